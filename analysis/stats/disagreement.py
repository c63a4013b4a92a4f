"""Which units go to an expert: the rules of the adjudication queue, on plain data.

A unit is what one answer is about: an output, or for pairwise criteria a pair of outputs
(oriented by `evalstudy.criteria.pair_oriented`, so that "A" always names the same output
whichever way round a rater was shown the pair). For one criterion, a unit is queued when

- the raters disagree ("raters"):
  - nominal kinds (binary, categorical, pairwise): the share of the human judgments that give
    the most common answer is below `Thresholds.majority` (default 0.6: with two raters any
    split, with three a 2-1 split (0.67) is kept out, with five a 3-2 split (0.6) too);
  - ordinal kinds (likert, severity, slider): the range of the human answers, as a share of
    the scale's span, is above `Thresholds.spread` (default 0.5: on a 5-point scale answers 3
    or more points apart, on the 3-point severity scale "0" beside "2"), or, when
    `Thresholds.sd` is set, their sample standard deviation over the span is above it;
  either only with at least `Thresholds.min_judgments` human judgments (default 2);
- a proxy and the humans disagree ("proxy"): a proxy's decision differs from the humans'
  majority, read as each kind reads a decision: binary and severity through
  `evalstudy.criteria.binary_label` (LATTE's "meaning preserved"), pairwise and categorical
  as the answer itself. Only a strict majority counts (an even split has no majority to
  disagree with; the raters rule catches it). Likert and slider answers have no decision to
  compare, so proxies never queue them.

Everything here is deterministic and knows nothing of the database.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from evalstudy.criteria import KINDS, AnswerKind, kind_of, strict_majority


def _kinds(test: Callable[[AnswerKind], bool]) -> tuple[str, ...]:
    return tuple(name for name in KINDS if test(kind_of(name)))


#: Kinds whose answers are categories (their raters disagree when no answer has a majority)
#: and kinds whose answers are points on a scale (when they lie far apart), in KINDS order.
NOMINAL = _kinds(lambda kind: kind.level == "nominal")
ORDINAL = _kinds(lambda kind: kind.level in ("ordinal", "interval"))
ADJUDICABLE = NOMINAL + ORDINAL
RATERS = "raters"
PROXY = "proxy"
REASONS = (RATERS, PROXY)
REASON_LABELS = {RATERS: "the raters disagree", PROXY: "a proxy disagrees with the raters"}

Unit = tuple[int, int | None]


@dataclass(frozen=True)
class Thresholds:
    majority: float = 0.6
    spread: float = 0.5
    sd: float | None = None
    min_judgments: int = 2

    def __post_init__(self) -> None:
        if not 0.0 < self.majority <= 1.0:
            raise ValueError("majority must be a share above 0 and at most 1")
        if not 0.0 <= self.spread <= 1.0:
            raise ValueError("spread must be a share of the scale from 0 to 1")
        if self.sd is not None and not 0.0 <= self.sd <= 1.0:
            raise ValueError("sd must be a share of the scale from 0 to 1")
        if self.min_judgments < 2:
            raise ValueError("min_judgments must be at least 2 (one answer cannot disagree)")


@dataclass(frozen=True)
class Answer:
    unit: Unit
    rater: Hashable
    value: str
    is_human: bool


@dataclass
class Flag:
    """Why one unit is queued: `reasons` (RATERS, PROXY) with a sentence each in `why`."""

    unit: Unit
    reasons: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    n_human: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # human answers, most common first
    majority: str | None = None  # the humans' strict majority (None: none)


def decision(kind: str, value: str) -> str | None:
    """What an answer decides, for comparing a proxy with the humans: the binary reading of
    binary and severity answers ("1.0"/"0.0"), the answer itself for pairwise and categorical
    ones, None where the kind has no decision (likert, slider)."""
    spec = kind_of(kind) if kind in KINDS else None
    if spec is None:
        return None
    if spec.binary_reading:
        label = spec.binary(value)
        return None if label is None else str(label)
    if spec.level == "nominal":
        return value
    return None


def unit_flags(answers: Iterable[Answer], *, kind: str, scale: tuple[float, float] | None = None,
               thresholds: Thresholds | None = None) -> dict[Unit, Flag]:
    """The queued units of one criterion of kind `kind`, by unit, from its answers (humans'
    and proxies'). `scale`: (lowest, highest) value of an ordinal kind (its span normalises
    the spread). Kinds outside ADJUDICABLE queue nothing."""
    thresholds = thresholds or Thresholds()
    if kind not in ADJUDICABLE:
        return {}
    by_unit: dict[Unit, list[Answer]] = {}
    for answer in answers:
        by_unit.setdefault(answer.unit, []).append(answer)
    flags: dict[Unit, Flag] = {}
    for unit, given in by_unit.items():
        humans = [a.value for a in given if a.is_human and a.value != ""]
        flag = Flag(unit=unit, n_human=len(humans),
                    counts=dict(Counter(humans).most_common()),
                    majority=strict_majority(humans))
        if len(humans) >= thresholds.min_judgments:
            sentence = (_nominal_disagreement(humans, thresholds) if kind in NOMINAL
                        else _ordinal_disagreement(humans, scale, thresholds))
            if sentence:
                flag.reasons.append(RATERS)
                flag.why.append(sentence)
        sentence = _proxy_disagreement(kind, given, humans)
        if sentence:
            flag.reasons.append(PROXY)
            flag.why.append(sentence)
        if flag.reasons:
            flags[unit] = flag
    return flags


def _nominal_disagreement(humans: list[str], thresholds: Thresholds) -> str | None:
    top, count = Counter(humans).most_common(1)[0]
    share = count / len(humans)
    if share >= thresholds.majority:
        return None
    return (f"the most common answer ({top!r}) was given by {count} of {len(humans)} raters "
            f"({share:.0%}), below {thresholds.majority:.0%}")


def _ordinal_disagreement(humans: list[str], scale: tuple[float, float] | None,
                          thresholds: Thresholds) -> str | None:
    numbers = []
    for value in humans:
        try:
            numbers.append(float(value))
        except ValueError:
            continue
    if len(numbers) < thresholds.min_judgments:
        return None
    low, high = scale if scale is not None else (min(numbers), max(numbers))
    span = high - low
    if span <= 0:
        return None
    spread = (max(numbers) - min(numbers)) / span
    if spread > thresholds.spread:
        return (f"answers range from {min(numbers):g} to {max(numbers):g}, {spread:.0%} of the "
                f"scale ({low:g} to {high:g}), above {thresholds.spread:.0%}")
    if thresholds.sd is not None:
        sd = statistics.stdev(numbers) / span
        if sd > thresholds.sd:
            return (f"the answers' standard deviation is {sd:.0%} of the scale ({low:g} to "
                    f"{high:g}), above {thresholds.sd:.0%}")
    return None


def _proxy_disagreement(kind: str, given: list[Answer], humans: list[str]) -> str | None:
    human_decisions = [d for d in (decision(kind, v) for v in humans) if d is not None]
    majority = strict_majority(human_decisions)
    if majority is None:
        return None
    against = sorted({str(a.rater) for a in given if not a.is_human and a.value != ""
                      and decision(kind, a.value) not in (None, majority)})
    if not against:
        return None
    shown = _decision_text(kind, majority)
    return (f"{', '.join(against)} decided otherwise than the raters' majority ({shown}, "
            f"{len(human_decisions)} rater{'s' if len(human_decisions) != 1 else ''})")


def _decision_text(kind: str, decision_value: str) -> str:
    spec = kind_of(kind) if kind in KINDS else None
    if spec is not None and spec.binary_reading:
        positive, negative = spec.binary_names()
        return positive if decision_value == "1.0" else negative
    return repr(decision_value)
