"""Malformed uploads, through the admin upload pages and the import commands: each is refused
with the file, line and reason, and leaves the stored data exactly as it was."""

import codecs

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.models import Item, Output, Study
from evalstudy.spec.limits import MAX_FIELD_CHARS
from tests.factories import UserFactory, make_study

HEADER = "item,system,output,reference\n"
GOOD_ROWS = "new-1,sys-0,hello,hello there\nnew-1,sys-1,hallo,hello there\n"

# name -> (file bytes, what the error must say, the line it must name)
MALFORMED_ITEMS = {
    "truncated": ((HEADER + GOOD_ROWS + 'new-2,sys-0,"cut off in the mid').encode(),
                  "the file ends inside a quoted field", 4),
    "short_row": ((HEADER + GOOD_ROWS + "new-2,sys-0\n").encode(),
                  "expected 4 columns like the header, got 2", 4),
    "latin1": ((HEADER + "caf\u00e9-1,sys-0,d\u00e9j\u00e0 vu,ok\n").encode("latin-1"),
               "the file is not UTF-8 (byte 0xe9", 2),
    "utf16_bom": (codecs.BOM_UTF16_LE + (HEADER + GOOD_ROWS).encode("utf-16-le"),
                  "the file is UTF-16", 1),
    "huge_field": ((HEADER + "new-1,sys-0," + "x" * (MAX_FIELD_CHARS + 10) + ",r\n").encode(),
                   f"a field is longer than {MAX_FIELD_CHARS:,} characters", 2),
    "binary_junk": (b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256)) * 4,
                    "this is not a text file (a NUL byte at offset 5)", 1),
    "missing_columns": (b"id,text\n1,hello\n", "missing column(s) item, system, output", 1),
}


def _stored(study: Study):
    """Everything an items import could change, in a comparable form."""
    return (
        list(Item.objects.filter(study=study).order_by("id").values()),
        list(Output.objects.filter(item__study=study).order_by("id").values()),
        Study.objects.filter(pk=study.pk).values().get(),
    )


@pytest.fixture
def staff_client(db):
    client = Client()
    client.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    return client


@pytest.mark.parametrize("case", sorted(MALFORMED_ITEMS))
def test_admin_items_upload_refuses_malformed_files(staff_client, case):
    data, reason, line = MALFORMED_ITEMS[case]
    study = make_study(n_items=2, n_systems=2)
    before = _stored(study)
    response = staff_client.post(
        reverse("admin:evalstudy_study_import_items", args=[study.pk]),
        {"file": SimpleUploadedFile(f"{case}.csv", data)}, follow=True)
    html = response.content.decode().replace("&quot;", '"').replace("&#x27;", "'")
    assert "Nothing was imported" in html
    assert f"{case}.csv:{line}:" in html and reason in html, html[-3000:]
    assert _stored(study) == before


@pytest.mark.parametrize("case", sorted(MALFORMED_ITEMS))
def test_import_items_command_refuses_malformed_files(db, tmp_path, case):
    data, reason, line = MALFORMED_ITEMS[case]
    study = make_study(n_items=2, n_systems=2)
    before = _stored(study)
    path = tmp_path / f"{case}.csv"
    path.write_bytes(data)
    with pytest.raises(CommandError) as error:
        call_command("import_items", str(path), "--study", study.slug)
    assert f"{path}:{line}:" in str(error.value) and reason in str(error.value)
    assert _stored(study) == before


def test_a_long_but_allowed_field_is_imported(db, tmp_path):
    study = make_study(n_items=1, n_systems=2)
    context = "y" * 200_000  # over the csv module's default limit of 131,072
    path = tmp_path / "long.csv"
    path.write_text("item,system,output,context\n"
                    f"long-1,sys-0,a,{context}\nlong-1,sys-1,b,{context}\n", encoding="utf-8")
    call_command("import_items", str(path), "--study", study.slug)
    assert Item.objects.get(study=study, external_id="long-1").context == context


@pytest.mark.parametrize(("name", "data", "reason"), [
    ("spec.yaml", codecs.BOM_UTF16_LE + "study: {}\n".encode("utf-16-le"), "UTF-16"),
    ("spec.json", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a text file"),
    ("spec.yaml", "study:\n  slug: caf\u00e9\n".encode("latin-1"), "not UTF-8"),
    ("spec.yaml", b"study:\n  slug: [unclosed\n", "spec.yaml:"),
])
def test_spec_upload_refuses_malformed_files(staff_client, name, data, reason):
    response = staff_client.post(reverse("admin:evalstudy_study_import_spec"),
                                 {"file": SimpleUploadedFile(name, data)}, follow=True)
    assert reason in response.content.decode()
    assert not Study.objects.exists()


def test_judgments_upload_refuses_malformed_files(staff_client, tmp_path):
    study = make_study(n_items=1, n_systems=2)
    url = reverse("admin:evalstudy_study_import_judgments", args=[study.pk])
    truncated = b'rater,item,system,criterion,value\nr1,item-000,sys-0,note,"unfinished'
    response = staff_client.post(url, {"file": SimpleUploadedFile("j.csv", truncated),
                                       "rater_kind": "slp"}, follow=True)
    assert "j.csv:2:" in response.content.decode() and "not closed" in response.content.decode()
    path = tmp_path / "j.csv"
    path.write_bytes(codecs.BOM_UTF16_LE + "rater,item\n".encode("utf-16-le"))
    with pytest.raises(CommandError, match="UTF-16"):
        call_command("import_judgments", str(path), "--study", study.slug)
    assert not Judgment.objects.exists()


@override_settings(EVALSTUDY_UPLOAD_MAX_BYTES=1000)
def test_uploads_over_the_size_limit_are_refused_unread(staff_client):
    study = make_study(n_items=1, n_systems=2)
    before = _stored(study)
    big = (HEADER + GOOD_ROWS * 40).encode()
    assert len(big) > 1000
    response = staff_client.post(
        reverse("admin:evalstudy_study_import_items", args=[study.pk]),
        {"file": SimpleUploadedFile("big.csv", big)})
    html = response.content.decode().replace("\xa0", " ")
    assert "big.csv: 2.4 KB is over the upload limit of 1000 bytes" in html, html[-2000:]
    assert _stored(study) == before


def test_wrong_types_and_empty_files_are_refused(staff_client):
    study = make_study(n_items=1, n_systems=2)
    url = reverse("admin:evalstudy_study_import_items", args=[study.pk])
    html = staff_client.post(url, {"file": SimpleUploadedFile("items.xlsx", b"PK\x03\x04")}
                             ).content.decode()
    assert "items.xlsx: expected a file ending in .csv, .jsonl" in html
    html = staff_client.post(url, {"file": SimpleUploadedFile("items.csv", b"")}
                             ).content.decode()
    assert "The submitted file is empty" in html  # Django's own check, before ours
