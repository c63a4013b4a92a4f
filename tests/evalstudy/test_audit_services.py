"""The audit trail is written by the services, inside their own transaction: a run started, a
study opened or a file exported leaves the same event whichever interface asked (API, admin,
page, command), naming who acted and through what; a change that rolls back leaves none."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from analysis.models import AnalysisRun
from evalstudy import audit
from evalstudy.models import AuditEvent, Rater, Study, StudyCollaborator
from evalstudy.services import study_open
from metrics.models import MetricRun
from metrics.services import metric_run_start
from tests.factories import UserFactory, make_study, token_client

# Throttle counters start empty (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_throttles")]


@pytest.fixture
def web(owner):
    client = Client()
    client.force_login(owner)
    return client


def _started(model) -> AuditEvent:
    return AuditEvent.objects.get(action="start", target_type=model._meta.label_lower)


def _who(event: AuditEvent) -> tuple[str, str]:
    return event.source, event.actor_repr


# --- runs ---------------------------------------------------------------------------------------
def test_a_metric_run_is_audited_from_the_api_the_page_the_admin_and_the_command(owner, web):
    study = make_study(owner=owner, slug="asr")
    api = token_client(owner)
    assert api.post(reverse("api-study-metric-runs", args=["asr"]), {"metrics": ["wer"]},
                    content_type="application/json").status_code == 202
    assert web.post(reverse("metrics:start", args=["asr"]),
                    {"metrics": ["wer", "cer"]}).status_code == 302
    owner.is_superuser = True  # the admin's study list needs the model permission
    owner.save()
    web.post(reverse("admin:evalstudy_study_changelist"),
             {"action": "compute_metrics", "_selected_action": [study.pk]})
    call_command("compute_metrics", "--study", "asr", "--metrics", "wer", "--no-wait")
    runs = list(MetricRun.objects.order_by("pk"))
    assert len(runs) == 4
    events = {event.target_id: event for event in
              AuditEvent.objects.filter(action="start", target_type="metrics.metricrun")}
    assert [_who(events[str(run.pk)])[0] for run in runs] == ["api", "web", "admin", "command"]
    assert [events[str(run.pk)].actor for run in runs] == [owner, owner, owner, None]
    assert events[str(runs[3].pk)].actor_repr.startswith("shell")
    assert events[str(runs[1].pk)].changes["metrics"] == ["wer", "cer"]
    assert all(event.study == study for event in events.values())


def test_an_analysis_run_is_audited_from_the_api_and_the_page(owner, web):
    make_study(owner=owner, slug="asr")
    api = token_client(owner)
    assert api.post(reverse("api-study-analysis-runs", args=["asr"]), {"options": {}},
                    content_type="application/json").status_code == 202
    assert web.post(reverse("analysis:start", args=["asr"]),
                    {"engine": "statsmodels"}).status_code == 302
    sources = [_who(AuditEvent.objects.get(action="start", target_id=str(run.pk),
                                           target_type="analysis.analysisrun"))
               for run in AnalysisRun.objects.order_by("pk")]
    assert sources == [("api", "owner"), ("web", "owner")]


# --- one transaction ------------------------------------------------------------------------
class TrailDown(Exception):
    pass


@pytest.fixture
def trail_down(monkeypatch):
    """The audit table refuses writes (a full disk, a revoked grant)."""
    def refuse(**event):
        raise TrailDown("the trail cannot be written")

    monkeypatch.setattr(audit.AuditEvent.objects, "create", refuse)


def test_a_change_whose_event_cannot_be_written_does_not_happen(trail_down):
    study = make_study()
    with pytest.raises(TrailDown):
        study_open(study=study)
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT
    assert not study.assignments.exists()
    with pytest.raises(TrailDown):
        metric_run_start(study=study, metrics=["wer"])
    assert not MetricRun.objects.exists()


# --- the same event whichever interface asked --------------------------------------------------
def _event_content(event: AuditEvent) -> tuple:
    changes = {k: v for k, v in event.changes.items() if k != "file"}
    return event.action, event.target_type, event.target_id, changes


def test_opening_a_study_reads_the_same_from_the_api_the_admin_and_a_service_call(owner, web):
    owner.is_superuser = True
    owner.save()
    _by_api, by_admin, by_worker = (make_study(owner=owner, slug=slug)
                                   for slug in ("by-api", "by-admin", "by-worker"))
    assert token_client(owner).post(reverse("api-study-open", args=["by-api"])).status_code == 200
    web.post(reverse("admin:evalstudy_study_changelist"),
             {"action": "open_studies", "_selected_action": [by_admin.pk]})
    study_open(study=by_worker)
    events = {e.study_slug: e for e in AuditEvent.objects.filter(action="open")}
    assert {slug: (e.source, e.actor) for slug, e in events.items()} == {
        "by-api": ("api", owner), "by-admin": ("admin", owner), "by-worker": ("system", None)}
    contents = {slug: _event_content(e)[3] for slug, e in events.items()}
    assert contents == {slug: {"status": ["draft", "open"]} for slug in events}
    # Opening an open study changes nothing and records nothing.
    token_client(owner).post(reverse("api-study-open", args=["by-api"]))
    assert AuditEvent.objects.filter(action="open").count() == 3


def test_a_design_export_reads_the_same_from_the_api_the_admin_and_the_command(owner, web,
                                                                               tmp_path):
    owner.is_superuser = True
    owner.save()
    study = make_study(owner=owner, slug="asr", status=Study.Status.OPEN)
    assert token_client(owner).get(reverse("api-study-design", args=["asr"])).status_code == 200
    assert web.get(reverse("admin:evalstudy_study_design_csv",
                           args=[study.pk])).status_code == 200
    call_command("export_design", "asr", "--csv", str(tmp_path / "design.csv"))
    exports = AuditEvent.objects.filter(action="export").order_by("pk")
    assert [e.source for e in exports] == ["api", "admin", "command"]
    contents = [_event_content(e) for e in exports]
    assert contents[0] == contents[1] == contents[2], contents
    assert contents[0][3] == {"what": "design", "format": "csv", "rows": 18 + 3}
    assert exports[2].changes["file"].endswith("design.csv")


def test_study_configuration_through_the_api_is_audited_with_its_changes(owner):
    api = token_client(owner)
    colleague = UserFactory(username="colleague")
    created = api.post(reverse("api-studies"), {"slug": "new", "title": "New"},
                       content_type="application/json")
    assert created.status_code == 201, created.content
    assert api.patch(reverse("api-study", args=["new"]), {"title": "Renamed"},
                     content_type="application/json").status_code == 200
    assert api.post(reverse("api-study-systems", args=["new"]), {"name": "base"},
                    content_type="application/json").status_code == 201
    assert api.post(reverse("api-study-criteria", args=["new"]),
                    {"key": "usable", "prompt": "Usable?", "kind": "binary"},
                    content_type="application/json").status_code == 201
    assert api.post(reverse("api-study-collaborators", args=["new"]),
                    {"username": "colleague", "role": "viewer"},
                    content_type="application/json").status_code == 201
    assert api.post(reverse("api-study-collaborators", args=["new"]),
                    {"username": "colleague", "role": "editor"},
                    content_type="application/json").status_code == 201
    assert api.delete(reverse("api-study-collaborator", args=["new", "colleague"])
                      ).status_code == 204
    assert not StudyCollaborator.objects.filter(user=colleague).exists()
    events = AuditEvent.objects.filter(study_slug="new").order_by("pk")
    assert all(_who(e) == ("api", "owner") for e in events)
    assert [(e.action, e.target_type) for e in events] == [
        ("create", "evalstudy.study"), ("update", "evalstudy.study"),
        ("create", "evalstudy.system"), ("create", "evalstudy.criterion"),
        ("update", "evalstudy.studycollaborator"), ("update", "evalstudy.studycollaborator"),
        ("delete", "")]
    assert events[1].changes == {"title": ["New", "Renamed"]}
    assert events[3].changes["key"] == [None, "usable"]
    assert [e.changes["collaborator"] for e in events[4:]] == [
        [None, "colleague:viewer"], ["colleague:viewer", "colleague:editor"],
        ["colleague", None]]


# --- the review's findings ------------------------------------------------------------------
def _researcher(username: str):
    from django.contrib.auth.models import Permission

    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    client = Client()
    client.force_login(user)
    return user, client


def test_a_spec_import_never_overwrites_a_study_the_importer_does_not_edit():
    import yaml
    from django.core.files.uploadedfile import SimpleUploadedFile

    from evalstudy.importers import spec_to_document, study_to_spec

    owner, _ = _researcher("owner")
    _attacker, admin = _researcher("attacker")
    victim = make_study(owner=owner, slug="victim", title="Owner's study")
    document = spec_to_document(study_to_spec(victim))
    document["study"]["title"] = "PWNED"
    upload = SimpleUploadedFile("x.yaml", yaml.safe_dump(document).encode())
    page = admin.post(reverse("admin:evalstudy_study_import_spec"), {"file": upload},
                      follow=True).content.decode()
    assert "is taken" in page
    viewer, admin_as_viewer = _researcher("viewer")
    StudyCollaborator.objects.create(study=victim, user=viewer, role="viewer")
    upload = SimpleUploadedFile("x.yaml", yaml.safe_dump(document).encode())
    page = admin_as_viewer.post(reverse("admin:evalstudy_study_import_spec"), {"file": upload},
                                follow=True).content.decode()
    assert "needs editor" in page
    victim.refresh_from_db()
    assert victim.title == "Owner's study"
    assert not AuditEvent.objects.filter(action="import", study=victim).exists()


def test_an_account_invitation_leaves_no_username_in_the_trail():
    from evalstudy.privacy import rater_data_erase

    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="s1")
    alice = UserFactory(username="alice.smith")
    api = token_client(owner)
    for username in ("alice.smith", "nobody.here"):
        assert api.post(reverse("api-study-raters", args=["s1"]),
                        {"kind": "slp", "username": username},
                        content_type="application/json").status_code == 202
    invitations = AuditEvent.objects.filter(changes__has_key="invitation")
    # The same event whether or not the account exists, and no name in it.
    assert [e.changes for e in invitations] == [{"invitation": [None, "an account, by its "
                                                                      "username"]}] * 2
    rater_data_erase(Rater.objects.get(user=alice))
    assert not [e for e in AuditEvent.objects.all()
                if "alice.smith" in json.dumps(e.changes) + e.target_repr + e.actor_repr]


def test_api_tokens_made_and_revoked_are_audited_without_their_secret():
    from evalstudy.tokens import api_token_create, api_token_revoke

    user = UserFactory(username="scripter")
    token, raw = api_token_create(user=user, name="nightly", source="command")
    assert api_token_revoke(user=user, source="command") == 1
    made = AuditEvent.objects.get(action="create", target_type="evalstudy.apitoken")
    gone = AuditEvent.objects.get(action="delete", target_type="evalstudy.apitoken")
    assert made.changes["token"] == [None, f"{token.prefix}... of scripter"]
    assert gone.changes["tokens"] == [[f"{token.prefix}..."], None]
    assert raw not in json.dumps(made.changes) + json.dumps(gone.changes)
