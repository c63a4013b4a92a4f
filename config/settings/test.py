"""The test suite runs against PostgreSQL and Redis, as production does.

`make test` starts both when they are not running. Override with DATABASE_URL and
CELERY_BROKER_URL (e.g. a RabbitMQ URL) to test against other servers.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-key-not-secret")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/evalstudy")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
# Nothing in the tests reaches Prolific: a closed loopback port, no retries (tests that need
# Prolific start the fake in tests/prolific_fake.py and point the setting at it).
os.environ.setdefault("PROLIFIC_API_URL", "http://127.0.0.1:9/api/v1/")
os.environ.setdefault("PROLIFIC_RETRIES", "0")

from .base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
