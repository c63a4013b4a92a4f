"""Recalibration rounds and agreement alerts: what a researcher does when a rater drifts away
from the others (`annotation.drift`), and what the periodic task records so the researcher
sees it later.

A round sends one rater back to the study's calibration items: one practice slot per item is
added to their seat, served next (after the item on their screen, if one is), with the same
feedback as the first practice items; then they carry on with their list. Judgments they
submit after the round started belong to it (`recalibration_round` in the analysis's table).
A round's practice answers never stop the rater (the study's calibration pass mark is for the
first practice items: `annotation.flow.after_calibration_item`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from evalstudy.audit import SYSTEM, audit_record
from evalstudy.models import Assignment, AssignmentSlot, AuditEvent, Study

from .behaviour import study_drift
from .models import AgreementAlert, RecalibrationRound
from .rater_actions import REASON_MAX, rater_enrollment

# Positions are moved out of the way through this offset, so that the seat's unique
# (seat, position) never sees two slots on one position while the later ones shift.
_SHIFT = 1_000_000


class RecalibrationNotPossible(Exception):
    """Nothing changed: no calibration items, no live seat with items left, the rater was
    stopped, or a round is still running (a 409 for callers)."""


def _running(study: Study, rater_id: int) -> RecalibrationRound | None:
    return (RecalibrationRound.objects.filter(study=study, rater_id=rater_id,
                                              completed_at__isnull=True)
            .filter(slots__completed_at__isnull=True).distinct().first())


@transaction.atomic
def recalibration_start(*, study: Study, rater_id: int, reason: str = "", actor: Any = None,
                        source: str = SYSTEM, now: dt.datetime | None = None
                        ) -> RecalibrationRound:
    """Start a recalibration round for rater `rater_id` of `study`: a practice slot per
    calibration item, served next. Raises `rater_actions.RaterNotInStudy` (another study's
    rater: a 404) or RecalibrationNotPossible (nothing changed). Audited as "update" of the
    enrollment."""
    now = now or timezone.now()
    enrollment = rater_enrollment(study=study, rater_id=rater_id, lock=True)
    if enrollment.stopped_at is not None:
        raise RecalibrationNotPossible("This rater's participation has ended.")
    items = list(study.calibration_items.order_by("order", "id"))
    if not items:
        raise RecalibrationNotPossible("The study has no calibration items to show again.")
    # The seat's lock, as the rater's loop takes it: no answer interleaves with the shift.
    seat = (Assignment.objects.select_for_update()
            .filter(study=study, rater_id=rater_id, state=Assignment.State.ACTIVE).first())
    current = (seat.slots.filter(completed_at__isnull=True).order_by("position").first()
               if seat is not None else None)
    if seat is None or current is None:
        raise RecalibrationNotPossible("This rater has no items left in a live seat.")
    if _running(study, rater_id) is not None:
        raise RecalibrationNotPossible("A recalibration round of this rater is still running.")
    # The item on the rater's screen (served) keeps its place: the round comes after it.
    at = current.position + 1 if current.served_at is not None else current.position
    later = seat.slots.filter(position__gte=at)
    later.update(position=F("position") + _SHIFT)
    seat.slots.filter(position__gte=_SHIFT).update(position=F("position") - _SHIFT + len(items))
    slots = AssignmentSlot.objects.bulk_create(
        AssignmentSlot(assignment=seat, position=at + k, kind=AssignmentSlot.Kind.CALIBRATION,
                       calibration_item=item) for k, item in enumerate(items))
    number = (RecalibrationRound.objects.filter(study=study, rater_id=rater_id)
              .aggregate(n=Max("number"))["n"] or 0) + 1
    reason = (reason or "").strip()[:REASON_MAX]
    round_ = RecalibrationRound.objects.create(
        study=study, rater_id=rater_id, number=number, started_at=now, reason=reason,
        started_by=actor if getattr(actor, "is_authenticated", False) else None)
    round_.slots.set(slots)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                 target=enrollment, changes={"recalibration_round": number,
                                             "calibration_items": len(items),
                                             "reason": reason})
    return round_


def recalibration_rounds_complete(*, study: Study | None = None,
                                  now: dt.datetime | None = None) -> int:
    """Mark finished the rounds whose practice slots are all answered (at their last answer);
    returns how many. Safe to run twice."""
    rounds = RecalibrationRound.objects.filter(completed_at__isnull=True)
    if study is not None:
        rounds = rounds.filter(study=study)
    done = 0
    for round_ in rounds.prefetch_related("slots"):
        answered = [slot.completed_at for slot in round_.slots.all()]
        if answered and all(at is not None for at in answered):
            round_.completed_at = max(answered)  # type: ignore[type-var]
            round_.save(update_fields=["completed_at"])
            done += 1
    return done


def agreement_alerts_record(*, study: Study, now: dt.datetime | None = None
                            ) -> list[AgreementAlert]:
    """Record each window of agreement over time that alerts and was not recorded yet
    (once per rater and window, with its values now); returns the new alerts."""
    threshold = study.agreement_alert_threshold
    if threshold is None:
        return []
    now = now or timezone.now()
    known = set(AgreementAlert.objects.filter(study=study).values_list("rater_id", "window"))
    new = [AgreementAlert(study=study, rater_id=rater, window=w.index, first=w.first,
                          last=w.last, window_size=study.agreement_window,
                          agreement=w.agreement, threshold=threshold, raised_at=now)
           for rater, windows in study_drift(study).items() for w in windows
           if w.alert and (rater, w.index) not in known]
    return AgreementAlert.objects.bulk_create(new, ignore_conflicts=True)


def integrity_scan(now: dt.datetime | None = None) -> int:
    """The periodic task's work: record new agreement alerts of every open study with an
    alert threshold, and close finished recalibration rounds. Returns the alerts raised."""
    raised = 0
    for study in Study.objects.filter(status=Study.Status.OPEN,
                                      agreement_alert_threshold__isnull=False):
        raised += len(agreement_alerts_record(study=study, now=now))
    recalibration_rounds_complete(now=now)
    return raised
