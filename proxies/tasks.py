"""Celery tasks for proxy runs and learned-proxy training. Thin: import the service lazily,
make one call.

The tasks are named after their app, `proxies.<queue>.<task>`, and routed by that name
(config.settings CELERY_TASK_ROUTES: `proxies.llm.*` to `llm`, `proxies.gpu.*` to `gpu`,
`proxies.cpu.*` to `cpu`). Remote LLM calls go to `llm` (I/O bound: run that worker with high
concurrency), local Hugging Face judges and the cross-encoder to `gpu`, logistic-regression
proxies to `cpu`. All are acks_late and idempotent.

Before the proxies had their own app the same tasks were named `metrics.<queue>.<task>`; each
is registered under that name too (`ALIASES`), the same code with the same options, so a
message queued by an older release (or a beat schedule not yet updated) still runs on the
worker of its queue. The aliases can go once no queue can hold such a message.
"""

from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.db import OperationalError

from metrics.tasks import COMMON

APP_PREFIX = "proxies."
LEGACY_PREFIX = "metrics."
#: The name each task was queued under before the proxies had their own app -> its name.
ALIASES: dict[str, str] = {}


def proxy_task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`shared_task` named `proxies.<name>`, also registered as `metrics.<name>` (ALIASES)."""
    def register(function: Callable[..., Any]) -> Any:
        shared_task(name=LEGACY_PREFIX + name, **options)(function)
        ALIASES[LEGACY_PREFIX + name] = APP_PREFIX + name
        return shared_task(name=APP_PREFIX + name, **options)(function)
    return register


def _proxy_batch(run_id: int, slot_ids: list[int]) -> int:
    from .services import proxy_batch_judge, proxy_run_fail

    try:
        return proxy_batch_judge(run_id=run_id, slot_ids=slot_ids)
    except OperationalError:
        raise  # the database blinked: retried by autoretry_for
    except Exception as error:
        proxy_run_fail(run_id=run_id, error=f"{type(error).__name__}: {error}")
        raise


@proxy_task("cpu.proxy_dispatch", soft_time_limit=300, **COMMON)
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
@proxy_task("llm.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_llm_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@proxy_task("gpu.proxy_batch", soft_time_limit=1800, **COMMON)
def proxy_batch_gpu_task(run_id: int, slot_ids: list[int]) -> int:
    return _proxy_batch(run_id, slot_ids)


@proxy_task("cpu.proxy_batch", soft_time_limit=1800, **COMMON)
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


@proxy_task("cpu.train_proxy", soft_time_limit=7200, **COMMON)
def learned_proxy_train_cpu_task(proxy_id: int) -> int:
    return _train(proxy_id)


@proxy_task("gpu.train_proxy", soft_time_limit=7200, **COMMON)
def learned_proxy_train_gpu_task(proxy_id: int) -> int:
    return _train(proxy_id)


@proxy_task("cpu.learned_proxies_fail_dead", soft_time_limit=60, acks_late=True)
def learned_proxies_fail_dead_task() -> int:
    """Fail the trainings whose process died on the host running this task (for a beat
    entry beside `evalstudy.runs_fail_stale`, on the host that runs `train_proxy --sync`)."""
    from .learned_services import learned_proxies_fail_dead

    return learned_proxies_fail_dead()
