"""The test suite runs against PostgreSQL and Redis, as production does.

`make test` starts both when they are not running. Override with DATABASE_URL and
CELERY_BROKER_URL (e.g. a RabbitMQ URL) to test against other servers.

Under pytest-xdist (`make test` runs one worker process per core) each worker is its own
world: pytest-django gives it its own database (test_<name>_gw0, ...), and this file gives it
its own broker keys (every Redis key and channel prefixed with the worker's name and the
run's id, so a purge, a queue length or a broadcast to Celery workers stays within it) and its
own var/ directory (media, trained proxies, models). The Celery worker processes a test
starts read these settings with the same PYTEST_XDIST_WORKER in their environment, so they
land in the same world. tests/test_parallel_isolation.py checks it.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-key-not-secret")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/evalstudy")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
# Nothing in the tests reaches Prolific: a closed loopback port, no retries (tests that need
# Prolific start the fake in tests/prolific_fake.py and point the setting at it).
os.environ.setdefault("PROLIFIC_API_URL", "http://127.0.0.1:9/api/v1/")
os.environ.setdefault("PROLIFIC_RETRIES", "0")
# "gw0", "gw1"... in a pytest-xdist worker (and in the processes it starts); "" otherwise.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if XDIST_WORKER:
    from pathlib import Path

    os.environ.setdefault("EVALSTUDY_VAR_DIR", str(
        Path(__file__).resolve().parents[2] / "var" / "xdist" / XDIST_WORKER))

from .base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if XDIST_WORKER and CELERY_BROKER_URL.startswith(("redis://", "rediss://")):  # noqa: F405
    # The worker's name and the session's id (xdist gives each run one): two workers of a run,
    # and two runs sharing a Redis database, never see each other's queues.
    _RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    CELERY_BROKER_TRANSPORT_OPTIONS = {  # noqa: F405
        **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
        "global_keyprefix": f"{XDIST_WORKER}-{_RUN}:" if _RUN else f"{XDIST_WORKER}:"}
