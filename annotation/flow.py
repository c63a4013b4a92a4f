"""The participant's way through a study: entry, screening, consent, instructions, rating,
and being stopped politely. Each step is a service; `next_step` says where a rater stands.

Preconditions and guarantees:
- Crowd entry is idempotent: the same PROLIFIC_PID always resumes the same rater and seat.
- Attention-check failures are computed from the stored judgments, never counted in a
  variable, so a retried submission cannot count a failure twice.
- Stopping a rater hands their unjudged slots on at once and keeps what they submitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from evalstudy.models import Assignment, AssignmentSlot, Enrollment, Rater, Study
from evalstudy.services import assignment_withdraw

from .models import Judgment

PARTICIPANT_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


class EntryRefused(Exception):
    """The entry link is unusable (e.g. no participant id): nothing was created."""


@transaction.atomic
def crowd_enter(
    *, study: Study, participant_id: str, platform_study_id: str = "", session_id: str = ""
) -> Enrollment:
    """Create or resume the crowd participant behind a Prolific-style entry URL."""
    participant_id = (participant_id or "").strip()
    if not PARTICIPANT_ID_RE.match(participant_id):
        raise EntryRefused(
            "This link is missing a valid participant id (PROLIFIC_PID). Please open the study "
            "from the crowd platform again."
        )
    rater, _ = Rater.objects.get_or_create(
        kind=Rater.Kind.CROWD, external_id=participant_id,
        defaults={"display_name": participant_id},
    )
    enrollment = enrollment_get(study=study, rater=rater)
    changed = []
    if platform_study_id and not enrollment.platform_study_id:
        enrollment.platform_study_id = platform_study_id[:100]
        changed.append("platform_study_id")
    if session_id and not enrollment.platform_session_id:
        enrollment.platform_session_id = session_id[:100]
        changed.append("platform_session_id")
    if changed:
        enrollment.save(update_fields=changed)
    return enrollment


def enrollment_get(*, study: Study, rater: Rater) -> Enrollment:
    """The rater's enrollment in the study, created (and screened) on first contact."""
    enrollment, created = Enrollment.objects.get_or_create(study=study, rater=rater)
    if created and _fails_screening(study, rater):
        _stop(enrollment, Enrollment.StopReason.SCREENING)
    return enrollment


def _fails_screening(study: Study, rater: Rater) -> bool:
    """Screening rule: someone who took part in an excluded study may not take this one."""
    excluded = study.excluded_studies.all()
    return (
        Enrollment.objects.filter(rater=rater, study__in=excluded).exists()
        or Assignment.objects.filter(rater=rater, study__in=excluded).exists()
    )


def _stop(enrollment: Enrollment, reason: str) -> None:
    if enrollment.stopped_at is not None:
        return
    enrollment.stopped_at = timezone.now()
    enrollment.stop_reason = reason
    enrollment.save(update_fields=["stopped_at", "stop_reason"])
    assignment_withdraw(study=enrollment.study, rater=enrollment.rater)


@transaction.atomic
def consent_record(*, enrollment: Enrollment, accepted: bool) -> Enrollment:
    """Store the answer to the consent page; declining stops the participant."""
    enrollment = Enrollment.objects.select_for_update().get(pk=enrollment.pk)
    if accepted:
        if enrollment.consented_at is None:
            enrollment.consented_at = timezone.now()
            enrollment.save(update_fields=["consented_at"])
    else:
        _stop(enrollment, Enrollment.StopReason.DECLINED)
    return enrollment


def instructions_seen(*, enrollment: Enrollment) -> None:
    if enrollment.instructions_seen_at is None:
        enrollment.instructions_seen_at = timezone.now()
        enrollment.save(update_fields=["instructions_seen_at"])


def control_slot_passed(slot: AssignmentSlot) -> bool | None:
    """Whether the answers to a calibration/attention slot match every expected answer
    (None when the slot has not been answered)."""
    control = slot.calibration_item or slot.attention_check
    if control is None or slot.completed_at is None:
        return None
    given = dict(Judgment.objects.filter(slot=slot).values_list("criterion__key", "value"))
    return all(given.get(key) == str(value) for key, value in control.expected.items())


def attention_failures(*, study: Study, rater: Rater) -> int:
    slots = AssignmentSlot.objects.filter(
        assignment__study=study, assignment__rater=rater, kind=AssignmentSlot.Kind.ATTENTION,
        completed_at__isnull=False,
    ).select_related("attention_check")
    return sum(1 for slot in slots if control_slot_passed(slot) is False)


def after_attention_check(*, study: Study, rater: Rater) -> bool:
    """Stop the rater when their failed attention checks reach the study's limit.
    Returns whether the rater is (now) stopped."""
    limit = study.attention_fail_limit
    if not limit or attention_failures(study=study, rater=rater) < limit:
        return False
    _stop(enrollment_get(study=study, rater=rater), Enrollment.StopReason.ATTENTION)
    return True


@dataclass(frozen=True)
class Step:
    name: str  # "stopped" | "consent" | "instructions" | "rate"
    enrollment: Enrollment


def next_step(*, study: Study, rater: Rater) -> Step:
    """Where the rater stands in the study's entry sequence."""
    enrollment = enrollment_get(study=study, rater=rater)
    if enrollment.stopped_at is not None:
        return Step("stopped", enrollment)
    if study.consent_text.strip() and enrollment.consented_at is None:
        return Step("consent", enrollment)
    if study.instructions.strip() and enrollment.instructions_seen_at is None:
        return Step("instructions", enrollment)
    return Step("rate", enrollment)
