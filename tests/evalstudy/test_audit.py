"""The audit trail: admin edits (form and inlines), study actions, imports and exports through
the admin, the commands and the download views; the read-only, study-scoped audit admin."""

import datetime as dt
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from analysis.models import AnalysisRun
from evalstudy.audit import audit_record
from evalstudy.models import AuditEvent, Criterion, Study, System
from kit.audit import instance_changes, model_snapshot
from tests.factories import UserFactory, make_study

DEMO = Path(__file__).resolve().parents[2] / "demo"
pytestmark = pytest.mark.django_db


class _FormFields(HTMLParser):
    """The submittable fields of the page's main form, as a browser would post them."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._select = None
        self._textarea = None

    def _add(self, name, value):
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "input" and name:
            kind = attrs.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in attrs:
                    self._add(name, attrs.get("value", "on"))
            elif kind not in ("submit", "button", "file", "image"):
                self._add(name, attrs.get("value", ""))
        elif tag == "select" and name:
            self._select = name
            self.data.setdefault(name, [])
        elif tag == "option" and self._select and "selected" in attrs:
            self._add(self._select, attrs.get("value", ""))
        elif tag == "textarea" and name:
            self._textarea = name
            self._add(name, "")

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea][-1] += data.removeprefix("\n")


def change_form(as_boss, url) -> dict:
    parser = _FormFields()
    parser.feed(as_boss.get(url).content.decode())
    data = {k: v if len(v) != 1 else v[0] for k, v in parser.data.items()}
    data.pop("action", None)  # the changelist's action select, when present
    # Empty extra inline forms are rendered with __prefix__ templates: never submitted.
    return {k: v for k, v in data.items() if "__prefix__" not in k}


@pytest.fixture
def boss(db):
    return UserFactory(username="boss", is_staff=True, is_superuser=True)


@pytest.fixture
def as_boss(boss):
    """A client signed in as the superuser "boss" (pytest-django's `client` signs in no one)."""
    as_boss = Client()
    as_boss.force_login(boss)
    return as_boss


def test_admin_study_edit_records_each_changed_field(as_boss, boss):
    study = make_study(title="Before")
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(as_boss, url)
    data.update(title="After", ratings_per_output="2")
    response = as_boss.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    event = AuditEvent.objects.get(action="update", target_type="evalstudy.study")
    assert event.actor == boss and event.actor_repr == "boss" and event.source == "admin"
    assert event.study == study and event.study_slug == study.slug
    assert event.changes["title"] == ["Before", "After"]
    assert event.changes["ratings_per_output"] == [1, 2]
    assert "updated_at" not in event.changes and "slug" not in event.changes
    # Saving again without a change records nothing.
    assert as_boss.post(url, change_form(as_boss, url)).status_code == 302
    assert AuditEvent.objects.filter(action="update").count() == 1


def test_admin_inline_create_update_delete_are_recorded(as_boss):
    study = make_study(n_systems=2)
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(as_boss, url)
    systems = [key for key in data if key.startswith("systems-") and key.endswith("-name")]
    assert len(systems) == 2
    prefix = systems[0].removesuffix("-name")
    data[f"{prefix}-description"] = "the baseline"
    note = next(k for k, v in data.items() if k.startswith("criteria-") and k.endswith("-key")
                and v == "note")
    data[note.removesuffix("-key") + "-DELETE"] = "on"
    data["systems-2-name"] = "sys-new"
    data["systems-2-description"] = ""
    data["systems-2-metadata"] = "{}"
    data["systems-2-study"] = str(study.pk)
    data["systems-TOTAL_FORMS"] = "3"
    response = as_boss.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    events = AuditEvent.objects.filter(study=study)
    update = events.get(action="update", target_type="evalstudy.system")
    assert update.changes == {"description": ["", "the baseline"]}
    create = events.get(action="create", target_type="evalstudy.system")
    assert create.target_repr == "sys-new" and create.changes["name"] == [None, "sys-new"]
    delete = events.get(action="delete", target_type="evalstudy.criterion")
    assert delete.target_repr == "note", delete.changes
    assert delete.changes.get("key") == ["note", None], delete.changes
    assert not Criterion.objects.filter(study=study, key="note").exists()


def test_admin_actions_imports_and_exports_are_recorded(as_boss, boss):
    study = make_study(n_items=2, n_systems=2)
    changelist = reverse("admin:evalstudy_study_changelist")
    as_boss.post(changelist, {"action": "open_studies", "_selected_action": [study.pk]})
    as_boss.post(changelist, {"action": "close_studies", "_selected_action": [study.pk]})
    as_boss.post(changelist, {"action": "export_specs", "_selected_action": [study.pk]})
    as_boss.get(reverse("admin:evalstudy_study_design_csv", args=[study.pk]))
    as_boss.get(reverse("admin:evalstudy_study_spec", args=[study.pk, "json"]))
    upload = SimpleUploadedFile("asr.yaml", (DEMO / "asr_meaning.yaml").read_bytes())
    as_boss.post(reverse("admin:evalstudy_study_import_spec"), {"file": upload})
    events = AuditEvent.objects.filter(actor=boss, source="admin")
    assert events.get(action="open").changes == {"status": ["draft", "open"]}
    assert events.get(action="close").changes == {"status": ["open", "closed"]}
    exports = sorted((e.changes["what"], e.changes["format"])
                     for e in events.filter(action="export", study=study))
    assert exports == [("design", "csv"), ("spec", "json"), ("spec", "yaml")]
    imported = events.get(action="import")
    assert imported.study_slug == "asr-meaning-demo"
    assert imported.changes == {"what": "spec", "file": "asr.yaml", "outcome": "created"}


def test_failed_action_and_failed_import_record_nothing(as_boss):
    study = make_study(n_items=2, n_systems=2)
    System.objects.create(study=study, name="no-outputs")  # cannot open: missing outputs
    as_boss.post(reverse("admin:evalstudy_study_changelist"),
                {"action": "open_studies", "_selected_action": [study.pk]})
    bad = SimpleUploadedFile("items.csv", b"item,system,output\nx,nope,hi\n")
    as_boss.post(reverse("admin:evalstudy_study_import_items", args=[study.pk]), {"file": bad})
    assert not AuditEvent.objects.exists()


def test_commands_record_imports_and_exports(tmp_path):
    call_command("import_study", str(DEMO / "asr_meaning.yaml"), "--open")
    study = Study.objects.get(slug="asr-meaning-demo")
    call_command("export_study", study.slug, "--output", str(tmp_path / "s.yaml"))
    call_command("export_design", study.slug, "--csv", str(tmp_path / "d.csv"))
    call_command("export_metrics", study.slug, "--csv", str(tmp_path / "m.csv"))
    events = AuditEvent.objects.filter(study=study, source="command")
    assert sorted(events.values_list("action", flat=True)) == [
        "export", "export", "export", "import", "open"]
    assert all(e.actor is None and e.actor_repr.startswith("shell") for e in events)
    assert events.get(action="export", changes__what="design").changes["file"].endswith("d.csv")


def test_download_views_record_exports(as_boss, boss):
    study = make_study(status=Study.Status.OPEN)
    run = AnalysisRun.objects.create(study=study, status=AnalysisRun.Status.DONE,
                                     report_html="<html><body>report</body></html>",
                                     result={"design": {}}, report_pdf=b"%PDF-1.4")
    for url in (reverse("metrics:csv", args=[study.slug]),
                reverse("annotation:monitor_csv", args=[study.slug]),
                reverse("analysis:report", args=[run.pk]),
                reverse("analysis:report_pdf", args=[run.pk]),
                reverse("analysis:report_json", args=[run.pk])):
        assert as_boss.get(url).status_code == 200, url
    exports = AuditEvent.objects.filter(action="export", study=study, actor=boss, source="web")
    assert sorted(e.changes["what"] + ":" + e.changes["format"] for e in exports) == [
        "analysis report:html", "analysis report:json", "analysis report:pdf",
        "metric results:csv", "progress:csv"]


def test_events_survive_the_study_and_the_user():
    user = UserFactory(username="gone")
    study = make_study()
    event = audit_record(actor=user, action="update", target=study, source="api",
                         changes={"title": ["a", "b"]})
    study.delete()
    user.delete()
    event.refresh_from_db()
    assert (event.study, event.study_slug) == (None, study.slug)
    assert (event.actor, event.actor_repr) == (None, "gone")


def test_audit_record_refuses_unknown_actions_and_sources():
    with pytest.raises(ValueError, match="unknown audit action"):
        audit_record(actor=None, action="frobnicate")
    with pytest.raises(ValueError, match="unknown audit source"):
        audit_record(actor=None, action="export", source="fax")
    assert not AuditEvent.objects.exists()


def test_instance_changes_and_snapshots():
    study = make_study(title="One")
    before = model_snapshot(study)
    study.title, study.lease_minutes = "Two", 5
    assert instance_changes(before, study) == {"lease_minutes": [60, 5], "title": ["One", "Two"]}
    assert instance_changes(study, study) == {}
    long_text = "x" * 2000
    study.instructions = long_text
    assert len(model_snapshot(study)["instructions"]) < 600  # cut, with the length said
    assert "access_token" not in model_snapshot(study.systems.first())
    created = instance_changes(None, study)
    assert created["slug"] == [None, study.slug]
    assert isinstance(model_snapshot(study)["created_at"], str)
    assert model_snapshot(study)["excluded_studies"] == []
    assert dt.datetime.fromisoformat(model_snapshot(study)["created_at"]) <= timezone.now()


def test_audit_admin_is_read_only_and_scoped(db, as_boss):
    researcher = UserFactory(username="alice", is_staff=True)
    researcher.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["evalstudy", "annotation"]))
    mine, theirs = make_study(owner=researcher), make_study()
    mine_event = audit_record(actor=researcher, action="export", target=mine, source="web")
    theirs_event = audit_record(actor=None, action="open", target=theirs, source="admin")
    changelist = reverse("admin:evalstudy_auditevent_changelist")
    assert as_boss.get(reverse("admin:evalstudy_auditevent_add")).status_code == 403
    change = as_boss.get(reverse("admin:evalstudy_auditevent_change", args=[mine_event.pk]))
    assert change.status_code == 200 and b'name="_save"' not in change.content
    delete = as_boss.post(reverse("admin:evalstudy_auditevent_delete", args=[mine_event.pk]),
                         {"post": "yes"})
    assert delete.status_code == 403 and AuditEvent.objects.count() == 2
    filtered = as_boss.get(changelist, {"action__exact": "open"}).context["cl"].result_list
    assert list(filtered) == [theirs_event]
    as_researcher = Client()
    as_researcher.force_login(researcher)
    page = as_researcher.get(changelist)
    assert list(page.context["cl"].result_list) == [mine_event]
    assert theirs.slug not in page.content.decode()  # not even in the filters
    assert as_researcher.get(reverse("admin:evalstudy_auditevent_change",
                                     args=[theirs_event.pk])).status_code == 302


