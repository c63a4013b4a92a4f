"""Real Celery worker processes for tests: same code, real broker, the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
# The environment as the test session started: worker processes get it, not whatever tests
# set in this process later (tests pass what a worker needs explicitly, e.g. `env=`).
# tests/conftest.py imports this module first, so the snapshot predates every test.
STARTUP_ENVIRONMENT = dict(os.environ)


def test_database_url() -> str:
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{host}:{port}/{db['NAME']}"


def start_worker(queues: list[str], *, name: str, env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None):
    """`celery -A config worker` in a process of its own (solo pool: killing it kills the task
    it runs), consuming `queues`, against the test database. `extra_args` go to the worker
    command line (e.g. ["--include", "tests.some_tasks"] to load test-only tasks)."""
    full_env = {
        **STARTUP_ENVIRONMENT, "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": test_database_url(), "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", ",".join(queues),
         "--pool", "solo", "--loglevel", "INFO", "--hostname", f"{name}@%h",
         "--without-gossip", "--without-mingle", "--without-heartbeat", *(extra_args or [])],
        cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )


def stop_worker(process, *, kill: bool = False) -> str:
    """Stop the worker (SIGKILL with kill=True, as a crash would) and return its log tail."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    return output[-4000:]


@contextmanager
def running_worker(queues: list[str], *, name: str, env: dict[str, str] | None = None,
                   extra_args: list[str] | None = None):
    process = start_worker(queues, name=name, env=env, extra_args=extra_args)
    try:
        yield process
    finally:
        print(stop_worker(process))  # shown by pytest when the test fails


def wait_for(predicate, *, timeout: float, interval: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
