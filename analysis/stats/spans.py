"""Error spans (MQM, ESA): MQM scores per output and system, a tidy table of spans, and how
far raters agree on where the errors are (no Django here).

Input: human judgments of one span criterion (`value` the canonical JSON of
`evalstudy.criteria`; `output`, `item`, `system`, `rater`), and for agreement the length of
each output's text and reference (`output_chars`, `reference_chars`).

MQM (Lommel et al. 2014; Freitag et al. 2021): an output's penalty is the sum of its spans'
severity weights, averaged over the raters who judged it; a system's score is the mean over
its outputs (lower is better; 0 is error-free). The weights are the criterion's (MQM's minor
1, major 5, critical 25 by default), applied at analysis time, so that a changed weighting
re-scores what was collected.

Agreement on where errors are: Krippendorff's unitizing alpha (u-alpha) compares continuous
segmentations; the documented alternative used here treats every character of a text as a
unit that each rater either marked (with a category) or left unmarked, and computes
Krippendorff's alpha over those units (nominal: "marked or not", and "which category or
none"), with a bootstrap CI over items, plus the character-level F1 of each pair of raters
(micro-averaged: 2 x shared marked characters / both raters' marked characters). Characters
that no rater marked in an output every rater left error-free agree trivially and are
counted, as in alpha over any pre-segmented units; the result says how many characters and
outputs it used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from . import agreement

UNMARKED = "(none)"
AGREEMENT_N_BOOT = agreement.N_BOOT
AGREEMENT_SEED = 20240917


def _spans(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, str) or not value:
        return []
    return list(json.loads(value).get("spans", []))


def span_rows(judgments: pd.DataFrame, weights: Mapping[str, float]) -> pd.DataFrame:
    """One row per span: the judgment's keys, then side, start, end, category, severity and
    its weight (0 for a severity the criterion no longer has). Judgments with no span have no
    row (`mqm_summary` counts them as error-free)."""
    keys = [c for c in ("judgment", "rater", "rater_kind", "item", "system", "output")
            if c in judgments.columns]
    rows = []
    for record in judgments[[*keys, "value"]].itertuples(index=False, name=None):
        base = dict(zip(keys, record[:-1], strict=True))
        for span in _spans(record[-1]):
            rows.append({**base, "side": span.get("side", "output"), "start": span["start"],
                         "end": span["end"], "category": span["category"],
                         "severity": span["severity"],
                         "weight": float(weights.get(span["severity"], 0.0))})
    columns = [*keys, "side", "start", "end", "category", "severity", "weight"]
    return pd.DataFrame(rows, columns=columns)


def _mean_ci(values: np.ndarray, conf_level: float = 0.95) -> tuple[float, float | None,
                                                                      float | None]:
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2:
        return mean, None, None
    half = float(sps.t.ppf(0.5 + conf_level / 2, len(values) - 1)
                 * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def mqm_summary(humans: pd.DataFrame, weights: Mapping[str, float]) -> dict[str, Any]:
    """MQM per system: penalty per output (mean over its raters) averaged over outputs, with a
    t CI over outputs; the share of judgments with no error; errors per judgment by severity
    and by category."""
    penalties = humans.assign(penalty=[
        sum(float(weights.get(s["severity"], 0.0)) for s in _spans(v)) for v in humans["value"]
    ], n_spans=[len(_spans(v)) for v in humans["value"]])
    spans = span_rows(humans, weights)
    systems = []
    for system, part in penalties.groupby("system", sort=True):
        per_output = part.groupby("output")["penalty"].mean().to_numpy(dtype=float)
        mean, low, high = _mean_ci(per_output)
        mine = spans[spans["system"] == system]
        n = len(part)
        systems.append({
            "system": system, "n_outputs": int(len(per_output)), "n_judgments": int(n),
            "mqm": mean, "ci_low": low, "ci_high": high,
            "error_free": float((part["n_spans"] == 0).mean()),
            "errors_per_judgment": float(part["n_spans"].mean()),
            "by_severity": {str(k): round(v / n, 4) for k, v in
                            mine.groupby("severity").size().items()},
            "by_category": {str(k): round(v / n, 4) for k, v in
                            mine.groupby("category").size().items()},
        })
    return {"weights": dict(weights), "systems": systems,
            "scale": "MQM penalty per output: the sum of its errors' severity weights "
                     "(lower is better; 0 is error-free), mean over raters, then over outputs",
            "n_spans": int(len(spans)),
            "categories": sorted({str(c) for c in spans["category"]}),
            "severities": list(weights)}


def _marks(value: Any, side: str, length: int, by_category: bool) -> np.ndarray:
    marks = np.full(length, UNMARKED, dtype=object)
    for span in _spans(value):
        if span.get("side", "output") == side:
            marks[int(span["start"]):min(int(span["end"]), length)] = (
                span["category"] if by_category else "marked")
    return marks


def span_agreement(humans: pd.DataFrame, *, sides: tuple[str, ...] = ("output",),
                   n_boot: int = AGREEMENT_N_BOOT, seed: int = AGREEMENT_SEED) -> dict[str, Any]:
    """Where raters agree errors are, on outputs judged by two or more human raters (see the
    module docstring): character-level alpha (marked or not; category or none) with bootstrap
    CIs over items, and character-level F1 between raters."""
    lengths = {"output": "output_chars", "reference": "reference_chars"}
    missing = [lengths[s] for s in sides if lengths[s] not in humans.columns]
    if missing:
        return {"note": f"text lengths unknown ({', '.join(missing)}): agreement not computed"}
    shared = humans.groupby("output")["rater"].transform("nunique") >= 2
    rated = humans[shared]
    if rated.empty:
        return {"note": "no output was marked by two or more humans"}
    frames: dict[str, list[pd.DataFrame]] = {"marked": [], "category": []}
    f1_shared, f1_total, pairs, empty_pairs = 0, 0, 0, 0
    n_chars = 0
    for (output, item), part in rated.groupby(["output", "item"], sort=False):
        for side in sides:
            length = part[lengths[side]].iloc[0]
            if not isinstance(length, int | float | np.integer) or not length > 0:
                continue
            length = int(length)
            n_chars += length
            marks = {rater: (_marks(v, side, length, False), _marks(v, side, length, True))
                     for rater, v in zip(part["rater"], part["value"], strict=True)}
            unit = [f"{output}:{side}:{i}" for i in range(length)]
            for rater, (marked, category) in marks.items():
                frames["marked"].append(pd.DataFrame({"unit": unit, "rater": rater,
                                                      "value": marked, "item": item}))
                frames["category"].append(pd.DataFrame({"unit": unit, "rater": rater,
                                                        "value": category, "item": item}))
            for a, b in combinations(marks, 2):
                left, right = marks[a][0] != UNMARKED, marks[b][0] != UNMARKED
                pairs += 1
                if not left.any() and not right.any():
                    empty_pairs += 1
                f1_shared += 2 * int((left & right).sum())
                f1_total += int(left.sum() + right.sum())
    if not frames["marked"]:
        return {"note": "no text to compare"}
    out: dict[str, Any] = {
        "method": "Krippendorff's alpha over characters (each character a unit: marked or "
                  "not; category or none), a documented alternative to unitizing alpha; "
                  "character-level F1 micro-averaged over rater pairs",
        "n_outputs": int(rated["output"].nunique()), "n_raters": int(rated["rater"].nunique()),
        "n_characters": n_chars, "n_pairs": pairs, "pairs_both_error_free": empty_pairs,
        "char_f1": (f1_shared / f1_total) if f1_total else None,
        "bootstrap": {"n_boot": n_boot, "seed": seed, "cluster": "item"},
    }
    for name, parts in frames.items():
        table = pd.concat(parts, ignore_index=True)
        out[f"alpha_{name}"] = agreement.krippendorff_alpha(
            table, "nominal", n_boot=n_boot, seed=seed, cluster="item")
    if f1_total == 0:
        out["warnings"] = ["no rater marked any error on the shared outputs: F1 is undefined "
                           "and alpha is 0/0"]
    return out
