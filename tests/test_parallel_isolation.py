"""Two pytest-xdist workers share nothing a test can observe: not the database (pytest-django's
per-worker suffix), not the broker's keys and channels (config/settings/test.py prefixes them
with the worker's name), not var/ (media, trained proxies, models). Each "worker" here is a
fresh interpreter with the test settings and PYTEST_XDIST_WORKER set, as the Celery workers a
test starts are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.workers import STARTUP_ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "parallel-isolation-probe"

# Run in each "worker": its settings, then (with an argument) one message put on QUEUE
# through the broker, then the queue's length as this worker's broker sees it.
PROBE = """
import json, sys
import django
django.setup()
from django.conf import settings
from config.celery import app
with app.connection_for_write() as conn:
    client = conn.default_channel.client
    if sys.argv[1] == "put":
        client.delete(QUEUE)
        conn.SimpleQueue(QUEUE).put({"from": settings.XDIST_WORKER})
    length = client.llen(QUEUE)
    if sys.argv[1] == "clean":
        client.delete(QUEUE)
print(json.dumps({
    "keyprefix": settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix"),
    "var": str(settings.VAR_DIR), "media": settings.MEDIA_ROOT,
    "proxies": settings.EVALSTUDY_PROXY_DIR, "models": settings.EVALSTUDY_MODEL_DIRS,
    "queue_length": length,
}))
""".replace("QUEUE", repr(QUEUE))


def _in_worker(worker: str, action: str) -> dict:
    env = {k: v for k, v in STARTUP_ENVIRONMENT.items()
           if k not in ("EVALSTUDY_VAR_DIR", "MEDIA_ROOT", "EVALSTUDY_PROXY_DIR")}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.test",
                "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_TESTRUNUID": "probe123run",
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL})
    done = subprocess.run([sys.executable, "-c", PROBE, action], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_workers_share_no_broker_keys_and_no_directories():
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "needs the Redis test broker"
    first = _in_worker("gw0", "put")
    try:
        second = _in_worker("gw1", "look")
        again = _in_worker("gw0", "look")
    finally:
        _in_worker("gw0", "clean")
    assert first["keyprefix"] == "gw0-probe123:" and second["keyprefix"] == "gw1-probe123:"
    # The message gw0 put is in gw0's queue and not in gw1's of the same name.
    assert first["queue_length"] == again["queue_length"] == 1
    assert second["queue_length"] == 0
    for name in ("var", "media", "proxies"):
        assert first[name] != second[name]
        assert Path(first[name]).is_relative_to(ROOT / "var" / "xdist" / "gw0")
        assert Path(second[name]).is_relative_to(ROOT / "var" / "xdist" / "gw1")
    assert set(first["models"]).isdisjoint(second["models"])


@pytest.mark.django_db
def test_this_worker_has_its_own_database_and_keys():
    from django.db import connection

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    assert worker == settings.XDIST_WORKER
    if not worker:
        pytest.skip("one process: nothing to isolate from")
    assert connection.settings_dict["NAME"].endswith(f"_{worker}")
    run = os.environ["PYTEST_XDIST_TESTRUNUID"][:8]
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] == f"{worker}-{run}:"
    assert Path(settings.VAR_DIR) == ROOT / "var" / "xdist" / worker
