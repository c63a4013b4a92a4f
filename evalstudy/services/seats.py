"""Handing seats on: an abandoned, expired or withdrawn seat's unjudged slots go to the next
rater in a replacement seat."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from ..models import (
    Assignment,
    AssignmentSlot,
    Rater,
    Study,
)


def has_open_slots() -> Exists:
    """Whether a seat still has slots to judge: a finished seat is never handed on."""
    return Exists(
        AssignmentSlot.objects.filter(assignment=OuterRef("pk"), completed_at__isnull=True)
    )


def hand_on_seat(seat: Assignment, *, every_slot: bool = False) -> Assignment:
    """Expire `seat` and open a replacement, the same seat of the design, holding fresh copies
    of its slots in the same order: the unjudged ones and the calibration items (an abandoned
    seat: the rater keeps what they judged, and their judgments count towards the outputs'
    redundancy), or with `every_slot` all of them (a seat reopened to someone else after its
    rater was excluded). Precondition: `seat` is locked by the caller."""
    seat.state = Assignment.State.EXPIRED
    seat.save(update_fields=["state"])
    replacement = Assignment.objects.create(
        study_id=seat.study_id, source=seat.source, seat_index=seat.seat_index,
        list_index=seat.list_index, part_index=seat.part_index, replica=seat.replica,
        seed=seat.seed, replaces=seat,
    )
    carried = seat.slots.all() if every_slot else seat.slots.filter(
        Q(completed_at__isnull=True) | Q(kind=AssignmentSlot.Kind.CALIBRATION))
    AssignmentSlot.objects.bulk_create(
        AssignmentSlot(
            assignment=replacement, position=position, kind=slot.kind, output_id=slot.output_id,
            output_b_id=slot.output_b_id, calibration_item_id=slot.calibration_item_id,
            attention_check_id=slot.attention_check_id, shown_outputs=slot.shown_outputs,
        )
        for position, slot in enumerate(carried.order_by("position"))
    )
    return replacement




def assignments_expire_leases(*, now: dt.datetime | None = None) -> int:
    """Hand on every active seat whose lease ran out; returns how many. Safe to run twice."""
    now = now or timezone.now()
    handed_on = 0
    with transaction.atomic():
        stale = (
            Assignment.objects.select_for_update(skip_locked=True)
            .filter(state=Assignment.State.ACTIVE, lease_expires_at__lt=now)
            .annotate(has_open_slots=has_open_slots())
            .filter(has_open_slots=True)
        )
        for seat in stale:
            hand_on_seat(seat)
            handed_on += 1
    return handed_on


def assignment_withdraw(*, study: Study, rater: Rater, now: dt.datetime | None = None) -> bool:
    """Take a stopped rater's seat back now: their unjudged slots go to the next rater (as when
    a lease expires) and what they submitted stays. Returns whether a seat was handed on."""
    now = now or timezone.now()
    with transaction.atomic():
        seat = (
            Assignment.objects.select_for_update()
            .filter(study=study, rater=rater, state=Assignment.State.ACTIVE)
            .annotate(has_open_slots=has_open_slots())
            .filter(has_open_slots=True)
            .first()
        )
        if seat is None:
            return False
        hand_on_seat(seat)
        return True
