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
from scipy import stats as sps

from analysis.stats.rbridge import factor_levels, level_label
from evalstudy.criteria import SEVERITY_DEFAULT_LABELS

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


def _t_interval(x: np.ndarray, conf_level: float) -> tuple[float | None, float | None]:
    if len(x) < 2:
        return None, None
    half = float(sps.t.ppf(0.5 + conf_level / 2, len(x) - 1) * x.std(ddof=1)
                 / math.sqrt(len(x)))
    return float(x.mean()) - half, float(x.mean()) + half


def rater_z_scores(df: pd.DataFrame, value: str = "score", rater: str = "rater"
                   ) -> tuple[pd.Series, list[str]]:
    """Each score standardised by its rater's own mean and SD (WMT direct assessment, Graham
    et al. 2017): removes how strict or lenient and how spread out each rater is. Raters with
    one score or no spread have no z-scores (NaN); the notes say how many."""
    x = pd.to_numeric(df[value], errors="raise").astype(float)
    grouped = x.groupby(df[rater])
    mean, sd = grouped.transform("mean"), grouped.transform(lambda s: s.std(ddof=1))
    usable = sd.notna() & (sd > 0)
    z = ((x - mean) / sd).where(usable)
    notes = []
    dropped = df.loc[~usable, rater].nunique()
    if dropped:
        notes.append(f"{dropped} rater(s) with a single score or all scores equal have no "
                     "z-scores and are left out of the z columns")
    return z, notes


def slider_summary(df: pd.DataFrame, value: str = "score", by: str = "system",
                   conf_level: float = 0.95, lower_is_better: bool = False) -> dict[str, Any]:
    """Direct-assessment scores per system as WMT reports them: the raw mean and the mean of
    per-rater z-scores, each averaged first over the raters of an output and then over
    outputs, with t CIs over outputs; n judgments, raters and outputs; SD of the raw scores.
    Systems come best first: highest z mean first, or lowest where fewer is better (a count
    of errors)."""
    z, notes = rater_z_scores(df, value)
    frame = df.assign(_raw=pd.to_numeric(df[value]).astype(float), _z=z)
    rows: list[dict[str, Any]] = []
    for g, sub in _groups(frame, by):
        raw = sub.groupby("output")["_raw"].mean().to_numpy(dtype=float)
        zs = sub.dropna(subset=["_z"]).groupby("output")["_z"].mean().to_numpy(dtype=float)
        raw_ci, z_ci = _t_interval(raw, conf_level), _t_interval(zs, conf_level)
        rows.append({
            "system": g, "n": int(len(sub)), "n_outputs": int(len(raw)),
            "n_raters": int(sub["rater"].nunique()),
            "mean": float(raw.mean()) if len(raw) else None,
            "ci_low": raw_ci[0], "ci_high": raw_ci[1],
            "sd": float(sub["_raw"].std(ddof=1)) if len(sub) > 1 else None,
            "z_mean": float(zs.mean()) if len(zs) else None,
            "z_ci_low": z_ci[0], "z_ci_high": z_ci[1],
        })
    sign = 1.0 if lower_is_better else -1.0
    rows.sort(key=lambda r: -math.inf if r["z_mean"] is None else sign * float(r["z_mean"]))
    return {"systems": rows, "conf_level": conf_level, "warnings": notes,
            "better": "lower" if lower_is_better else "higher",
            "method": "raw and per-rater z-scored means (WMT DA): averaged per output over "
                      "its raters, then over outputs; t intervals over outputs"}


def median_timing(humans: pd.DataFrame) -> float | None:
    """The median seconds per judgment over positive durations only: imported judgments
    have none, and simulated ones are served and submitted at once (a median of 0.0 s would
    read as data). None without any."""
    seconds = humans["seconds"] if "seconds" in humans else pd.Series(dtype=float)
    timed = seconds[seconds > 0]
    return float(timed.median()) if not timed.empty else None


def severity_distribution(rows: pd.DataFrame, labels: Any = None) -> list[dict[str, Any]]:
    """Judgments per system and severity level as stored (LATTE: 0 = fully preserved,
    1 = minor errors, 2 = meaning lost), each with the criterion's label for it (its own three
    labels when it has them). Never renumbered: a report shows the values raters chose."""
    names = (list(labels) if isinstance(labels, list | tuple) and len(labels) == 3
             else list(SEVERITY_DEFAULT_LABELS))
    counts = (rows.assign(severity=pd.to_numeric(rows["value"]).astype(int))
              .groupby(["system", "severity"]).size())
    return [{"system": system, "severity": int(level), "label": names[int(level)],
             "n": int(n)} for (system, level), n in counts.items()]
