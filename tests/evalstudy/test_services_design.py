"""Building seats and slots from a study's design, and the rules for opening a study."""

import itertools
from collections import Counter

import pytest
from django.core.exceptions import ValidationError

from evalstudy.models import Assignment, AssignmentSlot, Output, Study
from evalstudy.services import study_build_assignments, study_open, study_validate
from tests.factories import CriterionFactory, RaterFactory, make_study


def _slots(study):
    return AssignmentSlot.objects.filter(assignment__study=study)


@pytest.mark.django_db
def test_latin_square_seats_cover_every_output_ratings_per_output_times():
    study = make_study(n_items=7, n_systems=3, ratings_per_output=2)
    seats = study_build_assignments(study=study)
    assert seats == 3 * 2
    targets = _slots(study).filter(kind="target")
    per_output = Counter(targets.values_list("output_id", flat=True))
    assert set(per_output) == set(Output.objects.filter(item__study=study).values_list("id",
                                                                                       flat=True))
    assert set(per_output.values()) == {2}
    for seat in study.assignments.all():
        items = list(seat.slots.filter(kind="target").values_list("output__item_id", flat=True))
        assert len(items) == len(set(items)) == 7, "each list has every item exactly once"
        systems = Counter(seat.slots.filter(kind="target").values_list("output__system_id",
                                                                       flat=True))
        assert max(systems.values()) - min(systems.values()) <= 1
        first = seat.slots.order_by("position").first()
        assert first.kind == "calibration"


@pytest.mark.django_db
def test_items_per_rater_splits_lists_into_parts():
    study = make_study(n_items=10, n_systems=2, items_per_rater=4)
    assert study_build_assignments(study=study) == 2 * 3
    sizes = sorted(
        seat.slots.filter(kind="target").count() for seat in study.assignments.all()
    )
    assert sizes == [3, 3, 3, 3, 4, 4]


@pytest.mark.django_db
def test_pairwise_slots_store_both_outputs_and_balance_positions():
    study = make_study(n_items=6, n_systems=2, design="pairwise")
    study_build_assignments(study=study)
    targets = _slots(study).filter(kind="target")
    assert not targets.filter(output_b__isnull=True).exists()
    left = Counter(targets.values_list("output__system__name", flat=True))
    right = Counter(targets.values_list("output_b__system__name", flat=True))
    assert left == right, "each system is shown on the left as often as on the right"
    for slot in targets:
        assert slot.output.item_id == slot.output_b.item_id
        assert slot.output.system_id != slot.output_b.system_id


@pytest.mark.django_db
def test_crossed_gives_every_rater_every_output():
    study = make_study(n_items=4, n_systems=3, design="crossed", ratings_per_output=3)
    assert study_build_assignments(study=study) == 3
    for seat in study.assignments.all():
        assert seat.slots.filter(kind="target").count() == 12


@pytest.mark.django_db
def test_attention_checks_are_interleaved_never_first_never_adjacent():
    study = make_study(n_items=12, n_systems=2, attention_check_every=4)
    study_build_assignments(study=study)
    for seat in study.assignments.all():
        kinds = list(seat.slots.order_by("position").values_list("kind", flat=True))
        assert kinds[0] == "calibration"
        assert kinds.count("attention") == 3
        assert kinds[1] == "target"
        assert all(not (a == b == "attention") for a, b in itertools.pairwise(kinds))


@pytest.mark.django_db
def test_seat_order_is_reproducible_from_the_stored_seed():
    study = make_study(n_items=12, n_systems=2)
    study_build_assignments(study=study)
    before = {
        seat.seat_index: list(seat.slots.order_by("position").values_list("output_id", flat=True))
        for seat in study.assignments.all()
    }
    study_build_assignments(study=study)
    after = {
        seat.seat_index: list(seat.slots.order_by("position").values_list("output_id", flat=True))
        for seat in study.assignments.all()
    }
    assert before == after
    assert before[0] != sorted(before[0], key=lambda x: (x is None, x)), "order is shuffled"


@pytest.mark.django_db
def test_cannot_open_a_study_without_criteria_or_with_missing_outputs():
    study = make_study(n_items=3, n_systems=2)
    Output.objects.filter(item__external_id="item-001", system__name="sys-1").delete()
    study.criteria.all().delete()
    problems = study_validate(study=study)
    assert any("no criteria" in p for p in problems)
    assert any("item-001/sys-1" in p for p in problems)
    with pytest.raises(ValidationError) as error:
        study_open(study=study)
    assert "item-001/sys-1" in str(error.value)
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT
    assert not study.assignments.exists()


@pytest.mark.django_db
def test_validation_names_bad_expected_answers_and_pairwise_mismatches():
    study = make_study(n_items=2, n_systems=2)
    calibration = study.calibration_items.get()
    calibration.expected = {"severity": "5", "nonexistent": "x"}
    calibration.save()
    CriterionFactory(study=study, key="pref", kind="pairwise", prompt="A or B?")
    problems = study_validate(study=study)
    assert any("calib-good" in p and "'5'" in p for p in problems)
    assert any("unknown criterion 'nonexistent'" in p for p in problems)
    assert any("Pairwise criteria need the pairwise design" in p for p in problems)


@pytest.mark.django_db
def test_open_builds_the_design_once_and_rebuild_is_refused_after_a_claim():
    from evalstudy.services import assignment_claim

    study = make_study(n_items=4, n_systems=2)
    study_open(study=study)
    assert study.assignments.count() == 2
    study_open(study=study)  # idempotent
    assert study.assignments.count() == 2
    assignment_claim(study=study, rater=RaterFactory())
    with pytest.raises(ValidationError, match="already have raters"):
        study_build_assignments(study=study)
    assert Assignment.objects.filter(study=study, rater__isnull=False).count() == 1
