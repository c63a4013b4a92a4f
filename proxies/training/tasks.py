"""Celery tasks of learned-proxy training: a training on `cpu` (regressions) or `gpu` (the
cross-encoder), and the sweep failing trainings whose process died. Thin: import the service
lazily, make one call (proxies.task_names: names and routes)."""

from django.db import OperationalError

from metrics.tasks import COMMON
from proxies.task_names import proxy_task


def _train(proxy_id: int) -> int:
    from proxies.training.services import learned_proxy_fail, learned_proxy_train

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
    from proxies.training.services import learned_proxies_fail_dead

    return learned_proxies_fail_dead()
