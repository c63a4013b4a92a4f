"""`/healthz`: is this deployment able to serve? Checks the database, the broker and the workers.

200 when the database answers a query and the broker accepts a connection (and, when
`HEALTHZ_WORKERS_REQUIRED` is on, every queue in `HEALTHZ_REQUIRED_QUEUES` has a worker);
503 with the reasons otherwise. Workers are always reported: which ones answered and which
queues each consumes, so a missing GPU host shows as `gpu` without consumers.

No authentication (load balancers and orchestrators call it) and no secrets in the answer: the
broker is named by its transport only.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _timed(check) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = {"ok": True, **(check() or {})}
    except Exception as error:  # noqa: BLE001 - any failure is a reason to report, not raise
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"vendor": connection.vendor}


def _broker_connection():
    from kombu import Connection

    timeout = settings.HEALTHZ_TIMEOUT
    return Connection(
        settings.CELERY_BROKER_URL, connect_timeout=timeout,
        transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
    )


def check_broker() -> dict[str, Any]:
    with _broker_connection() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                               timeout=settings.HEALTHZ_TIMEOUT)
        return {"transport": conn.transport.driver_type}


def check_workers() -> dict[str, Any]:
    """Ask every worker which queues it consumes (one broadcast, `HEALTHZ_TIMEOUT` seconds)."""
    from config.celery import QUEUES, app

    with _broker_connection() as conn:
        replies = app.control.inspect(timeout=settings.HEALTHZ_TIMEOUT,
                                      connection=conn).active_queues() or {}
    queues: dict[str, list[str]] = {name: [] for name in QUEUES}
    for worker, consumed in sorted(replies.items()):
        for queue in consumed or []:
            queues.setdefault(queue["name"], []).append(worker)
    required = list(settings.HEALTHZ_REQUIRED_QUEUES)
    missing = [name for name in required if not queues.get(name)]
    result = {"workers": sorted(replies), "queues": queues, "required_queues": required,
              "queues_without_workers": missing}
    if not replies:
        raise _WorkersMissing(result, f"no worker answered within {settings.HEALTHZ_TIMEOUT} s")
    if missing:
        raise _WorkersMissing(result, "no worker consumes queue(s) " + ", ".join(missing))
    return result


class _WorkersMissing(Exception):
    def __init__(self, report: dict[str, Any], message: str):
        self.report = report
        super().__init__(message)


def health_report() -> tuple[bool, dict[str, Any]]:
    """(healthy, report) as `/healthz` answers it."""
    checks = {"database": _timed(check_database), "broker": _timed(check_broker)}
    workers_required = settings.HEALTHZ_WORKERS_REQUIRED
    if checks["broker"]["ok"]:
        started = time.perf_counter()
        try:
            workers = {"ok": True, **check_workers()}
        except _WorkersMissing as missing:
            workers = {"ok": False, **missing.report, "error": str(missing)}
        except Exception as error:  # noqa: BLE001 - reported
            workers = {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
        workers["seconds"] = round(time.perf_counter() - started, 3)
    else:
        workers = {"ok": False, "error": "not checked: the broker is unreachable"}
    workers["required"] = workers_required
    checks["workers"] = workers
    reasons = [f"{name}: {check.get('error', 'failed')}" for name, check in checks.items()
               if not check["ok"] and (name != "workers" or workers_required)]
    healthy = not reasons
    return healthy, {"status": "ok" if healthy else "unavailable", "checks": checks,
                     "reasons": reasons}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    healthy, report = health_report()
    return JsonResponse(report, status=200 if healthy else 503)
