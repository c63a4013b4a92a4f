"""How well a judge agrees with the human majority on a set of units (no Django here): the
figures the report gives per judge prompt version (`analysis.extras.judge_versions`).

A unit's human majority is strict (a tie on top is no majority, and the unit is left out), as
the validity section's majority label; the judge's answer and the humans' are compared on the
binary reading where the criterion has one (meaning preserved or not) and on the canonical
value otherwise. Accuracy is the share of units where the judge takes the majority's answer,
with a Wilson interval; Cohen's kappa (judge vs majority) with its analytic interval
(`analysis.stats.agreement.cohen_kappa`, Fleiss, Cohen & Everitt's SE)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from evalstudy.criteria import BINARY_KINDS, binary_label

from .agreement import cohen_kappa
from .descriptives import wilson_ci

UnitT = TypeVar("UnitT", bound=Hashable)  # whatever the caller names a unit by


def reading(kind: str, value: Any) -> str | None:
    """What judge and humans are compared on: "yes"/"no" for the kinds with a binary reading
    (None where a value has none), else the canonical value."""
    if value is None:
        return None
    if kind in BINARY_KINDS:
        label = binary_label(kind, str(value))
        return None if label is None else ("yes" if label == 1.0 else "no")
    return str(value)


def strict_majority(values: Sequence[str]) -> str | None:
    counts = Counter(values).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def agreement_with_majority(kind: str, judge: Mapping[UnitT, Any],
                            humans: Mapping[UnitT, Sequence[Any]]) -> dict[str, Any]:
    """Judge vs human majority over the units both answered (`judge`: unit -> the judge's
    value; `humans`: unit -> the human raters' values). Returns n, matches, accuracy
    {value, ci_low, ci_high}, kappa {value, ci_low, ci_high}, and the units left out for a
    tie among the humans or an unreadable answer."""
    judged, majority = [], []
    tied = unreadable = 0
    for unit, values in humans.items():
        if unit not in judge:
            continue
        top = strict_majority([r for r in (reading(kind, v) for v in values) if r is not None])
        answer = reading(kind, judge[unit])
        if top is None:
            tied += 1
            continue
        if answer is None:
            unreadable += 1
            continue
        judged.append(answer)
        majority.append(top)
    n = len(judged)
    matches = sum(a == b for a, b in zip(judged, majority, strict=True))
    out: dict[str, Any] = {"n": n, "matches": matches, "left_out": {
        "human_tie": tied, "unreadable_answer": unreadable}}
    if not n:
        out["accuracy"] = out["kappa"] = None
        return out
    interval = wilson_ci(matches, n)
    out["accuracy"] = {"value": matches / n, "ci_low": interval[0] if interval else None,
                       "ci_high": interval[1] if interval else None}
    kappa = cohen_kappa(judged, majority)
    value = float(kappa.value)
    out["kappa"] = None if value != value else {  # NaN: a side never varies
        "value": value, "ci_low": kappa.ci_low, "ci_high": kappa.ci_high}
    return out
