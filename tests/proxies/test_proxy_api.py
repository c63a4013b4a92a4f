"""Proxy runs through the REST API, the admin and a real Celery worker on the `llm` queue."""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.models import AuditEvent, StudyCollaborator
from proxies.models import ProxyRun
from proxies.runs import proxy_run_start
from tests.factories import UserFactory, make_study, token_client
from tests.proxies.judges.fake_openai import FakeOpenAI
from tests.proxies.test_proxy_runs import backend_for, latte_responder, run_here
from tests.workers import running_worker, wait_for

# Throttle counters start empty (tests/conftest.py): these tests call the API.
pytestmark = pytest.mark.usefixtures("fresh_throttles")


@pytest.fixture
def allowed_latte(allow_loopback_judges):
    """The fake judge on loopback, with loopback allowed (tests/proxies/conftest.py)."""
    with FakeOpenAI(latte_responder) as server:
        yield server


@pytest.mark.django_db
def test_start_follow_and_read_a_proxy_run_through_the_api(
        allowed_latte, django_capture_on_commit_callbacks):
    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="asr")
    api = token_client(owner)
    with django_capture_on_commit_callbacks(execute=False):
        response = api.post(reverse("api-study-proxy-runs", args=["asr"]), data=json.dumps(
            {"method": "latte", "criteria": ["usable"], "backend": backend_for(allowed_latte)}),
            content_type="application/json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert response["Location"] == body["status_url"]
    assert body["rater_kind"] == "llm" and body["total"] == 18 and body["status"] == "pending"
    run_here(ProxyRun.objects.get(pk=body["id"]))  # the worker's part, here
    status = api.get(body["status_url"]).json()
    assert status["status"] == "done" and status["done"] == 18
    results = api.get(body["results_url"]).json()
    assert results["count"] == 18
    first = results["results"][0]
    assert set(first) == {"item", "system", "system_b", "criterion", "value", "score"}
    scores = api.get(reverse("api-proxy-run-latte-scores", args=[body["id"]]),
                     {"criterion": "usable", "by": "system"}).json()
    assert {g["group"]: g["latte_score"] for g in scores["groups"]}["sys-2"] == 0.0


@pytest.mark.django_db
def test_bad_proxy_requests_get_the_error_shape_and_store_nothing(allowed_latte):
    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="asr")
    api = token_client(owner)
    response = api.post(reverse("api-study-proxy-runs", args=["asr"]), data=json.dumps(
        {"method": "latte", "criteria": ["nope"], "backend": backend_for(allowed_latte)}),
        content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert {"code", "message", "field_errors"} <= set(body)
    assert "'nope' is not a criterion" in json.dumps(body)
    assert not ProxyRun.objects.exists()


@pytest.mark.django_db
def test_viewers_read_but_cannot_start_and_strangers_see_nothing(allowed_latte):
    owner = UserFactory(username="owner", is_staff=True)
    viewer = UserFactory(username="viewer", is_staff=True)
    stranger = UserFactory(username="stranger", is_staff=True)
    study = make_study(owner=owner, slug="asr")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(allowed_latte), enqueue=False))
    start = reverse("api-study-proxy-runs", args=["asr"])
    body = json.dumps({"method": "latte", "backend": backend_for(allowed_latte)})
    as_viewer, as_stranger = token_client(viewer), token_client(stranger)
    assert as_viewer.get(reverse("api-proxy-run", args=[run.pk])).status_code == 200
    assert as_viewer.post(start, data=body, content_type="application/json").status_code == 403
    assert as_viewer.post(reverse("api-proxy-run-resume", args=[run.pk])).status_code == 403
    assert as_stranger.get(reverse("api-proxy-run", args=[run.pk])).status_code == 404
    assert as_stranger.get(reverse("api-proxy-run-results", args=[run.pk])).status_code == 404
    assert as_stranger.post(start, data=body, content_type="application/json").status_code == 404


