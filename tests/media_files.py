"""Small media files made by the tests themselves: a tone written with the `wave` module, and
other formats converted from it by Debian's ffmpeg (as a separate program, as the app uses it)."""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np


def write_tone(path: Path, *, seconds: float = 1.0, rate: int = 16000, channels: int = 1,
               frequency: float = 440.0) -> Path:
    """A sine tone as 16-bit PCM WAV."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * frequency * t) * 32767).astype("<i2")
    if channels > 1:
        samples = np.repeat(samples[:, None], channels, axis=1)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True, timeout=60)


def convert(source: Path, target: Path, *codec: str) -> Path:
    """`source` re-encoded into `target` (format from its extension) with `codec` options."""
    ffmpeg("-i", str(source), *codec, str(target))
    return target


def write_video(path: Path, *, seconds: float = 2.0) -> Path:
    """A small test-pattern video with a tone (MP4: H.264 + AAC; WebM: VP9 + Opus)."""
    codecs = (["-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac"]
              if path.suffix == ".mp4" else ["-c:v", "libvpx-vp9", "-c:a", "libopus"])
    ffmpeg("-f", "lavfi", "-i", f"testsrc=size=160x120:rate=10:duration={seconds}",
           "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", "-shortest",
           *codecs, str(path))
    return path


def truncated(source: Path, target: Path, share: float = 0.5) -> Path:
    data = source.read_bytes()
    target.write_bytes(data[: int(len(data) * share)])
    return target


def speech(path: Path, text: str) -> Path:
    """Speech from espeak-ng when it is installed, else a tone of about the same length."""
    if shutil.which("espeak-ng"):
        subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=60)
        return path
    return write_tone(path, seconds=max(1.0, 0.07 * len(text)))
