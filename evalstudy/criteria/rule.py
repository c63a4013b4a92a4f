"""A criterion's rule: what its kind makes of its settings and its answers, as plain data.

`CriterionRule` holds the parts of a criterion that decide which values are valid, and hands
each question to the criterion's kind (`evalstudy.criteria.kinds`). Values are stored as text,
in one canonical spelling per kind, so that an answer from the browser, an import file or a
proxy judge compares equal when it means the same thing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .kinds import KINDS, REFUSED_WHEN_UNUSED, SETTINGS, AnswerKind, kind_of, kinds_using


@dataclass(frozen=True)
class ShownText:
    """What a rater saw of one slot: the output marked, and the reference when shown."""

    output: str
    reference: str = ""
    n_outputs: int = 1  # outputs shown side by side (ranking and best-worst slots: 2 to 6)


@dataclass(frozen=True)
class CriterionRule:
    """The parts of a criterion that decide which values are valid."""

    kind: str
    scale_points: int | None = None
    options: Sequence[str] = field(default_factory=tuple)
    allow_tie: bool = False
    allow_both: bool = False  # pairwise: "both good" and "both bad" as answers of their own
    scale_min: int | None = None
    scale_max: int | None = None
    severity_weights: Mapping[str, float] | None = None
    span_reference: bool = False
    labels: Sequence[str] | Mapping[str, str] = field(default_factory=tuple)

    @property
    def spec(self) -> AnswerKind:
        """The criterion's kind."""
        return kind_of(self.kind)

    def choices(self) -> list[str] | None:
        """The canonical values, in display order; None where answers are not picked."""
        return self.spec.choices(self)

    def normalise(self, raw: object, shown: ShownText | None = None) -> str:
        """Return the canonical spelling of `raw`, or raise ValueError saying why it is invalid.

        `shown`: the texts the rater saw, which a span answer is checked against (a span answer
        without them is refused: its offsets mean nothing without the text)."""
        if raw is None:
            raise ValueError("a value is required")
        return self.spec.normalise(self, raw, shown)

    def normalise_expected(self, raw: object) -> str:
        """An expected answer (practice items, attention checks)."""
        return self.spec.normalise_expected(self, raw)

    def numeric(self, value: str) -> float | None:
        """The number a stored answer stands for (ordered points, a slider's position, a span
        answer's MQM penalty); None for kinds without one."""
        return self.spec.numeric(self, value)


def rule_of(values: Mapping[str, Any]) -> CriterionRule:
    """The rule of a criterion given as a mapping of its fields (the analysis's criterion
    dicts, study files, API bodies); a missing field reads as unset."""
    options = values.get("options") or ()
    return CriterionRule(
        kind=str(values.get("kind") or ""), scale_points=values.get("scale_points"),
        options=tuple(options) if isinstance(options, list | tuple) else (options,),
        allow_tie=bool(values.get("allow_tie")), allow_both=bool(values.get("allow_both")),
        scale_min=values.get("scale_min"), scale_max=values.get("scale_max"),
        severity_weights=values.get("severity_weights") or None,
        span_reference=bool(values.get("span_reference")), labels=values.get("labels") or ())


_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")


def expected_met(given: str | None, expected: object) -> bool:
    """Whether an answer meets an expected one: equal, or for a range "lo..hi" (a slider's
    expected answer) a whole number inside it."""
    expected = str(expected)
    if given == expected:
        return True
    found = _RANGE.fullmatch(expected)
    if found is None or given is None or not re.fullmatch(r"-?\d+", given):
        return False
    return int(found.group(1)) <= int(given) <= int(found.group(2))


def check_rule(
    kind: str,
    *,
    scale_points: int | None,
    labels: Sequence[str] | Mapping[str, str] | None,
    options: Sequence[str],
    scale_min: int | None = None,
    scale_max: int | None = None,
    severity_weights: Mapping[str, object] | None = None,
    span_reference: bool = False,
    allow_both: bool = False,
) -> list[str]:
    """Problems with a criterion's configuration, as readable sentences (empty when valid):
    the settings its kind does not use must be unset, and the kind checks those it uses."""
    if kind not in KINDS:
        return [f"kind {kind!r} is not one of {', '.join(KINDS)}"]
    spec = kind_of(kind)
    given = {"allow_both": allow_both, "scale_points": scale_points, "scale_min": scale_min,
             "scale_max": scale_max, "options": options, "severity_weights": severity_weights,
             "span_reference": span_reference}
    problems: list[str] = []
    for name in REFUSED_WHEN_UNUSED:
        setting = SETTINGS[name]
        unused = name not in spec.settings
        if name == "scale_min":  # one sentence for the pair
            set_ = not (setting.unset(scale_min) and setting.unset(scale_max))
        else:
            set_ = not setting.unset(given[name])
        if unused and set_:
            problems.append(setting.refused.format(kinds=_listed(kinds_using(name)),
                                                   kind=kind))
    rule = CriterionRule(
        kind=kind, scale_points=scale_points, options=tuple(options), allow_both=allow_both,
        scale_min=scale_min, scale_max=scale_max,
        severity_weights=severity_weights,  # type: ignore[arg-type]  # checked by the kind
        span_reference=span_reference, labels=labels or ())
    return problems + spec.problems(rule)


def _listed(names: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "no"


#: The fields of a criterion that `criterion_problems` reads, as the model and the API name them.
RULE_FIELDS = ("kind", "scale_points", "labels", "options", "scale_min", "scale_max",
               "severity_weights", "span_reference", "allow_both")


def criterion_problems(values: Mapping[str, Any]) -> list[str]:
    """Problems with a criterion given as a mapping of its fields (`RULE_FIELDS`; a missing one
    reads as unset): the one rule that the admin and the API apply when a criterion is saved
    and `study_validate` applies when the study is opened, so that the two cannot disagree."""
    kind = str(values.get("kind") or "")
    if not kind:
        return ["a criterion needs a kind"]
    options = values.get("options") or []
    return check_rule(
        kind, scale_points=values.get("scale_points"), labels=values.get("labels") or [],
        options=list(options) if isinstance(options, list | tuple) else [options],
        scale_min=values.get("scale_min"), scale_max=values.get("scale_max"),
        severity_weights=values.get("severity_weights") or None,
        span_reference=bool(values.get("span_reference")),
        allow_both=bool(values.get("allow_both")))


def binary_label(kind: str, value: str) -> float | None:
    """1/0 for "meaning preserved"/"yes", None where the kind has no binary reading (or the
    kind is not known)."""
    return kind_of(kind).binary(value) if kind in KINDS else None


def attention_repeats(*, checks_per_seat: int, n_attention: int) -> str | None:
    """A warning when a seat would show the same attention check more than once: the design
    cycles through the study's checks (evalstudy.design.ordering), so with fewer checks than a
    seat's attention slots some come back. None when every slot gets a different check."""
    if n_attention <= 0 or checks_per_seat <= n_attention:
        return None
    return (f"A seat has up to {checks_per_seat} attention-check slots but the study has "
            f"{n_attention} attention check(s), so a rater sees the same check more than once: "
            f"add at least {checks_per_seat - n_attention} more, or raise "
            "attention_check_every.")


def strict_majority(values: Iterable[str]) -> str | None:
    """The answer given more often than any other (None for an empty list or a tie on top)."""
    ranked = Counter(values).most_common()
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]
