"""Descriptive statistics per system: Likert summaries, proportions with Wilson CIs, and
precision/recall/F1 from TP/FP/FN/TN tallies.

All functions take tidy DataFrames (one row per judgment) and return lists of plain
dataclasses, one per group (``by``, default ``system``), in the group's level order (a pandas
Categorical's order, else sorted). ``to_frame`` turns any such list into a DataFrame.

Definitions
-----------
* Likert: ``n`` non-missing ratings, ``mean``, ``median``, ``sd`` (sample SD, ddof=1; None for
  n < 2), ``sem = sd / sqrt(n)``, ``counts`` per rating value.
* Binary: ``proportion = successes / n`` with a Wilson score interval
  (``statsmodels.stats.proportion.proportion_confint(method="wilson")``), e.g. 7/10 ->
  [0.3968, 0.8922].
* Classification tallies (KK's task 1: each judgment labelled TP, FP, FN or TN):
  precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2 P R / (P + R)
  = 2 TP / (2 TP + FP + FN), accuracy = (TP + TN) / (TP + FP + FN + TN) (only when TN was
  tallied). A ratio with a zero denominator is None (undefined), not 0. Precision and recall
  also get Wilson CIs (they are proportions of TP among TP+FP and TP+FN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats.rbridge import factor_levels, level_label

__all__ = [
    "ClassificationSummary",
    "LikertSummary",
    "ProportionSummary",
    "classification_summary",
    "confusion_metrics",
    "likert_summary",
    "proportion_summary",
    "to_frame",
    "wilson_ci",
]


@dataclass
class LikertSummary:
    group: str
    n: int
    mean: float | None
    median: float | None
    sd: float | None
    sem: float | None
    minimum: float | None
    maximum: float | None
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class ProportionSummary:
    group: str
    n: int
    successes: int
    proportion: float | None
    ci_low: float | None
    ci_high: float | None
    conf_level: float = 0.95
    method: str = "wilson"


@dataclass
class ClassificationSummary:
    group: str
    tp: int
    fp: int
    fn: int
    tn: int | None
    n: int
    precision: float | None
    recall: float | None
    f1: float | None
    accuracy: float | None
    precision_ci: tuple[float, float] | None
    recall_ci: tuple[float, float] | None
    conf_level: float = 0.95


def wilson_ci(count: float, nobs: float, conf_level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval for ``count / nobs`` (None when ``nobs`` is 0)."""
    from statsmodels.stats.proportion import proportion_confint

    if nobs <= 0:
        return None
    lo, hi = proportion_confint(count, nobs, alpha=1 - conf_level, method="wilson")
    # Rounding leaves 2.8e-17 where the interval's end is exactly the proportion (0 or 1): an
    # interval that does not contain its own estimate, and a negative error bar in the plot.
    share = count / nobs
    return float(min(max(lo, 0.0), share)), float(max(min(hi, 1.0), share))


def to_frame(rows: Sequence[Any]) -> pd.DataFrame:
    """A DataFrame with one row per summary dataclass."""
    return pd.DataFrame([asdict(r) if is_dataclass(r) and not isinstance(r, type) else dict(r)
                         for r in rows])


def _groups(df: pd.DataFrame, by: str | None) -> list[tuple[str, pd.DataFrame]]:
    if by is None:
        return [("all", df)]
    if by not in df.columns:
        raise ValueError(f"missing column {by!r}")
    keys = df[by].map(lambda v: None if pd.isna(v) else level_label(v))
    order = factor_levels(df[by])
    return [(g, df[keys == g]) for g in order]