@pytest.mark.django_db
def test_admin_starts_a_proxy_run_and_shows_errors_on_the_form(allowed_latte, client,
                                                              django_capture_on_commit_callbacks):
    owner = UserFactory(username="owner", is_staff=True, is_superuser=True)
    study = make_study(owner=owner, slug="asr")
    client.force_login(owner)
    url = reverse("admin:proxies_proxyrun_add")
    form = {"study": study.pk, "method": "latte", "criteria_keys": "usable",
            "backend_config": json.dumps(backend_for(allowed_latte)), "template": "",
            "params_config": "{}"}
    bad = client.post(url, {**form, "criteria_keys": "nope"})
    assert bad.status_code == 200 and "is not a criterion" in bad.content.decode()
    assert not ProxyRun.objects.exists()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    run = ProxyRun.objects.get()
    assert run.criteria == ["usable"] and run.rater.kind == "llm" and len(callbacks) == 1
    assert client.get(reverse("admin:proxies_proxyrun_change", args=[run.pk])).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_real_worker_on_the_llm_queue_judges_a_run(allowed_latte, allow_loopback_judges):
    study = make_study(n_items=4, n_systems=2)
    name = f"llm-{uuid.uuid4().hex[:6]}"
    # The worker reads its settings from the environment: the loopback opt-in goes there too.
    with running_worker(["cpu", "llm"], name=name, env=allow_loopback_judges):
        run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                              backend=backend_for(allowed_latte))
        assert wait_for(lambda: ProxyRun.objects.get(pk=run.pk).status == "done", timeout=120)
    assert Judgment.objects.filter(rater=run.rater).count() == 8
    assert allowed_latte.hits == 8


@pytest.mark.django_db
def test_metrics_page_lists_proxy_runs_with_progress(allowed_latte, client):
    from django.contrib.auth.models import Permission

    owner = UserFactory(username="owner", is_staff=True)
    owner.user_permissions.set(Permission.objects.filter(content_type__app_label="proxies"))
    study = make_study(owner=owner, slug="asr")
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(allowed_latte), enqueue=False))
    client.force_login(owner)
    page = client.get(reverse("metrics:runs", args=["asr"])).content.decode()
    assert str(run.rater) in page and "18 / 18" in page
    assert f"/admin/proxies/proxyrun/add/?study={study.pk}" in page
    add = client.get(f"/admin/proxies/proxyrun/add/?study={study.pk}").content.decode()
    assert f'<option value="{study.pk}" selected>' in add


@pytest.mark.django_db
def test_admin_offers_only_studies_the_researcher_may_edit(client):
    from django.contrib.auth.models import Permission

    viewer = UserFactory(username="viewer", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="proxies"))
    mine = make_study(owner=viewer, slug="mine")
    watched = make_study(slug="watched")
    StudyCollaborator.objects.create(study=watched, user=viewer, role="viewer")
    client.force_login(viewer)
    for url in ("/admin/proxies/proxyrun/add/", "/admin/proxies/learnedproxy/add/"):
        page = client.get(url).content.decode()
        assert f'<option value="{mine.pk}">' in page
        assert f'<option value="{watched.pk}">' not in page
    response = client.post("/admin/proxies/proxyrun/add/", {
        "study": watched.pk, "method": "latte", "criteria_keys": "usable",
        "backend_config": json.dumps({"base_url": "http://127.0.0.1:9/v1", "model": "m"}),
        "params_config": "{}"})
    assert response.status_code == 200 and not ProxyRun.objects.exists()


@pytest.mark.django_db
def test_a_proxy_run_and_its_resumption_are_audited_and_a_refusal_is_not(allowed_latte):
    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="asr")
    api = token_client(owner)
    response = api.post(reverse("api-study-proxy-runs", args=["asr"]), data=json.dumps(
        {"method": "latte", "criteria": ["usable"], "backend": backend_for(allowed_latte)}),
        content_type="application/json")
    assert response.status_code == 202, response.content
    run = ProxyRun.objects.get()
    started = AuditEvent.objects.get(action="start", target_type="proxies.proxyrun")
    assert (started.source, started.actor_repr, started.target_id) == ("api", "owner",
                                                                       str(run.pk))
    assert started.changes["method"] == "latte" and started.changes["criteria"] == ["usable"]
    resumed = api.post(reverse("api-proxy-run-resume", args=[run.pk]))
    assert resumed.status_code == 202
    event = AuditEvent.objects.get(action="start", changes__resumed=True)
    assert (event.source, event.actor_repr) == ("api", "owner")
    # A refused request is no run and no event.
    refused = api.post(reverse("api-study-proxy-runs", args=["asr"]), data=json.dumps(
        {"method": "latte", "criteria": ["nope"], "backend": backend_for(allowed_latte)}),
        content_type="application/json")
    assert refused.status_code == 400
    assert AuditEvent.objects.filter(action="start").count() == 2
