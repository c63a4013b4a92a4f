"""The researcher's admin: pages load, actions call the services, uploads validate, scoping."""

import csv
import io
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from evalstudy.models import Item, Output, Study
from tests.factories import UserFactory, make_study

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.mark.parametrize("model", [
    "study", "system", "item", "output", "criterion", "calibrationitem", "attentioncheck",
    "rater", "assignment", "studycollaborator", "enrollment",
])
def test_every_changelist_and_add_page_loads(boss_client, model):
    make_study(status=Study.Status.OPEN)
    assert boss_client.get(reverse(f"admin:evalstudy_{model}_changelist")).status_code == 200
    expected = 403 if model == "enrollment" else 200  # participation records are evidence
    assert boss_client.get(reverse(f"admin:evalstudy_{model}_add")).status_code == expected


def test_judgment_admin_is_read_only(boss_client):
    assert boss_client.get(reverse("admin:annotation_judgment_changelist")).status_code == 200
    assert boss_client.get(reverse("admin:annotation_judgment_add")).status_code == 403


def test_study_change_page_offers_imports_and_exports(boss_client):
    study = make_study()
    html = boss_client.get(reverse("admin:evalstudy_study_change", args=[study.pk])).content
    for name in ("import_items", "import_judgments", "design_csv"):
        assert reverse(f"admin:evalstudy_study_{name}", args=[study.pk]).encode() in html


def test_open_action_reports_why_a_study_cannot_open(boss_client):
    study = make_study(n_items=2, n_systems=2)
    Output.objects.filter(item__external_id="item-000", system__name="sys-1").delete()
    response = boss_client.post(
        reverse("admin:evalstudy_study_changelist"),
        {"action": "open_studies", "_selected_action": [study.pk]}, follow=True,
    )
    assert "item-000/sys-1" in response.content.decode()
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT


def test_open_action_opens_and_builds_the_design(boss_client):
    study = make_study(n_items=4, n_systems=2)
    boss_client.post(reverse("admin:evalstudy_study_changelist"),
                      {"action": "open_studies", "_selected_action": [study.pk]})
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    assert study.assignments.count() == 2


def test_import_spec_upload_creates_the_study(boss_client):
    upload = SimpleUploadedFile("asr.yaml", (DEMO / "asr_meaning.yaml").read_bytes())
    response = boss_client.post(reverse("admin:evalstudy_study_import_spec"),
                                 {"file": upload, "open_after_import": "on"}, follow=True)
    assert response.status_code == 200
    study = Study.objects.get(slug="asr-meaning-demo")
    assert study.status == Study.Status.OPEN
    assert study.owner.username == "boss"


def test_invalid_spec_upload_lists_problems_and_imports_nothing(boss_client):
    bad = b"study:\n  slug: Bad Slug\n  title: t\n  colour: blue\nsystems: []\n"
    response = boss_client.post(reverse("admin:evalstudy_study_import_spec"),
                                 {"file": SimpleUploadedFile("bad.yaml", bad)}, follow=True)
    html = response.content.decode()
    assert "bad.yaml:2: study.slug" in html
    assert "bad.yaml:4: study.colour: unknown field" in html
    assert not Study.objects.exists()


def test_upload_with_wrong_extension_is_refused(boss_client):
    response = boss_client.post(reverse("admin:evalstudy_study_import_spec"),
                                 {"file": SimpleUploadedFile("spec.exe", b"x")})
    assert "expected a file ending in .yaml, .yml, .json" in response.content.decode()


def test_import_items_csv_upload(boss_client):
    study = make_study(n_items=1, n_systems=2)
    data = "item,system,output,reference,speaker\nnew-1,sys-0,hello,hello there,spk9\n" \
           "new-1,sys-1,hallo,hello there,spk9\n"
    boss_client.post(reverse("admin:evalstudy_study_import_items", args=[study.pk]),
                      {"file": SimpleUploadedFile("items.csv", data.encode())})
    item = Item.objects.get(study=study, external_id="new-1")
    assert item.metadata == {"speaker": "spk9"}
    assert item.outputs.count() == 2


def test_design_csv_download_lists_every_seat_slot(boss_client):
    study = make_study(n_items=4, n_systems=2, status=Study.Status.OPEN)
    response = boss_client.get(reverse("admin:evalstudy_study_design_csv", args=[study.pk]))
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0])[:5] == ["list", "position", "item", "system", "kind"]
    assert len(rows) == 2 * (4 + 1)
    assert {row["kind"] for row in rows} == {"calibration", "target"}


def test_researchers_see_only_their_own_studies(db):
    researcher = UserFactory(username="alice", is_staff=True)
    researcher.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["evalstudy", "annotation"])
    )
    mine = make_study(owner=researcher)
    theirs = make_study()
    client = Client()
    client.force_login(researcher)
    html = client.get(reverse("admin:evalstudy_study_changelist")).content.decode()
    assert mine.slug in html and theirs.slug not in html
    assert client.get(
        reverse("admin:evalstudy_study_change", args=[theirs.pk])
    ).status_code in (302, 404)
    assert client.get(
        reverse("admin:evalstudy_study_design_csv", args=[theirs.pk])
    ).status_code == 404
    items = client.get(reverse("admin:evalstudy_item_changelist")).content.decode()
    assert mine.slug in items and theirs.slug not in items


def test_import_judgments_upload_and_its_errors(boss_client):
    from annotation.models import Judgment

    study = make_study(n_items=1, n_systems=2)
    url = reverse("admin:evalstudy_study_import_judgments", args=[study.pk])
    good = "rater,item,system,criterion,value\nr1,item-000,sys-0,severity,2\n"
    response = boss_client.post(url, {"file": SimpleUploadedFile("j.csv", good.encode()),
                                       "rater_kind": "slp"}, follow=True)
    assert "1 judgments created" in response.content.decode()
    assert Judgment.objects.get().rater.kind == "slp"
    bad = "rater,item,system,criterion,value\nr1,nope,sys-0,severity,2\n"
    response = boss_client.post(url, {"file": SimpleUploadedFile("j.csv", bad.encode()),
                                       "rater_kind": "slp"})
    assert "Problem in j.csv:2: item: no item &#x27;nope&#x27;" in response.content.decode()
    assert Judgment.objects.count() == 1
