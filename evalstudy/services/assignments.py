"""Claiming a seat and serving its slots (see the package's note on concurrency)."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..models import (
    Assignment,
    AssignmentSlot,
    Rater,
    Study,
)
from .enrolments import (
    enrollment_of,
)
from .seats import hand_on_seat, has_open_slots

LEASE_SLACK = dt.timedelta(minutes=1)


class StudyNotOpen(Exception):
    """The study does not accept raters (draft or closed)."""


class StudyFull(Exception):
    """Every seat is taken: the redundancy target is met."""


class AssignmentExpired(Exception):
    """The rater's lease ran out and their unjudged slots went to another rater."""


def _lease_end(study: Study, now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(minutes=study.lease_minutes)


def _existing_seat(study: Study, rater: Rater) -> Assignment | None:
    existing = Assignment.objects.filter(study=study, rater=rater).first()
    if existing is not None and existing.state == Assignment.State.EXPIRED:
        raise AssignmentExpired(
            "Your time on this study ran out and your remaining items went to another "
            "rater. What you submitted is kept."
        )
    return existing


def lease_renew(seat: Assignment, study: Study, now: dt.datetime) -> bool:
    """Push the seat's lease to `now + lease_minutes`, unless it was renewed within the last
    minute (a write per page view buys nothing). Returns whether the field changed."""
    target = _lease_end(study, now)
    slack = min(LEASE_SLACK, dt.timedelta(minutes=study.lease_minutes) / 10)
    if seat.lease_expires_at is not None and seat.lease_expires_at > target - slack:
        return False
    seat.lease_expires_at = target
    return True


def assignment_claim(*, study: Study, rater: Rater, now: dt.datetime | None = None) -> Assignment:
    """The rater's seat in `study`, claiming the next free one if they have none.

    Free seats are handed out in (list, part, replica) order, which completes the outputs of one
    list before starting the next. A seat whose lease expired counts as free. Idempotent: the
    same rater always gets the same seat. Raises StudyNotOpen, StudyFull, AssignmentExpired.
    """
    now = now or timezone.now()
    # The common case (the rater already has a seat) needs no lock.
    existing = _existing_seat(study, rater)
    if existing is not None:
        return existing
    with transaction.atomic():
        # Serialise one rater's parallel first requests, then look again under the lock.
        Rater.objects.select_for_update().filter(pk=rater.pk).first()
        existing = _existing_seat(study, rater)
        if existing is not None:
            return existing
        study = Study.objects.get(pk=study.pk)
        if study.status != Study.Status.OPEN:
            raise StudyNotOpen(f"Study {study.slug} is not open.")
        # A plain Assignment: the annotation only filters, no reader needs it.
        seat: Assignment | None = (
            Assignment.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(study=study, source=Assignment.Source.DESIGN)
            .annotate(has_open_slots=has_open_slots())
            .filter(
                Q(state=Assignment.State.OPEN)
                | Q(state=Assignment.State.ACTIVE, lease_expires_at__lt=now, has_open_slots=True)
            )
            .order_by("list_index", "part_index", "replica", "id")
            .first()
        )
        if seat is None and study.design == Study.Design.ADAPTIVE:
            from .adaptive import adaptive_seat_create

            seat = adaptive_seat_create(study=study, now=now)
        if seat is None:
            raise StudyFull(f"Study {study.slug} has no free seat.")
        if seat.state == Assignment.State.ACTIVE:
            seat = hand_on_seat(seat)
        seat.rater = rater
        seat.state = Assignment.State.ACTIVE
        seat.claimed_at = now
        seat.lease_expires_at = _lease_end(study, now)
        seat.save(update_fields=["rater", "state", "claimed_at", "lease_expires_at"])
        return seat


def assignment_next(
    *, study: Study, rater: Rater, now: dt.datetime | None = None
) -> AssignmentSlot | None:
    """The rater's next slot to judge (claiming a seat if needed); None when their list is done.

    Marks the slot served (time on task starts at the first serve) and renews the lease.
    Raises NotEnrolled unless the study admitted the rater, StudyNotOpen, StudyFull,
    AssignmentExpired.
    """
    now = now or timezone.now()
    enrollment_of(study=study, rater=rater)
    seat = assignment_claim(study=study, rater=rater, now=now)
    with transaction.atomic():
        seat = (Assignment.objects.select_for_update(of=("self",)).select_related("study")
                .get(pk=seat.pk))
        if seat.state == Assignment.State.EXPIRED:
            raise AssignmentExpired("Your time on this study ran out.")
        slot = seat.slots.filter(completed_at__isnull=True).order_by("position").first()
        if slot is None:
            if seat.state != Assignment.State.DONE:
                seat.state = Assignment.State.DONE
                seat.completed_at = now
                seat.save(update_fields=["state", "completed_at"])
            return None
        if seat.study.status != Study.Status.OPEN:
            raise StudyNotOpen(f"Study {seat.study.slug} is not open.")
        if slot.served_at is None:
            slot.served_at = now
            slot.save(update_fields=["served_at"])
        if lease_renew(seat, seat.study, now):
            seat.save(update_fields=["lease_expires_at"])
        return slot
