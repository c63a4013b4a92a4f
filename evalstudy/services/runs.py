"""Background runs whose worker is gone."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q
from django.utils import timezone


def runs_fail_stale(*, minutes: int | None = None, now: dt.datetime | None = None) -> int:
    """Mark failed every running background run (metric, analysis, proxy: any concrete
    `BackgroundRun`) whose last heartbeat is older than `minutes` (default
    EVALSTUDY_STALE_RUN_MINUTES). Returns how many were failed.

    Its worker died or its messages were lost, so nothing would ever finish it and its page
    would poll forever. One conditional UPDATE per model: a run whose heartbeat moves on
    between the read and the write is left alone. Safe to run twice.
    """
    from django.apps import apps
    from django.conf import settings
    from django.db.models.functions import Coalesce

    from kit.runs import BackgroundRun

    minutes = settings.EVALSTUDY_STALE_RUN_MINUTES if minutes is None else minutes
    now = now or timezone.now()
    cutoff = now - dt.timedelta(minutes=minutes)
    failed = 0
    for model in apps.get_models():
        if not issubclass(model, BackgroundRun):
            continue
        # _default_manager: the abstract BackgroundRun declares no `objects` for the stubs;
        # every run model's only manager is its default one.
        stale = model._default_manager.annotate(
            last_sign=Coalesce("heartbeat_at", "started_at", "created_at"),
        ).filter(status=BackgroundRun.Status.RUNNING, last_sign__lt=cutoff)
        for pk, last in stale.values_list("pk", "last_sign"):
            failed += model._default_manager.filter(
                Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff),
                pk=pk, status=BackgroundRun.Status.RUNNING,
            ).update(
                status=BackgroundRun.Status.FAILED, finished_at=now,
                error=(f"No progress for {minutes} minutes (last sign of life "
                       f"{last:%Y-%m-%d %H:%M} UTC): the worker running it stopped or lost "
                       "the task. Start the run again; finished parts are kept."),
            )
    return failed
