"""Media stimuli on the way in (evalstudy.media): the spec, item files, an uploaded archive, a
media directory, allowed https URLs, the admin and the API all check each file with the real
ffprobe, store it under a random name, and on any problem store nothing at all."""

from __future__ import annotations

import http.server
import io
import re
import shutil
import socket
import ssl
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from evalstudy import media as media_service
from evalstudy.importers import items_import, spec_to_document, study_import_spec, study_to_spec
from evalstudy.media import archive_source, item_media_upload
from evalstudy.models import AuditEvent, Item, ItemMedia, Output, Study, StudyCollaborator
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_items_file
from evalstudy.spec.study import parse_study_spec
from tests.factories import UserFactory, make_study, token_client
from tests.media_files import convert, truncated, write_tone

SPEC = """
study: {slug: listening, title: Listening study}
systems: [{name: asr-a}, {name: asr-b}]
criteria: [{key: usable, kind: binary, prompt: Usable?}]
items:
  - id: u1
    reference: turn on the light
    media: clips/u1.wav
    outputs: {asr-a: turn on the light, asr-b: turn of the light}
  - id: u2
    reference: call my sister
    media: clips/u2.ogg
    output_media: {asr-b: tts/u2-b.wav}
    outputs: {asr-a: call my sister, asr-b: all my sister}
"""


def stored_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture
def clips(tmp_path) -> Path:
    """A media directory: good files, a broken one, a text file named .wav, and a link out."""
    root = tmp_path / "import"
    (root / "clips").mkdir(parents=True)
    (root / "tts").mkdir()
    write_tone(root / "clips" / "u1.wav", seconds=1.0)
    convert(write_tone(tmp_path / "u2.wav", seconds=1.5), root / "clips" / "u2.ogg",
            "-c:a", "libvorbis")
    write_tone(root / "tts" / "u2-b.wav", seconds=0.8)
    truncated(convert(root / "clips" / "u1.wav", tmp_path / "whole.mp3", "-c:a", "libmp3lame"),
              root / "clips" / "broken.mp3")
    (root / "clips" / "notes.wav").write_text("not audio at all\n" * 50)
    (tmp_path / "secret.wav").write_bytes((root / "clips" / "u1.wav").read_bytes())
    (root / "clips" / "escape.wav").symlink_to(tmp_path / "secret.wav")
    return root


