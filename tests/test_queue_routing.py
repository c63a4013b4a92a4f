"""Two real worker processes on different queues (`cpu` and `llm`), each consuming only its own
queue: tasks are routed by name through the production routing table, and each one runs on the
worker of its queue."""

import pytest
from celery.backends.redis import RedisBackend
from celery.result import AsyncResult
from django.conf import settings

from config.celery import app
from tests.routing_tasks import cpu_whoami, gpu_whoami, llm_whoami
from tests.workers import running_worker, wait_for


@pytest.mark.slow
def test_tasks_are_routed_by_name_to_the_worker_of_their_queue():
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "needs the Redis test broker"
    results_url = settings.CELERY_BROKER_URL  # this test's own Redis database
    backend = RedisBackend(app=app, url=results_url)
    app.control.purge()  # nothing left over from earlier runs on these queues
    env = {"CELERY_RESULT_BACKEND": results_url}
    include = ["--include", "tests.routing_tasks"]
    with running_worker(["cpu"], name="route-cpu", env=env, extra_args=include), \
            running_worker(["llm"], name="route-llm", env=env, extra_args=include):
        inspector = app.control.inspect(timeout=1.0)

        def both_consuming():
            replies = inspector.active_queues() or {}
            return len(replies) == 2

        assert wait_for(both_consuming, timeout=90, interval=1), "workers did not start"
        consumed = {worker.split("@")[0]: sorted(q["name"] for q in queues)
                    for worker, queues in inspector.active_queues().items()}
        assert consumed == {"route-cpu": ["cpu"], "route-llm": ["llm"]}

        sent = [(cpu_whoami.delay(), "cpu") for _ in range(4)]
        sent += [(llm_whoami.delay(), "llm") for _ in range(4)]
        for result, queue in sent:
            answer = AsyncResult(result.id, app=app, backend=backend).get(timeout=60)
            assert answer["queue"] == queue
            assert answer["hostname"].startswith(f"route-{queue}@"), answer
        # A gpu task waits: no worker consumes `gpu`, and neither worker took it.
        waiting = gpu_whoami.delay()
        assert AsyncResult(waiting.id, app=app, backend=backend).state == "PENDING"
        with app.connection_for_write() as conn:
            assert conn.default_channel.client.llen("gpu") == 1
    app.control.purge()
