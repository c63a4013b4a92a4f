"""/healthz against the real database and broker, with and without a real worker, and with the
broker or the database pointing at a closed port."""

import json
import socket
import subprocess
import sys

import pytest
from django.test import Client, override_settings

from tests.workers import ROOT, STARTUP_ENVIRONMENT, running_worker, wait_for

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


def _health(**settings):
    with override_settings(**settings):
        response = Client().get("/healthz")
    return response.status_code, response.json()


def test_healthy_without_workers_when_they_are_not_required():
    status, body = _health(HEALTHZ_WORKERS_REQUIRED=False, HEALTHZ_TIMEOUT=0.5)
    assert status == 200 and body["status"] == "ok"
    assert body["checks"]["database"]["ok"] and body["checks"]["database"]["vendor"] == (
        "postgresql")
    assert body["checks"]["broker"] == {**body["checks"]["broker"], "ok": True,
                                        "transport": "redis"}
    workers = body["checks"]["workers"]
    assert workers["ok"] is False and workers["required"] is False
    assert "no worker answered" in workers["error"]
    assert body["reasons"] == []


def test_unavailable_when_workers_are_required_and_absent():
    status, body = _health(HEALTHZ_WORKERS_REQUIRED=True, HEALTHZ_TIMEOUT=0.5)
    assert status == 503 and body["status"] == "unavailable"
    assert body["reasons"] == ["workers: no worker answered within 0.5 s"]


def test_broker_down_is_a_503_with_the_reason():
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    status, body = _health(CELERY_BROKER_URL=url, CELERY_BROKER_TRANSPORT_OPTIONS={},
                           HEALTHZ_TIMEOUT=0.5)
    assert status == 503
    assert body["checks"]["broker"]["ok"] is False
    assert "Connection refused" in body["checks"]["broker"]["error"]
    assert body["checks"]["workers"]["error"] == "not checked: the broker is unreachable"
    assert len(body["reasons"]) == 1 and body["reasons"][0].startswith("broker: ")
    assert url not in str(body)  # the broker URL (which may hold a password) is not shown


@pytest.mark.slow
def test_a_real_worker_is_reported_with_its_queues():
    required = {"HEALTHZ_WORKERS_REQUIRED": True, "HEALTHZ_TIMEOUT": 1.0,
                "HEALTHZ_REQUIRED_QUEUES": ["default", "cpu"]}
    with running_worker(["default", "cpu"], name="health-cpu"):
        assert wait_for(lambda: _health(**required)[0] == 200, timeout=60, interval=1), (
            _health(**required))
        status, body = _health(**required)
        workers = body["checks"]["workers"]
        [name] = workers["workers"]
        assert name.startswith("health-cpu@")
        assert workers["queues"]["cpu"] == [name] and workers["queues"]["default"] == [name]
        assert workers["queues"]["gpu"] == [] and workers["queues"]["llm"] == []
        # Requiring the gpu queue as well: a 503 that names it.
        status, body = _health(**{**required, "HEALTHZ_REQUIRED_QUEUES": ["cpu", "gpu"]})
        assert status == 503
        assert body["reasons"] == ["workers: no worker consumes queue(s) gpu"]


def test_database_down_is_a_503_with_the_reason():
    """In a fresh process whose DATABASE_URL points at a closed port."""
    env = {**STARTUP_ENVIRONMENT, "DJANGO_SETTINGS_MODULE": "config.settings.test",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:{_closed_port()}/nothing",
           "HEALTHZ_TIMEOUT": "0.5"}
    script = ("import json, django; django.setup(); from django.test import Client; "
              "r = Client().get('/healthz', HTTP_HOST='localhost'); "
              "print(json.dumps([r.status_code, r.json()]))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    status, body = json.loads(result.stdout.strip().splitlines()[-1])
    assert status == 503
    assert body["checks"]["database"]["ok"] is False
    assert body["reasons"][0].startswith("database: OperationalError")
    assert body["checks"]["broker"]["ok"] is True
