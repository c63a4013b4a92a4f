"""Handing out seats: concurrency on PostgreSQL, order, leases, and the next slot."""

import datetime as dt
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from annotation.services import judgment_submit
from evalstudy.models import Assignment, AssignmentSlot, Study
from evalstudy.services import (
    AssignmentExpired,
    StudyFull,
    StudyNotOpen,
    assignment_claim,
    assignment_next,
    assignments_expire_leases,
)
from tests.factories import RaterFactory, invite, make_study


def _race(study, raters, workers):
    """Every rater claims at once (released by a barrier); returns seat ids or 'full'."""
    barrier = threading.Barrier(workers)
    chunks = [raters[i::workers] for i in range(workers)]

    def run(chunk):
        results = []
        try:
            barrier.wait()
            for rater in chunk:
                try:
                    results.append(assignment_claim(study=study, rater=rater).pk)
                except StudyFull:
                    results.append("full")
        finally:
            connection.close()
        return results

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [r for chunk in pool.map(run, chunks) for r in chunk]


@pytest.mark.django_db(transaction=True)
def test_100_raters_racing_for_40_seats_get_exactly_40_distinct_seats():
    assert connection.vendor == "postgresql"
    study = make_study(n_items=8, n_systems=4, ratings_per_output=10, status=Study.Status.OPEN)
    assert study.assignments.count() == 40
    raters = [RaterFactory() for _ in range(100)]
    results = _race(study, raters, workers=40)
    seats = [r for r in results if r != "full"]
    assert len(seats) == 40
    assert len(set(seats)) == 40
    assert results.count("full") == 60
    claimed = Assignment.objects.filter(study=study, rater__isnull=False)
    assert claimed.count() == 40
    assert len(set(claimed.values_list("rater_id", flat=True))) == 40
    # the redundancy target is met exactly: every output has 10 target slots with a rater
    per_output = Counter(
        AssignmentSlot.objects.filter(assignment__in=claimed, kind="target")
        .values_list("output_id", flat=True)
    )
    assert set(per_output.values()) == {10}


@pytest.mark.django_db(transaction=True)
def test_one_rater_racing_with_itself_gets_one_seat():
    study = make_study(n_items=4, n_systems=2, ratings_per_output=5, status=Study.Status.OPEN)
    rater = RaterFactory()
    results = _race(study, [rater] * 12, workers=12)
    assert len(set(results)) == 1
    assert Assignment.objects.filter(study=study, rater=rater).count() == 1


@pytest.mark.django_db
def test_seats_are_handed_out_list_by_list_to_complete_outputs_soonest():
    study = make_study(n_items=6, n_systems=3, ratings_per_output=2, status=Study.Status.OPEN)
    seats = [assignment_claim(study=study, rater=RaterFactory()) for _ in range(4)]
    assert [(s.list_index, s.replica) for s in seats] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.django_db
def test_claim_refused_for_draft_study_and_when_full():
    study = make_study(n_items=2, n_systems=2)
    with pytest.raises(StudyNotOpen):
        assignment_claim(study=study, rater=RaterFactory())
    make_study_open = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN)
    assignment_claim(study=make_study_open, rater=RaterFactory())
    with pytest.raises(StudyFull):
        assignment_claim(study=make_study_open, rater=RaterFactory())


def _answer(rater, slot):
    if slot.kind == "calibration" or slot.kind == "target":
        return judgment_submit(rater=rater, slot_id=slot.pk,
                               answers={"severity": "1", "usable": "yes"})


@pytest.mark.django_db
def test_next_slot_walks_the_list_in_order_and_finishes():
    study = make_study(n_items=3, n_systems=3, status=Study.Status.OPEN)
    rater = invite(study)
    seen = []
    while (slot := assignment_next(study=study, rater=rater)) is not None:
        assert slot.served_at is not None
        seen.append(slot.position)
        _answer(rater, slot)
    assert seen == list(range(4))  # calibration + 3 items
    seat = Assignment.objects.get(study=study, rater=rater)
    assert seat.state == Assignment.State.DONE
    assert assignment_next(study=study, rater=rater) is None


@pytest.mark.django_db
def test_abandoned_seat_is_handed_on_with_its_unjudged_slots_only():
    study = make_study(n_items=4, n_systems=1, status=Study.Status.OPEN, lease_minutes=30)
    first, second = invite(study), invite(study)
    start = timezone.now()
    # first rater does calibration + one item, then disappears
    for _ in range(2):
        _answer(first, assignment_next(study=study, rater=first, now=start))
    judged = set(AssignmentSlot.objects.filter(
        assignment__rater=first, kind="target", completed_at__isnull=False
    ).values_list("output_id", flat=True))
    assert len(judged) == 1
    with pytest.raises(StudyFull):
        assignment_claim(study=study, rater=second, now=start + dt.timedelta(minutes=29))
    later = start + dt.timedelta(minutes=31)
    seat = assignment_claim(study=study, rater=second, now=later)
    assert seat.replaces is not None and seat.replaces.rater == first
    carried = list(seat.slots.order_by("position").values_list("kind", "output_id"))
    assert carried[0][0] == "calibration", "the new rater is calibrated too"
    target_outputs = {o for kind, o in carried if kind == "target"}
    assert len(target_outputs) == 3 and not (target_outputs & judged)
    with pytest.raises(AssignmentExpired):
        assignment_next(study=study, rater=first, now=later)
    # what the first rater submitted is kept
    assert first.judgments.count() == 4


@pytest.mark.django_db
def test_expire_leases_task_hands_on_stale_seats_once():
    study = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN, lease_minutes=5)
    rater = invite(study)
    start = timezone.now()
    assignment_next(study=study, rater=rater, now=start)
    assert assignments_expire_leases(now=start + dt.timedelta(minutes=4)) == 0
    assert assignments_expire_leases(now=start + dt.timedelta(minutes=6)) == 1
    assert assignments_expire_leases(now=start + dt.timedelta(minutes=7)) == 0
    states = Counter(study.assignments.values_list("state", flat=True))
    assert states == {"expired": 1, "open": 1}


@pytest.mark.django_db
def test_finished_seat_is_never_handed_on():
    study = make_study(n_items=1, n_systems=1, status=Study.Status.OPEN, lease_minutes=5)
    rater = invite(study)
    start = timezone.now()
    while (slot := assignment_next(study=study, rater=rater, now=start)) is not None:
        _answer(rater, slot)
    assert assignments_expire_leases(now=start + dt.timedelta(hours=1)) == 0
    with pytest.raises(StudyFull):
        assignment_claim(study=study, rater=RaterFactory(), now=start + dt.timedelta(hours=1))
