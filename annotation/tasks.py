"""Celery tasks of the annotation app: thin wrappers that import their service and call it
once."""

from celery import shared_task


@shared_task(name="annotation.integrity_scan", acks_late=True, soft_time_limit=300)
def integrity_scan_task() -> int:
    """Periodic (beat): record new agreement-over-time alerts of the open studies and close
    finished recalibration rounds. Safe to run twice."""
    from .recalibration import integrity_scan

    return integrity_scan()
