"""The researcher's live view of a study: seats, coverage of outputs, and every rater's progress
and quality signals (listening to media among them). Read-only; a handful of queries whatever
the study's size."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q

from evalstudy import criteria as rules
from evalstudy.models import Assignment, AssignmentSlot, Enrollment, Study

from .media import listening_by_seat
from .models import Judgment


@dataclass
class ListSeats:
    list_index: int
    part: int
    filled: int
    total: int


@dataclass
class RaterProgress:
    rater_id: int
    rater: str
    kind: str
    seat: int | None
    list_index: int | None
    part: int
    replica: int
    state: str
    done: int
    total: int
    median_seconds: float | None
    attention_failed: int
    attention_answered: int
    calibration_correct: int
    calibration_answered: int
    last_activity: datetime | None
    stopped: str
    # Items with media (audio, video) answered, how many heard to the end, and the median
    # seconds heard per such item (annotation.media: what was played, not wall time).
    media_items: int = 0
    media_heard_to_end: int = 0
    median_seconds_listened: float | None = None

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0

    @property
    def calibration_accuracy(self) -> float | None:
        if not self.calibration_answered:
            return None
        return self.calibration_correct / self.calibration_answered


@dataclass
class StudyMonitor:
    study: Study
    lists: list[ListSeats]
    coverage: dict[int, int]  # completed ratings -> number of outputs with that many
    outputs_total: int
    outputs_complete: int
    target: int
    median_seconds: float | None
    raters: list[RaterProgress] = field(default_factory=list)

    @property
    def seats_filled(self) -> int:
        return sum(row.filled for row in self.lists)

    @property
    def seats_total(self) -> int:
        return sum(row.total for row in self.lists)


def _seconds(served: datetime | None, completed: datetime | None) -> float | None:
    if served is None or completed is None:
        return None
    return max((completed - served).total_seconds(), 0.0)


def study_monitor(study: Study) -> StudyMonitor:
    design = Assignment.objects.filter(study=study, source=Assignment.Source.DESIGN)
    lists = [
        ListSeats(row["list_index"], row["part_index"], row["filled"], row["total"])
        for row in design.exclude(state=Assignment.State.EXPIRED)
        .values("list_index", "part_index")
        .annotate(total=Count("id"), filled=Count("id", filter=Q(rater__isnull=False)))
        .order_by("list_index", "part_index")
    ]

    # Planned ratings per output: its slots in live seats, plus slots completed in seats that
    # expired (their judgments count; their unjudged slots moved to the replacement).
    planned: Counter[int] = Counter()
    done: Counter[int] = Counter()
    slots = AssignmentSlot.objects.filter(
        assignment__in=design, kind=AssignmentSlot.Kind.TARGET
    ).values_list("output_id", "output_b_id", "completed_at", "assignment__state")
    for output_id, output_b_id, completed_at, state in slots:
        if state == Assignment.State.EXPIRED and completed_at is None:
            continue
        for output in (output_id, output_b_id):
            if output is None:
                continue
            planned[output] += 1
            if completed_at is not None:
                done[output] += 1
    target = max(planned.values(), default=0)
    coverage = Counter(done.get(output, 0) for output in planned)
    complete = sum(1 for output, n in planned.items() if done.get(output, 0) >= n)

    # Per seat with a rater: progress, timings, and control-item results.
    seats = (
        design.filter(rater__isnull=False)
        .select_related("rater")
        .annotate(total=Count("slots"),
                  done=Count("slots", filter=Q(slots__completed_at__isnull=False)))
        .order_by("list_index", "part_index", "replica", "id")
    )
    timings: dict[int, list[float]] = defaultdict(list)
    last: dict[int, datetime] = {}
    for seat_id, served, completed in AssignmentSlot.objects.filter(
        assignment__in=seats, kind=AssignmentSlot.Kind.TARGET, completed_at__isnull=False
    ).values_list("assignment_id", "served_at", "completed_at"):
        seconds = _seconds(served, completed)
        if seconds is not None:
            timings[seat_id].append(seconds)
        if completed is not None and (seat_id not in last or completed > last[seat_id]):
            last[seat_id] = completed
    controls = _control_results(study)
    listening = listening_by_seat(study)
    stopped = dict(
        Enrollment.objects.filter(study=study, stopped_at__isnull=False)
        .values_list("rater_id", "stop_reason")
    )
    raters = []
    for seat in seats:
        results = controls.get(seat.pk, {})
        attention = results.get(AssignmentSlot.Kind.ATTENTION, [])
        calibration = results.get(AssignmentSlot.Kind.CALIBRATION, [])
        raters.append(RaterProgress(
            rater_id=seat.rater_id, rater=str(seat.rater), kind=seat.rater.kind,
            seat=seat.seat_index, list_index=seat.list_index, part=seat.part_index,
            replica=seat.replica, state=seat.state, done=seat.done, total=seat.total,
            median_seconds=statistics.median(timings[seat.pk]) if timings[seat.pk] else None,
            attention_failed=attention.count(False), attention_answered=len(attention),
            calibration_correct=calibration.count(True), calibration_answered=len(calibration),
            last_activity=last.get(seat.pk), stopped=stopped.get(seat.rater_id, ""),
        ))
        heard = listening.get(seat.pk)
        if heard is not None:
            raters[-1].media_items, raters[-1].media_heard_to_end = (heard.media_slots,
                                                                     heard.heard_to_end)
            raters[-1].median_seconds_listened = heard.median_seconds
    every_timing = [t for values in timings.values() for t in values]
    return StudyMonitor(
        study=study, lists=lists, coverage=dict(sorted(coverage.items())),
        outputs_total=len(planned), outputs_complete=complete, target=target,
        median_seconds=statistics.median(every_timing) if every_timing else None,
        raters=raters,
    )


def _control_results(study: Study) -> dict[int, dict[str, list[bool]]]:
    """seat id -> slot kind -> [passed, ...] for answered calibration and attention slots."""
    answers: dict[int, dict[str, str]] = defaultdict(dict)
    for slot_id, key, value in Judgment.objects.filter(
        slot__assignment__study=study,
        slot__kind__in=[AssignmentSlot.Kind.ATTENTION, AssignmentSlot.Kind.CALIBRATION],
    ).values_list("slot_id", "criterion__key", "value"):
        answers[slot_id][key] = value
    results: dict[int, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    slots = AssignmentSlot.objects.filter(
        assignment__study=study, completed_at__isnull=False,
        kind__in=[AssignmentSlot.Kind.ATTENTION, AssignmentSlot.Kind.CALIBRATION],
    ).select_related("calibration_item", "attention_check")
    for slot in slots:
        expected = (slot.calibration_item or slot.attention_check).expected
        given = answers.get(slot.pk, {})
        passed = all(rules.expected_met(given.get(key), value) for key, value in expected.items())
        results[slot.assignment_id][slot.kind].append(passed)
    return results


PROGRESS_COLUMNS = (
    "rater", "kind", "seat", "list", "part", "replica", "state", "done", "total",
    "median_seconds", "attention_failed", "attention_answered", "calibration_correct",
    "calibration_answered", "last_activity", "stopped", "media_items", "media_heard_to_end",
    "median_seconds_listened",
)


def progress_rows(monitor: StudyMonitor):
    for row in monitor.raters:
        yield {
            "rater": row.rater, "kind": row.kind, "seat": row.seat, "list": row.list_index,
            "part": row.part, "replica": row.replica, "state": row.state, "done": row.done,
            "total": row.total,
            "median_seconds": "" if row.median_seconds is None else f"{row.median_seconds:.1f}",
            "attention_failed": row.attention_failed,
            "attention_answered": row.attention_answered,
            "calibration_correct": row.calibration_correct,
            "calibration_answered": row.calibration_answered,
            "last_activity": row.last_activity.isoformat() if row.last_activity else "",
            "stopped": row.stopped,
            "media_items": row.media_items, "media_heard_to_end": row.media_heard_to_end,
            "median_seconds_listened": ("" if row.median_seconds_listened is None
                                        else f"{row.median_seconds_listened:.1f}"),
        }
