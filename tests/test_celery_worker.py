"""A real Celery worker process, on the real broker (Redis in the test settings), runs a task
against the test database: the periodic lease expiry hands an abandoned seat on."""

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from evalstudy.models import Assignment, Study
from evalstudy.services import assignment_next
from evalstudy.tasks import assignments_expire_leases_task
from tests.factories import invite, make_study
from tests.workers import running_worker, wait_for


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_worker_expires_an_abandoned_lease():
    study = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN, lease_minutes=1)
    rater = invite(study)
    assignment_next(study=study, rater=rater)
    Assignment.objects.filter(rater=rater).update(
        lease_expires_at=timezone.now() - dt.timedelta(minutes=5)
    )
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with running_worker([queue], name=queue):
        assignments_expire_leases_task.apply_async(queue=queue)

        def handed_on():
            return sorted(study.assignments.values_list("state", flat=True)) == [
                "expired", "open"
            ]

        assert wait_for(handed_on, timeout=60), "the worker did not hand the seat on in 60 s"
