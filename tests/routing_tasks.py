"""Test-only tasks named like the real ones, so the production routing table (CELERY_TASK_ROUTES:
`metrics.cpu.*` -> cpu, `metrics.llm.*` -> llm, `metrics.gpu.*` -> gpu) decides their queue.
Each answers which worker ran it and from which queue the message came."""

from celery import shared_task


def _whoami(task) -> dict[str, str]:
    delivery = task.request.delivery_info or {}
    return {"hostname": task.request.hostname,
            "queue": delivery.get("routing_key") or delivery.get("exchange") or ""}


@shared_task(bind=True, name="metrics.cpu.test_whoami")
def cpu_whoami(self) -> dict[str, str]:
    return _whoami(self)


@shared_task(bind=True, name="metrics.llm.test_whoami")
def llm_whoami(self) -> dict[str, str]:
    return _whoami(self)


@shared_task(bind=True, name="metrics.gpu.test_whoami")
def gpu_whoami(self) -> dict[str, str]:
    return _whoami(self)
