"""Celery tasks for proxy runs and learned-proxy training. Thin: import the service lazily,
make one call.

The task names keep the `metrics.` prefix they were routed and queued under before the proxies
had their own app (config.settings CELERY_TASK_ROUTES: `metrics.llm.*` to `llm`, `metrics.gpu.*`
to `gpu`, `metrics.cpu.*` to `cpu`): messages already in a queue still find their task, and
the workers' `-Q` options stay as they are. Remote LLM calls go to `llm` (I/O bound: run that
worker with high concurrency), local Hugging Face judges and the cross-encoder to `gpu`,
logistic-regression proxies to `cpu`. All are acks_late and idempotent.
"""

from celery import shared_task
from django.db import OperationalError

from metrics.tasks import COMMON


def _proxy_batch(run_id: int, slot_ids: list[int]) -> int:
    from .services import proxy_batch_judge, proxy_run_fail

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
    from .services import proxy_run_dispatch, proxy_run_fail

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
    from .learned_services import learned_proxy_fail, learned_proxy_train

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


@shared_task(name="metrics.cpu.learned_proxies_fail_dead", soft_time_limit=60, acks_late=True)
def learned_proxies_fail_dead_task() -> int:
    """Fail the trainings whose process died on the host running this task (for a beat
    entry beside `evalstudy.runs_fail_stale`, on the host that runs `train_proxy --sync`)."""
    from .learned_services import learned_proxies_fail_dead

    return learned_proxies_fail_dead()
