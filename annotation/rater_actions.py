"""What a researcher does about one rater of a study, from the monitor or the API: exclude them
from the analysis (reversibly: their judgments stay stored), include them again, and reopen
their seat to someone else. Each service is audited (actor, source) in its own transaction.

A rater is acted on through their enrollment in the study (people who entered it: invited,
account holders who accepted, crowd participants); raters of imported judgments and proxies
have none and are left out of an analysis with its rater filters instead.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from evalstudy.audit import SYSTEM, audit_record
from evalstudy.models import Assignment, AuditEvent, Enrollment, Rater, Study
from evalstudy.services import assignment_withdraw, enrollment_stop, hand_on_seat

REASON_MAX = 500


class RaterNotInStudy(Exception):
    """The rater did not enter this study (or is another study's): a 404 for callers."""


class SeatNotReopenable(Exception):
    """The rater holds no seat that could be handed on (none, already handed on, or finished
    without `all_items`): a 409 for callers."""


def rater_enrollment(*, study: Study, rater_id: int, lock: bool = False) -> Enrollment:
    """The enrollment of rater `rater_id` in `study`; RaterNotInStudy when there is none (a
    rater of another study, a pending invitation, a proxy)."""
    rows = Enrollment.objects.select_related("rater", "study").filter(
        study=study, rater_id=rater_id, invitation_pending=False)
    enrollment = (rows.select_for_update(of=("self",)) if lock else rows).first()
    if enrollment is None:
        raise RaterNotInStudy(f"No rater {rater_id} in study {study.slug}.")
    return enrollment


@transaction.atomic
def rater_exclude(*, study: Study, rater_id: int, reason: str = "", actor: Any = None,
                  source: str = SYSTEM, now: dt.datetime | None = None) -> Enrollment:
    """Exclude the rater from the study's analysis (`analysis.selectors.judgments_tidy` leaves
    their judgments out by default). Their judgments and seat are untouched; `rater_include`
    undoes it. Idempotent: excluding an excluded rater again only updates the reason (and
    records it). Audited as "update" of the enrollment."""
    enrollment = rater_enrollment(study=study, rater_id=rater_id, lock=True)
    reason = (reason or "").strip()[:REASON_MAX]
    before = enrollment.excluded_at
    if before is None:
        enrollment.excluded_at = now or timezone.now()
    enrollment.excluded_reason = reason
    enrollment.excluded_by = actor if getattr(actor, "is_authenticated", False) else None
    enrollment.save(update_fields=["excluded_at", "excluded_reason", "excluded_by"])
    audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                 target=enrollment, changes={
                     "excluded_from_analysis": [before is not None, True], "reason": reason})
    return enrollment


@transaction.atomic
def rater_include(*, study: Study, rater_id: int, actor: Any = None,
                  source: str = SYSTEM) -> Enrollment:
    """Undo `rater_exclude`: the rater's judgments enter the analysis again. Idempotent.
    Audited as "update" of the enrollment (with the reason the exclusion had)."""
    enrollment = rater_enrollment(study=study, rater_id=rater_id, lock=True)
    was = enrollment.excluded_at is not None
    reason = enrollment.excluded_reason
    enrollment.excluded_at, enrollment.excluded_reason, enrollment.excluded_by = None, "", None
    enrollment.save(update_fields=["excluded_at", "excluded_reason", "excluded_by"])
    audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                 target=enrollment, changes={"excluded_from_analysis": [was, False],
                                             "reason": reason})
    return enrollment


@transaction.atomic
def seat_reopen(*, study: Study, rater_id: int, all_items: bool = False, actor: Any = None,
                source: str = SYSTEM, now: dt.datetime | None = None) -> Assignment:
    """Hand the rater's seat on to someone else; returns the replacement seat (open, no rater).

    The rater is stopped (reason "reopened": their page says the researcher ended their
    participation) and keeps what they judged. By default the replacement holds their
    unjudged slots, as for a participant who returned (`evalstudy.services.
    assignment_withdraw`). With `all_items` it holds every slot of the seat, answered or not:
    the whole list is rated again by someone else (after excluding a speeder, say), and the
    first rater's judgments stay stored beside the new ones. Raises SeatNotReopenable (nothing
    changed) when there is no live seat, or it is finished and `all_items` is not set.
    Audited as "update" of the seat."""
    now = now or timezone.now()
    enrollment = rater_enrollment(study=study, rater_id=rater_id, lock=True)
    rater: Rater = enrollment.rater
    seat = (Assignment.objects.select_for_update()
            .filter(study=study, rater=rater, source=Assignment.Source.DESIGN)
            .exclude(state=Assignment.State.EXPIRED).first())
    if seat is None:
        raise SeatNotReopenable("This rater holds no seat to hand on (none yet, or it was "
                                "already handed on).")
    unjudged = seat.slots.filter(completed_at__isnull=True).count()
    if not all_items and not unjudged:
        raise SeatNotReopenable("This rater finished their list: nothing is left to hand on. "
                                "Reopen it with all_items to have the whole list rated again.")
    state_before = seat.state
    if all_items:
        replacement = hand_on_seat(seat, every_slot=True)
        if enrollment.stopped_at is None:
            enrollment_stop(enrollment=enrollment, reason=Enrollment.StopReason.REOPENED, now=now)
    else:
        if enrollment.stopped_at is None:
            enrollment_stop(enrollment=enrollment, reason=Enrollment.StopReason.REOPENED, now=now)
        else:
            assignment_withdraw(study=study, rater=rater, now=now)
        replacement = Assignment.objects.get(replaces=seat)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                 target=seat, changes={
                     "state": [state_before, Assignment.State.EXPIRED.value],
                     "reopened_to": replacement.pk, "all_items": all_items,
                     "slots_handed_on": replacement.slots.count(), "rater": rater.pk})
    return replacement