def zipped(root: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                archive.write(path, path.relative_to(root).as_posix())
    buffer.seek(0)
    return buffer


def test_a_spec_with_media_from_the_media_directory_stores_each_file_checked(
        db, settings, media_root, clips):
    settings.EVALSTUDY_MEDIA_IMPORT_ROOT = str(clips)
    study, outcome = study_import_spec(spec=parse_study_spec(SPEC, "listening.yaml"),
                                       file_name="listening.yaml")
    assert outcome == "created"
    rows = {(m.item.external_id, m.output.system.name if m.output else None): m
            for m in ItemMedia.objects.select_related("item", "output__system")}
    assert set(rows) == {("u1", None), ("u2", None), ("u2", "asr-b")}
    u1 = rows["u1", None]
    assert (u1.kind, u1.mime, u1.codec, u1.channels, u1.sample_rate) == (
        "audio", "audio/wav", "pcm_s16le", 1, 16000)
    assert u1.duration_s == pytest.approx(1.0, abs=0.01)
    assert rows["u2", None].mime == "audio/ogg" and u1.source == "clips/u1.wav"
    # Stored under random names that say nothing of the file, the item or the system.
    for media in rows.values():
        assert re.fullmatch(r"evalstudy-media/[A-Za-z0-9_-]{32}", media.file.name)
    assert len({media.file.name for media in rows.values()}) == 3
    assert len(stored_files(media_root)) == 3
    assert u1.file.read() == (clips / "clips" / "u1.wav").read_bytes()

    # Read back as written, and re-importing the same spec reads no file again.
    document = spec_to_document(study_to_spec(study))
    assert document["items"][1]["media"] == "clips/u2.ogg"
    assert document["items"][1]["output_media"] == {"asr-b": "tts/u2-b.wav"}
    shutil.rmtree(clips)
    again = parse_study_spec(yaml.safe_dump(document, sort_keys=False), "again.yaml")
    assert study_import_spec(spec=again, file_name="again.yaml")[1] == "unchanged"

    # A spec without u2's output media removes it, and its file once the import commits.
    document["items"][1].pop("output_media")
    fewer = parse_study_spec(yaml.safe_dump(document, sort_keys=False), "fewer.yaml")
    with on_commit_run() as callbacks:
        assert study_import_spec(spec=fewer, file_name="fewer.yaml")[1] == "updated"
    assert len(callbacks) == 1 and ItemMedia.objects.count() == 2
    assert len(stored_files(media_root)) == 2


def on_commit_run():
    from django.test import TestCase

    return TestCase.captureOnCommitCallbacks(execute=True)


@pytest.mark.parametrize("ref, reason", [
    ("clips/broken.mp3", "truncated"),
    ("clips/notes.wav", "not a readable audio or video file"),
    ("clips/escape.wav", "out of the media directory"),
    ("clips/missing.wav", "no such file in the media directory"),
])
def test_a_bad_media_row_names_file_row_and_field_and_stores_nothing(
        db, settings, media_root, clips, ref, reason):
    settings.EVALSTUDY_MEDIA_IMPORT_ROOT = str(clips)
    study = make_study(n_items=0, n_systems=2)
    text = ("item,system,output,media\n"
            "a1,sys-0,zero,clips/u1.wav\na1,sys-1,one,clips/u1.wav\n"
            f"a2,sys-0,zero,{ref}\na2,sys-1,one,{ref}\n")
    items = parse_items_file(text, "items.csv", "csv")
    with pytest.raises(SpecInvalid) as refused:
        items_import(study=study, items=items, file_name="items.csv")
    [problem] = refused.value.errors
    assert (problem.source, problem.line, problem.path) == ("items.csv", 4, "media")
    assert reason in problem.message and ref in problem.message
    assert str(clips) not in problem.message  # never the server's directory
    assert not Item.objects.filter(study=study).exists()
    assert not ItemMedia.objects.exists() and stored_files(media_root) == []


def test_path_traversal_is_refused_when_the_file_is_read(db):
    with pytest.raises(SpecInvalid) as refused:
        parse_study_spec(SPEC.replace("clips/u1.wav", "../../etc/passwd"), "evil.yaml")
    [problem] = refused.value.errors
    assert problem.path == "items[0].media" and "'..' is refused" in problem.message
    assert problem.line == 8
    with pytest.raises(SpecInvalid) as refused:
        parse_items_file("item,system,output,output_media\nx,s,t,/etc/passwd\n", "i.csv", "csv")
    assert refused.value.errors[0].path == "output_media"


def test_an_item_file_with_an_uploaded_archive_and_output_media(db, media_root, clips):
    study = make_study(n_items=0, n_systems=2)
    text = ("item,system,output,media,output_media\n"
            "a1,sys-0,zero,clips/u1.wav,\n"
            "a1,sys-1,one,clips/u1.wav,tts/u2-b.wav\n")
    items = parse_items_file(text, "items.csv", "csv")
    with archive_source(zipped(clips)) as source:
        assert items_import(study=study, items=items, file_name="items.csv",
                            media_from=source) == (1, 2)
    rows = ItemMedia.objects.select_related("output__system").order_by("id")
    assert [(m.output.system.name if m.output else None) for m in rows] == [None, "sys-1"]
    event = AuditEvent.objects.filter(action="import").latest("id")
    assert event.changes["media"] == 2
    # Items without media in a later file keep theirs.
    items_import(study=study, items=parse_items_file(
        "item,system,output\na1,sys-0,zero\na1,sys-1,one\n", "again.csv", "csv"),
        file_name="again.csv")
    assert ItemMedia.objects.count() == 2 and len(stored_files(media_root)) == 2


def test_a_database_failure_after_files_were_stored_removes_them(db, settings, media_root,
                                                                 clips, monkeypatch):
    settings.EVALSTUDY_MEDIA_IMPORT_ROOT = str(clips)
    saved = []
    original = ItemMedia.save

    def save_then_fail(self, *args, **kwargs):
        saved.append(self.file.name)
        if len(saved) == 2:
            raise RuntimeError("the database went away")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ItemMedia, "save", save_then_fail)
    with pytest.raises(RuntimeError):
        study_import_spec(spec=parse_study_spec(SPEC, "listening.yaml"),
                          file_name="listening.yaml")
    assert len(saved) == 2 and stored_files(media_root) == []
    assert not Study.objects.filter(slug="listening").exists()


