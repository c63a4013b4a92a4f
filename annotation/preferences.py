"""Pairwise preferences as units: each pair of outputs with the number of people who chose A,
B or a tie, from named raters' answers and from aggregated counts, and the majority of a
unit. A Django-free core (plain pandas): the analysis (`analysis.stats.pairwise_validity`)
and the learned pairwise proxy (`proxies.learned`) read human preferences the same way.

"Both good" and "both bad" (a criterion's absolute answers, `evalstudy.criteria`) prefer
neither output: here they count in the `tie` column, as no preference. Only the joint model
(`analysis.stats.pairwise_joint`) reads the level they add.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from evalstudy.criteria import NO_PREFERENCE

# Upper-cased answers that prefer neither output (a tie, both good, both bad).
_NO_PREFERENCE = {answer.upper() for answer in NO_PREFERENCE}

UNIT_COLUMNS = ["output", "output_b", "item", "a", "b", "tie"]


def units_from_choices(frame: pd.DataFrame) -> pd.DataFrame:
    """Named raters' pairwise answers (columns output, output_b, value in A/B/tie, item) as
    units with their votes counted, each pair oriented as first seen (an answer given with
    the pair shown the other way round is turned around)."""
    counts: dict[tuple[Any, Any], dict[str, Any]] = {}
    for output, output_b, value, item in frame[["output", "output_b", "value", "item"]
                                               ].itertuples(index=False):
        key = (output, output_b) if (output_b, output) not in counts else (output_b, output)
        unit = counts.setdefault(key, {"output": key[0], "output_b": key[1], "item": item,
                                       "a": 0, "b": 0, "tie": 0})
        choice = str(value).strip().upper()
        flipped = key != (output, output_b)
        if choice in _NO_PREFERENCE:
            unit["tie"] += 1
        elif (choice == "A") != flipped:
            unit["a"] += 1
        else:
            unit["b"] += 1
    return pd.DataFrame(list(counts.values()),
                        columns=["output", "output_b", "item", "a", "b", "tie"])


def units_from_votes(votes: pd.DataFrame) -> pd.DataFrame:
    """Pairwise counts as units (output, output_b, item, a, b, tie)."""
    if votes.empty:
        return pd.DataFrame(columns=["output", "output_b", "item", "a", "b", "tie"])
    answer = votes["value"].astype(str).str.strip().str.upper().map(
        {"A": "a", "B": "b", **dict.fromkeys(_NO_PREFERENCE, "tie")})
    wide = (votes.assign(answer=answer).pivot_table(
        index=["output", "output_b", "item"], columns="answer", values="count",
        aggfunc="sum", fill_value=0).reset_index())
    for column in ("a", "b", "tie"):
        if column not in wide:
            wide[column] = 0
    return wide[["output", "output_b", "item", "a", "b", "tie"]]


def merge_units(*frames: pd.DataFrame) -> pd.DataFrame:
    """Units from several sources (named raters, counts) with the same pair summed, oriented
    as the first source gave it."""
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    for frame in frames:
        for row in frame.to_dict("records"):
            key = (row["output"], row["output_b"])
            back = (row["output_b"], row["output"])
            if back in merged and key not in merged:
                unit = merged[back]
                unit["a"] += row["b"]
                unit["b"] += row["a"]
                unit["tie"] += row["tie"]
                continue
            unit = merged.setdefault(key, {**row, "a": 0, "b": 0, "tie": 0})
            for answer in ("a", "b", "tie"):
                unit[answer] += row[answer]
    return pd.DataFrame(list(merged.values()))


def majority(a: np.ndarray, b: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """+1 (A), -1 (B) or 0 (a human tie: "tie" most chosen, or A and B level on top)."""
    top = np.maximum(np.maximum(a, b), tie)
    only_a = (a == top) & (b < top) & (tie < top)
    only_b = (b == top) & (a < top) & (tie < top)
    return np.where(only_a, 1, np.where(only_b, -1, 0))
