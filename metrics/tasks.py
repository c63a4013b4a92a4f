"""Celery tasks for metric runs. Thin: import the service lazily, make one call.

Routing is by name (config.settings CELERY_TASK_ROUTES): `metrics.cpu.*` to the `cpu` queue,
`metrics.gpu.*` (model-backed metrics) to `gpu`, which a GPU host consumes
(`celery -A config worker -Q gpu`); on a machine without a GPU a worker on `gpu` runs them on
the CPU. All are acks_late and idempotent, so a task redelivered after its worker died
finishes the work without duplicates.
"""

from celery import shared_task
from django.db import OperationalError

COMMON = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}


@shared_task(name="metrics.cpu.dispatch", soft_time_limit=300, **COMMON)
def metric_run_dispatch_task(run_id: int) -> int:
    from .models import MetricRun
    from .services import metric_run_dispatch

    def send(kind, output_ids, names):
        task = metric_batch_gpu_task if kind == "gpu" else metric_batch_cpu_task
        task.delay(run_id, output_ids, names)

    return metric_run_dispatch(MetricRun.objects.get(pk=run_id), send=send)


@shared_task(name="metrics.cpu.score_batch", soft_time_limit=1800, **COMMON)
def metric_batch_cpu_task(run_id: int, output_ids: list[int], metrics: list[str]) -> int:
    from .services import metric_batch_score

    return metric_batch_score(run_id=run_id, output_ids=output_ids, metrics=metrics)


@shared_task(name="metrics.gpu.score_batch", soft_time_limit=3600, **COMMON)
def metric_batch_gpu_task(run_id: int, output_ids: list[int], metrics: list[str]) -> int:
    from .services import metric_batch_score

    return metric_batch_score(run_id=run_id, output_ids=output_ids, metrics=metrics)
