"""Stale-run detection: running runs without a heartbeat for too long are failed, by the
service and by its beat task in a real worker; everything else is left alone."""

import datetime as dt
import uuid

import pytest
from django.conf import settings
from django.utils import timezone

from analysis.models import AnalysisRun
from config.celery import app
from evalstudy.services import runs_fail_stale
from evalstudy.tasks import runs_fail_stale_task
from metrics.models import MetricRun
from tests.factories import make_study
from tests.workers import running_worker, wait_for

MINUTES = 30


def _ago(minutes):
    return timezone.now() - dt.timedelta(minutes=minutes)


@pytest.fixture
def runs(db):
    study = make_study()
    return {
        "stale_metric": MetricRun.objects.create(study=study, status="running",
                                                 started_at=_ago(90), heartbeat_at=_ago(45)),
        "stale_analysis": AnalysisRun.objects.create(study=study, status="running",
                                                     started_at=_ago(40)),
        "fresh_metric": MetricRun.objects.create(study=study, status="running",
                                                 started_at=_ago(90), heartbeat_at=_ago(5)),
        "old_pending": AnalysisRun.objects.create(study=study, status="pending"),
        "old_done": MetricRun.objects.create(study=study, status="done", heartbeat_at=_ago(99)),
    }


def _status(run):
    run.refresh_from_db()
    return run.status


def test_stale_running_runs_fail_with_a_clear_error(runs):
    AnalysisRun.objects.filter(pk=runs["old_pending"].pk).update(created_at=_ago(300))
    assert runs_fail_stale(minutes=MINUTES) == 2
    for name in ("stale_metric", "stale_analysis"):
        run = runs[name]
        assert _status(run) == "failed"
        assert f"No progress for {MINUTES} minutes" in run.error
        assert "Start the run again" in run.error and run.finished_at is not None
    assert _status(runs["fresh_metric"]) == "running"
    assert _status(runs["old_pending"]) == "pending"  # waiting for a worker is not stale
    assert _status(runs["old_done"]) == "done"
    assert runs_fail_stale(minutes=MINUTES) == 0  # safe to run twice


def test_the_threshold_comes_from_settings(runs, settings):
    settings.EVALSTUDY_STALE_RUN_MINUTES = 60
    assert runs_fail_stale() == 0
    settings.EVALSTUDY_STALE_RUN_MINUTES = 20
    assert runs_fail_stale() == 2


def test_beat_schedules_the_task():
    entry = settings.CELERY_BEAT_SCHEDULE["fail-stale-runs"]
    assert entry["task"] == runs_fail_stale_task.name == "evalstudy.runs_fail_stale"
    assert entry["task"] in app.tasks


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_beat_task():
    study = make_study()
    stale = MetricRun.objects.create(study=study, status="running", heartbeat_at=_ago(600))
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with running_worker([queue], name=queue):
        runs_fail_stale_task.apply_async(queue=queue)
        assert wait_for(lambda: _status(stale) == "failed", timeout=60)
