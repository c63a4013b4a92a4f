"""Deploy checks (`manage.py check --deploy`): settings that keep state on one host.

Scaling out means adding web processes and worker hosts; anything below would be seen by one
process or one host only.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def per_host_state(app_configs, **kwargs):
    problems = []
    backend = settings.CACHES.get("default", {}).get("BACKEND", "")
    if backend.endswith(("locmem.LocMemCache", "dummy.DummyCache")):
        problems.append(Warning(
            "The cache is local to each process: the sign-in and API throttles count per web "
            "process, so N processes allow N times the limit.",
            hint="Set CACHE_URL to a shared Redis, e.g. redis://redis:6379/2.",
            id="evalstudy.W001",
        ))
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        problems.append(Warning(
            "The database is SQLite in a local file: a second host would not see it.",
            hint="Set DATABASE_URL to PostgreSQL.", id="evalstudy.W002",
        ))
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        problems.append(Warning(
            "The Celery broker is the filesystem transport in var/broker: workers on other "
            "hosts cannot receive tasks.",
            hint="Set CELERY_BROKER_URL to Redis or RabbitMQ.", id="evalstudy.W003",
        ))
    return problems
