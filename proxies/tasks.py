"""The proxies' Celery tasks, for the workers' autodiscovery (which imports `<app>.tasks`):
proxy runs' in proxies.runs.tasks, learned-proxy training's in proxies.training.tasks, their
names and the old names they still answer to in proxies.task_names."""

from proxies.runs.tasks import (
    proxy_batch_cpu_task,
    proxy_batch_gpu_task,
    proxy_batch_llm_task,
    proxy_run_dispatch_task,
)
from proxies.task_names import ALIASES
from proxies.training.tasks import (
    learned_proxies_fail_dead_task,
    learned_proxy_train_cpu_task,
    learned_proxy_train_gpu_task,
)

__all__ = ["ALIASES", "learned_proxies_fail_dead_task", "learned_proxy_train_cpu_task",
           "learned_proxy_train_gpu_task", "proxy_batch_cpu_task", "proxy_batch_gpu_task",
           "proxy_batch_llm_task", "proxy_run_dispatch_task"]
