"""A real Celery worker process, on the real broker (Redis in the test settings), runs a task
against the test database: the periodic lease expiry hands an abandoned seat on."""

import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from evalstudy.models import Assignment, Study
from evalstudy.services import assignment_next
from evalstudy.tasks import assignments_expire_leases_task
from tests.factories import RaterFactory, make_study

ROOT = Path(__file__).resolve().parents[1]


def _database_url() -> str:
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def worker():
    """Starts `celery -A config worker` on a queue of its own; yields the queue name."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": _database_url(), "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue, "--pool", "solo",
         "--loglevel", "INFO", "--hostname", f"{queue}@%h", "--without-gossip",
         "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        yield queue
    finally:
        process.terminate()
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        print(output[-4000:])  # shown by pytest when the test fails


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_worker_expires_an_abandoned_lease(worker):
    study = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN, lease_minutes=1)
    rater = RaterFactory()
    assignment_next(study=study, rater=rater)
    Assignment.objects.filter(rater=rater).update(
        lease_expires_at=timezone.now() - dt.timedelta(minutes=5)
    )
    assignments_expire_leases_task.apply_async(queue=worker)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = sorted(study.assignments.values_list("state", flat=True))
        if states == ["expired", "open"]:
            break
        time.sleep(0.5)
    assert states == ["expired", "open"], "the worker did not hand the seat on within 60 s"
