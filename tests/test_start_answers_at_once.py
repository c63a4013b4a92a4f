"""Every Start answers at once: the request records the run (queued) and hands it to the
workers; the scorers, the statistics and the judges' libraries load there, never in the web
request.

Before, the first "Start" of a metric run took about 19 s on a cold web process (building the
scorers to fingerprint their configurations imported torch, jiwer and nltk inside the request)
and the analysis' Start about 11 s (its option checks imported pandas and scipy.stats through
the statistics packages), with no sign that anything was happening.

The requests run in a fresh interpreter (the pytest process has long imported everything), on
this test's database, which a transactional test commits so that the other process sees it.
Its broker is in memory: the queued task goes nowhere, as the point is what the request did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from analysis.models import AnalysisRun
from metrics.models import MetricRun
from proxies.models import ProxyRun
from tests.factories import UserFactory, make_study
from tests.test_startup_imports import HEAVY

ROOT = Path(__file__).resolve().parent.parent

_REQUEST = """
import json, os, sys
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()  # the test client's host name is allowed
from django.contrib.auth import get_user_model
heavy = {heavy!r}
client = Client()
client.force_login(get_user_model().objects.get(username={username!r}))
before = [name for name in heavy if name in sys.modules]
response = client.post({url!r}, {body}, content_type={content_type!r})
print("ANSWER=" + json.dumps({{
    "status": response.status_code, "body": response.content.decode()[:500], "before": before,
    "after": [name for name in heavy if name in sys.modules]}}))
"""


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}")


def post_in_a_fresh_process(url: str, body: dict, *, username: str, as_json: bool) -> dict:
    """POST `body` to `url` as `username` in a new interpreter; its status and the heavy
    libraries loaded before and after the request."""
    script = _REQUEST.format(
        heavy=HEAVY, username=username, url=url,
        body=f"json.dumps({body!r})" if as_json else repr(body),
        content_type="application/json" if as_json else "application/x-www-form-urlencoded")
    if not as_json:  # the test client encodes a dict as a form when given the multipart type
        script = script.replace("content_type='application/x-www-form-urlencoded'", "")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test",
           "DATABASE_URL": _database_url(), "CELERY_BROKER_URL": "memory://",
           # The judge the proxy run names is the operator's (a trusted origin); it is never
           # asked anything here.
           "EVALSTUDY_JUDGE_BASE_URL": "http://127.0.0.1:9/v1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ANSWER=")]
    assert done.returncode == 0 and lines, f"the request failed:\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("ANSWER="))


@pytest.fixture
def editor_study(transactional_db):
    owner = UserFactory(username="starter", is_staff=True)
    return make_study(owner=owner, slug="starts")


START_REQUESTS = {
    # The metrics page's form: every default metric, the model-backed ones included.
    "metric run (page)": (lambda slug: reverse("metrics:start", args=[slug]),
                          {"metrics": ["wer", "bertscore", "semantic_distance"]}, False,
                          MetricRun),
    "metric run (API)": (lambda slug: reverse("api-study-metric-runs", args=[slug]),
                         {"metrics": ["wer", "semantic_distance"]}, True, MetricRun),
    "analysis (page)": (lambda slug: reverse("analysis:start", args=[slug]),
                        {"engine": "auto", "formula": "severity ~ system + (1|rater)",
                         "deployment_group": "system"}, False,
                        AnalysisRun),
    "analysis (API)": (lambda slug: reverse("api-study-analysis-runs", args=[slug]),
                       {"options": {"power": {"effect": 0.5}}}, True, AnalysisRun),
    "proxy judge (API)": (lambda slug: reverse("api-study-proxy-runs", args=[slug]),
                          {"method": "latte", "criteria": ["usable"],
                           "backend": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
                          True, ProxyRun),
}


@pytest.mark.slow
@pytest.mark.parametrize("start", list(START_REQUESTS))
def test_a_start_request_loads_no_heavy_library_and_leaves_the_run_queued(start,
                                                                          editor_study):
    url, body, as_json, model = START_REQUESTS[start]
    answer = post_in_a_fresh_process(url(editor_study.slug), body, username="starter",
                                     as_json=as_json)
    assert answer["before"] == [], "Django's start alone loaded a heavy library"
    assert answer["status"] in (202, 302), answer
    assert answer["after"] == [], f"{start}: the request imported {answer['after']}"
    run = model.objects.get(study=editor_study)
    assert run.status == "pending" and run.error == ""


def _start_button(html: str, button_id: str) -> str:
    found = re.search(rf'<button[^>]*id="{button_id}"[^>]*>.*?</button>', html, re.S)
    assert found, f"no button {button_id} in the page"
    return " ".join(found.group(0).split())


@pytest.mark.django_db
@pytest.mark.parametrize("runs_page", ["metrics", "analysis"])
def test_a_queued_or_running_run_shows_its_state_and_disables_start_until_it_ends(runs_page,
                                                                               client):
    owner = UserFactory(username="watcher", is_staff=True)
    study = make_study(owner=owner, slug="watched")
    client.force_login(owner)
    if runs_page == "metrics":
        run = MetricRun.objects.create(study=study, metrics=["wer"], total=10)
        button_id, label = "metric-start", ">Start</button>"
    else:
        run = AnalysisRun.objects.create(study=study, options={}, total=10)
        button_id, label = "analysis-start", ">Run the analysis</button>"
    page_url = reverse(f"{runs_page}:page", args=[study.slug])
    fragment_url = reverse(f"{runs_page}:runs", args=[study.slug])

    shown = client.get(page_url).content.decode()
    button = _start_button(shown, button_id)
    assert " disabled" in button and f"Run {run.pk}: queued" in button
    assert "queued" in shown.split(f'id="{runs_page.replace("metrics", "metric")}-runs"')[1]

    type(run).objects.filter(pk=run.pk).update(status="running", done=3)
    polled = client.get(fragment_url).content.decode()
    assert "running 3 of 10" in polled
    button = _start_button(polled, button_id)  # carried out of band to the form
    assert 'hx-swap-oob="true"' in button and " disabled" in button
    assert f"Run {run.pk}: running 3 of 10" in button

    type(run).objects.filter(pk=run.pk).update(status="done", done=10)
    button = _start_button(client.get(fragment_url).content.decode(), button_id)
    assert " disabled" not in button and button.endswith(label)
    assert " disabled" not in _start_button(client.get(page_url).content.decode(), button_id)


@pytest.mark.django_db
def test_a_metric_run_its_scorers_refuse_fails_on_the_worker_with_the_reason_on_its_page(
        client, django_capture_on_commit_callbacks):
    """What only the scorer knows (its parameters' values) is checked by the dispatch task,
    not by the request: the run fails there and its page says why."""
    from metrics.services import metric_run_dispatch, metric_run_start

    owner = UserFactory(username="refused", is_staff=True)
    study = make_study(owner=owner, slug="refused")
    with django_capture_on_commit_callbacks(execute=False) as queued:
        run = metric_run_start(study=study, metrics=["wer"], params={"wer": {"colour": "red"}})
    assert len(queued) == 1 and not run.configs.exists()
    sent = []
    assert metric_run_dispatch(run, send=lambda *batch: sent.append(batch)) == 0
    run.refresh_from_db()
    assert run.status == "failed" and not sent
    assert "metric 'wer': invalid parameters" in run.error and "colour" in run.error
    client.force_login(owner)
    page = client.get(reverse("metrics:page", args=[study.slug])).content.decode()
    assert "metric &#x27;wer&#x27;: invalid parameters" in page