# --- https URLs -------------------------------------------------------------------------------
@pytest.fixture
def https_server(tmp_path, clips):
    """An https server on 127.0.0.1 with its own certificate (for `localhost`), serving the
    media directory; yields (base URL, CA file)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(clips), **kwargs)

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET

    server = Server(("127.0.0.1", 0), Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://localhost:{server.server_address[1]}", str(cert)
    server.shutdown()
    server.server_close()


def test_an_allowed_https_url_is_fetched_and_others_are_refused(db, settings, media_root,
                                                                https_server, monkeypatch):
    base, ca_file = https_server
    # localhost may also resolve to ::1, where the test server does not listen.
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: real(
        "127.0.0.1" if host == "localhost" else host, *a, **k))
    settings.EVALSTUDY_MEDIA_URL_HOSTS = ["localhost"]
    settings.EVALSTUDY_MEDIA_URL_CA_FILE = ca_file
    settings.EVALSTUDY_MEDIA_URL_ALLOW_LOOPBACK = True  # the test's own server
    study = make_study(n_items=0, n_systems=1)

    def run(url):
        items = parse_items_file(f"item,system,output,media\nx,sys-0,t,{url}\n", "u.csv", "csv")
        return items_import(study=study, items=items, file_name="u.csv")

    run(f"{base}/clips/u1.wav")
    media = ItemMedia.objects.get()
    assert media.mime == "audio/wav" and media.source == f"{base}/clips/u1.wav"
    for url, reason in ((f"{base}/clips/notes.wav", "not a readable audio"),
                        (f"{base}/clips/nothing.wav", "HTTP 404"),
                        ("https://media.example.org/a.wav", "not on the media hosts allow-list")):
        with pytest.raises(SpecInvalid) as refused:
            run(url)
        assert reason in str(refused.value), str(refused.value)
    settings.EVALSTUDY_MEDIA_URL_ALLOW_LOOPBACK = False  # as in production
    with pytest.raises(SpecInvalid, match="resolves to a loopback address"):
        run(f"{base}/clips/u2.ogg")
    assert ItemMedia.objects.count() == 1 and len(stored_files(media_root)) == 1


# --- the admin and the API --------------------------------------------------------------------
@pytest.fixture
def upload_tone(tmp_path) -> Path:
    return write_tone(tmp_path / "upload.wav", seconds=1.2)


def test_the_api_uploads_lists_and_removes_an_items_media_for_editors_only(
        db, media_root, upload_tone, tmp_path):
    owner, editor, viewer, other = (UserFactory(username=n, is_staff=True)
                                    for n in ("own", "edi", "vie", "oth"))
    study = make_study(n_items=2, n_systems=2, owner=owner)
    make_study(n_items=1, n_systems=1, owner=other)
    StudyCollaborator.objects.create(study=study, user=editor, role="editor")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    url = reverse("api-study-item-media", args=[study.slug, "item-000"])

    def post(user, path: Path, **data):
        with open(path, "rb") as stream:
            return token_client(user).post(url, {"file": stream, **data})

    assert post(viewer, upload_tone).status_code == 403
    assert post(other, upload_tone).status_code == 404
    response = post(editor, upload_tone, system="sys-1")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["system"] == "sys-1" and body["mime"] == "audio/wav" and body["source"] == (
        "upload.wav")
    assert token_client(viewer).get(url).json()[0]["id"] == body["id"]

    (tmp_path / "text.wav").write_text("hello\n" * 100)
    refused = post(owner, tmp_path / "text.wav")
    assert refused.status_code == 400 and "not a readable audio" in refused.content.decode()
    assert ItemMedia.objects.count() == 1 and len(stored_files(media_root)) == 1
    assert token_client(editor).post(url, {}, content_type="application/json"
                                     ).status_code == 400

    assert token_client(viewer).delete(url + "?system=sys-1").status_code == 403
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        assert token_client(owner).delete(url + "?system=sys-1").status_code == 204
    assert not ItemMedia.objects.exists() and stored_files(media_root) == []
    assert set(AuditEvent.objects.filter(changes__what="media").values_list(
        "action", "source")) == {("import", "api"), ("delete", "api")}


def test_media_cannot_change_once_raters_started(db, media_root, upload_tone):
    study = make_study(n_items=1, n_systems=1, status=Study.Status.OPEN)
    with open(upload_tone, "rb") as stream, pytest.raises(SpecInvalid, match="draft study"):
        item_media_upload(item=Item.objects.get(study=study), upload=stream, name="t.wav")
    assert stored_files(media_root) == []


def test_the_admin_item_page_uploads_through_the_same_checks(db, media_root, upload_tone, tmp_path):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    study = make_study(n_items=1, n_systems=1, owner=admin)
    item = Item.objects.get(study=study)
    output = Output.objects.get(item=item)
    client = Client()
    client.force_login(admin)
    url = reverse("admin:evalstudy_item_change", args=[item.pk])
    page = client.get(url).content.decode()
    assert 'enctype="multipart/form-data"' in page and "Media files" in page

    def form(path: Path) -> dict:
        return {
            "study": study.pk, "external_id": item.external_id, "reference": item.reference,
            "context": "", "metadata": "{}",
            "outputs-TOTAL_FORMS": "1", "outputs-INITIAL_FORMS": "1",
            "outputs-0-id": output.pk, "outputs-0-item": item.pk,
            "outputs-0-system": output.system_id, "outputs-0-text": output.text,
            "media-TOTAL_FORMS": "1", "media-INITIAL_FORMS": "0",
            "media-0-item": item.pk, "media-0-output": "", "media-0-upload": open(path, "rb"),
        }

    (tmp_path / "fake.wav").write_text("no\n" * 100)
    refused = client.post(url, form(tmp_path / "fake.wav"))
    assert refused.status_code == 200 and "not a readable audio" in refused.content.decode()
    assert not ItemMedia.objects.exists() and stored_files(media_root) == []
    assert client.post(url, form(upload_tone)).status_code == 302
    media = ItemMedia.objects.get()
    assert media.item == item and media.output is None and media.source == "upload.wav"
    assert AuditEvent.objects.filter(action="import", source="admin",
                                     changes__what="media").exists()


def test_probing_runs_outside_the_transaction_and_in_parallel(db, settings, media_root, clips,
                                                             monkeypatch):
    """Checks take seconds each (ffprobe, ffmpeg, downloads): they run before the import's
    transaction, several at a time."""
    from django.db import connection

    settings.EVALSTUDY_MEDIA_IMPORT_ROOT = str(clips)
    depth = len(connection.savepoint_ids)  # the test's own transaction
    inside = []
    real = media_service.probe_file
    monkeypatch.setattr(media_service, "probe_file", lambda *a, **k: (
        inside.append(len(connection.savepoint_ids) - depth), real(*a, **k))[1])
    study_import_spec(spec=parse_study_spec(SPEC, "listening.yaml"), file_name="l.yaml")
    assert inside == [0, 0, 0]


def test_deleting_an_item_or_a_study_deletes_its_stored_files(
        db, settings, tmp_path, django_capture_on_commit_callbacks):
    """Files leave storage with their rows however they go (the admin's delete, a cascade),
    once the deletion commits; a rolled-back deletion keeps them."""
    from django.db import transaction

    from evalstudy.media import item_media_upload
    from evalstudy.models import Item, ItemMedia
    from tests.factories import make_study
    from tests.media_files import write_tone

    settings.MEDIA_ROOT = str(tmp_path / "stored")
    study = make_study(n_items=2, n_systems=2)
    upload_tone = write_tone(tmp_path / "tone.wav", seconds=0.5)
    for item in Item.objects.filter(study=study):
        with open(upload_tone, "rb") as stream:
            item_media_upload(item=item, upload=stream, name="tone.wav")
    stored = lambda: sorted(p.name for p in (tmp_path / "stored").rglob("*") if p.is_file())  # noqa: E731
    assert len(stored()) == 2
    first = ItemMedia.objects.first()
    with django_capture_on_commit_callbacks(execute=True) as rolled_back:
        try:
            with transaction.atomic():
                first.item.delete()
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert rolled_back == [] and len(stored()) == 2
    with django_capture_on_commit_callbacks(execute=True):
        Item.objects.filter(pk=first.item_id).delete()
    assert len(stored()) == 1
    with django_capture_on_commit_callbacks(execute=True):
        study.delete()
    assert stored() == []


def test_a_users_import_reads_only_its_own_studys_folder_and_checks_the_slug_first(
        db, settings, media_root, clips, tmp_path):
    """Through the admin or the API (a user's import) the media directory is the study's own
    folder: another lab's recordings beside it cannot be named. Another user's slug is refused
    before any media is read."""
    settings.EVALSTUDY_MEDIA_IMPORT_ROOT = str(tmp_path / "root")
    (tmp_path / "root" / "listening").mkdir(parents=True)
    shutil.copytree(clips / "clips", tmp_path / "root" / "listening" / "clips")
    shutil.copytree(clips / "tts", tmp_path / "root" / "listening" / "tts")
    shutil.copytree(clips, tmp_path / "root" / "other-lab")
    owner, stranger = UserFactory(), UserFactory()
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "listening.yaml"),
                                 file_name="listening.yaml", owner=owner, actor=owner)
    assert ItemMedia.objects.filter(item__study=study).count() == 3
    theirs = SPEC.replace("slug: listening", "slug: mine").replace(
        "clips/u1.wav", "../other-lab/clips/u1.wav")
    with pytest.raises(SpecInvalid) as error:
        study_import_spec(spec=parse_study_spec(theirs, "mine.yaml"), file_name="mine.yaml",
                          owner=stranger, actor=stranger)
    assert "items[0].media" in str(error.value)
    assert not Study.objects.filter(slug="mine").exists()
    # Another's slug: refused as taken, and not one file of the spec is read.
    read = []
    original = media_service.media_checked

    def spy(requests, **kwargs):
        read.extend(requests)
        return original(requests, **kwargs)

    changed = SPEC.replace("clips/u1.wav", "clips/u2.ogg")
    try:
        media_service.media_checked = spy
        with pytest.raises(SpecInvalid, match="is taken"):
            study_import_spec(spec=parse_study_spec(changed, "listening.yaml"),
                              file_name="listening.yaml", owner=stranger, actor=stranger)
    finally:
        media_service.media_checked = original
    assert read == []
