"""`/healthz`: is this deployment able to serve? Checks the database, the broker and the workers.

200 when the database answers a query and the broker accepts a connection (and, when
`HEALTHZ_WORKERS_REQUIRED` is on, every queue in `HEALTHZ_REQUIRED_QUEUES` has a worker);
503 otherwise.

No authentication (load balancers and orchestrators call it), so every anonymous request must
stay cheap and say little:
- the database and broker checks run on each request (one `SELECT 1`, one broker connection,
  each bounded by `HEALTHZ_TIMEOUT`);
- the worker check is a broadcast that waits `HEALTHZ_TIMEOUT` for replies, so its answer is
  kept in the Django cache for `HEALTHZ_WORKERS_CACHE_SECONDS` (30 s): at most one broadcast
  per interval per cache (per process with the local-memory cache, per deployment with Redis),
  and a lock keeps concurrent requests from broadcasting together. Anonymous requests run it
  only when `HEALTHZ_WORKERS_REQUIRED` is on, since only then does it decide the status;
- anonymous callers get the status and the names of the failed checks, never error text (it
  can name hosts, ports and database users), worker hostnames or the queue layout. Signed-in
  staff (session) also get the details: errors, timings, which worker consumes which queue.
The broker URL (it may hold a password) is never shown, only its transport.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

DEFAULT_WORKERS_CACHE_SECONDS = 30


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


def _workers_cache_seconds() -> float:
    return float(getattr(settings, "HEALTHZ_WORKERS_CACHE_SECONDS",
                         DEFAULT_WORKERS_CACHE_SECONDS))


def _ask_workers() -> dict[str, Any]:
    """One broadcast: `{"replies": {worker: [queue names]}, "error": str}` (error "" when the
    broadcast went out; no reply is not an error here)."""
    from celery import current_app as app

    try:
        with _broker_connection() as conn:
            replies = app.control.inspect(timeout=settings.HEALTHZ_TIMEOUT,
                                          connection=conn).active_queues() or {}
    except Exception as error:  # noqa: BLE001 - reported
        return {"replies": {}, "error": f"{type(error).__name__}: {error}"[:500]}
    return {"replies": {worker: sorted(q["name"] for q in consumed or [])
                        for worker, consumed in replies.items()}, "error": ""}


def workers_cache_key() -> str:
    """Keyed by broker, so settings pointing elsewhere (tests, a second site) never mix."""
    digest = hashlib.sha256(str(settings.CELERY_BROKER_URL).encode()).hexdigest()[:16]
    return f"healthz:workers:{digest}"


def worker_replies() -> dict[str, Any]:
    """The workers' answer to "which queues do you consume?", from the cache when it is younger
    than `HEALTHZ_WORKERS_CACHE_SECONDS`, else from a new broadcast (`_ask_workers` plus
    `checked_at`, a Unix time, and `seconds`). While another request broadcasts, the previous
    answer is used; with none yet, `{"replies": None, "error": "... in progress"}`."""
    key = workers_cache_key()
    entry = cache.get(key)
    max_age = _workers_cache_seconds()
    if entry is not None and time.time() - entry["checked_at"] < max_age:
        return entry
    # add() is atomic in every cache backend: one request per cache asks, the others do not
    # wait for it. The lock expires on its own should this process die mid-broadcast.
    lock = key + ":lock"
    if not cache.add(lock, 1, timeout=int(settings.HEALTHZ_TIMEOUT) + 10):
        return entry or {"replies": None, "error": "worker check in progress", "checked_at": None,
                         "seconds": 0.0}
    try:
        started = time.perf_counter()
        entry = {**_ask_workers(), "checked_at": time.time(),
                 "seconds": round(time.perf_counter() - started, 3)}
        # Kept past its freshness so concurrent requests have an answer while one refreshes.
        cache.set(key, entry, timeout=max(max_age * 10, 60))
    finally:
        cache.delete(lock)
    return entry


def check_workers() -> dict[str, Any]:
    """Which worker consumes which queue (`worker_replies`, cached) against the queues that
    `HEALTHZ_REQUIRED_QUEUES` names; `ok` is False when none answered or a required queue has
    no consumer, with the reason in `error`."""
    from celery import current_app

    try:
        entry = worker_replies()
    except Exception as error:  # noqa: BLE001 - a cache outage must not turn into a broadcast
        entry = {"replies": None, "checked_at": None, "seconds": 0.0,
                 "error": f"cache unavailable: {type(error).__name__}: {error}"[:500]}
    replies = entry["replies"] or {}
    # The project's queues, as its Celery app declares them (config/celery.py).
    queues: dict[str, list[str]] = {queue.name: []
                                    for queue in current_app.conf.task_queues or ()}
    for worker, consumed in sorted(replies.items()):
        for queue in consumed:
            queues.setdefault(queue, []).append(worker)
    required = list(settings.HEALTHZ_REQUIRED_QUEUES)
    missing = [name for name in required if not queues.get(name)]
    result: dict[str, Any] = {
        "ok": True, "workers": sorted(replies), "queues": queues, "required_queues": required,
        "queues_without_workers": missing, "seconds": entry["seconds"],
        "checked_at": (None if entry["checked_at"] is None else
                       dt.datetime.fromtimestamp(entry["checked_at"], dt.UTC).isoformat()),
    }
    if entry["error"]:
        result.update(ok=False, error=entry["error"])
    elif not replies:
        result.update(ok=False,
                      error=f"no worker answered within {settings.HEALTHZ_TIMEOUT} s")
    elif missing:
        result.update(ok=False, error="no worker consumes queue(s) " + ", ".join(missing))
    return result


def health_report(*, include_workers: bool = True) -> tuple[bool, dict[str, Any]]:
    """(healthy, full report with error texts). The workers are checked when `include_workers`
    is on or `HEALTHZ_WORKERS_REQUIRED` is (then they decide the status too)."""
    checks = {"database": _timed(check_database), "broker": _timed(check_broker)}
    workers_required = settings.HEALTHZ_WORKERS_REQUIRED
    if include_workers or workers_required:
        if checks["broker"]["ok"]:
            workers = check_workers()
        else:
            workers = {"ok": False, "error": "not checked: the broker is unreachable"}
        workers["required"] = workers_required
        checks["workers"] = workers
    failed = [name for name, check in checks.items()
              if not check["ok"] and (name != "workers" or workers_required)]
    reasons = [f"{name}: {checks[name].get('error', 'failed')}" for name in failed]
    healthy = not failed
    return healthy, {"status": "ok" if healthy else "unavailable", "failed": failed,
                     "reasons": reasons, "checks": checks}


def public_report(report: dict[str, Any]) -> dict[str, Any]:
    """What an anonymous caller sees: the status, which checks passed, which failed."""
    return {
        "status": report["status"], "failed": report["failed"],
        "checks": {name: {"ok": check["ok"], **({"required": check["required"]}
                                                 if "required" in check else {})}
                   for name, check in report["checks"].items()},
    }


def _is_staff(request: HttpRequest) -> bool:
    try:
        user = request.user
        return bool(user.is_authenticated and user.is_active and user.is_staff)
    except Exception:  # noqa: BLE001 - reading the session needs the database, which may be down
        return False


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    staff = _is_staff(request)
    healthy, report = health_report(include_workers=staff)
    return JsonResponse(report if staff else public_report(report),
                        status=200 if healthy else 503)
