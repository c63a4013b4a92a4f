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


# --- proxy judges -------------------------------------------------------------------------
# Remote LLM calls go to `llm` (I/O bound: run that worker with high concurrency), local
# Hugging Face judges and the cross-encoder to `gpu`, logistic-regression proxies to `cpu`.

def _proxy_batch(run_id: int, slot_ids: list[int]) -> int:
    from .proxy_services import proxy_batch_judge, proxy_run_fail

    try:
        return proxy_batch_judge(run_id=run_id, slot_ids=slot_ids)
    except OperationalError:
        raise  # the database blinked: retried by autoretry_for
    except Exception as error:
        proxy_run_fail(run_id=run_id, error=f"{type(error).__name__}: {error}")
        raise


@shared_task(name="metrics.cpu.proxy_dispatch", soft_time_limit=300, **COMMON)
def proxy_run_dispatch_task(run_id: int) -> int:
    from .models import ProxyRun
    from .proxy_services import proxy_run_dispatch, proxy_run_fail

    tasks = {"llm": proxy_batch_llm_task, "gpu": proxy_batch_gpu_task,
             "cpu": proxy_batch_cpu_task}
    try:
        return proxy_run_dispatch(
            ProxyRun.objects.get(pk=run_id),
            send=lambda queue, slot_ids: tasks[queue].delay(run_id, slot_ids))
    except OperationalError:
        raise
    except Exception as error:  # a run never stays pending because its dispatch failed
        proxy_run_fail(run_id=run_id, error=f"{type(error).__name__}: {error}")
        raise


# Soft limits stay below the broker's visibility timeout (3600 s by default), so a batch that
# is still running is never handed to a second worker as well.
@shared_task(name="metrics.llm.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_llm_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@shared_task(name="metrics.gpu.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_gpu_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@shared_task(name="metrics.cpu.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_cpu_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


def _train(proxy_id: int) -> int:
    from .proxy_services import learned_proxy_fail, learned_proxy_train

    try:
        return learned_proxy_train(proxy_id).pk
    except OperationalError:
        raise
    except Exception as error:
        learned_proxy_fail(proxy_id=proxy_id, error=f"{type(error).__name__}: {error}")
        raise


@shared_task(name="metrics.cpu.train_proxy", soft_time_limit=7200, **COMMON)
def learned_proxy_train_cpu_task(proxy_id: int) -> int:
    return _train(proxy_id)


@shared_task(name="metrics.gpu.train_proxy", soft_time_limit=7200, **COMMON)
def learned_proxy_train_gpu_task(proxy_id: int) -> int:
    return _train(proxy_id)
