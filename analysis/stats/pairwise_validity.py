"""Does a metric (or a proxy rater) pick the output people preferred? Pairwise validity against
the human majority, with the human ceiling in the same units.

Units are pairs of outputs with the people's votes counted per answer (`a`, `b`, `tie`): from
named raters' judgments, from aggregated counts (`annotation.votes`), or both (every person
counts once towards the majority). For each unit:

- the human majority is the answer most people gave; two answers with the most votes (4 "A"
  and 4 "B") make a human tie;
- `agreement` is the share of the votes the majority answer got; strata: unanimous
  (agreement 1), at least 70%, and all units (the HATS paper's three columns);
- a metric prefers the output it scores better (lower WER, higher BERTScore); equal scores
  are a metric tie; a unit where the metric lacks a score for either output is left out of
  that metric's figures (and counted in `n_missing`).

Two counting rules, both reported:

- `ties_wrong` (the HATS paper's rule): a unit counts as right only when the metric picks the
  majority's output; a metric tie and a human tie are wrong. Every unit of the stratum counts.
- `ties_excluded`: units with a human tie are left out; a metric tie counts as half right
  (what a coin flip would get), so a metric cannot gain by abstaining.

The human ceiling in the same units: for each vote of a unit, whether that one person's answer
matches the majority of the OTHER people of the unit (leave one vote out), under the same rule
(their "tie" answer, or a tie among the others, is wrong under `ties_wrong` and half right
under `ties_excluded`), averaged over the unit's votes and then over units like the metric's
figure. A unit with a single vote has no ceiling. It is the agreement a single person reaches
with the crowd: a proxy above it agrees with the majority better than one of its members does.

CIs: 95% percentile bootstrap over units, resampled by `group` (the reference or item, so
units sharing a reference move together), B=2000 with a fixed seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from annotation.preferences import majority as human_majority

STRATA = (("unanimous", 1.0), ("agreement >= 70%", 0.7), ("all", 0.0))
MIN_VOTES_STRATUM = 3  # a pair judged by one or two people is in "all" only
RULES = ("ties_wrong", "ties_excluded")
# The same rules against the majority of the OTHER people of each pair, each vote left out in
# turn: the units of the one-person ceiling, so that a proxy can be compared with it.
LOO_RULES = ("ties_wrong_loo", "ties_excluded_loo")
N_BOOT = 2000
SEED = 20240917
CEILING = "one person (leave one vote out)"


@dataclass
class Cell:
    """One metric, stratum and rule: the share of units where it picks the majority."""

    n: int
    accuracy: float | None
    ci: tuple[float, float] | None
    n_metric_ties: int = 0


@dataclass
class ProxyRow:
    proxy: str
    kind: str  # "metric", "proxy rater", "ceiling"
    higher_is_better: bool | None
    n_units: int
    n_missing: int
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # rule -> stratum -> cell


@dataclass
class PairwiseValidity:
    n_units: int
    n_votes: int
    n_human_ties: int
    strata: dict[str, int]  # units per stratum
    rows: list[ProxyRow]
    method: str
    notes: list[str] = field(default_factory=list)


def _credit(pick: np.ndarray, majority: np.ndarray, rule: str) -> np.ndarray:
    """Per unit: 1 right, 0 wrong, 0.5 (ties_excluded: a metric tie), NaN (left out)."""
    right = ((pick == majority) & (majority != 0)).astype(float)
    if rule == "ties_wrong":
        return right
    return np.where(majority == 0, np.nan, np.where(pick == 0, 0.5, right))


def _loo_credit(a: np.ndarray, b: np.ndarray, tie: np.ndarray, rule: str,
                pick: np.ndarray | None = None) -> np.ndarray:
    """Per unit: the mean over its votes of `pick` (a proxy's answer; None: the left-out
    person's own answer, the ceiling) against the majority of the OTHER votes of the unit,
    under `rule`: ties_wrong (a tie on either side is wrong) or ties_excluded (a tie on either
    side counts half; units whose full majority is a tie left out, as for the metrics). NaN
    for a unit of one vote."""
    n = a + b + tie
    total = np.zeros(len(a), dtype=float)
    for answer, count in ((1, a), (-1, b), (0, tie)):
        others = human_majority(a - (answer == 1), b - (answer == -1), tie - (answer == 0))
        chosen = np.full(len(a), answer) if pick is None else pick
        if rule == "ties_wrong":
            credit = ((chosen == others) & (others != 0)).astype(float)
        else:
            credit = np.where((others == 0) | (chosen == 0), 0.5,
                              (chosen == others).astype(float))
        total += count * credit
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n >= 2, total / np.maximum(n, 1), np.nan)
    if rule == "ties_excluded":
        mean = np.where(human_majority(a, b, tie) == 0, np.nan, mean)
    return mean


def _bootstrap(credit: np.ndarray, groups: np.ndarray, rng_seed: int, n_boot: int
               ) -> tuple[float, float] | None:
    keep = ~np.isnan(credit)
    credit, groups = credit[keep], groups[keep]
    if len(credit) < 2:
        return None
    codes, uniques = pd.factorize(groups)
    sums = np.bincount(codes, weights=credit, minlength=len(uniques))
    sizes = np.bincount(codes, minlength=len(uniques)).astype(float)
    rng = np.random.default_rng(rng_seed)
    draws = rng.integers(0, len(uniques), size=(n_boot, len(uniques)))
    means = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _cells(credit: np.ndarray, agreement: np.ndarray, groups: np.ndarray, picks: np.ndarray
           | None, n_boot: int, n_votes: np.ndarray) -> dict[str, Cell]:
    out = {}
    for index, (stratum, floor) in enumerate(STRATA):
        inside = _in_stratum(agreement, n_votes, floor)
        values = credit[inside]
        known = values[~np.isnan(values)]
        out[stratum] = Cell(
            n=int(len(known)), accuracy=float(known.mean()) if len(known) else None,
            ci=_bootstrap(values, groups[inside], SEED + index, n_boot),
            n_metric_ties=int(((picks[inside] == 0) & ~np.isnan(values)).sum())
            if picks is not None else 0)
    return out


def _in_stratum(agreement: np.ndarray, n_votes: np.ndarray, floor: float) -> np.ndarray:
    return (agreement >= floor - 1e-12) & ((n_votes >= MIN_VOTES_STRATUM) | (floor == 0.0))


def pairwise_validity(units: pd.DataFrame, scores: pd.DataFrame,
                      higher_is_better: Mapping[str, bool],
                      proxy_picks: Mapping[str, pd.Series] | None = None,
                      *, group: str = "item", n_boot: int = N_BOOT) -> PairwiseValidity:
    """Every metric of `scores` (indexed by output id; `higher_is_better[name]` gives its
    direction) and every proxy rater of `proxy_picks` (per unit index: +1 A, -1 B, 0 tie, NaN
    no answer) against the human majority of `units` (output, output_b, a, b, tie, `group`),
    with the human ceiling; see the module docstring for the rules."""
    units = units.reset_index(drop=True)
    a, b, tie = (units[c].to_numpy(dtype=float) for c in ("a", "b", "tie"))
    n_votes = a + b + tie
    units = units[n_votes > 0].reset_index(drop=True)
    a, b, tie = (units[c].to_numpy(dtype=float) for c in ("a", "b", "tie"))
    n_votes = a + b + tie
    majority = human_majority(a, b, tie)
    agreement = np.maximum(np.maximum(a, b), tie) / n_votes
    groups = units[group].astype(str).to_numpy() if group in units else np.arange(len(units))
    rows: list[ProxyRow] = []
    picks: dict[str, tuple[str, bool | None, np.ndarray, np.ndarray]] = {}
    for name, higher in higher_is_better.items():
        if name not in scores.columns:
            continue
        column = scores[name]
        score_a = column.reindex(units["output"]).to_numpy(dtype=float)
        score_b = column.reindex(units["output_b"]).to_numpy(dtype=float)
        known = ~np.isnan(score_a) & ~np.isnan(score_b)
        pick = np.where(known, np.sign(score_a - score_b) * (1 if higher else -1), 0)
        picks[name] = ("metric", higher, pick, known)
    for name, answers in (proxy_picks or {}).items():
        values = answers.reindex(units.index).to_numpy(dtype=float)
        known = ~np.isnan(values)
        picks[name] = ("proxy rater", None, np.where(known, values, 0), known)
    for name, (kind, direction, pick, known) in picks.items():
        row = ProxyRow(name, kind, direction, int(known.sum()), int((~known).sum()))
        for rule in RULES:
            credit = np.where(known, _credit(pick, majority, rule), np.nan)
            row.cells[rule] = _cells(credit, agreement, groups, pick, n_boot, n_votes)
        for rule in LOO_RULES:
            credit = np.where(known, _loo_credit(a, b, tie, rule.removesuffix("_loo"), pick),
                              np.nan)
            row.cells[rule] = _cells(credit, agreement, groups, pick, n_boot, n_votes)
        rows.append(row)
    ceiling = ProxyRow(CEILING, "ceiling", None, int((n_votes >= 2).sum()),
                       int((n_votes < 2).sum()))
    for rule in LOO_RULES:
        ceiling.cells[rule] = _cells(_loo_credit(a, b, tie, rule.removesuffix("_loo")),
                                     agreement, groups, None, n_boot, n_votes)
    rows.append(ceiling)
    strata = {stratum: int(_in_stratum(agreement, n_votes, floor).sum())
              for stratum, floor in STRATA}
    return PairwiseValidity(
        n_units=int(len(units)), n_votes=int(n_votes.sum()),
        n_human_ties=int((majority == 0).sum()), strata=strata, rows=rows,
        method=("Share of pairs where the metric prefers the output most people preferred; "
                "ties_wrong: a metric or human tie counts as wrong (the HATS paper's rule); "
                "ties_excluded: pairs with a human tie left out, a metric tie counts half. "
                "Against the others (the _loo rules): each vote left out in turn, the metric "
                "against the majority of the other votes, averaged over the pair's votes: the "
                "units of the ceiling, one person's answer against the majority of the others. "
                f"Strata need at least {MIN_VOTES_STRATUM} votes. 95% CI: percentile bootstrap "
                f"over {group}s, B={n_boot}, seed {SEED}."))


def picks_of_answers(units: pd.DataFrame, answers: pd.DataFrame) -> pd.Series:
    """A proxy rater's pairwise answers (output, output_b, value) as picks per unit index of
    `units` (+1 A, -1 B, 0 tie), turned around where it saw the pair the other way. A pair it
    answered more than once (both orders) gets the sign of its answers' mean: answers that
    contradict each other (A first, then A again with the pair swapped) make a tie, so a judge
    that always picks the first position earns nothing from it."""
    where = {(o, ob): i for i, (o, ob) in enumerate(zip(units["output"], units["output_b"],
                                                          strict=True))}
    total = np.zeros(len(units))
    seen = np.zeros(len(units))
    for output, output_b, value in answers[["output", "output_b", "value"]].itertuples(
            index=False):
        choice = str(value).strip().upper()
        sign = 1 if choice == "A" else -1 if choice == "B" else 0
        if (output, output_b) in where:
            index, turned = where[(output, output_b)], 1
        elif (output_b, output) in where:
            index, turned = where[(output_b, output)], -1
        else:
            continue
        total[index] += turned * sign
        seen[index] += 1
    picks = np.where(seen > 0, np.sign(total), np.nan)
    return pd.Series(picks, index=units.index, dtype=float)


def as_table(result: PairwiseValidity, rule: str) -> list[dict[str, Any]]:
    """Report rows for one rule: proxy, then accuracy, CI and n per stratum."""
    rows = []
    for row in result.rows:
        if rule not in row.cells:
            continue
        entry: dict[str, Any] = {"proxy": row.proxy, "kind": row.kind,
                                 "higher_is_better": row.higher_is_better}
        for stratum, _ in STRATA:
            cell = row.cells[rule][stratum]
            entry[stratum] = {"accuracy": cell.accuracy, "ci": cell.ci, "n": cell.n,
                              "metric_ties": cell.n_metric_ties}
        rows.append(entry)
    return rows
