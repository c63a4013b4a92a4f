"""The audit trail is written by the services, inside their own transaction: a run started, a
study opened or a file exported leaves the same event whichever interface asked (API, admin,
page, command), naming who acted and through what; a change that rolls back leaves none."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from analysis.models import AnalysisRun
from evalstudy import audit
from evalstudy.models import AuditEvent, Study, StudyCollaborator
from evalstudy.services import study_open
from metrics.models import MetricRun
from metrics.services import metric_run_start
from tests.factories import UserFactory, make_study, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttles(fresh_throttles):
    """Throttle counters start empty (tests/conftest.py)."""


@pytest.fixture
def owner(db):
    return UserFactory(username="owner", is_staff=True)


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
    by_api, by_admin, by_worker = (make_study(owner=owner, slug=slug)
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
