"""The proxies' Celery tasks are named after their app (`proxies.<queue>.<task>`), routed to
their queue by that name, and still run when a message names them as before
(`metrics.<queue>.<task>`, queued by an older release)."""

from __future__ import annotations

import uuid

import pytest
from celery.backends.redis import RedisBackend
from celery.result import AsyncResult
from django.conf import settings

from config.celery import app
from proxies import tasks
from tests.workers import running_worker

OLD_NAMES = {
    "metrics.cpu.proxy_dispatch": "proxies.cpu.proxy_dispatch",
    "metrics.llm.proxy_batch": "proxies.llm.proxy_batch",
    "metrics.gpu.proxy_batch": "proxies.gpu.proxy_batch",
    "metrics.cpu.proxy_batch": "proxies.cpu.proxy_batch",
    "metrics.cpu.train_proxy": "proxies.cpu.train_proxy",
    "metrics.gpu.train_proxy": "proxies.gpu.train_proxy",
    "metrics.cpu.learned_proxies_fail_dead": "proxies.cpu.learned_proxies_fail_dead",
}


def test_each_task_is_named_after_its_app_and_keeps_its_old_name():
    assert tasks.ALIASES == OLD_NAMES
    for task in (tasks.proxy_run_dispatch_task, tasks.proxy_batch_llm_task,
                 tasks.proxy_batch_gpu_task, tasks.proxy_batch_cpu_task,
                 tasks.learned_proxy_train_cpu_task, tasks.learned_proxy_train_gpu_task,
                 tasks.learned_proxies_fail_dead_task):
        assert task.name.startswith("proxies."), task.name
    registered = app.tasks
    for old, new in OLD_NAMES.items():
        assert old in registered and new in registered
        # The same code with the same options: an old message runs exactly as a new one.
        assert registered[old].run.__code__ is registered[new].run.__code__
        for option in ("acks_late", "soft_time_limit", "max_retries", "autoretry_for",
                       "reject_on_worker_lost"):
            assert getattr(registered[old], option, None) == getattr(registered[new], option,
                                                                     None), (old, option)


@pytest.mark.parametrize(("name", "queue"), [
    ("proxies.cpu.proxy_dispatch", "cpu"), ("proxies.llm.proxy_batch", "llm"),
    ("proxies.gpu.proxy_batch", "gpu"), ("proxies.cpu.proxy_batch", "cpu"),
    ("proxies.cpu.train_proxy", "cpu"), ("proxies.gpu.train_proxy", "gpu"),
    ("metrics.llm.proxy_batch", "llm"), ("metrics.gpu.train_proxy", "gpu"),
    ("metrics.cpu.learned_proxies_fail_dead", "cpu"),
])
def test_new_and_old_names_route_to_the_same_queue(name, queue):
    route = app.amqp.router.route({}, name)
    assert route["queue"].name == queue


def test_the_beat_schedule_sends_the_new_name():
    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "proxies.cpu.learned_proxies_fail_dead" in names
    assert not {name for name in names if name in OLD_NAMES}


@pytest.mark.django_db
def test_a_message_sent_by_an_old_name_is_executed_by_the_task_registry():
    # What a worker does with a message: look its name up and run that task.
    result = app.tasks["metrics.cpu.learned_proxies_fail_dead"].apply()
    assert result.successful() and result.result == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_a_message_queued_under_the_old_name():
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "needs the Redis test broker"
    results_url = settings.CELERY_BROKER_URL
    backend = RedisBackend(app=app, url=results_url)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with running_worker([queue], name=queue, env={"CELERY_RESULT_BACKEND": results_url}):
        # As an older release queued it: by name, no task object of this release involved.
        sent = app.send_task("metrics.cpu.learned_proxies_fail_dead", queue=queue)
        assert AsyncResult(sent.id, app=app, backend=backend).get(timeout=90) == 0
