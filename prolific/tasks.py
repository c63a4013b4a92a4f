"""Celery tasks of the Prolific app: thin wrappers that import their service and call it once."""

from celery import shared_task


@shared_task(name="prolific.sync_open_studies", acks_late=True, soft_time_limit=240)
def prolific_sync_open_studies_task() -> int:
    """Periodic (beat): sync the submissions of every linked open study, freeing the seats of
    returned and timed-out participants. Safe to run twice."""
    from .services import prolific_sync_open_studies

    return prolific_sync_open_studies()