def likert_summary(df: pd.DataFrame, value: str = "rating", by: str | None = "system"
                   ) -> list[LikertSummary]:
    """n, mean, median, SD, SEM, min, max and counts of ``value`` per ``by`` group."""
    if value not in df.columns:
        raise ValueError(f"missing column {value!r}")
    out = []
    for g, sub in _groups(df, by):
        x = pd.to_numeric(sub[value], errors="raise").dropna().to_numpy(dtype=float)
        n = len(x)
        sd = float(np.std(x, ddof=1)) if n >= 2 else None
        counts = {level_label(k): int(v) for k, v in
                  sorted(pd.Series(x).value_counts().items(), key=lambda kv: kv[0])}
        out.append(LikertSummary(
            group=g, n=n,
            mean=float(x.mean()) if n else None,
            median=float(np.median(x)) if n else None,
            sd=sd,
            sem=sd / math.sqrt(n) if sd is not None else None,
            minimum=float(x.min()) if n else None,
            maximum=float(x.max()) if n else None,
            counts=counts,
        ))
    return out


def proportion_summary(df: pd.DataFrame, value: str = "y", by: str | None = "system",
                       conf_level: float = 0.95) -> list[ProportionSummary]:
    """Proportion of 1/True in ``value`` per group, with a Wilson CI."""
    if value not in df.columns:
        raise ValueError(f"missing column {value!r}")
    out = []
    for g, sub in _groups(df, by):
        y = sub[value].dropna()
        y = y.astype(float) if pd.api.types.is_bool_dtype(y.dtype) else pd.to_numeric(y)
        if not set(np.unique(y.to_numpy(dtype=float))) <= {0.0, 1.0}:
            raise ValueError(f"{value!r} must be 0/1 or bool")
        n, k = len(y), int(y.sum())
        ci = wilson_ci(k, n, conf_level)
        out.append(ProportionSummary(
            group=g, n=n, successes=k, proportion=k / n if n else None,
            ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
            conf_level=conf_level,
        ))
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def confusion_metrics(tp: int, fp: int, fn: int, tn: int | None = None, *,
                      group: str = "all", conf_level: float = 0.95) -> ClassificationSummary:
    """Precision, recall, F1 (and accuracy when ``tn`` is given) from counts."""
    for name, v in (("tp", tp), ("fp", fp), ("fn", fn), ("tn", tn)):
        if v is not None and v < 0:
            raise ValueError(f"{name} must be >= 0")
    precision = _ratio(tp, tp + fp)
    recall = _ratio(tp, tp + fn)
    f1 = _ratio(2 * tp, 2 * tp + fp + fn)
    n = tp + fp + fn + (tn or 0)
    accuracy = _ratio(tp + tn, n) if tn is not None else None
    return ClassificationSummary(
        group=group, tp=int(tp), fp=int(fp), fn=int(fn), tn=None if tn is None else int(tn),
        n=int(n), precision=precision, recall=recall, f1=f1, accuracy=accuracy,
        precision_ci=wilson_ci(tp, tp + fp, conf_level),
        recall_ci=wilson_ci(tp, tp + fn, conf_level),
        conf_level=conf_level,
    )


def classification_summary(df: pd.DataFrame, label: str = "label", by: str | None = "system",
                           conf_level: float = 0.95) -> list[ClassificationSummary]:
    """Tally TP/FP/FN/TN labels (case-insensitive) per group and compute the metrics.

    TN is reported (and accuracy computed) when the column contains any TN label for some
    group; otherwise ``tn`` and ``accuracy`` are None. Other labels raise ValueError.
    """
    if label not in df.columns:
        raise ValueError(f"missing column {label!r}")
    labels = df[label].dropna().astype(str).str.strip().str.upper()
    bad = sorted(set(labels) - {"TP", "FP", "FN", "TN"})
    if bad:
        raise ValueError(f"unknown labels {bad}; expected TP/FP/FN/TN")
    has_tn = bool((labels == "TN").any())
    out = []
    for g, sub in _groups(df, by):
        lab = sub[label].dropna().astype(str).str.strip().str.upper()
        c = lab.value_counts()
        out.append(confusion_metrics(
            int(c.get("TP", 0)), int(c.get("FP", 0)), int(c.get("FN", 0)),
            int(c.get("TN", 0)) if has_tn else None, group=g, conf_level=conf_level))
    return out
