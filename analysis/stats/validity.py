"""Validity of proxies against human judgments: discrimination, association, agreement, decisions.

- `auc_by_slice`, `delong_test`: AUC-ROC of a proxy score against binary human labels per
  slice (LATTE Table 4), and DeLong's test for two proxies scored on the same cases; the AUC
  itself with its DeLong (1988) or stratified bootstrap CI is `proxies.quality.auc_with_ci`.
- `correlations`, `williams_test`: association (Pearson/Spearman/Kendall with bootstrap CIs;
  Williams' test for two metrics' correlations with the same human scores).
- `bland_altman`: agreement of two numeric methods (bias and limits of agreement).
- `deployment_table`: turning a proxy into decisions (LATTE section 5), on
  `proxies.quality.latte_score` (and `threshold_for_precision` there).

Orientation: every AUC/threshold function assumes a higher score means "more likely positive"
unless `higher_is_positive=False` (WER-like scores), in which case scores are negated inside and
thresholds are reported back in the original units. Labels are booleans or 0/1. Pairs with a
missing score or label are dropped (counted in `details["dropped"]` where an Estimate is
returned).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from kit.estimate import Estimate
from metrics.scorers import registry
from proxies.quality import auc_with_ci, delong_components, latte_score, scores_and_labels

# Decisions compare percentages with thresholds; 100 - 100 * 0.2 is 79.99999999999999 in
# floating point, so ">= 80" is tested with this tolerance.
DECISION_TOLERANCE = 1e-9


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------

def metric_directions(metrics: pd.DataFrame) -> dict[str, bool]:
    """The stored metric values among `metrics`' numeric columns that are compared with people
    over outputs, headline scores first (in the registry's order), then by name; each with
    True where a higher value is better. Every value's direction is its scorer's declaration
    (`metrics.scorers.registry`): counts are left out (they grow with the reference's length),
    and so are values without a direction; a column no scorer declares raises
    `registry.UnknownValue` rather than being read as higher-better."""
    numeric = {str(c) for c in metrics.columns if c not in ("output", "item", "system")
               and pd.api.types.is_numeric_dtype(metrics[c])}
    headline = registry.headline_values()
    ordered = [c for c in headline if c in numeric] + sorted(numeric - set(headline))
    directions = {}
    for column in ordered:
        declared = registry.value(column)
        if not declared.count and declared.direction is not None:
            directions[column] = declared.direction == "higher"
    return directions



def _pairs(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray, int]:
    """Two numeric arrays with pairs missing either value dropped."""
    xs = pd.to_numeric(pd.Series(list(x), dtype=object), errors="raise").astype(float)
    ys = pd.to_numeric(pd.Series(list(y), dtype=object), errors="raise").astype(float)
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length ({len(xs)} vs {len(ys)})")
    keep = (xs.notna() & ys.notna()).to_numpy()
    return xs[keep].to_numpy(), ys[keep].to_numpy(), int((~keep).sum())


# --------------------------------------------------------------------------------------------
# AUC
# --------------------------------------------------------------------------------------------


#: How `auc_by_slice` rows are computed, for a report to print under the table.
SLICE_METHOD = (
    "AUC-ROC per slice with its DeLong 95% CI (unadjusted); p: two-sided Mann-Whitney U test "
    "of AUC = 0.5 (scipy: exact for small samples without ties, else the normal approximation "
    "with tie and continuity corrections, as R's wilcox.test); p_adjusted: Holm over the "
    "slices of one proxy and one field that have both classes"
)


@dataclass
class SliceAuc:
    """One row of an AUC-by-slice table (a table row and a forest-plot line).

    `auc`, the CI and the p-values are None when the slice has a single class. `p_value` tests
    AUC = 0.5 (Mann-Whitney U, two-sided); `p_adjusted` is Holm-adjusted over the slices of
    the same call (the overall row is not part of that family and has none).
    """

    slice: object
    n: int
    n_pos: int
    auc: float | None
    ci_low: float | None
    ci_high: float | None
    is_overall: bool = False
    n_neg: int = 0
    p_value: float | None = None
    p_adjusted: float | None = None


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input order (R `p.adjust(p, "holm")`).

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)).
    """
    values = np.asarray(list(p_values), dtype=float)
    m = values.size
    order = np.argsort(values, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * values[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def auc_by_slice(
    df: pd.DataFrame,
    score_col: str,
    label_col: str,
    slice_col: str,
    *,
    method: Literal["delong", "bootstrap"] = "delong",
    higher_is_positive: bool = True,
    include_overall: bool = True,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[SliceAuc]:
    """AUC with CI overall (first row, `is_overall=True`, `slice=None`) and per slice value.

    Slices come in sorted order (first-seen order if unsortable); rows with a missing slice
    value count only in the overall row. `n` counts cases with both score and label. Each row
    also tests AUC = 0.5 (`p_value`, Mann-Whitney U) and the slice rows carry Holm-adjusted
    p-values over the slices (`p_adjusted`): testing many slices finds a "significant" one by
    chance. See SLICE_METHOD.
    """
    rows: list[SliceAuc] = []

    def one(part: pd.DataFrame, name: object, overall: bool) -> SliceAuc:
        s, y, _ = scores_and_labels(part[score_col], part[label_col], higher_is_positive)
        n_pos = int(y.sum())
        n_neg = int(y.size) - n_pos
        if n_pos == 0 or n_neg == 0:
            return SliceAuc(name, int(y.size), n_pos, None, None, None, overall, n_neg)
        # Two-sided, so the orientation does not change p; U / (n_pos n_neg) is the AUC.
        p_value = float(stats.mannwhitneyu(s[y], s[~y], alternative="two-sided").pvalue)
        result = auc_with_ci(
            part[score_col],
            part[label_col],
            method=method,
            higher_is_positive=higher_is_positive,
            level=level,
            n_boot=n_boot,
            seed=seed,
        )
        est = result.auc
        return SliceAuc(name, est.n, n_pos, est.value, est.ci_low, est.ci_high, overall, n_neg,
                        p_value)

    if include_overall:
        rows.append(one(df, None, True))
    values = list(pd.unique(df[slice_col].dropna()))
    with contextlib.suppress(TypeError):  # unsortable slice values keep first-seen order
        values = sorted(values)
    for value in values:
        plain = value.item() if isinstance(value, np.generic) else value
        rows.append(one(df[df[slice_col] == value], plain, False))
    tested = [row for row in rows if not row.is_overall and row.p_value is not None]
    p_values = [r.p_value for r in tested if r.p_value is not None]
    for row, adjusted in zip(tested, holm_adjust(p_values), strict=True):
        row.p_adjusted = adjusted
    return rows


@dataclass
class HypothesisTest:
    """A test statistic with its degrees of freedom (None for z tests) and p-value."""

    statistic: float
    df: float | None
    p_value: float
    method: str
    details: dict[str, float] = field(default_factory=dict)


def delong_test(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    labels: Sequence,
    *,
    higher_is_positive: tuple[bool, bool] = (True, True),
    level: float = 0.95,
) -> HypothesisTest:
    """DeLong's test for two correlated AUCs: two proxies scored on the same cases.

    z = (AUC_a - AUC_b) / sqrt(var_a + var_b - 2 cov_ab) from the structural components;
    two-sided p-value. `details` holds both AUCs, their difference and its CI (as R pROC's
    `roc.test(method="delong", paired=TRUE)`). Cases missing either score or the label are
    dropped.
    """
    frame = pd.DataFrame({"a": list(scores_a), "b": list(scores_b), "y": list(labels)})
    frame = frame.dropna()
    sa, y, _ = scores_and_labels(frame["a"], frame["y"], higher_is_positive[0])
    sb, _, _ = scores_and_labels(frame["b"], frame["y"], higher_is_positive[1])
    if y.sum() < 2 or (~y).sum() < 2:
        raise ValueError("DeLong's test needs at least 2 cases of each class")
    auc_a, v10_a, v01_a = delong_components(sa[y], sa[~y])
    auc_b, v10_b, v01_b = delong_components(sb[y], sb[~y])
    s10 = np.cov(np.vstack([v10_a, v10_b]), ddof=1)
    s01 = np.cov(np.vstack([v01_a, v01_b]), ddof=1)
    cov = s10 / v10_a.size + s01 / v01_a.size
    variance = float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
    diff = auc_a - auc_b
    z = diff / np.sqrt(variance) if variance > 0 else float("nan")
    half = float(stats.norm.ppf(1 - (1 - level) / 2) * np.sqrt(variance))
    return HypothesisTest(
        statistic=float(z),
        df=None,
        p_value=float(2 * stats.norm.sf(abs(z))),
        method="DeLong's test for two correlated ROC curves (two-sided)",
        details={
            "auc_a": auc_a,
            "auc_b": auc_b,
            "difference": diff,
            "ci_low": diff - half,
            "ci_high": diff + half,
            "n": float(y.size),
        },
    )


# --------------------------------------------------------------------------------------------
# Correlation
# --------------------------------------------------------------------------------------------

_CORRELATIONS = {
    "pearson": stats.pearsonr,
    "spearman": stats.spearmanr,
    "kendall": stats.kendalltau,  # tau-b (ties corrected)
}


def correlations(
    x: Sequence[float],
    y: Sequence[float],
    n_boot: int = 1000,
    seed: int = 0,
    *,
    level: float = 0.95,
) -> dict[str, Estimate]:
    """Pearson r, Spearman rho and Kendall tau-b, each with a bootstrap CI and p-value.

    p-values are scipy's (Pearson: t test; Spearman: t approximation; Kendall: exact for small
    samples without ties, else normal approximation). CIs: percentile bootstrap over pairs
    (x_i, y_i) resampled together, the same resamples for the three coefficients; replicates
    where a coefficient is undefined (a constant resample) are skipped. Correlation is
    association, not agreement: report `bland_altman` or kappa/alpha as well.
    """
    xs, ys, dropped = _pairs(x, y)
    n = xs.size
    if n < 3:
        raise ValueError(f"correlations need at least 3 complete pairs; have {n}")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_boot, n))
    tail = (1 - level) / 2
    out: dict[str, Estimate] = {}
    # The replicates computed for many resamples at once (the same statistics as scipy's:
    # one scipy call per resample cost 0.3-1 ms, B x 3 calls per metric and criterion), in
    # chunks of resamples that keep the arrays small.
    all_replicates = {name: np.empty(n_boot) for name in _CORRELATIONS}
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_boot, chunk):
        xr, yr = xs[draws[start:start + chunk]], ys[draws[start:start + chunk]]
        # A constant resample has no correlation (skipped, as below).
        constant = (np.ptp(xr, axis=1) == 0) | (np.ptp(yr, axis=1) == 0)
        for name, func in _CORRELATIONS.items():
            values = _bootstrap_statistics(name, xr, yr, func)
            values[constant] = np.nan
            all_replicates[name][start:start + chunk] = values
    for name, func in _CORRELATIONS.items():
        point = func(xs, ys)
        replicates = all_replicates[name]
        valid = replicates[np.isfinite(replicates)]
        low, high = (
            (float(v) for v in np.quantile(valid, [tail, 1 - tail]))
            if valid.size
            else (
                None,
                None,
            )
        )
        out[name] = Estimate(
            value=float(point.statistic),
            ci_low=low,
            ci_high=high,
            n=n,
            method=f"{name} correlation, percentile bootstrap CI over pairs (B={n_boot}, "
            f"seed={seed})",
            p_value=float(point.pvalue),
            details={"dropped": float(dropped), "n_invalid": float(n_boot - valid.size)},
        )
    return out


def _pearson_rows(xr: np.ndarray, yr: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair (rows without spread give nan)."""
    xc = xr - xr.mean(axis=1, keepdims=True)
    yc = yr - yr.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=1) / np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    return np.clip(r, -1.0, 1.0)


#: Kendall's tau-b is vectorised over resamples through n x n sign matrices (in chunks of this
#: many cells) for samples up to `_KENDALL_VECTOR_N`; longer ones go through scipy one resample
#: at a time, where its O(n log n) work outweighs the per-call overhead (measured: at n = 300
#: the sign matrices took 0.8 s for B = 1,000, scipy 0.5 s).
_KENDALL_VECTOR_N = 120
_KENDALL_CHUNK_CELLS = 4_000_000


def _kendall_rows(xr: np.ndarray, yr: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair: sum(sx sy) / sqrt(sum(sx^2) sum(sy^2)) over pairs,
    sx = sign(x_i - x_j) (ties give 0, the tau-b correction)."""
    n = xr.shape[1]
    out = np.empty(xr.shape[0])
    step = max(1, _KENDALL_CHUNK_CELLS // (n * n))
    for start in range(0, xr.shape[0], step):
        x, y = xr[start:start + step], yr[start:start + step]
        sx = np.sign(x[:, :, None] - x[:, None, :])
        sy = np.sign(y[:, :, None] - y[:, None, :])
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + step] = ((sx * sy).sum(axis=(1, 2))
                                       / np.sqrt((sx * sx).sum(axis=(1, 2))
                                                 * (sy * sy).sum(axis=(1, 2))))
    return out


def _bootstrap_statistics(name: str, xr: np.ndarray, yr: np.ndarray,
                          func: Callable[..., Any]) -> np.ndarray:
    """The coefficient `name` for each resample (row) of xr and yr."""
    if name == "pearson":
        return _pearson_rows(xr, yr)
    if name == "spearman":
        return _pearson_rows(stats.rankdata(xr, axis=1), stats.rankdata(yr, axis=1))
    if xr.shape[1] <= _KENDALL_VECTOR_N:
        return _kendall_rows(xr, yr)
    return np.array([func(x, y).statistic if np.ptp(x) and np.ptp(y) else np.nan
                     for x, y in zip(xr, yr, strict=True)])


def williams_test(
    r12: float,
    r13: float,
    r23: float,
    n: int,
    *,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
) -> HypothesisTest:
    """Williams' (1959) test of r12 = r13 for dependent correlations sharing variable 1.

    Variable 1 is typically the human score, 2 and 3 two metrics scored on the same n cases
    (Graham & Baldwin 2014 for MT metrics); r23 is the metrics' correlation with each other.
    With K = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23 (Steiger 1980, eq. 7):

        t = (r12 - r13) sqrt((n - 1)(1 + r23)) /
            sqrt(2 K (n - 1) / (n - 3) + ((r12 + r13) / 2)^2 (1 - r23)^3),   df = n - 3.

    `alternative="greater"` tests r12 > r13 (metric 2 correlates better), as Graham & Baldwin
    do one-sided. Raises `ValueError` for |r| > 1, n <= 3 or an impossible correlation
    matrix (K < 0).
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, not {alternative!r}")
    if any(abs(r) > 1 for r in (r12, r13, r23)):
        raise ValueError("correlations must lie in [-1, 1]")
    if n <= 3:
        raise ValueError("Williams' test needs n > 3")
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    if k < 0:
        raise ValueError("r12, r13 and r23 do not form a valid correlation matrix")
    numerator = (r12 - r13) * np.sqrt((n - 1) * (1 + r23))
    denominator = np.sqrt(2 * k * (n - 1) / (n - 3) + ((r12 + r13) / 2) ** 2 * (1 - r23) ** 3)
    t = float(numerator / denominator)
    dof = n - 3
    if alternative == "two-sided":
        p = 2 * stats.t.sf(abs(t), dof)
    elif alternative == "greater":
        p = stats.t.sf(t, dof)
    else:
        p = stats.t.cdf(t, dof)
    method = f"Williams' t for dependent correlations ({alternative})"
    return HypothesisTest(t, float(dof), float(p), method)


# --------------------------------------------------------------------------------------------
# Bland-Altman
# --------------------------------------------------------------------------------------------


@dataclass
class BlandAltman:
    """Bias (mean of a - b), SD of the differences and the limits of agreement, with CIs.

    `means` and `differences` are the per-case points of the Bland-Altman plot (x: (a+b)/2,
    y: a-b); draw horizontal lines at `bias.value`, `lower.value` and `upper.value`.
    """

    bias: Estimate
    sd: float
    lower: Estimate
    upper: Estimate
    n: int
    k: float
    means: list[float]
    differences: list[float]


def bland_altman(
    a: Sequence[float], b: Sequence[float], *, k: float = 1.96, level: float = 0.95
) -> BlandAltman:
    """Bland-Altman agreement of two measurement methods on the same cases (d = a - b).

    bias = mean(d), sd = SD(d) (ddof=1), limits = bias -/+ k sd. CIs use t with n - 1 df and
    Bland & Altman (1999) standard errors: SE(bias) = sd / sqrt(n), SE(limit) =
    sd sqrt(1/n + k^2 / (2 (n - 1))) (about sqrt(3 sd^2 / n) for k near 2, their 1986 text).
    Pairs missing a value are dropped. Assumes differences roughly normal and unrelated to
    the magnitude; look at the plot.
    """
    xa, xb, dropped = _pairs(a, b)
    n = xa.size
    if n < 3:
        raise ValueError(f"Bland-Altman needs at least 3 complete pairs; have {n}")
    d = xa - xb
    bias = float(d.mean())
    sd = float(d.std(ddof=1))
    t = float(stats.t.ppf(1 - (1 - level) / 2, n - 1))
    se_bias = sd / float(np.sqrt(n))
    se_limit = sd * float(np.sqrt(1 / n + k**2 / (2 * (n - 1))))
    lower, upper = bias - k * sd, bias + k * sd
    note = f"t-based {level:.0%} CI (Bland & Altman 1999), dropped={dropped}"
    return BlandAltman(
        bias=Estimate(bias, bias - t * se_bias, bias + t * se_bias, n, f"mean difference; {note}"),
        sd=sd,
        lower=Estimate(
            lower, lower - t * se_limit, lower + t * se_limit, n, f"bias - {k} SD; {note}"
        ),
        upper=Estimate(
            upper, upper - t * se_limit, upper + t * se_limit, n, f"bias + {k} SD; {note}"
        ),
        n=n,
        k=k,
        means=((xa + xb) / 2).tolist(),
        differences=d.tolist(),
    )


# --------------------------------------------------------------------------------------------
# Decisions (LATTE section 5)
# --------------------------------------------------------------------------------------------


@dataclass
class DeploymentRow:
    """One group (a speaker's model): WordAcc, human MP%, each proxy's LATTEScore, decisions.

    `system` is the system the group's outputs come from when the table groups within
    systems (`system_col`), else None. `n` counts the row's outputs; each figure rests on
    those it has a value for, and says how many: `word_acc_n` (outputs with a WER, or with the
    WER counts for a corpus WordAcc) and `human_n` (outputs with a human label: a tied
    majority is none). `word_acc` is None without a WER column. `proxies` maps each proxy to
    its LATTEScore (% of the group's outputs it predicts preserved) and `proxy_n` to the
    number of outputs that score counts (a proxy may lack some answers). `accept` maps
    "word_acc" (when there is a WER), "human" and each proxy to the decision.
    """

    group: object
    n: int
    word_acc: float | None
    human_mp: float
    proxies: dict[str, float]
    accept: dict[str, bool]
    system: object = None
    proxy_n: dict[str, int] = field(default_factory=dict)
    word_acc_n: int | None = None
    human_n: int = 0


@dataclass
class DecisionAgreement:
    """How often a decider (WordAcc or a proxy) takes the humans' accept/reject decision.

    `disagreements` lists the groups where it does not: group values, or [system, group]
    pairs when the table groups within systems.
    """

    decider: str
    n_groups: int
    accuracy: float
    kappa: float
    disagreements: list[object]


@dataclass
class DeploymentTable:
    """`rows`: one per group (per system and group with `system_col`); `by_system`: the same
    figures over each system's outputs (empty without `system_col`)."""

    rows: list[DeploymentRow]
    agreement: list[DecisionAgreement]
    method: str
    by_system: list[DeploymentRow] = field(default_factory=list)
    group_col: str = ""
    system_col: str | None = None


def _passes(value: float | None, minimum: float) -> bool:
    return bool(value is not None and np.isfinite(value) and value >= minimum - DECISION_TOLERANCE)


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def deployment_table(
    df: pd.DataFrame,
    group_col: str,
    *,
    human_col: str = "meaning_preserved",
    wer_col: str | None = "wer",
    proxy_cols: Sequence[str] = (),
    proxy_thresholds: Mapping[str, float] | None = None,
    system_col: str | None = None,
    wer_unit: Literal["fraction", "percent"] = "fraction",
    word_acc: Literal["mean", "corpus"] = "mean",
    errors_col: str | None = None,
    ref_words_col: str | None = None,
    word_acc_min: float = 80.0,
    mp_min: float = 70.0,
    proxy_min: float = 70.0,
) -> DeploymentTable:
    """LATTE's deployment table: per group, WordAcc, human MP%, proxy % and accept/reject.

    One row of `df` per output (utterance) with its group (speaker/model), the binary human
    label `human_col` (meaning preserved: booleans/0-1; aggregate several raters first), the
    WER `wer_col` and one column per proxy. A proxy column holds 0/1 predictions, or scores
    turned into predictions by `proxy_thresholds[col]` (P(yes) >= threshold).

    `system_col`: group within systems. LATTE's rows are speakers, each with a personalised
    model, so a row is one model on one speaker's outputs; when a study runs several systems
    on every speaker, pooling a speaker's outputs over systems would blend the decisions about
    different models. With `system_col` each row is one (system, group) and `by_system` adds
    one row per system over all its outputs.

    WordAcc = 100 - min(WER%, 100) with the group's WER. `word_acc="corpus"`: LATTE's
    per-speaker WordAcc, the WER of the group being one corpus WER, sum(errors_col) /
    sum(ref_words_col) (errors S + D + I over reference words N), which weighs each output
    by its reference length as a speaker's WER does (it is not the mean of per-sentence
    WERs); the analysis uses it whenever the WER counts are stored. `word_acc="mean"`
    (default here, for tables that hold only a WER per output): the mean over the group's
    outputs of each output's WordAcc; WER is a fraction (jiwer, our scorers) unless
    `wer_unit="percent"`. `wer_col=None`: no WordAcc (None) and no WordAcc decision.
    Human MP% = 100 * mean(human_col); proxy % = `latte_score`. Missing values are left out
    of each figure, so a WER-only figure does not move with the human labels (an output with
    a tied majority, NaN in `human_col`, still counts for WordAcc). Accept when WordAcc >=
    `word_acc_min` (80), MP >= `mp_min` (70), proxy % >= `proxy_min` (70), compared with a
    1e-9 tolerance. `agreement` compares each decider's decisions (WordAcc and every proxy)
    with the human decisions over the rows: accuracy and Cohen's kappa (NaN when a side never
    varies).
    """
    from analysis.stats.agreement import cohen_kappa

    if wer_unit not in ("fraction", "percent"):
        raise ValueError("wer_unit must be 'fraction' or 'percent'")
    if word_acc not in ("mean", "corpus"):
        raise ValueError("word_acc must be 'mean' or 'corpus'")
    if word_acc == "corpus" and (errors_col is None or ref_words_col is None):
        raise ValueError("word_acc='corpus' needs errors_col and ref_words_col")
    if system_col == group_col:
        system_col = None  # grouping by system already is "within system"
    thresholds = dict(proxy_thresholds or {})
    needed = [*proxy_cols, *thresholds, group_col, *([system_col] if system_col else [])]
    unknown = [c for c in needed if c not in df.columns]
    if unknown:
        raise ValueError(f"columns not in the table: {unknown}")
    scale = 100.0 if wer_unit == "fraction" else 1.0

    def row_for(part: pd.DataFrame, group: object, system: object) -> DeploymentRow:
        acc: float | None = None
        acc_n: int | None = None
        if wer_col is not None and word_acc == "mean":
            wer_pct = pd.to_numeric(part[wer_col], errors="raise").astype(float) * scale
            acc = float((100.0 - wer_pct.clip(upper=100.0)).mean())
            acc_n = int(wer_pct.notna().sum())
        elif wer_col is not None:
            counts = pd.DataFrame({"errors": pd.to_numeric(part[errors_col]),
                                   "words": pd.to_numeric(part[ref_words_col])}).dropna()
            words, errors = float(counts["words"].sum()), float(counts["errors"].sum())
            acc_n = len(counts)
            if not acc_n:
                acc = float("nan")
            else:
                # No reference word at all: only empty references matched by empty
                # hypotheses (a perfect match, as `metrics.scorers.text.corpus_rate` says).
                acc = 100.0 - min(100.0 * errors / words, 100.0) if words > 0 else 100.0
        human = pd.to_numeric(part[human_col].astype(object), errors="raise").dropna()
        if not human.isin([0, 1]).all():
            raise ValueError(f"{human_col!r} must hold booleans or 0/1 (meaning preserved)")
        mp = float(100.0 * human.astype(float).mean()) if len(human) else float("nan")
        predicted = {
            col: latte_score(part[col], threshold=thresholds.get(col)) for col in proxy_cols
        }
        counted = {col: int(part[col].notna().sum()) for col in proxy_cols}
        accept = {"human": _passes(mp, mp_min)}
        if wer_col is not None:
            accept = {"word_acc": _passes(acc, word_acc_min), **accept}
        accept.update({col: _passes(pct, proxy_min) for col, pct in predicted.items()})
        return DeploymentRow(_plain(group), len(part), acc, mp, predicted, accept,
                             system=_plain(system), proxy_n=counted, word_acc_n=acc_n,
                             human_n=len(human))

    rows: list[DeploymentRow] = []
    by_system: list[DeploymentRow] = []
    if system_col is None:
        for group, part in df.groupby(group_col, sort=True, dropna=True):
            rows.append(row_for(part, group, None))
    else:
        for (system, group), part in df.groupby([system_col, group_col], sort=True,
                                                 dropna=True):
            rows.append(row_for(part, group, system))
        for system, part in df.groupby(system_col, sort=True, dropna=True):
            by_system.append(row_for(part, system, system))

    human_decisions = [r.accept["human"] for r in rows]
    agreement: list[DecisionAgreement] = []
    deciders = [*(["word_acc"] if wer_col is not None else []), *proxy_cols]
    for decider in deciders:
        decisions = [r.accept[decider] for r in rows]
        matches = [d == h for d, h in zip(decisions, human_decisions, strict=True)]
        kappa = cohen_kappa(decisions, human_decisions, labels=[False, True]).value
        agreement.append(
            DecisionAgreement(
                decider=decider,
                n_groups=len(rows),
                accuracy=float(np.mean(matches)) if rows else float("nan"),
                kappa=kappa,
                disagreements=[
                    r.group if system_col is None else [r.system, r.group]
                    for r, m in zip(rows, matches, strict=True)
                    if not m
                ],
            )
        )
    rules = [f"human MP >= {mp_min}", f"proxy >= {proxy_min}"]
    if wer_col is not None:
        how = ("100 - min(corpus WER %, 100) per row" if word_acc == "corpus"
               else "mean of per-output WordAcc")
        rules.insert(0, f"WordAcc ({how}) >= {word_acc_min}")
    within = f"; rows per {group_col} within {system_col}" if system_col else ""
    return DeploymentTable(
        rows=rows,
        agreement=agreement,
        method=", ".join(rules) + within,
        by_system=by_system,
        group_col=group_col,
        system_col=system_col,
    )
