"""What an audio or video file is, read by Debian's `ffprobe`/`ffmpeg` in a separate process
(no Django): the checks every media file passes before anything of it is stored.

FFmpeg is GPL/LGPL software: it runs as its own program, never linked into this process, and
talks to us through JSON on a pipe. Each run has a time limit; a file that makes it hang is
refused like a broken one.

A file is accepted when
- it is not empty and not over `ProbeLimits.max_bytes`;
- `ffprobe` reads it as one of the containers raters' browsers play (WAV, FLAC, MP3, Ogg,
  WebM; MP4 for video) holding only codecs those browsers decode (`FORMATS`);
- it reads to its end: audio is decoded whole, video demuxed whole, and both must produce
  about the duration the file declares, without an error. A file cut short keeps a header
  that promises more (an MP3 or WAV cut in half still "lasts" its full length to `ffprobe`);
  only reading it through shows that it stops early;
- it lasts more than nothing and at most `ProbeLimits.max_seconds`.

Every refusal is a `MediaRefused` whose message says why in the researcher's words (it is
shown with the file, row and field it came from).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUDIO = "audio"
VIDEO = "video"

# ffprobe's format name -> (what raters' browsers call it, audio codecs, video codecs). A format
# whose video codecs are empty holds audio only. Only what Chromium and Firefox both play.
_PCM = frozenset({"pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le", "pcm_u8"})
FORMATS: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    "wav": ("wav", _PCM, frozenset()),
    "flac": ("flac", frozenset({"flac"}), frozenset()),
    "mp3": ("mp3", frozenset({"mp3"}), frozenset()),
    "ogg": ("ogg", frozenset({"vorbis", "opus", "flac"}), frozenset()),
    "matroska,webm": ("webm", frozenset({"opus", "vorbis"}),
                      frozenset({"vp8", "vp9", "av1"})),
    "mov,mp4,m4a,3gp,3g2,mj2": ("mp4", frozenset({"aac", "mp3", "opus"}),
                                frozenset({"h264", "av1", "vp9"})),
}
# What ffprobe and ffmpeg may open: the accepted formats' demuxers only, from a local file
# only. Without this they detect any of their formats (an HLS playlist names other files; its
# error message would tell a researcher whether a path exists on the server).
_WHITELIST = ["-protocol_whitelist", "file",
              "-format_whitelist", ",".join(sorted({n for f in FORMATS for n in f.split(",")}))]
# The Content-Type each accepted file is served with: (container, kind) -> MIME type.
MIME_TYPES = {
    ("wav", AUDIO): "audio/wav", ("flac", AUDIO): "audio/flac", ("mp3", AUDIO): "audio/mpeg",
    ("ogg", AUDIO): "audio/ogg", ("webm", AUDIO): "audio/webm", ("webm", VIDEO): "video/webm",
    ("mp4", VIDEO): "video/mp4",
}
SUPPORTED = ("audio: WAV (PCM), FLAC, MP3, Ogg (Vorbis, Opus), WebM (Opus); "
             "video: MP4 (H.264, AV1), WebM (VP8, VP9, AV1)")
# Decoded audio may stop this short of the declared duration (encoder padding, rounding);
# demuxed video stops at its last packet's time (B-frame delays, edit lists: a few tenths
# of a second early).
_SHORTFALL = {AUDIO: (0.25, 0.02), VIDEO: (1.0, 0.10)}  # kind -> (seconds, share of duration)


class MediaRefused(ValueError):  # noqa: N818 - reads as what happened to the file
    """The file cannot be used; the message says why (without the file's path)."""


@dataclass(frozen=True)
class ProbeLimits:
    """Bounds on one media file (settings EVALSTUDY_MEDIA_MAX_BYTES, _MAX_SECONDS,
    _PROBE_TIMEOUT), and the programs that read it."""

    max_bytes: int = 200 * 1024 * 1024
    max_seconds: float = 30 * 60
    timeout_s: float = 60.0
    ffprobe: str = "ffprobe"
    ffmpeg: str = "ffmpeg"


@dataclass(frozen=True)
class MediaInfo:
    """What an accepted file is: its kind, how it is served, and what a researcher may want to
    know about it."""

    kind: str  # AUDIO or VIDEO
    mime: str
    container: str  # wav, flac, mp3, ogg, webm, mp4
    codec: str  # the codec of the stream played (the video's, for a video)
    duration_s: float
    size_bytes: int
    sha256: str
    channels: int | None = None
    sample_rate: int | None = None
    width: int | None = None
    height: int | None = None


def _run(command: list[str], limits: ProbeLimits, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(  # noqa: S603 - a fixed program and a path we chose, no shell
            command, capture_output=True, timeout=limits.timeout_s, check=False,
            stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                           "LC_ALL": "C"})
    except FileNotFoundError:
        raise MediaRefused(f"{what} is not installed on the server (Debian: apt-get install "
                           "ffmpeg); media cannot be checked, so none is accepted") from None
    except subprocess.TimeoutExpired:
        raise MediaRefused(f"reading the file took longer than {limits.timeout_s:g} s "
                           "(EVALSTUDY_MEDIA_PROBE_TIMEOUT); it is broken or too large") from None


def _first_line(stderr: bytes, path: Path) -> str:
    """FFmpeg's first complaint, without the file's path (a temporary name, or the server's
    directory layout) and without its internal addresses."""
    text = stderr.decode("utf-8", "replace").replace(str(path), "the file")
    for line in text.splitlines():
        line = re.sub(r"\[[\w,]+ @ 0x[0-9a-f]+\]\s*", "", line).strip()
        if line:
            return line[:200]
    return "no reason given"


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


def interpret(probe: dict[str, Any], *, size_bytes: int, sha256: str,
              limits: ProbeLimits = ProbeLimits()) -> MediaInfo:
    """`ffprobe -of json -show_format -show_streams` output as a MediaInfo, or MediaRefused:
    the format and codecs must be ones raters' browsers play, the duration within bounds.
    (A pure function of the probe's answer: testable without a file.)"""
    format_name = str((probe.get("format") or {}).get("format_name") or "")
    if format_name not in FORMATS:
        raise MediaRefused(f"the format {format_name or 'of the file'!r} is not supported; "
                           f"use {SUPPORTED}")
    container, audio_codecs, video_codecs = FORMATS[format_name]
    streams = [s for s in probe.get("streams") or [] if isinstance(s, dict)]
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    video = [s for s in streams if s.get("codec_type") == "video"
             and not (s.get("disposition") or {}).get("attached_pic")]  # cover art: not video
    if video and not video_codecs:
        video = []  # e.g. an MP3's cover picture read as a stream: the file is audio
    if not audio and not video:
        raise MediaRefused("the file holds no audio or video stream")
    for stream in audio:
        codec = str(stream.get("codec_name") or "")
        if codec not in audio_codecs:
            raise MediaRefused(f"the audio codec {codec!r} in a {container} file is not "
                               f"supported; use {SUPPORTED}")
    for stream in video:
        codec = str(stream.get("codec_name") or "")
        if codec not in video_codecs:
            raise MediaRefused(f"the video codec {codec!r} in a {container} file is not "
                               f"supported; use {SUPPORTED}")
    kind = VIDEO if video else AUDIO
    if (container, kind) not in MIME_TYPES:
        raise MediaRefused(f"a {container} file without a video stream is not supported; "
                           f"use {SUPPORTED}")
    main = (video or audio)[0]
    duration = _number((probe.get("format") or {}).get("duration")) or _number(
        main.get("duration"))
    if duration is None or duration <= 0:
        raise MediaRefused("the file declares no duration (broken or truncated?)")
    if duration > limits.max_seconds:
        raise MediaRefused(f"the file lasts {duration:,.1f} s, over the limit of "
                           f"{limits.max_seconds:,.0f} s (EVALSTUDY_MEDIA_MAX_SECONDS)")
    first_audio = audio[0] if audio else {}
    channels = first_audio.get("channels")
    rate = _number(first_audio.get("sample_rate"))
    return MediaInfo(
        kind=kind, mime=MIME_TYPES[container, kind], container=container,
        codec=str(main.get("codec_name")), duration_s=round(duration, 3), size_bytes=size_bytes,
        sha256=sha256, channels=int(channels) if isinstance(channels, int) else None,
        sample_rate=int(rate) if rate else None,
        width=int(main["width"]) if kind == VIDEO and isinstance(main.get("width"), int) else None,
        height=(int(main["height"]) if kind == VIDEO and isinstance(main.get("height"), int)
                else None),
    )


def _read_through(path: Path, info: MediaInfo, limits: ProbeLimits) -> None:
    """MediaRefused unless the whole file reads without an error and lasts about what it
    declares. Audio is decoded (cheap); video is demuxed without decoding (a decode of a long
    video would take minutes), which still finds a file cut short or a broken container."""
    stream = ["-map", "0:v:0", "-c", "copy"] if info.kind == VIDEO else ["-map", "0:a:0"]
    done = _run([limits.ffmpeg, "-nostdin", "-hide_banner", "-v", "error", "-xerror",
                 *_WHITELIST, "-i", str(path), *stream, "-f", "null", "-", "-progress", "pipe:1"],
                limits, "ffmpeg")
    if done.returncode != 0 or done.stderr.strip():
        raise MediaRefused(f"the file is broken: {_first_line(done.stderr, path)}")
    read = [int(value) for value in re.findall(rb"out_time_us=(\d+)", done.stdout)]
    seconds = read[-1] / 1e6 if read else 0.0
    seconds_allowed, share = _SHORTFALL[info.kind]
    shortfall = max(seconds_allowed, share * info.duration_s)
    if seconds < info.duration_s - shortfall:
        raise MediaRefused(f"the file stops after {seconds:.1f} s of the {info.duration_s:.1f} s "
                           "it declares (truncated?)")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def probe_file(path: str | Path, limits: ProbeLimits = ProbeLimits()) -> MediaInfo:
    """Check one local file (see the module's docstring); MediaInfo or MediaRefused."""
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        raise MediaRefused("the file is empty")
    if size > limits.max_bytes:
        raise MediaRefused(f"the file is {size:,} bytes, over the limit of "
                           f"{limits.max_bytes:,} bytes (EVALSTUDY_MEDIA_MAX_BYTES)")
    done = _run([limits.ffprobe, "-v", "error", *_WHITELIST, "-of", "json", "-show_format",
                 "-show_streams", str(path)], limits, "ffprobe")
    if done.returncode != 0:
        raise MediaRefused("not a readable audio or video file "
                           f"({_first_line(done.stderr, path)})")
    try:
        probe = json.loads(done.stdout.decode("utf-8", "replace") or "{}")
    except json.JSONDecodeError:
        raise MediaRefused("not a readable audio or video file (ffprobe gave no answer)"
                           ) from None
    info = interpret(probe, size_bytes=size, sha256=file_digest(path), limits=limits)
    _read_through(path, info, limits)
    return info
