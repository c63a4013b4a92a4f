"""Storing a rater's answers: idempotent, own-slot-only, conditional questions, revisions."""

import pytest

from annotation.models import Judgment, JudgmentRevision
from annotation.services import SubmissionInvalid, SubmissionRefused, judgment_submit
from evalstudy.models import Study
from evalstudy.services import assignment_next
from tests.factories import invite, make_study

GOOD = {"severity": "0", "usable": "yes"}


@pytest.fixture
def open_study(db):
    return make_study(n_items=3, n_systems=3, status=Study.Status.OPEN)


def test_same_answer_posted_twice_stores_one_judgment(open_study):
    rater = invite(open_study)
    slot = assignment_next(study=open_study, rater=rater)
    first = judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    second = judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    assert (first.created, second.created, second.unchanged) == (2, 0, 2)
    assert Judgment.objects.filter(slot=slot).count() == 2
    slot.refresh_from_db()
    assert slot.completed_at is not None


def test_another_raters_slot_is_refused_and_nothing_is_stored(open_study):
    owner, intruder = invite(open_study), invite(open_study)
    slot = assignment_next(study=open_study, rater=owner)
    assignment_next(study=open_study, rater=intruder)
    with pytest.raises(SubmissionRefused) as error:
        judgment_submit(rater=intruder, slot_id=slot.pk, answers=GOOD)
    assert error.value.status == 404
    assert not Judgment.objects.exists()


def test_a_later_slot_than_the_current_one_is_refused(open_study):
    rater = invite(open_study)
    current = assignment_next(study=open_study, rater=rater)
    later = current.assignment.slots.get(position=current.position + 2)
    with pytest.raises(SubmissionRefused, match="not your current item"):
        judgment_submit(rater=rater, slot_id=later.pk, answers=GOOD)
    assert not Judgment.objects.exists()


def test_missing_and_invalid_answers_are_reported_per_criterion(open_study):
    rater = invite(open_study)
    slot = assignment_next(study=open_study, rater=rater)
    with pytest.raises(SubmissionInvalid) as error:
        judgment_submit(rater=rater, slot_id=slot.pk, answers={"severity": "7"})
    assert set(error.value.errors) == {"severity", "usable"}
    assert error.value.errors["severity"] == "choose one of: 0, 1, 2"
    assert not Judgment.objects.exists()


def test_conditional_question_counts_only_when_its_condition_holds(open_study):
    rater = invite(open_study)
    slot = assignment_next(study=open_study, rater=rater)
    # severity 0 hides the note: a posted note is ignored
    judgment_submit(rater=rater, slot_id=slot.pk, answers={**GOOD, "note": "ignored"})
    assert not Judgment.objects.filter(criterion__key="note").exists()
    slot = assignment_next(study=open_study, rater=rater)
    judgment_submit(rater=rater, slot_id=slot.pk,
                    answers={"severity": "2", "usable": "no", "note": "number changed"})
    assert Judgment.objects.get(slot=slot, criterion__key="note").value == "number changed"


def test_revision_keeps_the_earlier_value_in_history(open_study):
    rater = invite(open_study)
    calibration = assignment_next(study=open_study, rater=rater)
    judgment_submit(rater=rater, slot_id=calibration.pk, answers=GOOD)
    slot = assignment_next(study=open_study, rater=rater)
    judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    assignment_next(study=open_study, rater=rater)  # moves on
    counts = judgment_submit(rater=rater, slot_id=slot.pk,
                             answers={"severity": "1", "usable": "yes"})
    assert (counts.revised, counts.unchanged) == (1, 1)
    judgment = Judgment.objects.get(slot=slot, criterion__key="severity")
    assert (judgment.value, judgment.numeric_value, judgment.revision) == ("1", 1.0, 1)
    assert list(JudgmentRevision.objects.values_list("value", flat=True)) == ["0"]


def test_practice_items_cannot_be_revised(open_study):
    rater = invite(open_study)
    calibration = assignment_next(study=open_study, rater=rater)
    judgment_submit(rater=rater, slot_id=calibration.pk, answers=GOOD)
    with pytest.raises(SubmissionRefused, match="cannot be changed"):
        judgment_submit(rater=rater, slot_id=calibration.pk,
                        answers={"severity": "2", "usable": "no"})


def test_revision_refused_when_the_study_does_not_allow_it(db):
    study = make_study(n_items=2, n_systems=1, status=Study.Status.OPEN, allow_revision=False)
    rater = invite(study)
    slot = assignment_next(study=study, rater=rater)
    judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)  # a retry is still fine
    with pytest.raises(SubmissionRefused, match="does not allow"):
        judgment_submit(rater=rater, slot_id=slot.pk, answers={"severity": "2", "usable": "no"})
    assert Judgment.objects.get(slot=slot, criterion__key="severity").value == "0"


def test_closed_study_refuses_submissions(open_study):
    rater = invite(open_study)
    slot = assignment_next(study=open_study, rater=rater)
    Study.objects.filter(pk=open_study.pk).update(status=Study.Status.CLOSED)
    with pytest.raises(SubmissionRefused):
        judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)


def test_a_rater_the_study_did_not_admit_gets_nothing_and_stores_nothing(open_study):
    """The service itself checks the enrollment (not only the views): a rater of another study,
    or one never admitted, is refused a seat and cannot submit into a seat it somehow holds."""
    from evalstudy.models import Assignment
    from evalstudy.services import NotEnrolled

    other_study = make_study(n_items=3, n_systems=3, status=Study.Status.OPEN)
    outsider = invite(other_study)
    with pytest.raises(NotEnrolled):
        assignment_next(study=open_study, rater=outsider)
    # A seat handed to it by a bug elsewhere still takes no answer.
    seat = Assignment.objects.filter(study=open_study, rater__isnull=True).first()
    Assignment.objects.filter(pk=seat.pk).update(rater=outsider, state="active")
    slot = seat.slots.order_by("position").first()
    with pytest.raises(SubmissionRefused) as refused:
        judgment_submit(rater=outsider, slot_id=slot.pk, answers=GOOD)
    assert refused.value.status == 404
    assert not Judgment.objects.exists()
