"""How well a proxy's scores separate human labels (no Django here): AUC-ROC with a DeLong or
stratified-bootstrap CI, the threshold reaching a target precision, and LATTEScore.

The proxies use these to train and choose (`proxies.learned.training`, `proxies.runs.thresholds`),
and the analysis reports them (`analysis.stats.validity` builds its slices, DeLong's test and
the deployment table on them).

Orientation: a higher score means "more likely positive" unless `higher_is_positive=False`
(WER-like scores), in which case scores are negated inside and thresholds are reported back in
the original units. Labels are booleans or 0/1. Pairs with a missing score or label are dropped
(counted in `details["dropped"]` where an Estimate is returned).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kit.estimate import Estimate

# pandas and scipy.stats are imported by the functions that use them (1-3 s each), not with
# this module: the proxies' API and pages import it at start and compute with it rarely.


def scores_and_labels(
    scores: Sequence[float], labels: Sequence, higher_is_positive: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """Oriented float scores and boolean labels with incomplete pairs dropped."""
    import pandas as pd

    s = pd.to_numeric(pd.Series(list(scores), dtype=object), errors="raise").astype(float)
    y = pd.Series(list(labels), dtype=object)
    if len(s) != len(y):
        raise ValueError(f"scores and labels differ in length ({len(s)} vs {len(y)})")
    keep = (s.notna() & y.notna()).to_numpy()
    y_kept = y[keep]
    if not y_kept.isin([0, 1]).all():  # True == 1 and False == 0, so booleans pass
        raise ValueError("labels must be booleans or 0/1")
    oriented = s[keep].to_numpy() * (1.0 if higher_is_positive else -1.0)
    return oriented, y_kept.astype(bool).to_numpy(), int((~keep).sum())


@dataclass
class AucResult:
    """AUC-ROC with its CI, class sizes and the ROC curve for plotting.

    `fpr`, `tpr` and `thresholds` come from `sklearn.metrics.roc_curve` (intermediate
    collinear points dropped); thresholds are in the caller's score units, and the first one
    is +inf (or -inf when `higher_is_positive=False`): the point (0, 0) where nothing is
    predicted positive.
    """

    auc: Estimate
    n_pos: int
    n_neg: int
    higher_is_positive: bool
    fpr: list[float] = field(default_factory=list)
    tpr: list[float] = field(default_factory=list)
    thresholds: list[float] = field(default_factory=list)


def delong_components(pos: np.ndarray, neg: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """AUC and DeLong's structural components via midranks (Sun & Xu 2014).

    v10[i]: share of negatives scored below positive i (ties count 1/2);
    v01[j]: share of positives scored above negative j (ties count 1/2).
    """
    from scipy import stats

    m, n = pos.size, neg.size
    rank_all = stats.rankdata(np.concatenate([pos, neg]))
    rank_pos = stats.rankdata(pos)
    rank_neg = stats.rankdata(neg)
    auc = (rank_all[:m].sum() - m * (m + 1) / 2) / (m * n)
    v10 = (rank_all[:m] - rank_pos) / n
    v01 = 1.0 - (rank_all[m:] - rank_neg) / m
    return float(auc), v10, v01


def delong_variance(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(AUC, DeLong variance) for oriented scores and boolean labels (both classes present).

    var = s10 / m + s01 / n with s10, s01 the sample variances (ddof=1) of the structural
    components over the m positives and n negatives (DeLong, DeLong & Clarke-Pearson 1988).
    """
    auc, v10, v01 = delong_components(scores[labels], scores[~labels])
    return auc, float(np.var(v10, ddof=1) / v10.size + np.var(v01, ddof=1) / v01.size)


def _rank_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    from scipy import stats

    m = int(labels.sum())
    n = labels.size - m
    ranks = stats.rankdata(scores)
    return float((ranks[labels].sum() - m * (m + 1) / 2) / (m * n))


