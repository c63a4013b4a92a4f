"""Agreement among raters (humans and proxies alike) on a tidy table of ratings.

Input: a `pandas.DataFrame` with one row per rating and the columns `unit` (what is rated),
`rater` and `value`; optionally `item` (the source item a unit belongs to). Rules shared by every
function here:

- Rows whose `value` is missing (NaN/None) are dropped first: a missing value is "not rated".
- A rater may rate a unit at most once; a duplicate (unit, rater) pair raises `ValueError`
  (aggregate repeated judgments before calling).
- Categories are compared by equality. Their order matters only for weighted kappa, ordinal
  alpha and tie-breaking; it is the order of `labels` when given, otherwise the sorted order of
  the observed values (numeric values sort numerically). Non-numeric values need `labels`
  wherever order matters.
- A coefficient that is undefined on the data (a single category, no unit with two ratings)
  comes back as NaN rather than raising, so that bootstrap replicates can skip it.

Pinned against published values in `tests/analysis/stats/test_agreement.py`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.stats import Estimate

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[str, ...] = ("nominal", "ordinal", "interval", "ratio")
KappaWeights = Literal["linear", "quadratic"] | None
TieBreak = Literal["split", "lowest", "drop"]

# Shrout & Fleiss (1979) names, in pingouin's row order, with McGraw & Wong (1996) descriptions.
ICC_FORMS: tuple[tuple[str, str], ...] = (
    ("ICC1", "ICC(1,1): one-way random effects, absolute agreement, single rater"),
    ("ICC2", "ICC(2,1) = ICC(A,1): two-way random effects, absolute agreement, single rater"),
    ("ICC3", "ICC(3,1) = ICC(C,1): two-way mixed effects, consistency, single rater"),
    ("ICC1k", "ICC(1,k): one-way random effects, absolute agreement, mean of k raters"),
    ("ICC2k", "ICC(2,k) = ICC(A,k): two-way random effects, absolute agreement, mean of k raters"),
    ("ICC3k", "ICC(3,k) = ICC(C,k): two-way mixed effects, consistency, mean of k raters"),
)


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def ratings_frame(df: pd.DataFrame, *, numeric: bool = False) -> pd.DataFrame:
    """Validate a tidy ratings table; return its rated rows (missing values dropped).

    Raises `ValueError` when `unit`, `rater` or `value` is absent, when a rater rated a unit
    twice, or (with `numeric=True`) when a value is not a number.
    """
    missing = [c for c in ("unit", "rater", "value") if c not in df.columns]
    if missing:
        raise ValueError(f"ratings table lacks column(s) {missing}; expected unit, rater, value")
    rated = df[df["value"].notna()]
    # Duplicate (unit, rater) pairs, found on integer codes: much faster than
    # DataFrame.duplicated on two object columns for a million rows.
    unit_codes, _ = pd.factorize(rated["unit"])
    rater_codes, raters = pd.factorize(rated["rater"])
    keys = unit_codes.astype(np.int64) * max(len(raters), 1) + rater_codes
    duplicated = pd.Series(keys).duplicated(keep=False).to_numpy()
    if duplicated.any():
        first = rated.loc[duplicated, ["unit", "rater"]].iloc[0]
        raise ValueError(
            f"rater {first['rater']!r} rated unit {first['unit']!r} more than once; "
            "aggregate repeated judgments first"
        )
    if numeric:
        rated = rated.assign(value=pd.to_numeric(rated["value"], errors="raise").astype(float))
    return rated


def category_order(values: Sequence | pd.Series, labels: Sequence | None = None) -> list:
    """The ordered list of categories: `labels` when given (validated), else sorted observed.

    `labels` must be unique and contain every observed value; categories listed but never
    observed are kept (they matter for Gwet's AC1, whose chance term depends on their number).
    """
    observed = list(pd.unique(pd.Series(values).dropna()))
    if labels is not None:
        order = list(labels)
        if len(set(order)) != len(order):
            raise ValueError(f"labels contain duplicates: {order}")
        unknown = [v for v in observed if v not in set(order)]
        if unknown:
            raise ValueError(f"values {unknown} are not among labels {order}")
        return order
    try:
        return sorted(observed)
    except TypeError:  # mixed types: any fixed order will do for nominal use
        return sorted(observed, key=repr)


def _is_numeric(values: pd.Series | Sequence) -> bool:
    """True for numbers (not booleans), also when held in an object column."""
    inferred = pd.Series(list(values))  # re-infer: Django values often arrive as objects
    return pd.api.types.is_numeric_dtype(inferred) and not pd.api.types.is_bool_dtype(inferred)


def _codes(values: pd.Series | Sequence, categories: list) -> np.ndarray:
    """Integer positions of `values` in `categories` (all values must be present)."""
    codes = pd.Index(categories).get_indexer(pd.Series(values).to_numpy())
    if (codes < 0).any():
        raise ValueError("some values are not among the categories")
    return codes


def _count_matrix(rated: pd.DataFrame, categories: list) -> tuple[np.ndarray, np.ndarray]:
    """Units x categories matrix of rating counts, and the unit labels (first-seen order)."""
    unit_index, units = pd.factorize(rated["unit"])
    counts = np.zeros((len(units), len(categories)), dtype=float)
    np.add.at(counts, (unit_index, _codes(rated["value"], categories)), 1.0)
    return counts, np.asarray(units)


# --------------------------------------------------------------------------------------------
# Coefficients
# --------------------------------------------------------------------------------------------


def percent_agreement(df: pd.DataFrame) -> Estimate:
    """Observed agreement: the share of agreeing rater pairs per unit, averaged over units.

    For a unit with r ratings of which r_k fall into category k, the unit's agreement is
    sum_k r_k (r_k - 1) / (r (r - 1)); units with fewer than two ratings are left out; every
    unit weighs the same. With two raters this is the plain proportion of matching units. It
    is the `pa` of Gwet's AC1 and of Fleiss' kappa. `n` counts the units used.
    """
    rated = ratings_frame(df)
    counts, _ = _count_matrix(rated, category_order(rated["value"]))
    per_unit = counts.sum(axis=1)
    usable = per_unit >= 2
    if not usable.any():
        value = float("nan")
    else:
        agreeing = (counts[usable] * (counts[usable] - 1)).sum(axis=1)
        value = float(np.mean(agreeing / (per_unit[usable] * (per_unit[usable] - 1))))
    return Estimate(
        value=value,
        ci_low=None,
        ci_high=None,
        n=int(usable.sum()),
        method="percent agreement (pairwise, mean over units with >= 2 ratings)",
    )


def cohen_kappa(
    a: Sequence,
    b: Sequence,
    weights: KappaWeights = None,
    labels: Sequence | None = None,
    sample_weight: Sequence[float] | None = None,
) -> Estimate:
    """Cohen's kappa for two raters' paired ratings `a[i]`, `b[i]` (via scikit-learn).

    Pairs with a missing value on either side are dropped; `n` counts the pairs used. Weighted
    kappa (`weights="linear"` or `"quadratic"`) penalises a disagreement by the distance
    between the two categories' positions in the category order (positions, not numeric
    differences): pass `labels` in order unless the values are numbers, whose numeric order is
    used. Non-numeric values without `labels` are refused for weighted kappa, because sorting
    them alphabetically would silently invent an order. Symmetric in `a` and `b`.
    `sample_weight` weighs pairs (the human ceiling uses it to split tied majorities).
    Returns NaN when kappa is undefined (both raters always use the same single category).
    """
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', not {weights!r}")
    a_series = pd.Series(list(a), dtype=object)
    b_series = pd.Series(list(b), dtype=object)
    if len(a_series) != len(b_series):
        raise ValueError(f"a and b differ in length ({len(a_series)} vs {len(b_series)})")
    keep = (a_series.notna() & b_series.notna()).to_numpy()
    a_kept, b_kept = a_series[keep], b_series[keep]
    both = pd.concat([a_kept, b_kept], ignore_index=True)
    if labels is None and weights is not None and len(both) and not _is_numeric(both):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    categories = category_order(both, labels)
    sw = None if sample_weight is None else np.asarray(sample_weight, dtype=float)[keep]
    method = "Cohen's kappa" if weights is None else f"Cohen's kappa ({weights} weights)"
    n = int(keep.sum())
    if n == 0 or len(categories) < 2:
        return Estimate(float("nan"), None, None, n, method)
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a single observed label: undefined, reported as NaN
        value = cohen_kappa_score(
            _codes(a_kept, categories),
            _codes(b_kept, categories),
            labels=list(range(len(categories))),
            weights=weights,
            sample_weight=sw,
            replace_undefined_by=np.nan,
        )
    return Estimate(float(value), None, None, n, method)


def paired_ratings(df: pd.DataFrame, rater_a: Hashable, rater_b: Hashable) -> pd.DataFrame:
    """The units both raters rated, as columns `unit`, `a`, `b` (sorted by unit where possible).

    Convenience for `cohen_kappa` on a tidy table:
    `p = paired_ratings(df, "r1", "r2"); cohen_kappa(p.a, p.b)`.
    """
    rated = ratings_frame(df)
    left = rated.loc[rated["rater"] == rater_a, ["unit", "value"]].rename(columns={"value": "a"})
    right = rated.loc[rated["rater"] == rater_b, ["unit", "value"]].rename(columns={"value": "b"})
    merged = left.merge(right, on="unit", how="inner")
    try:
        return merged.sort_values("unit", ignore_index=True)
    except TypeError:
        return merged.reset_index(drop=True)


def fleiss_kappa(
    df: pd.DataFrame,
    *,
    labels: Sequence | None = None,
    unbalanced: Literal["raise", "drop"] = "raise",
) -> Estimate:
    """Fleiss' (1971) kappa for many raters (statsmodels' aggregate_raters + fleiss_kappa).

    Fleiss' kappa needs the same number m >= 2 of ratings on every unit (who the raters are
    may differ from unit to unit). With `unbalanced="raise"` (default) any other pattern
    raises `ValueError`; with `"drop"` only the units carrying the most common number of
    ratings (at least 2; the larger number on a tie) are kept and the rest dropped, which
    `details["units_dropped"]` reports. For arbitrary missing patterns prefer
    `krippendorff_alpha` or `gwet_ac1`. `n` counts the units used.
    """
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

    if unbalanced not in ("raise", "drop"):
        raise ValueError(f"unbalanced must be 'raise' or 'drop', not {unbalanced!r}")
    rated = ratings_frame(df)
    categories = category_order(rated["value"], labels)
    per_unit = rated.groupby("unit", sort=False)["value"].size()
    counts_seen = per_unit[per_unit >= 2].value_counts()
    method = "Fleiss' kappa"
    if counts_seen.empty:
        return Estimate(float("nan"), None, None, 0, method)
    if per_unit.nunique() != 1 and unbalanced == "raise":
        raise ValueError(
            "Fleiss' kappa needs the same number of ratings on every unit; found "
            f"{sorted(per_unit.unique().tolist())}. Use unbalanced='drop', or "
            "krippendorff_alpha/gwet_ac1 for missing ratings"
        )
    m = int(max(counts_seen[counts_seen == counts_seen.max()].index))
    kept_units = per_unit.index[per_unit == m]
    kept = rated[rated["unit"].isin(kept_units)]
    grouped = np.argsort(pd.factorize(kept["unit"])[0], kind="stable")
    codes = _codes(kept["value"], categories)[grouped].reshape(len(kept_units), m)
    table, _ = aggregate_raters(codes, n_cat=len(categories))
    if len(categories) < 2:
        value = float("nan")
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            value = float(sm_fleiss_kappa(table, method="fleiss"))
    return Estimate(
        value=value,
        ci_low=None,
        ci_high=None,
        n=len(kept_units),
        method=method,
        details={
            "ratings_per_unit": float(m),
            "units_dropped": float(len(per_unit) - len(kept_units)),
        },
    )


def krippendorff_alpha(
    df: pd.DataFrame, level: Level, *, labels: Sequence | None = None
) -> Estimate:
    """Krippendorff's alpha at an explicit level of measurement (krippendorff package).

    `level` is required and passed on explicitly: the package itself defaults to "interval",
    which is wrong for categories. The raters x units matrix carries NaN wherever a rater did
    not rate a unit; any missing pattern is fine, and units with a single rating are not
    pairable and do not count. Values: nominal takes any categories; ordinal takes numbers
    (their numeric order) or categories ordered by `labels`; interval and ratio take numbers
    only (ratio assumes a true zero and non-negative values). `n` counts pairable units.
    Returns NaN when fewer than two distinct values occur (alpha is 0/0 there).
    """
    import krippendorff

    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    rated = ratings_frame(df, numeric=level in ("interval", "ratio"))
    if level in ("interval", "ratio"):
        if labels is not None:
            raise ValueError("labels apply to nominal and ordinal levels only")
        numeric_values = rated["value"].astype(float)
    elif level == "ordinal" and labels is None:
        if not _is_numeric(rated["value"]):
            raise ValueError("ordinal alpha on non-numeric values needs labels in order")
        numeric_values = rated["value"].astype(float)
    else:
        categories = category_order(rated["value"], labels)
        numeric_values = pd.Series(_codes(rated["value"], categories), index=rated.index)
    # raters x units, NaN where a rater did not rate a unit (a scatter, not DataFrame.pivot:
    # the pivot was most of the time on a million judgments).
    rater_index, raters = pd.factorize(rated["rater"])
    unit_index, units = pd.factorize(rated["unit"])
    matrix = np.full((len(raters), len(units)), np.nan)
    matrix[rater_index, unit_index] = numeric_values.to_numpy(dtype=float)
    pairable = int((np.sum(~np.isnan(matrix), axis=0) >= 2).sum())
    method = f"Krippendorff's alpha ({level})"
    if pairable == 0 or np.unique(matrix[~np.isnan(matrix)]).size < 2:
        return Estimate(float("nan"), None, None, pairable, method)
    value = krippendorff.alpha(reliability_data=matrix, level_of_measurement=level)
    return Estimate(float(value), None, None, pairable, method)


def gwet_ac1(df: pd.DataFrame, *, labels: Sequence | None = None) -> Estimate:
    """Gwet's (2008) AC1 for any number of raters with missing ratings allowed.

    AC1 = (pa - pe) / (1 - pe), following Gwet's Handbook (and R irrCAC's gwet.ac1.raw):
    pa = mean over units with r_i >= 2 ratings of sum_k r_ik (r_ik - 1) / (r_i (r_i - 1));
    pi_k = mean over all units with >= 1 rating of r_ik / r_i;
    pe = sum_k pi_k (1 - pi_k) / (q - 1), with q the number of categories: those in `labels`
    when given (unobserved ones included), else the observed ones. `n` counts units with
    >= 2 ratings; `details` holds pa, pe and q. NaN when q < 2 or no unit has two ratings.
    """
    rated = ratings_frame(df)
    categories = category_order(rated["value"], labels)
    counts, _ = _count_matrix(rated, categories)
    per_unit = counts.sum(axis=1)
    usable = per_unit >= 2
    q = len(categories)
    method = "Gwet's AC1"
    if q < 2 or not usable.any():
        return Estimate(float("nan"), None, None, int(usable.sum()), method)
    c2, r2 = counts[usable], per_unit[usable]
    pa = float(np.mean((c2 * (c2 - 1)).sum(axis=1) / (r2 * (r2 - 1))))
    pi = (counts / per_unit[:, None]).mean(axis=0)
    pe = float(np.sum(pi * (1 - pi)) / (q - 1))
    value = (pa - pe) / (1 - pe) if pe < 1 else float("nan")
    return Estimate(
        value=float(value),
        ci_low=None,
        ci_high=None,
        n=int(usable.sum()),
        method=method,
        details={"pa": pa, "pe": pe, "q": float(q)},
    )


@contextmanager
def _pingouin_unrounded() -> Iterator[None]:
    """pingouin rounds its CI95 column to 2 decimals by default; switch that off briefly."""
    import pingouin

    saved = dict(pingouin.options)
    pingouin.options["round"] = None
    pingouin.options["round.column.CI95"] = None
    try:
        yield
    finally:
        pingouin.options.clear()
        pingouin.options.update(saved)


def icc(df: pd.DataFrame, *, raters: Sequence | None = None) -> dict[str, Estimate]:
    """The six Shrout & Fleiss (1979) intraclass correlations (pingouin.intraclass_corr).

    Returns {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"} -> Estimate with the 95% CI
    (unrounded), F test p-value and `details` F, df1, df2. Values must be numeric.

    The ANOVA behind the ICCs needs a complete units x raters table. `raters` first restricts
    the table to those raters (default: every rater present); then every unit lacking a rating
    from any of them is dropped (listwise deletion) and the count goes to
    `details["units_dropped"]`. A design where different raters rate different units (crowd
    work) therefore loses most units: pick a fully crossed subset of raters first. `n` counts
    the units kept. Raises `ValueError` with fewer than 2 complete units or 2 raters.
    """
    import pingouin

    rated = ratings_frame(df, numeric=True)
    if raters is not None:
        rated = rated[rated["rater"].isin(list(raters))]
    wide = rated.pivot(index="unit", columns="rater", values="value")
    complete = wide.dropna(axis=0, how="any")
    dropped = len(wide) - len(complete)
    if complete.shape[0] < 2 or complete.shape[1] < 2:
        raise ValueError(
            f"ICC needs >= 2 units rated by all of >= 2 raters; have {complete.shape[0]} "
            f"complete units and {complete.shape[1]} raters ({dropped} incomplete units dropped)"
        )
    long = pd.DataFrame(
        {
            "target": np.repeat(np.arange(complete.shape[0]), complete.shape[1]),
            "judge": np.tile(np.arange(complete.shape[1]), complete.shape[0]),
            "score": complete.to_numpy(dtype=float).ravel(),
        }
    )
    with _pingouin_unrounded(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        table = pingouin.intraclass_corr(
            data=long, targets="target", raters="judge", ratings="score"
        )
    if len(table) != len(ICC_FORMS):  # pragma: no cover - a pingouin API change
        raise RuntimeError(f"unexpected pingouin.intraclass_corr output: {table['Type'].tolist()}")
    result: dict[str, Estimate] = {}
    for (name, description), (_, row) in zip(ICC_FORMS, table.iterrows(), strict=True):
        low, high = (float(x) for x in row["CI95"])
        result[name] = Estimate(
            value=float(row["ICC"]),
            ci_low=low,
            ci_high=high,
            n=int(complete.shape[0]),
            method=description,
            p_value=float(row["pval"]),
            details={
                "F": float(row["F"]),
                "df1": float(row["df1"]),
                "df2": float(row["df2"]),
                "raters": float(complete.shape[1]),
                "units_dropped": float(dropped),
            },
        )
    return result


# --------------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------------


def _as_float(result: float | Estimate) -> float:
    return float(result.value if isinstance(result, Estimate) else result)


def bootstrap_ci(
    df: pd.DataFrame,
    statistic: Callable[[pd.DataFrame], float | Estimate],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    cluster: Literal["unit", "item"] = "unit",
) -> Estimate:
    """Percentile bootstrap CI for `statistic(df)`, resampling units (or items) with replacement.

    Each replicate draws as many clusters as there are, with replacement, and keeps all rows
    of each drawn cluster (all of a unit's ratings; with `cluster="item"` all units of the
    item). A cluster drawn twice must count as two units, so in replicates `unit` (and `item`)
    are replaced by fresh integer ids; `statistic` must therefore use them only as keys.
    Deterministic for a given `seed` and row order. Replicates where the statistic is NaN
    (e.g. a single category drawn) are skipped and counted in `details["n_invalid"]`.
    `value` is the statistic on the full data; `n` counts clusters.
    """
    if cluster not in ("unit", "item"):
        raise ValueError(f"cluster must be 'unit' or 'item', not {cluster!r}")
    if cluster not in df.columns:
        raise ValueError(f"cannot resample by {cluster!r}: no such column")
    if df[cluster].isna().any() or df["unit"].isna().any():
        raise ValueError(f"every row needs a unit and a {cluster} to resample by")
    if not 0 < level < 1:
        raise ValueError("level must lie strictly between 0 and 1")
    point = _as_float(statistic(df))
    cluster_codes, clusters = pd.factorize(df[cluster])
    unit_codes, units = pd.factorize(df["unit"])
    n_clusters = len(clusters)
    order = np.argsort(cluster_codes, kind="stable")
    sizes = np.bincount(cluster_codes, minlength=n_clusters)
    rows_of = np.split(order, np.cumsum(sizes)[:-1])
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_boot, dtype=float)
    for b in range(n_boot):
        draw = rng.integers(0, n_clusters, size=n_clusters)
        index = np.concatenate([rows_of[k] for k in draw])
        draw_no = np.repeat(np.arange(n_clusters), sizes[draw])
        sample = df.iloc[index].copy()
        sample["unit"] = draw_no.astype(np.int64) * len(units) + unit_codes[index]
        if cluster == "item":
            sample["item"] = draw_no
        replicates[b] = _as_float(statistic(sample))
    valid = replicates[np.isfinite(replicates)]
    tail = (1 - level) / 2
    low, high = (None, None)
    if valid.size:
        low, high = (float(x) for x in np.quantile(valid, [tail, 1 - tail]))
    return Estimate(
        value=point,
        ci_low=low,
        ci_high=high,
        n=n_clusters,
        method=f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, level={level})",
        details={"n_boot": float(n_boot), "n_invalid": float(n_boot - valid.size)},
    )


# --------------------------------------------------------------------------------------------
# Human ceiling: leave one rater out
# --------------------------------------------------------------------------------------------


@dataclass
class RaterAgreement:
    """One rater's agreement with a reference (the majority of other humans).

    For a human: against the majority of the other humans on the units it rated. For a proxy:
    the mean over held-out humans h of its agreement with the majority of the humans other
    than h, on the units h rated (the same references the humans faced). `n_units` counts
    units compared (for a proxy, summed over held-out humans). `extra` is the optional custom
    statistic.
    """

    rater: object
    n_units: int
    kappa: float
    percent_agreement: float
    extra: float | None = None


@dataclass
class HumanCeiling:
    """Leave-one-rater-out agreement of each human, their unweighted means, and proxies."""

    humans: list[RaterAgreement]
    mean_kappa: float
    mean_percent_agreement: float
    mean_extra: float | None
    proxies: list[RaterAgreement]
    method: str


AgreementStatistic = Callable[[np.ndarray, np.ndarray, np.ndarray], float]


def _majority_reference(
    others: np.ndarray, tie_break: TieBreak
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference rows from per-unit category counts of the other raters.

    Returns (row_unit, reference_code, weight): one row per unit, or with `split` one row per
    tied modal category with weight 1/(number tied).
    """
    top = others.max(axis=1, keepdims=True)
    tied = (others == top) & (top > 0)
    n_tied = tied.sum(axis=1)
    if tie_break == "lowest":
        rows = np.flatnonzero(n_tied > 0)
        return rows, tied[rows].argmax(axis=1), np.ones(rows.size)
    if tie_break == "drop":
        rows = np.flatnonzero(n_tied == 1)
        return rows, tied[rows].argmax(axis=1), np.ones(rows.size)
    rows, codes = np.nonzero(tied)
    return rows, codes, 1.0 / n_tied[rows]


def _agreement_row(
    rater: object,
    mine: np.ndarray,
    reference: np.ndarray,
    weight: np.ndarray,
    n_units: int,
    q: int,
    weights: KappaWeights,
    statistic: AgreementStatistic | None,
) -> RaterAgreement:
    if n_units == 0:
        nan = float("nan")
        return RaterAgreement(rater, 0, nan, nan, nan if statistic else None)
    kappa = cohen_kappa(mine, reference, weights=weights, labels=range(q), sample_weight=weight)
    percent = float(np.sum(weight * (mine == reference)) / np.sum(weight))
    extra = float(statistic(mine, reference, weight)) if statistic else None
    return RaterAgreement(rater, n_units, kappa.value, percent, extra)


def human_ceiling(
    df: pd.DataFrame,
    *,
    humans: Sequence | None = None,
    proxies: Sequence = (),
    weights: KappaWeights = None,
    labels: Sequence | None = None,
    tie_break: TieBreak = "split",
    min_others: int = 1,
    statistic: AgreementStatistic | None = None,
) -> HumanCeiling:
    """Leave-one-rater-out agreement: each human against the majority of the OTHER humans.

    For every human h and every unit h rated that at least `min_others` other humans also
    rated, the reference is the modal category among the other humans' ratings (proxies never
    vote). Cohen's kappa (`weights`/`labels` as in `cohen_kappa`) and percent agreement of h
    against these references are h's ceiling row; the means over humans (each human weighs the
    same, whatever its number of units) are the human ceiling. A proxy is scored against
    exactly the same references: for each h, on the units h was scored on (and the proxy
    rated), then averaged over h, so a proxy and the humans face identical targets.

    Ties among modal categories, decided deterministically:
    - "split" (default): each tied category is a reference with weight 1/t (t tied), i.e. the
      expected agreement under a random tie-break; kappa uses these as sample weights.
    - "lowest": the first tied category in the category order (labels or sorted values);
      biased towards low categories, kept for comparison with tools that do this.
    - "drop": units with a tied majority are left out (biased towards easy units).

    `humans` defaults to every rater not listed in `proxies`. `statistic(mine, reference,
    weight)` adds a custom agreement measure reported as `extra`.
    """
    if tie_break not in ("split", "lowest", "drop"):
        raise ValueError(f"tie_break must be 'split', 'lowest' or 'drop', not {tie_break!r}")
    if min_others < 1:
        raise ValueError("min_others must be at least 1")
    rated = ratings_frame(df)
    proxies = list(proxies)
    if humans is None:
        humans = [r for r in pd.unique(rated["rater"]) if r not in set(proxies)]
    humans = list(humans)
    if set(humans) & set(proxies):
        raise ValueError("a rater cannot be both a human and a proxy")
    if len(humans) < 2:
        raise ValueError("the human ceiling needs at least two humans")
    rated = rated[rated["rater"].isin(humans + proxies)]
    if labels is None and weights is not None and not _is_numeric(rated["value"]):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    categories = category_order(rated["value"], labels)
    q = len(categories)
    coded = rated.assign(code=_codes(rated["value"], categories))
    wide = coded.pivot(index="unit", columns="rater", values="code")
    for rater in humans + proxies:
        if rater not in wide.columns:
            wide[rater] = np.nan
    human_codes = wide[humans].to_numpy(dtype=float)
    counts = np.stack([(human_codes == k).sum(axis=1) for k in range(q)], axis=1).astype(float)

    references: dict[object, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    human_rows: list[RaterAgreement] = []
    for j, h in enumerate(humans):
        mine = human_codes[:, j]
        rated_by_h = ~np.isnan(mine)
        others = counts.copy()
        others[rated_by_h, mine[rated_by_h].astype(int)] -= 1
        eligible = rated_by_h & (others.sum(axis=1) >= min_others)
        others[~eligible] = 0
        rows, ref, w = _majority_reference(others, tie_break)
        references[h] = (rows, ref, w)
        human_rows.append(
            _agreement_row(
                _plain(h),
                mine[rows].astype(int),
                ref,
                w,
                np.unique(rows).size,
                q,
                weights,
                statistic,
            )
        )

    proxy_rows: list[RaterAgreement] = []
    for p in proxies:
        theirs = wide[p].to_numpy(dtype=float)
        per_h: list[RaterAgreement] = []
        for h in humans:
            rows, ref, w = references[h]
            keep = ~np.isnan(theirs[rows])
            per_h.append(
                _agreement_row(
                    _plain(h),
                    theirs[rows[keep]].astype(int),
                    ref[keep],
                    w[keep],
                    np.unique(rows[keep]).size,
                    q,
                    weights,
                    statistic,
                )
            )
        proxy_rows.append(
            RaterAgreement(
                rater=_plain(p),
                n_units=sum(r.n_units for r in per_h),
                kappa=_nanmean([r.kappa for r in per_h if r.n_units]),
                percent_agreement=_nanmean([r.percent_agreement for r in per_h if r.n_units]),
                extra=_nanmean([r.extra for r in per_h if r.n_units]) if statistic else None,
            )
        )

    scored = [r for r in human_rows if r.n_units]
    return HumanCeiling(
        humans=human_rows,
        mean_kappa=_nanmean([r.kappa for r in scored]),
        mean_percent_agreement=_nanmean([r.percent_agreement for r in scored]),
        mean_extra=_nanmean([r.extra for r in scored]) if statistic else None,
        proxies=proxy_rows,
        method=(
            "leave-one-rater-out: each human vs the majority of the other humans "
            f"(ties: {tie_break}; kappa weights: {weights or 'none'}; unweighted mean over humans)"
        ),
    )


def _plain(value: object) -> object:
    """numpy scalars (from pandas) as plain Python values, for rendering and JSON."""
    return value.item() if isinstance(value, np.generic) else value


def _nanmean(values: Sequence[float | None]) -> float:
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")
