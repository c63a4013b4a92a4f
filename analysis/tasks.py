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
