"""Celery tasks of the studies app: thin wrappers that import their service and call it once."""

from celery import shared_task


@shared_task(name="evalstudy.assignments_expire_leases", acks_late=True, soft_time_limit=120)
def assignments_expire_leases_task() -> int:
    """Periodic (beat): hand abandoned seats to the next rater. Safe to run twice."""
    from .services import assignments_expire_leases

    return assignments_expire_leases()


@shared_task(name="evalstudy.runs_fail_stale", acks_late=True, soft_time_limit=120)
def runs_fail_stale_task() -> int:
    """Periodic (beat): fail running runs without a heartbeat for too long. Safe to run twice."""
    from .services import runs_fail_stale

    return runs_fail_stale()
