"""Rater quality read from a study's judgments (selectors only, no page): straight-lining,
leave-one-out agreement, MACE competence and agreement over time of every human rater, by the
rules of the Django-free cores `annotation.quality` and `annotation.drift`.

The monitor page shows all of them (`rater_signals`, read by `annotation.monitor_selectors`);
the analysis leaves out raters below a competence (`rater_competences`: MACE alone). Both read
the same rows the same way, so a rater's competence is the same number on the monitor and in
the analysis.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime

from evalstudy import criteria as rules
from evalstudy.models import AssignmentSlot, Criterion, Rater, Study

from . import drift, quality
from .models import Judgment

__all__ = ["RaterSignal", "StudySignals", "agreement_scale", "compared_as_labels",
           "judged_unit", "rater_competences", "rater_signals"]

RATER_HUMAN_KINDS = list(Rater.HUMAN_KINDS)

# One row of a target judgment: id, rater, criterion, output, output_b, value, numeric value,
# submitted at.
Row = tuple[int, int, int, int | None, int | None, str, float | None, datetime]


@dataclass
class RaterSignal:
    straightlining: bool = False
    detail: str = ""
    agreement: float | None = None
    agreement_units: int = 0
    competence: float | None = None


@dataclass
class StudySignals:
    raters: dict[int, RaterSignal]
    competence_criteria: list[str]
    # rater id -> criterion key -> MACE competence (for the analysis's `min_competence`)
    competence_by_criterion: dict[int, dict[str, float]] = field(default_factory=dict)
    # rater id -> agreement over time (annotation.drift), from the same rows
    agreement_windows: dict[int, list[drift.Window]] = field(default_factory=dict)


def compared_as_labels(kind: rules.AnswerKind) -> bool:
    """Whether agreement over time and MACE read a kind's answers as labels: those of a
    declared list of categories (a Likert point or a severity level is a label too: the
    others' majority is a modal answer)."""
    return kind.closed


def agreement_scale(criterion: Criterion) -> quality.Scale | None:
    """How leave-one-out agreement compares the criterion's answers: as categories, or as
    points on its kind's scale (distances over its range); None where it compares nothing."""
    kind = criterion.rule.spec
    if kind.level == "nominal":
        return quality.Scale(quality.NOMINAL)
    bounds = kind.value_range(criterion.rule)
    return quality.Scale(quality.ORDINAL, *bounds) if bounds is not None else None


def judged_unit(output: int | None, output_b: int | None, kind: rules.AnswerKind, value: str
                ) -> tuple[tuple[int | None, int | None], str]:
    """The unit several raters judged, and the answer read in its terms: a pair of outputs is
    the same unit whichever side each rater saw it on (an answer naming a side of the pair
    follows the swap)."""
    if output_b is not None and output is not None and output_b < output:
        if kind.shows == rules.PAIR and value in ("A", "B"):
            value = "B" if value == "A" else "A"
        return (output_b, output), value
    return (output, output_b), value


def _target_judgments(study: Study) -> tuple[dict[int, Criterion], list[Row]]:
    """The study's criteria by id and its human raters' judgments of target items, oldest
    first: two queries whatever the study's size."""
    criteria = {c.pk: c for c in study.criteria.all()}
    rows: list[Row] = list(Judgment.objects.filter(
        slot__assignment__study=study, slot__kind=AssignmentSlot.Kind.TARGET,
        rater__kind__in=RATER_HUMAN_KINDS,
    ).values_list("id", "rater_id", "criterion_id", "slot__output_id", "slot__output_b_id",
                  "value", "numeric_value", "submitted_at").order_by("submitted_at", "id"))
    return criteria, rows


def _kinds(criteria: dict[int, Criterion]) -> dict[int, rules.AnswerKind]:
    """Each criterion's kind, asked once per criterion rather than once per judgment."""
    return {pk: criterion.rule.spec for pk, criterion in criteria.items()}


def _answers(criteria: dict[int, Criterion], rows: list[Row]) -> list[quality.Answer[int]]:
    kinds = _kinds(criteria)
    answers = []
    for _pk, rater, criterion_id, output, output_b, value, number, _at in rows:
        criterion = criteria.get(criterion_id)
        if criterion is None:
            continue
        unit, value = judged_unit(output, output_b, kinds[criterion_id], value)
        answers.append(quality.Answer(rater, unit, criterion.key, value, number))
    return answers


_MACE_CACHE: dict[tuple[int, str], tuple[tuple, quality.MaceResult[Hashable, int]]] = {}
_MACE_CACHE_SIZE = 64


def _mace_cached(study_id: int, key: str, signature: tuple,
                 triples: list[tuple[Hashable, int, str]], labels: list[str]
                 ) -> quality.MaceResult[Hashable, int]:
    """MACE for one criterion, computed again only when its judgments changed (the monitor
    polls every few seconds; EM over a large study takes a moment)."""
    cached = _MACE_CACHE.get((study_id, key))
    if cached is not None and cached[0] == signature:
        return cached[1]
    result = quality.mace(triples, labels=labels, restarts=3, iterations=50)
    if len(_MACE_CACHE) >= _MACE_CACHE_SIZE:
        _MACE_CACHE.pop(next(iter(_MACE_CACHE)))
    _MACE_CACHE[(study_id, key)] = (signature, result)
    return result


@dataclass
class _Competences:
    by_rater: dict[int, float | None]
    by_criterion: dict[int, dict[str, float]]
    criteria: list[str]  # the criteria MACE was run on, in display order


def _competences(study: Study, criteria: dict[int, Criterion], rows: list[Row],
                 answers: list[quality.Answer[int]]) -> _Competences:
    """MACE per categorical criterion; a rater's competence is the mean over the criteria they
    answered, weighted by their answers to each."""
    mace_criteria = [c for c in criteria.values() if compared_as_labels(c.rule.spec)]
    weighted: dict[int, list[tuple[float, int]]] = defaultdict(list)
    by_criterion: dict[int, dict[str, float]] = defaultdict(dict)
    used = []
    for criterion in sorted(mace_criteria, key=lambda c: (c.order, c.pk)):
        triples = [(a.unit, a.rater, a.value) for a in answers if a.criterion == criterion.key]
        raters = {rater for _, rater, _ in triples}
        if len(raters) < 2 or len({unit for unit, _, _ in triples}) == len(triples):
            continue  # no unit judged twice: nothing to learn competence from
        used.append(criterion.key)
        ids = [pk for pk, _r, c, *_rest in rows if c == criterion.pk]
        signature = (len(ids), max(ids, default=0),
                     max((at for _pk, _r, c, *_x, at in rows if c == criterion.pk),
                         default=None))
        result = _mace_cached(study.pk, criterion.key, signature, triples,
                              criterion.rule.choices() or [])
        answered = Counter(rater for _, rater, _ in triples)
        for rater, theta in result.competence.items():
            weighted[rater].append((theta, answered[rater]))
            by_criterion[rater][criterion.key] = theta
    by_rater: dict[int, float | None] = {}
    for rater, values in weighted.items():
        total = sum(n for _, n in values)
        by_rater[rater] = sum(t * n for t, n in values) / total if total else None
    return _Competences(by_rater, dict(by_criterion), used)


def rater_competences(study: Study) -> dict[int, float]:
    """rater id -> MACE competence (0..1) of the study's human raters on its categorical
    criteria, as the monitor shows it; raters with no shared categorical judgment are absent."""
    criteria, rows = _target_judgments(study)
    found = _competences(study, criteria, rows, _answers(criteria, rows))
    return {rater: theta for rater, theta in found.by_rater.items() if theta is not None}


def rater_signals(study: Study) -> StudySignals:
    """Straight-lining, leave-one-out agreement, MACE competence and agreement over time of
    every human rater of `study` from their answers to target items: two queries whatever the
    study's size."""
    criteria, rows = _target_judgments(study)
    answers = _answers(criteria, rows)
    votes: list[drift.Vote[int]] = []
    sequences: dict[tuple[int, int], list[str]] = defaultdict(list)
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    kinds = _kinds(criteria)
    for pk, rater, criterion_id, output, output_b, value, _number, at in rows:
        kind = kinds.get(criterion_id)
        if kind is None:
            continue
        unit, value = judged_unit(output, output_b, kind, value)
        if compared_as_labels(kind):
            votes.append(drift.Vote(rater, (unit, criterion_id), value, (at, pk)))
        sequences[(rater, criterion_id)].append(value)
        counts[criterion_id][value] += 1
    signals: dict[int, RaterSignal] = defaultdict(RaterSignal)
    for (rater, criterion_id), values in sequences.items():
        criterion = criteria[criterion_id]
        points = len(criterion.rule.choices() or [])
        mine = Counter(values)
        top = mine.most_common(1)[0][0]
        others_total = sum(counts[criterion_id].values()) - len(values)
        others_share = ((counts[criterion_id][top] - mine[top]) / others_total
                        if others_total else None)
        found = quality.straightlining(values, points=points, others_share=others_share)
        if found.flagged:
            signal = signals[rater]
            signal.straightlining = True
            signal.detail = "; ".join(filter(None, [signal.detail, (
                f"{criterion.key}: {found.share:.0%} {found.value!r} "
                f"(longest run {found.longest_run} of {found.answers})")]))
    scales = {c.key: scale for c in criteria.values()
              if (scale := agreement_scale(c)) is not None}
    for rater, agreement in quality.leave_one_out_agreement(answers, scales).items():
        signals[rater].agreement, signals[rater].agreement_units = (agreement.score,
                                                                    agreement.units)
    competences = _competences(study, criteria, rows, answers)
    for rater, theta in competences.by_rater.items():
        signals[rater].competence = theta
    windows = drift.agreement_windows(votes, window=study.agreement_window,
                                      threshold=study.agreement_alert_threshold)
    return StudySignals(raters=dict(signals), competence_criteria=competences.criteria,
                        competence_by_criterion=competences.by_criterion,
                        agreement_windows=windows)
