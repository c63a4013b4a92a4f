"""Celery tasks of the studies app: thin wrappers that import their service and call it once."""

from celery import shared_task


@shared_task(name="evalstudy.assignments_expire_leases", acks_late=True, soft_time_limit=120)
def assignments_expire_leases_task() -> int:
    """Periodic (beat): hand abandoned seats to the next rater. Safe to run twice."""
    from .services import assignments_expire_leases

    return assignments_expire_leases()
