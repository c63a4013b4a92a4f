"""The adaptive pairwise design: the allocation's constraints and its aim (Django-free), and
seats built from it when raters arrive."""

from collections import Counter

import pytest
from django.core.exceptions import ValidationError

from evalstudy.design import TargetCell
from evalstudy.design.adaptive import Tally, Uncertainty, all_pairs, allocate_seat
from evalstudy.models import AssignmentSlot, AuditEvent, Study
from evalstudy.services import (
    PlanRegistered,
    StudyFull,
    assignment_claim,
    study_open,
    study_plan_save,
)
from tests.factories import invite, make_study

SYSTEMS = ["a", "b", "c", "d"]
ITEMS = [f"i{n}" for n in range(30)]


def _seats(n_seats, size=12, strengths=None, contrasts=()):
    assigned: list[TargetCell] = []
    seats = []
    for _ in range(n_seats):
        seat = allocate_seat(items=ITEMS, systems=SYSTEMS, strengths=strengths or {},
                             contrasts=list(contrasts), assigned=assigned, size=size)
        seats.append(seat)
        assigned += seat
    return seats, assigned


def test_a_rater_never_sees_an_item_twice_nor_one_seen_before():
    seats, _ = _seats(20)
    for seat in seats:
        assert len({cell.item for cell in seat}) == len(seat) == 12
    seen = {f"i{n}" for n in range(25)}
    seat = allocate_seat(items=ITEMS, systems=SYSTEMS, strengths={}, contrasts=[],
                         assigned=[], size=12, seen_items=seen)
    assert {cell.item for cell in seat} == set(ITEMS) - seen  # only 5 left: a shorter seat


def test_positions_are_counterbalanced_and_items_pairs_spread():
    _, assigned = _seats(30)
    ordered = Counter((c.system, c.system_b) for c in assigned)
    for a, b in all_pairs(SYSTEMS):
        assert abs(ordered[(a, b)] - ordered[(b, a)]) <= 1
    # Every item is used about equally often, and no item repeats one pair while it lacks
    # another.
    per_item = Counter(c.item for c in assigned)
    assert max(per_item.values()) - min(per_item.values()) <= 1
    per_item_pair = Counter((c.item, frozenset((c.system, c.system_b))) for c in assigned)
    for item in ITEMS:
        counts = [per_item_pair[(item, frozenset(p))] for p in all_pairs(SYSTEMS)]
        if max(counts) > 1:
            assert min(counts) >= 1


def test_allocation_goes_where_the_largest_contrast_uncertainty_is():
    # Pairs a-b, a-c, b-c well measured; d compared twice: every contrast with d is the least
    # certain, so the next pairs involve d.
    assigned = [TargetCell(f"i{n}", x, y) for n in range(30)
                for x, y in (("a", "b"), ("a", "c"), ("b", "c"))]
    assigned += [TargetCell("i0", "a", "d"), TargetCell("i1", "d", "b")]
    seat = allocate_seat(items=ITEMS, systems=SYSTEMS, strengths={}, contrasts=[],
                         assigned=assigned, size=6)
    assert all("d" in (c.system, c.system_b) for c in seat)
    # With one contrast in the plan, its own pair (and pairs linking its systems) get the
    # comparisons, never the pairs that tell nothing about it.
    seat = allocate_seat(items=ITEMS, systems=SYSTEMS, strengths={}, contrasts=[("a", "b")],
                         assigned=[], size=8)
    assert Counter(frozenset((c.system, c.system_b)) for c in seat)[frozenset("ab")] >= 4
    assert not any({c.system, c.system_b} == {"c", "d"} for c in seat)


def test_the_largest_variance_falls_below_the_balanced_designs_for_the_same_count():
    strengths = {"a": 0.0, "b": 0.3, "c": 0.6, "d": 1.0}
    plan = [("d", "a"), ("d", "b"), ("d", "c")]
    tally = Tally.of(())
    for _ in range(50):
        allocate_seat(items=ITEMS, systems=SYSTEMS, strengths=strengths, contrasts=plan,
                      assigned=(), size=20, tally=tally)
    adaptive = Uncertainty.build(SYSTEMS, strengths, plan, tally.unordered_counts())
    balanced = Uncertainty.build(SYSTEMS, strengths, plan,
                                 dict.fromkeys(all_pairs(SYSTEMS), 1000 / 6))
    assert max(adaptive.contrast_variances().values()) < 0.9 * max(
        balanced.contrast_variances().values())


# --- seats built as raters arrive --------------------------------------------------------------
def adaptive_study(**plan):
    study = make_study(design="pairwise", n_items=10, n_systems=3, items_per_rater=4)
    study.design = Study.Design.ADAPTIVE
    study.save()
    study_plan_save(study=study, fields={"target_ci_width": 1.0, "check_every": 8,
                                         "max_judgments": 16, **plan})
    return study


@pytest.mark.django_db
def test_an_adaptive_study_cannot_open_without_a_plan():
    study = make_study(design="pairwise")
    study.design = Study.Design.ADAPTIVE
    study.save()
    with pytest.raises(ValidationError, match="pre-registered plan"):
        study_open(study=study)


@pytest.mark.django_db
def test_seats_are_built_on_claim_from_the_allocation_until_the_maximum():
    study = adaptive_study()
    study_open(study=study)
    assert study.assignments.count() == 0  # nothing built when it opens
    seats = [assignment_claim(study=study, rater=invite(study)) for _ in range(4)]
    assert len(seats) == 4
    for seat in seats:
        targets = seat.slots.filter(kind=AssignmentSlot.Kind.TARGET)
        assert targets.count() == 4
        items = list(targets.values_list("output__item_id", flat=True))
        assert len(set(items)) == 4
        assert seat.slots.filter(kind=AssignmentSlot.Kind.CALIBRATION).count() == 1
    rows = AssignmentSlot.objects.filter(assignment__study=study, kind="target")
    ordered = Counter(rows.values_list("output__system_id", "output_b__system_id"))
    for (a, b), n in ordered.items():
        assert abs(n - ordered.get((b, a), 0)) <= 1
    with pytest.raises(StudyFull):  # 16 comparisons handed out: the plan's maximum
        assignment_claim(study=study, rater=invite(study))


@pytest.mark.django_db
def test_the_plan_cannot_change_after_registration():
    study = adaptive_study()
    study_open(study=study)
    plan = study.plan
    plan.refresh_from_db()
    assert plan.registered_at is not None
    with pytest.raises(PlanRegistered, match="registered at"):
        study_plan_save(study=study, fields={"target_ci_width": 5.0})
    plan.refresh_from_db()
    assert plan.target_ci_width == 1.0
    assert AuditEvent.objects.filter(target_type="evalstudy.studyplan",
                                     changes__has_key="registered_at").exists()


@pytest.mark.django_db
def test_plan_problems_name_the_field():
    study = adaptive_study(contrasts=[["sys-0", "nope"]])
    with pytest.raises(ValidationError, match="does not name two different systems"):
        study_open(study=study)
