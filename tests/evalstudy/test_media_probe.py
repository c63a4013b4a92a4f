"""The Django-free media cores with the real programs: what ffprobe/ffmpeg accept and refuse
(evalstudy.media_probe), and how imported files are found without a way out of their directory
or archive (evalstudy.media_fetch)."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from evalstudy.media_fetch import (
    MediaSourceError,
    UrlPolicy,
    ZipSource,
    address_problem,
    copy_from_directory,
    fetch_url,
    ref_problem,
)
from evalstudy.media_probe import MediaRefused, ProbeLimits, interpret, probe_file
from tests.media_files import convert, truncated, write_tone, write_video


@pytest.fixture(scope="module")
def tone(tmp_path_factory) -> Path:
    return write_tone(tmp_path_factory.mktemp("media") / "tone.wav", seconds=2.0, rate=22050,
                      channels=2)


def test_a_wav_written_with_the_wave_module_is_accepted_with_what_it_is(tone):
    info = probe_file(tone)
    assert (info.kind, info.mime, info.container, info.codec) == (
        "audio", "audio/wav", "wav", "pcm_s16le")
    assert info.duration_s == pytest.approx(2.0, abs=0.01)
    assert (info.channels, info.sample_rate) == (2, 22050)
    assert info.size_bytes == tone.stat().st_size and len(info.sha256) == 64
    assert info.width is None and info.height is None


@pytest.mark.parametrize("name, codec, mime, expected_codec", [
    ("tone.ogg", ["-c:a", "libvorbis"], "audio/ogg", "vorbis"),
    ("tone.opus.ogg", ["-c:a", "libopus"], "audio/ogg", "opus"),
    ("tone.mp3", ["-c:a", "libmp3lame"], "audio/mpeg", "mp3"),
    ("tone.flac", ["-c:a", "flac"], "audio/flac", "flac"),
    ("tone.webm", ["-c:a", "libopus"], "audio/webm", "opus"),
])
def test_the_audio_formats_browsers_play_are_accepted(tone, tmp_path, name, codec, mime,
                                                      expected_codec):
    info = probe_file(convert(tone, tmp_path / name, *codec))
    assert (info.kind, info.mime, info.codec) == ("audio", mime, expected_codec)
    assert info.duration_s == pytest.approx(2.0, abs=0.1)


@pytest.mark.parametrize("name, mime", [("clip.mp4", "video/mp4"), ("clip.webm", "video/webm")])
def test_video_is_accepted_with_its_size(tmp_path, name, mime):
    info = probe_file(write_video(tmp_path / name))
    assert (info.kind, info.mime, info.width, info.height) == ("video", mime, 160, 120)


@pytest.mark.parametrize("name, codec", [
    ("tone.wav", []), ("tone.mp3", ["-c:a", "libmp3lame"]), ("tone.ogg", ["-c:a", "libvorbis"]),
    ("tone.flac", ["-c:a", "flac"]), ("tone.webm", ["-c:a", "libopus"]),
])
def test_a_file_cut_in_half_is_refused(tone, tmp_path, name, codec):
    whole = tone if name == "tone.wav" else convert(tone, tmp_path / name, *codec)
    half = truncated(whole, tmp_path / f"half-{name}")
    with pytest.raises(MediaRefused) as refused:
        probe_file(half)
    reason = str(refused.value)
    assert any(word in reason for word in ("truncated", "broken", "not a readable")), reason
    assert str(tmp_path) not in reason  # never the server's paths


def test_garbage_a_text_file_renamed_wav_and_an_empty_file_are_refused(tmp_path):
    (tmp_path / "notes.wav").write_text("this is not a recording\n" * 20)
    (tmp_path / "noise.mp3").write_bytes(os.urandom(4096))
    (tmp_path / "empty.wav").write_bytes(b"")
    for name in ("notes.wav", "noise.mp3"):
        with pytest.raises(MediaRefused, match="not a readable audio or video file"):
            probe_file(tmp_path / name)
    with pytest.raises(MediaRefused, match="empty"):
        probe_file(tmp_path / "empty.wav")


def test_a_codec_browsers_do_not_play_is_refused(tone, tmp_path):
    adpcm = convert(tone, tmp_path / "adpcm.wav", "-c:a", "adpcm_ima_wav")
    with pytest.raises(MediaRefused, match="audio codec 'adpcm_ima_wav' in a wav file"):
        probe_file(adpcm)
    mpeg4 = tmp_path / "old.mp4"
    from tests.media_files import ffmpeg

    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=5:duration=1", "-c:v", "mpeg4",
           str(mpeg4))
    with pytest.raises(MediaRefused, match="video codec 'mpeg4'"):
        probe_file(mpeg4)


def test_too_long_and_too_large_files_are_refused_naming_the_setting(tone):
    with pytest.raises(MediaRefused, match="EVALSTUDY_MEDIA_MAX_SECONDS"):
        probe_file(tone, ProbeLimits(max_seconds=1))
    with pytest.raises(MediaRefused, match="EVALSTUDY_MEDIA_MAX_BYTES"):
        probe_file(tone, ProbeLimits(max_bytes=1000))


def test_a_missing_program_refuses_every_file(tone):
    with pytest.raises(MediaRefused, match="not installed"):
        probe_file(tone, ProbeLimits(ffprobe="/nonexistent/ffprobe"))


def test_interpret_reads_ffprobes_answer_without_a_file():
    probe = {"format": {"format_name": "ogg", "duration": "3.5"},
             "streams": [{"codec_type": "audio", "codec_name": "opus", "channels": 1,
                          "sample_rate": "48000"}]}
    info = interpret(probe, size_bytes=10, sha256="0" * 64)
    assert (info.mime, info.channels, info.sample_rate, info.duration_s) == (
        "audio/ogg", 1, 48000, 3.5)
    with pytest.raises(MediaRefused, match="format 'avi' is not supported"):
        interpret({"format": {"format_name": "avi", "duration": "1"}, "streams": []},
                  size_bytes=1, sha256="")
    with pytest.raises(MediaRefused, match="no duration"):
        interpret({**probe, "format": {"format_name": "ogg"}}, size_bytes=1, sha256="")
    with pytest.raises(MediaRefused, match="no audio or video stream"):
        interpret({**probe, "streams": []}, size_bytes=1, sha256="")


# --- where imported files come from -------------------------------------------------------------
@pytest.mark.parametrize("ref, problem", [
    ("clips/a.wav", None), ("./a.wav", None), ("https://media.example.org/a.wav", None),
    ("../secret.wav", "'..' is refused"), ("clips/../../etc/passwd", "'..' is refused"),
    ("/etc/passwd", "absolute path"), ("C:/audio/a.wav", "absolute path"),
    ("~/a.wav", "absolute path"), ("clips\\a.wav", "backslash"),
    ("http://media.example.org/a.wav", "plain http is refused"),
    ("file:///etc/passwd", "'file' URLs are refused"), ("ftp://x/a.wav", "'ftp' URLs"),
    ("https://user:pw@media.example.org/a.wav", "user name or password"),
    ("a\x00.wav", "control character"), ("x" * 1001, "longer than"),
])
def test_a_reference_is_a_plain_relative_path_or_an_https_url(ref, problem):
    found = ref_problem(ref)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_a_directory_gives_its_own_files_only(tone, tmp_path):
    root = tmp_path / "media"
    (root / "clips").mkdir(parents=True)
    (root / "clips" / "a.wav").write_bytes(tone.read_bytes())
    outside = tmp_path / "secret.wav"
    outside.write_bytes(b"secret")
    (root / "clips" / "link.wav").symlink_to(outside)
    (root / "clips" / "dir").mkdir()
    copy_from_directory(root, "clips/a.wav", tmp_path / "copy", 10**9)
    assert (tmp_path / "copy").read_bytes() == tone.read_bytes()
    for ref, reason in (("clips/link.wav", "out of the media directory"),
                        ("../secret.wav", "'..' is refused"),
                        (str(outside), "absolute path"),
                        ("clips/missing.wav", "no such file"), ("clips/dir", "not a file")):
        with pytest.raises(MediaSourceError, match=reason):
            copy_from_directory(root, ref, tmp_path / "copy2", 10**9)
    assert not (tmp_path / "copy2").exists()
    with pytest.raises(MediaSourceError, match="EVALSTUDY_MEDIA_MAX_BYTES"):
        copy_from_directory(root, "clips/a.wav", tmp_path / "copy3", 100)


def test_an_archive_gives_regular_members_only_and_never_more_than_the_limit(tone, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("clips/a.wav", tone.read_bytes())
        archive.writestr("../evil.wav", b"evil")
        link = zipfile.ZipInfo("clips/link.wav")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
        archive.writestr("bomb.wav", b"\0" * 5_000_000)  # deflates to a few kB
    source = ZipSource(io.BytesIO(buffer.getvalue()))
    source.copy("./clips/a.wav", tmp_path / "a", 10**9)
    assert (tmp_path / "a").read_bytes() == tone.read_bytes()
    with pytest.raises(MediaSourceError, match=r"'..' is refused"):
        source.copy("../evil.wav", tmp_path / "b", 10**9)
    with pytest.raises(MediaSourceError, match="no such file in the media archive"):
        source.copy("clips/link.wav", tmp_path / "c", 10**9)
    with pytest.raises(MediaSourceError, match="over the limit"):
        source.copy("bomb.wav", tmp_path / "d", 1_000_000)
    with pytest.raises(MediaSourceError, match="not a readable zip file"):
        ZipSource(io.BytesIO(b"PK not really"))


def test_urls_are_refused_off_the_allow_list_and_to_addresses_that_are_not_public(tmp_path):
    import ipaddress

    target = tmp_path / "fetched"
    with pytest.raises(MediaSourceError, match="not on the media hosts allow-list"):
        fetch_url("https://media.example.org/a.wav", target, UrlPolicy())
    with pytest.raises(MediaSourceError, match="loopback"):
        fetch_url("https://localhost:9/a.wav", target,
                  UrlPolicy(allowed_hosts=frozenset({"localhost"})))
    with pytest.raises(MediaSourceError, match="plain http is refused"):
        fetch_url("http://localhost:9/a.wav", target,
                  UrlPolicy(allowed_hosts=frozenset({"localhost"}), allow_loopback=True))
    for address in ("10.0.0.5", "169.254.169.254", "192.168.1.1", "::ffff:127.0.0.1",
                    "64:ff9b::a00:1", "fd00::1", "0.0.0.0"):
        assert address_problem(ipaddress.ip_address(address)) is not None, address
    assert address_problem(ipaddress.ip_address("93.184.216.34")) is None
    assert not target.exists()


def test_a_playlist_naming_other_files_is_refused_without_reading_them(tmp_path):
    """ffprobe may open only the accepted formats from the file itself: an HLS playlist (which
    would make it read another path on the server) is refused as unsupported, and the message
    says nothing of the path it names."""
    from evalstudy.media_probe import MediaRefused, ProbeLimits, probe_file

    secret = tmp_path / "elsewhere" / "segment0.ts"
    playlist = tmp_path / "upload.wav"
    playlist.write_text("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n"
                        f"{secret}\n#EXT-X-ENDLIST\n")
    with pytest.raises(MediaRefused) as refused:
        probe_file(playlist, ProbeLimits())
    assert "elsewhere" not in str(refused.value) and "segment0" not in str(refused.value)