def test_the_trail_keeps_personal_data_and_secrets_out_of_collaborators_sight(as_boss, boss):
    """A rater's metadata (an email) and a crowd participant's platform session id, which the
    admin and the API show to the study's owner only, never reach the trail every collaborator
    reads: a metadata change is recorded as a change, without its values."""
    from evalstudy.models import Enrollment, Rater
    from tests.factories import invite

    study = make_study()
    rater = invite(study, external_id="P-1", metadata={"email": "ann@example.org"})
    form = {"kind": "crowd", "external_id": "P-1", "display_name": "Ann",
            "metadata": '{"email": "ann.new@example.org"}', "user": ""}
    assert as_boss.post(reverse("admin:evalstudy_rater_change", args=[rater.pk]),
                       form).status_code == 302
    Rater.objects.get(pk=rater.pk)
    edit = AuditEvent.objects.get(action="update", target_type="evalstudy.rater")
    assert edit.changes["metadata"] == ["<personal data>", "<personal data>"]
    assert "example.org" not in str(edit.changes)
    Enrollment.objects.filter(rater=rater).update(platform_session_id="SECRETSESSION")
    enrollment = Enrollment.objects.get(rater=rater)
    as_boss.post(reverse("admin:evalstudy_enrollment_delete", args=[enrollment.pk]),
                {"post": "yes"})
    deleted = AuditEvent.objects.get(action="delete", target_type="evalstudy.enrollment")
    assert "SECRETSESSION" not in str(deleted.changes)
