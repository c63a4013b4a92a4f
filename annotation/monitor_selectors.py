"""What the study monitor shows (selectors of the monitor page, `annotation.monitor_views`): the
researcher's live view of a study: seats, coverage of outputs, and every rater's progress and
quality signals (listening to media among them; the rater-quality signals themselves are
`annotation.rater_quality`'s). Read-only; a handful of queries whatever the study's size."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q

from evalstudy import criteria as rules
from evalstudy.models import Assignment, AssignmentSlot, Enrollment, Study

from . import drift, integrity, quality
from .behaviour import study_integrity
from .media import listening_by_seat
from .models import Judgment
from .rater_quality import rater_signals


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
    # Live quality control (annotation.quality): fastest item, speeding against the study's
    # threshold, straight-lining (with what and where), agreement with the other raters of the
    # same outputs (leave-one-out, 0..1), MACE competence on the categorical criteria, and
    # whether a researcher excluded the rater from the analysis.
    min_seconds: float | None = None
    speeder: bool = False
    straightlining: bool = False
    straightlining_detail: str = ""
    agreement: float | None = None
    agreement_units: int = 0
    competence: float | None = None
    excluded: bool = False
    excluded_reason: str = ""
    has_enrollment: bool = False
    seat_open: bool = False  # the seat can still be handed on (live, not expired)
    # Integrity signals (annotation.behaviour): shares of flagged answers per signal, and
    # agreement over time (annotation.drift) with the study's alerting windows; evidence only.
    integrity: integrity.RaterIntegrity | None = None
    agreement_windows: list[drift.Window] = field(default_factory=list)
    recalibration_rounds: int = 0
    recalibration_running: bool = False

    @property
    def agreement_alerts(self) -> int:
        return sum(1 for window in self.agreement_windows if window.alert)

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
    speeder_seconds: float | None = None  # the threshold in force (None: too few timings)
    speeder_derived: bool = True  # derived from the study's median (not the study's setting)
    competence_criteria: list[str] = field(default_factory=list)  # what MACE was run on
    # Alerts the periodic task recorded (annotation.recalibration), latest first.
    agreement_alerts: list = field(default_factory=list)

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
    enrollments = {
        rater_id: (stop_reason if stopped_at else "", excluded_at is not None, reason)
        for rater_id, stop_reason, stopped_at, excluded_at, reason in
        Enrollment.objects.filter(study=study).values_list(
            "rater_id", "stop_reason", "stopped_at", "excluded_at", "excluded_reason")
    }
    stopped = {rater: row[0] for rater, row in enrollments.items() if row[0]}
    raters = []
    for seat in seats:
        rater = seat.rater
        assert rater is not None, "the seats are read with a rater (the filter)"
        results = controls.get(seat.pk, {})
        attention = results.get(AssignmentSlot.Kind.ATTENTION, [])
        calibration = results.get(AssignmentSlot.Kind.CALIBRATION, [])
        raters.append(RaterProgress(
            rater_id=rater.pk, rater=str(rater), kind=rater.kind,
            seat=seat.seat_index, list_index=seat.list_index, part=seat.part_index,
            replica=seat.replica, state=seat.state, done=seat.done, total=seat.total,
            median_seconds=statistics.median(timings[seat.pk]) if timings[seat.pk] else None,
            attention_failed=attention.count(False), attention_answered=len(attention),
            calibration_correct=calibration.count(True), calibration_answered=len(calibration),
            last_activity=last.get(seat.pk), stopped=stopped.get(rater.pk, ""),
        ))
        heard = listening.get(seat.pk)
        if heard is not None:
            raters[-1].media_items, raters[-1].media_heard_to_end = (heard.media_slots,
                                                                     heard.heard_to_end)
            raters[-1].median_seconds_listened = heard.median_seconds
    every_timing = [t for values in timings.values() for t in values]
    threshold = quality.speeder_threshold(every_timing, fixed=study.speeder_seconds)
    signals = rater_signals(study)
    flags = study_integrity(study, speeder_seconds=threshold, threshold_known=True,
                            media=bool(listening))
    rounds = _rounds(study)
    for row, seat in zip(raters, seats, strict=True):
        seat_timings = timings[seat.pk]
        row.min_seconds = min(seat_timings) if seat_timings else None
        row.speeder = quality.is_speeder(seat_timings, threshold)
        signal = signals.raters.get(row.rater_id)
        if signal is not None:
            row.straightlining, row.straightlining_detail = signal.straightlining, signal.detail
            row.agreement, row.agreement_units = signal.agreement, signal.agreement_units
            row.competence = signal.competence
        enrolled = enrollments.get(row.rater_id)
        if enrolled is not None:
            row.has_enrollment, row.excluded, row.excluded_reason = True, *enrolled[1:]
        row.seat_open = seat.state in (Assignment.State.ACTIVE, Assignment.State.DONE)
        row.integrity = flags.raters.get(row.rater_id)
        row.agreement_windows = signals.agreement_windows.get(row.rater_id, [])
        row.recalibration_rounds, row.recalibration_running = rounds.get(row.rater_id,
                                                                         (0, False))
    return StudyMonitor(
        study=study, lists=lists, coverage=dict(sorted(coverage.items())),
        outputs_total=len(planned), outputs_complete=complete, target=target,
        median_seconds=statistics.median(every_timing) if every_timing else None,
        raters=raters, speeder_seconds=threshold,
        speeder_derived=study.speeder_seconds is None,
        competence_criteria=signals.competence_criteria,
        agreement_alerts=_recorded_alerts(study),
    )


def _recorded_alerts(study: Study) -> list:
    from .models import AgreementAlert

    return list(AgreementAlert.objects.filter(study=study).select_related("rater")
                .order_by("-raised_at", "-id")[:20])


def _rounds(study: Study) -> dict[int, tuple[int, bool]]:
    """rater id -> (recalibration rounds started, whether one is still running)."""
    from .models import RecalibrationRound

    found: dict[int, tuple[int, bool]] = {}
    for rater, number, running in RecalibrationRound.objects.filter(study=study).annotate(
            open=Count("slots", filter=Q(slots__completed_at__isnull=True))
    ).values_list("rater_id", "number", "open"):
        before = found.get(rater, (0, False))
        found[rater] = (max(before[0], number), before[1] or running > 0)
    return found


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
        control = slot.calibration_item or slot.attention_check
        assert control is not None, "a control slot shows its control item"
        expected = control.expected
        given = answers.get(slot.pk, {})
        passed = all(rules.expected_met(given.get(key), value) for key, value in expected.items())
        results[slot.assignment_id][slot.kind].append(passed)
    return results


PROGRESS_COLUMNS = (
    "rater", "kind", "seat", "list", "part", "replica", "state", "done", "total",
    "median_seconds", "attention_failed", "attention_answered", "calibration_correct",
    "calibration_answered", "last_activity", "stopped", "media_items", "media_heard_to_end",
    "median_seconds_listened", "rater_id", "min_seconds", "speeder", "straightlining",
    "straightlining_detail", "agreement", "agreement_units", "competence", "excluded",
    "excluded_reason", "integrity_flagged", "integrity_detail", "paste_share", "away_share",
    "keystroke_free_share", "speed_share", "listening_share", "agreement_windows",
    "agreement_alerts", "recalibration_rounds",
)


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


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
            "rater_id": row.rater_id, "min_seconds": _number(row.min_seconds, 1),
            "speeder": int(row.speeder), "straightlining": int(row.straightlining),
            "straightlining_detail": row.straightlining_detail,
            "agreement": _number(row.agreement, 3), "agreement_units": row.agreement_units,
            "competence": _number(row.competence, 3), "excluded": int(row.excluded),
            "excluded_reason": row.excluded_reason,
            **integrity_columns(row),
        }


def integrity_columns(row: RaterProgress) -> dict[str, object]:
    """The integrity part of a progress row (CSV and API): shares of flagged answers, the
    windows of agreement over time ("0.85 0.62!": `!` marks an alert) and rounds started."""
    found = row.integrity
    shares = found.shares if found is not None else {}
    return {
        "integrity_flagged": int(bool(found and found.flagged)),
        "integrity_detail": found.detail() if found is not None else "",
        **{f"{name}_share": _number(shares.get(name), 3) for name in integrity.SIGNALS},
        "agreement_windows": " ".join(f"{w.agreement:.2f}{'!' if w.alert else ''}"
                                      for w in row.agreement_windows),
        "agreement_alerts": row.agreement_alerts,
        "recalibration_rounds": row.recalibration_rounds,
    }
