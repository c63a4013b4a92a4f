"""Celery task for analyses (queue `cpu`, via the `analysis.*` route)."""

from celery import shared_task


@shared_task(name="analysis.run", acks_late=True, reject_on_worker_lost=True,
             soft_time_limit=3600)
def analysis_run_task(run_id: int) -> str:
    from .models import AnalysisRun
    from .services import analysis_run_execute, analysis_run_fail

    try:
        return analysis_run_execute(AnalysisRun.objects.get(pk=run_id)).status
    except Exception as error:
        analysis_run_fail(run_id=run_id, error=f"{type(error).__name__}: {error}")
        raise


@shared_task(name="analysis.stopping_checks", acks_late=True, soft_time_limit=600)
def stopping_checks_task() -> int:
    """Beat: the next look of every open adaptive study that is due one (analysis.stopping)."""
    from .stopping import stopping_checks_due

    return stopping_checks_due()
