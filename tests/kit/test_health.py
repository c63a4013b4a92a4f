"""/healthz against the real database and broker, with and without a real worker, and with the
broker or the database pointing at a closed port: anonymous probes are cheap and terse, staff
see the details, and the worker broadcast is cached."""

import json
import socket
import subprocess
import sys
import time

import pytest
from django.core.cache import cache
from django.test import Client, override_settings

from kit.health import workers_cache_key
from tests.factories import UserFactory
from tests.workers import ROOT, STARTUP_ENVIRONMENT, running_worker, wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


def _staff_client() -> Client:
    client = Client()
    client.force_login(UserFactory(username="ops", is_staff=True))
    return client


def _health(client=None, **settings):
    with override_settings(**settings):
        response = (client or Client()).get("/healthz")
    return response.status_code, response.json()


def test_anonymous_probe_checks_database_and_broker_only_and_shows_no_details():
    status, body = _health(HEALTHZ_WORKERS_REQUIRED=False, HEALTHZ_TIMEOUT=0.5)
    assert status == 200
    assert body == {"status": "ok", "failed": [],
                    "checks": {"database": {"ok": True}, "broker": {"ok": True}}}
    assert cache.get(workers_cache_key()) is None  # no broadcast to the workers


def test_staff_see_details_and_workers_even_when_not_required():
    status, body = _health(_staff_client(), HEALTHZ_WORKERS_REQUIRED=False, HEALTHZ_TIMEOUT=0.5)
    assert status == 200 and body["status"] == "ok"
    assert body["checks"]["database"]["ok"] and body["checks"]["database"]["vendor"] == (
        "postgresql")
    assert body["checks"]["broker"] == {**body["checks"]["broker"], "ok": True,
                                        "transport": "redis"}
    workers = body["checks"]["workers"]
    assert workers["ok"] is False and workers["required"] is False
    assert "no worker answered" in workers["error"]
    assert body["reasons"] == [] and body["failed"] == []
    # A signed-in user who is not staff is treated as anonymous.
    member = Client()
    member.force_login(UserFactory(username="rater-account"))
    assert _health(member, HEALTHZ_TIMEOUT=0.5)[1] == {
        "status": "ok", "failed": [],
        "checks": {"database": {"ok": True}, "broker": {"ok": True}}}


def test_unavailable_when_workers_are_required_and_absent():
    required = {"HEALTHZ_WORKERS_REQUIRED": True, "HEALTHZ_TIMEOUT": 0.5}
    status, body = _health(**required)
    assert status == 503
    assert body == {"status": "unavailable", "failed": ["workers"],
                    "checks": {"database": {"ok": True}, "broker": {"ok": True},
                               "workers": {"ok": False, "required": True}}}
    status, body = _health(_staff_client(), **required)
    assert status == 503 and body["reasons"] == ["workers: no worker answered within 0.5 s"]


def test_the_worker_broadcast_is_cached():
    """One broadcast per interval: later requests reuse its answer (same check time) and do
    not wait for replies; with a zero interval every request asks again."""
    staff = _staff_client()
    settings = {"HEALTHZ_WORKERS_REQUIRED": True, "HEALTHZ_TIMEOUT": 2.0,
                "HEALTHZ_WORKERS_CACHE_SECONDS": 30}
    first = _health(staff, **settings)[1]["checks"]["workers"]
    assert first["seconds"] >= 2.0  # waited the whole timeout for replies
    for client in (staff, Client(), staff):
        started = time.monotonic()
        status, body = _health(client, **settings)
        assert status == 503 and time.monotonic() - started < 1.5
    assert body["checks"]["workers"]["checked_at"] == first["checked_at"]
    # Another request broadcasting right now: the others neither wait nor broadcast.
    cache.clear()
    cache.add(workers_cache_key() + ":lock", 1)
    status, body = _health(staff, **settings)
    assert status == 503 and body["checks"]["workers"]["error"] == "worker check in progress"
    cache.clear()
    uncached = {**settings, "HEALTHZ_TIMEOUT": 0.3, "HEALTHZ_WORKERS_CACHE_SECONDS": 0}
    first = _health(staff, **uncached)[1]["checks"]["workers"]["checked_at"]
    time.sleep(0.01)
    assert _health(staff, **uncached)[1]["checks"]["workers"]["checked_at"] != first