def auc_with_ci(
    scores: Sequence[float],
    labels: Sequence,
    method: Literal["delong", "bootstrap"] = "delong",
    *,
    higher_is_positive: bool = True,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> AucResult:
    """AUC-ROC of `scores` for binary `labels` with a confidence interval and the ROC curve.

    The point value is `sklearn.metrics.roc_auc_score` (ties between a positive and a negative
    count 1/2). `method="delong"`: AUC +/- z * sqrt(DeLong variance), clipped to [0, 1], as
    R pROC's default `ci.auc`. `method="bootstrap"`: percentile interval over `n_boot`
    stratified resamples (positives and negatives resampled separately, so every replicate
    has both classes, as pROC's `stratified=TRUE`), seeded. `n` counts cases used.
    Raises `ValueError` unless both classes are present.
    """
    from sklearn.metrics import roc_auc_score, roc_curve

    if method not in ("delong", "bootstrap"):
        raise ValueError(f"method must be 'delong' or 'bootstrap', not {method!r}")
    s, y, dropped = scores_and_labels(scores, labels, higher_is_positive)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUC needs both classes; have {n_pos} positive, {n_neg} negative")
    point = float(roc_auc_score(y, s))
    tail = (1 - level) / 2
    details = {"dropped": float(dropped)}
    low: float | None
    high: float | None
    if method == "delong":
        label = f"AUC-ROC, DeLong {level:.0%} CI"
        if n_pos < 2 or n_neg < 2:  # the structural components' variances need 2 per class
            low = high = None
            label += " (undefined: fewer than 2 cases in a class)"
        else:
            from scipy import stats

            _, variance = delong_variance(s, y)
            half = float(stats.norm.ppf(1 - tail) * np.sqrt(variance))
            low, high = max(0.0, point - half), min(1.0, point + half)
            details["variance"] = variance
    else:
        rng = np.random.default_rng(seed)
        pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
        stratified_labels = np.concatenate([np.ones(n_pos, bool), np.zeros(n_neg, bool)])
        replicates = np.empty(n_boot)
        for b in range(n_boot):
            draw = np.concatenate([rng.choice(pos, n_pos), rng.choice(neg, n_neg)])
            replicates[b] = _rank_auc(s[draw], stratified_labels)
        low, high = (float(x) for x in np.quantile(replicates, [tail, 1 - tail]))
        details["n_boot"] = float(n_boot)
        label = f"AUC-ROC, stratified percentile bootstrap {level:.0%} CI (B={n_boot}, seed={seed})"
    fpr, tpr, thresholds = roc_curve(y, s)
    if not higher_is_positive:
        thresholds = -thresholds
    return AucResult(
        auc=Estimate(point, low, high, n_pos + n_neg, label, details=details),
        n_pos=n_pos,
        n_neg=n_neg,
        higher_is_positive=higher_is_positive,
        fpr=fpr.tolist(),
        tpr=tpr.tolist(),
        thresholds=thresholds.tolist(),
    )


@dataclass
class ThresholdChoice:
    """The chosen threshold and its precision/recall; threshold None when none qualifies."""

    threshold: float | None
    precision: float | None
    recall: float | None
    n_predicted_positive: int
    n_positive: int
    target_precision: float
    achieved: bool
    higher_is_positive: bool


def threshold_for_precision(
    scores: Sequence[float],
    labels: Sequence,
    target_precision: float,
    *,
    higher_is_positive: bool = True,
) -> ThresholdChoice:
    """The most permissive threshold whose precision reaches `target_precision` (dev split).

    A case is predicted positive when score >= threshold (score <= threshold when
    `higher_is_positive=False`). Candidates are the observed scores; among those with
    precision >= target the one predicting the most positives is returned, i.e. the smallest
    threshold (largest for lower-is-positive), which maximises recall at that precision.
    Precision is not monotone in the threshold, so a stricter threshold may fall below
    target again; the choice is still the smallest qualifying one. LATTE picked 0.85 on its
    dev split for 90% precision (72% recall). Pick on dev, report on test.
    """
    if not 0 < target_precision <= 1:
        raise ValueError("target_precision must lie in (0, 1]")
    s, y, _ = scores_and_labels(scores, labels, higher_is_positive)
    n_positive = int(y.sum())
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    predicted = np.arange(1, s.size + 1)
    # Only the last index of each run of equal scores is a realisable cut.
    last_of_run = np.append(s_sorted[1:] != s_sorted[:-1], True)
    precision = tp[last_of_run] / predicted[last_of_run]
    ok = np.flatnonzero(precision >= target_precision - 1e-12)
    if ok.size == 0 or n_positive == 0:
        return ThresholdChoice(
            None, None, None, 0, n_positive, target_precision, False, higher_is_positive
        )
    best = ok[-1]  # the lowest oriented threshold that qualifies
    cut = s_sorted[last_of_run][best]
    threshold = float(cut if higher_is_positive else -cut)
    return ThresholdChoice(
        threshold=threshold,
        precision=float(precision[best]),
        recall=float(tp[last_of_run][best] / n_positive),
        n_predicted_positive=int(predicted[last_of_run][best]),
        n_positive=n_positive,
        target_precision=target_precision,
        achieved=True,
        higher_is_positive=higher_is_positive,
    )


def latte_score(predictions: Sequence, *, threshold: float | None = None) -> float:
    """LATTEScore = 100 * (# predicted meaning preserved) / (# examples) (LATTE eq. 1).

    `predictions` are booleans/0-1 predictions, or with `threshold` probabilities P(yes) and
    an example counts as preserved when P(yes) >= threshold. Missing predictions are left out
    of both counts; NaN when none remain.
    """
    import pandas as pd

    values = pd.to_numeric(pd.Series(list(predictions), dtype=object), errors="raise")
    values = values.dropna().astype(float)
    if values.empty:
        return float("nan")
    if threshold is None:
        if not values.isin([0.0, 1.0]).all():
            raise ValueError("predictions must be 0/1 unless a probability threshold is given")
        preserved = values == 1.0
    else:
        preserved = values >= threshold
    return float(100.0 * preserved.mean())
