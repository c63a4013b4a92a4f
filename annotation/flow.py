"""The participant's way through a study: entry, screening, consent, instructions, rating,
and being stopped politely. Each step is a service; `next_step` says where a rater stands.

Preconditions and guarantees:
- A rater reaches only the studies that admitted them (`enrollment_get` raises NotEnrolled).
- Crowd entry is idempotent: the same PROLIFIC_PID (and platform session) resumes the same
  rater and seat in that study; in another study the same id is another rater.
- Attention-check failures are computed from the stored judgments, never counted in a
  variable, so a retried submission cannot count a failure twice.
- Stopping a rater hands their unjudged slots on at once and keeps what they submitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from evalstudy import criteria as rules
from evalstudy.models import Assignment, AssignmentSlot, Enrollment, Rater, Study
from evalstudy.services import (
    enrollment_admit,
    enrollment_of,
    enrollment_stop,
)

from .models import Judgment

PARTICIPANT_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
# The participant ids each crowd platform hands out (Study.crowd_platform): a made-up or
# mistyped id ("abc") is refused at the door instead of becoming a rater no one can pay.
PARTICIPANT_ID_FORMATS = {
    "prolific": re.compile(r"^[0-9a-fA-F]{24}$"),
    "mturk": re.compile(r"^A[A-Z0-9]{9,20}$"),
    "other": PARTICIPANT_ID_RE,
}


class EntryRefused(Exception):
    """The entry link is unusable (e.g. no participant id): nothing was created."""


@transaction.atomic
def crowd_enter(
    *, study: Study, participant_id: str, platform_study_id: str = "", session_id: str = "",
    session_rater_id: int | None = None,
) -> Enrollment:
    """Create or resume the crowd participant behind a Prolific-style entry URL.

    The participant is a rater of this study only: the same participant id in another study
    is another rater, so nothing learnt in one study's crowd entry reaches another study. Only
    raters that a crowd entry created are resumed: the id of a rater invited with a personal
    link is no way in for whoever knows it.

    The participant id is not secret (it travels in URLs, exports and emails); the platform's
    session id is. A participation that began with a session id is bound to it: once it has
    started (consent, instructions or a seat), it is resumed only with that session id or from
    the browser session already bound to it (`session_rater_id`). Before it has started, a new
    session id takes it over, so someone who entered first with a made-up session cannot lock
    the real participant out. A participation begun without a session id stays resumable by
    the participant id alone (the platform offered nothing more).
    Raises EntryRefused (nothing created or changed) for a missing id, an invited rater's id,
    a study that admits no new participants (closed), or a session id that does not match."""
    participant_id = (participant_id or "").strip()
    session_id = (session_id or "").strip()[:100]
    if not PARTICIPANT_ID_FORMATS.get(study.crowd_platform, PARTICIPANT_ID_RE).match(
            participant_id):
        raise EntryRefused(gettext(
            "This link is missing a valid participant id (PROLIFIC_PID). Please open the study "
            "from the crowd platform again."
        ))
    rater = Rater.objects.filter(study=study, kind=Rater.Kind.CROWD,
                                 external_id=participant_id).first()
    if rater is not None and rater.origin != Rater.Origin.CROWD:
        raise EntryRefused(gettext(
            "This participant id belongs to a rater invited to this study: please use the "
            "personal link you were sent."
        ))
    if rater is None:
        if study.status != Study.Status.OPEN:
            raise EntryRefused(
                gettext("This study is not taking part in new participants any more."))
        rater, _ = Rater.objects.get_or_create(
            study=study, kind=Rater.Kind.CROWD, external_id=participant_id,
            defaults={"display_name": participant_id, "origin": Rater.Origin.CROWD},
        )
    enrollment = (Enrollment.objects.select_for_update()
                  .filter(study=study, rater=rater).first())
    if enrollment is None:
        enrollment, _ = enrollment_admit(study=study, rater=rater)
        enrollment.platform_study_id = (platform_study_id or "")[:100]
        enrollment.platform_session_id = session_id
        enrollment.save(update_fields=["platform_study_id", "platform_session_id"])
        return enrollment
    bound = enrollment.platform_session_id
    if bound and session_rater_id != rater.pk and session_id != bound:
        if _has_started(enrollment):
            raise EntryRefused(gettext(
                "This participation was started from another session of the crowd platform. "
                "Please open the study from the crowd platform again, or contact the "
                "researcher."
            ))
        if session_id:  # not started yet: the newcomer's session takes it over
            enrollment.platform_session_id = session_id
            enrollment.save(update_fields=["platform_session_id"])
    return enrollment


def _has_started(enrollment: Enrollment) -> bool:
    return (enrollment.consented_at is not None or enrollment.instructions_seen_at is not None
            or Assignment.objects.filter(study_id=enrollment.study_id,
                                         rater_id=enrollment.rater_id).exists())


def enrollment_get(*, study: Study, rater: Rater) -> Enrollment:
    """The rater's enrollment in the study; NotEnrolled (a 404 for callers) when the study did
    not admit them. Nothing is created here: admission is an invitation or a crowd entry."""
    return enrollment_of(study=study, rater=rater)


def _stop(enrollment: Enrollment, reason: str) -> None:
    enrollment_stop(enrollment=enrollment, reason=reason)


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
    return all(rules.expected_met(given.get(key), value)
               for key, value in control.expected.items())


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


def after_calibration_item(*, study: Study, rater: Rater) -> bool:
    """Stop the rater when the study has a calibration pass mark, every practice item of their
    seat is answered, and the share they answered as expected is below the mark: the real
    items are then never served to them. Computed from the stored judgments (a retried
    submission cannot count twice). Returns whether the rater is (now) stopped."""
    mark = study.calibration_pass_mark
    if mark is None:
        return False
    slots = list(AssignmentSlot.objects.filter(
        assignment__study=study, assignment__rater=rater, kind=AssignmentSlot.Kind.CALIBRATION,
    ).exclude(assignment__state=Assignment.State.EXPIRED)
      # A recalibration round's practice items (annotation.recalibration) never stop anyone.
      .exclude(recalibration_rounds__isnull=False).select_related("calibration_item"))
    if not slots or any(slot.completed_at is None for slot in slots):
        return False
    passed = [control_slot_passed(slot) for slot in slots]
    if sum(1 for p in passed if p) / len(passed) >= mark:
        return False
    _stop(enrollment_get(study=study, rater=rater), Enrollment.StopReason.CALIBRATION)
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
