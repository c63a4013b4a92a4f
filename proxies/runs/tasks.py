"""Celery tasks of proxy runs: dispatching a run and judging its batches. Thin: import the
service lazily, make one call. Remote LLM calls go to `llm` (I/O bound: run that worker with
high concurrency), local Hugging Face judges and the cross-encoder to `gpu`, logistic-regression
proxies to `cpu`; all are acks_late and idempotent (proxies.task_names: names and routes)."""

from django.db import OperationalError

from metrics.tasks import COMMON
from proxies.task_names import proxy_task


def _proxy_batch(run_id: int, slot_ids: list[int]) -> int:
    from proxies.runs.services import proxy_batch_judge, proxy_run_fail

    try:
        return proxy_batch_judge(run_id=run_id, slot_ids=slot_ids)
    except OperationalError:
        raise  # the database blinked: retried by autoretry_for
    except Exception as error:
        proxy_run_fail(run_id=run_id, error=f"{type(error).__name__}: {error}")
        raise


@proxy_task("cpu.proxy_dispatch", soft_time_limit=300, **COMMON)
def proxy_run_dispatch_task(run_id: int) -> int:
    from proxies.models import ProxyRun
    from proxies.runs.services import proxy_run_dispatch, proxy_run_fail

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
@proxy_task("llm.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_llm_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@proxy_task("gpu.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_gpu_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@proxy_task("cpu.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_cpu_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)