def test_broker_down_is_a_503_naming_the_check_only():
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    down = {"CELERY_BROKER_URL": url, "CELERY_BROKER_TRANSPORT_OPTIONS": {},
            "HEALTHZ_TIMEOUT": 0.5}
    status, body = _health(**down)
    assert status == 503
    assert body == {"status": "unavailable", "failed": ["broker"],
                    "checks": {"database": {"ok": True}, "broker": {"ok": False}}}
    status, body = _health(_staff_client(), **down)
    assert status == 503
    assert body["checks"]["broker"]["ok"] is False
    assert "Connection refused" in body["checks"]["broker"]["error"]
    assert body["checks"]["workers"]["error"] == "not checked: the broker is unreachable"
    assert len(body["reasons"]) == 1 and body["reasons"][0].startswith("broker: ")
    assert url not in str(body)  # the broker URL (which may hold a password) is not shown


@pytest.mark.slow
def test_a_real_worker_is_reported_with_its_queues_to_staff_only():
    # No caching here: the loop waits for the worker to come up.
    required = {"HEALTHZ_WORKERS_REQUIRED": True, "HEALTHZ_TIMEOUT": 1.0,
                "HEALTHZ_REQUIRED_QUEUES": ["default", "cpu"],
                "HEALTHZ_WORKERS_CACHE_SECONDS": 0}
    staff = _staff_client()
    with running_worker(["default", "cpu"], name="health-cpu"):
        assert wait_for(lambda: _health(staff, **required)[0] == 200, timeout=60, interval=1), (
            _health(staff, **required))
        status, body = _health(staff, **required)
        workers = body["checks"]["workers"]
        [name] = workers["workers"]
        assert name.startswith("health-cpu@")
        assert workers["queues"]["cpu"] == [name] and workers["queues"]["default"] == [name]
        assert workers["queues"]["gpu"] == [] and workers["queues"]["llm"] == []
        status, body = _health(**required)
        assert status == 200 and "health-cpu" not in json.dumps(body)
        # Requiring the gpu queue as well: a 503 that names it (to staff).
        gpu = {**required, "HEALTHZ_REQUIRED_QUEUES": ["cpu", "gpu"]}
        status, body = _health(staff, **gpu)
        assert status == 503
        assert body["reasons"] == ["workers: no worker consumes queue(s) gpu"]
        status, body = _health(**gpu)
        assert status == 503 and body["failed"] == ["workers"] and "gpu" not in json.dumps(body)


def test_database_down_is_a_503_without_the_error_text():
    """In a fresh process whose DATABASE_URL points at a closed port; the request carries a
    session cookie, whose lookup fails too (read as anonymous, not a 500)."""
    port = _closed_port()
    env = {**STARTUP_ENVIRONMENT, "DJANGO_SETTINGS_MODULE": "config.settings.test",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/nothing",
           "HEALTHZ_TIMEOUT": "0.5"}
    script = ("import json, django; django.setup(); from django.test import Client; "
              "c = Client(); c.cookies['sessionid'] = 'abcdefghijklmnopqrstuvwxyz012345'; "
              "r = c.get('/healthz', HTTP_HOST='localhost'); "
              "print(json.dumps([r.status_code, r.json()]))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    status, body = json.loads(result.stdout.strip().splitlines()[-1])
    assert status == 503
    assert body == {"status": "unavailable", "failed": ["database"],
                    "checks": {"database": {"ok": False}, "broker": {"ok": True}}}
    assert str(port) not in json.dumps(body)
