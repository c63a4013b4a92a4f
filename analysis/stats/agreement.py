"""Agreement among raters (humans and proxies alike) on a tidy table of ratings.

Input: a `pandas.DataFrame` with one row per rating and the columns `unit` (what is rated),
`rater` and `value`; optionally `item` (the source item a unit belongs to, the cluster for
item-level bootstraps). Rules shared by every function here:

- Rows whose `value` is missing (NaN/None) are dropped first: a missing value is "not rated"
  (counted in `excluded["missing_values"]`).
- A rater may rate a unit at most once; a duplicate (unit, rater) pair raises `ValueError`
  (aggregate repeated judgments before calling).
- Categories are compared by equality. Pass the declared scale as `labels` (criterion scale
  1..n, severity 0..2, a categorical criterion's options, yes/no): AC1's chance term, AC2's and
  weighted kappa's weights depend on the category set, so a coefficient computed on the values
  observed changes when any rater uses a new category. Without `labels` the sorted observed
  values are used and the result says so (`categories_from`). Order matters for weighted
  kappa, AC2, ordinal alpha and tie-breaking: the order of `labels`, else numeric order.
- A coefficient that is undefined on the data (a single category, no unit with two ratings)
  comes back as NaN rather than raising, so that bootstrap replicates can skip it.

Results are `Agreement` objects: an `Estimate` plus the numbers a report must show beside the
value (units, raters, ratings, what was excluded and why, warnings as sentences, the level of
measurement, the category set, the weights, the SE, and B and the seed of a bootstrap CI).

Everything is implemented here on numpy/scipy: the `krippendorff` and `pingouin` packages
(GPL) are test-only oracles. Pinned against published values (Krippendorff 2011, Shrout &
Fleiss 1979, Gwet's irrCAC, R irr) and lme4 in `tests/analysis/stats/test_agreement*.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import optimize, sparse
from scipy import stats as sps
from scipy.linalg import cho_factor, cho_solve
from threadpoolctl import threadpool_limits

from analysis.stats import Estimate

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[str, ...] = ("nominal", "ordinal", "interval", "ratio")
KappaWeights = Literal["linear", "quadratic"] | None
# Gwet's weight families (irrCAC weights.gen.r): identity = unweighted.
AgreementWeights = Literal["identity", "linear", "quadratic", "ordinal"]
TieBreak = Literal["split", "lowest", "drop"]
Cluster = Literal["unit", "item"]

#: Bootstrap replicates by default: enough for stable 2.5 % / 97.5 % percentiles.
N_BOOT = 2000
#: Replicates of the parametric bootstrap behind REML ICC intervals (each one is a REML fit).
N_BOOT_ICC = 500
CONFLEV = 0.95
# Floats held at once by a block of bootstrap replicates (sums per feature, tables per pair):
# bounds memory whatever the number of replicates, features or clusters.
_BLOCK_FLOATS = 4_000_000
# Above this many distinct values the coincidence matrix is not materialised per replicate.
_MAX_BOOT_VALUES = 64

# Shrout & Fleiss (1979) names, in their Table 4 order, with McGraw & Wong (1996) descriptions.
ICC_FORMS: tuple[tuple[str, str], ...] = (
    ("ICC1", "ICC(1,1): one-way random effects, absolute agreement, single rater"),
    ("ICC2", "ICC(2,1) = ICC(A,1): two-way random effects, absolute agreement, single rater"),
    ("ICC3", "ICC(3,1) = ICC(C,1): two-way mixed effects, consistency, single rater"),
    ("ICC1k", "ICC(1,k): one-way random effects, absolute agreement, mean of k raters"),
    ("ICC2k", "ICC(2,k) = ICC(A,k): two-way random effects, absolute agreement, mean of k raters"),
    ("ICC3k", "ICC(3,k) = ICC(C,k): two-way mixed effects, consistency, mean of k raters"),
)


@dataclass
class Agreement(Estimate):
    """An agreement coefficient with what a reader needs beside the number.

    `n` keeps its `Estimate` meaning (what the coefficient is based on: pairable units, units
    with >= 2 ratings, pairs; each function says which); `n_units`, `n_raters`, `n_ratings`
    count what entered the computation. `excluded` maps a reason to a count (ratings, units or
    pairs, the key says which). `warnings` are sentences a report shows next to the number.
    `se` is the analytic standard error where one is published (else None); `ci_method` says
    how the CI was obtained; `n_boot`, `seed` and `cluster` describe a bootstrap CI. `level` is
    the level of measurement (Krippendorff's alpha), `weights` the weighting, `categories` the
    category set in order and `categories_from` where it came from.
    """

    se: float | None = None
    ci_method: str | None = None
    n_units: int = 0
    n_raters: int = 0
    n_ratings: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    level: str | None = None
    weights: str | None = None
    categories: list | None = None
    categories_from: str | None = None
    n_boot: int | None = None
    seed: int | None = None
    cluster: str | None = None


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def ratings_frame(df: pd.DataFrame, *, numeric: bool = False) -> pd.DataFrame:
    """Validate a tidy ratings table; return its rated rows (missing values dropped).

    Raises `ValueError` when `unit`, `rater` or `value` is absent, when a rater rated a unit
    twice, or (with `numeric=True`) when a value is not a number.
    """
    return _validated(df, numeric=numeric)[0]


def _validated(df: pd.DataFrame, *, numeric: bool = False
               ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`ratings_frame` plus the integer codes it computes anyway: (rated, unit codes, unit
    labels, rater codes, rater labels). Factorising a million object keys costs tens of
    milliseconds each time, so it is done once."""
    missing = [c for c in ("unit", "rater", "value") if c not in df.columns]
    if missing:
        raise ValueError(f"ratings table lacks column(s) {missing}; expected unit, rater, value")
    rated = df[df["value"].notna()]
    # Duplicate (unit, rater) pairs, found on integer codes: much faster than
    # DataFrame.duplicated on two object columns for a million rows.
    unit_codes, units = pd.factorize(rated["unit"])
    rater_codes, raters = pd.factorize(rated["rater"])
    keys = unit_codes.astype(np.int64) * max(len(raters), 1) + rater_codes
    cells = len(units) * max(len(raters), 1)
    if cells <= 50_000_000:  # a bincount over unit x rater cells beats hashing the keys
        repeated = np.bincount(keys, minlength=cells) > 1
        duplicated = repeated[keys] if repeated.any() else None
    else:
        duplicated = pd.Series(keys).duplicated(keep=False).to_numpy()
    if duplicated is not None and duplicated.any():
        first = rated.loc[duplicated, ["unit", "rater"]].iloc[0]
        raise ValueError(
            f"rater {first['rater']!r} rated unit {first['unit']!r} more than once; "
            "aggregate repeated judgments first"
        )
    if numeric:
        rated = rated.assign(value=pd.to_numeric(rated["value"], errors="raise").astype(float))
    return rated, unit_codes, np.asarray(units), rater_codes, np.asarray(raters)


@dataclass
class _Coded:
    """A validated ratings table on integer codes: unit, rater and category per rating."""

    rated: pd.DataFrame
    unit: np.ndarray
    units: np.ndarray
    rater: np.ndarray
    raters: np.ndarray
    code: np.ndarray
    categories: list
    source: str
    excluded: dict[str, int]

    def counts(self) -> np.ndarray:
        """Units x categories rating counts (irrCAC's agree.mat), one bincount."""
        q = len(self.categories)
        flat = np.bincount(self.unit.astype(np.int64) * q + self.code,
                           minlength=len(self.units) * q)
        return flat.reshape(len(self.units), q).astype(float)


def _coded(df: pd.DataFrame, labels: Sequence | None) -> _Coded:
    rated, unit, units, rater, raters = _validated(df)
    code, categories, source = _category_codes(rated["value"], labels)
    return _Coded(rated, unit, units, rater, raters, code, categories, source, _missing(df))


def _category_codes(values: pd.Series, labels: Sequence | None) -> tuple[np.ndarray, list, str]:
    """Category codes of `values` in the order of `category_order`, from one factorisation
    (the category set is decided on the distinct values, not on every rating)."""
    raw, uniques = pd.factorize(values)
    categories = category_order(list(uniques), labels)
    position = (pd.Index(categories).get_indexer(np.asarray(uniques, dtype=object))
                if len(uniques) else np.empty(0, dtype=np.intp))
    if (position < 0).any():
        raise ValueError("some values are not among the categories")
    return position[raw].astype(np.int64), categories, (
        "labels" if labels is not None else "observed values")


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


def _categories(values: pd.Series, labels: Sequence | None) -> tuple[list, str]:
    """The category set and where it came from (the result must say)."""
    order = category_order(values, labels)
    return order, ("labels" if labels is not None else "observed values")


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


def _missing(df: pd.DataFrame) -> dict[str, int]:
    dropped = int(df["value"].isna().sum()) if "value" in df.columns else 0
    return {"missing_values": dropped} if dropped else {}


def _plain(value: object) -> object:
    """numpy scalars (from pandas) as plain Python values, for rendering and JSON."""
    return value.item() if isinstance(value, np.generic) else value


def _nanmean(values: Sequence[float | None]) -> float:
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _t_interval(
    value: float, se: float, n: int, conflev: float, bounds: tuple[float, float]
) -> tuple[float | None, float | None]:
    """value +- t(n-1) se, clipped to the coefficient's range (irrCAC's interval: Student t on
    n - 1 degrees of freedom; irrCAC caps the upper bound at 1, we clip both ends)."""
    if not (np.isfinite(value) and np.isfinite(se)) or n < 2:
        return None, None
    half = float(sps.t.ppf(1 - (1 - conflev) / 2, n - 1)) * se
    return max(bounds[0], value - half), min(bounds[1], value + half)


def _percentile(replicates: np.ndarray, conflev: float) -> tuple[float | None, float | None, int]:
    """Percentile interval of the finite replicates, and how many were not finite."""
    finite = replicates[np.isfinite(replicates)]
    invalid = int(replicates.size - finite.size)
    if not finite.size:
        return None, None, invalid
    tail = (1 - conflev) / 2
    low, high = np.quantile(finite, [tail, 1 - tail])
    return float(low), float(high), invalid


# --------------------------------------------------------------------------------------------
# Weights and the Gwet family (percent agreement, AC1/AC2, Fleiss' kappa)
# --------------------------------------------------------------------------------------------


def agreement_weights(categories: Sequence, weights: AgreementWeights | None) -> np.ndarray:
    """Gwet's agreement weights (1 on the diagonal), as in irrCAC's weights.gen.r.

    identity (unweighted); linear 1 - |x_k - x_l| / (max - min); quadratic
    1 - (x_k - x_l)^2 / (max - min)^2, on the category values when they are numbers and on
    their positions 1..q otherwise; ordinal 1 - C(|k - l| + 1, 2) / max, on positions only.
    """
    q = len(categories)
    if weights in (None, "identity"):
        return np.eye(q)
    if weights not in ("linear", "quadratic", "ordinal"):
        raise ValueError(f"weights must be identity, linear, quadratic or ordinal: {weights!r}")
    if q < 2:
        return np.ones((q, q))
    positions = np.arange(1, q + 1, dtype=float)
    if weights == "ordinal":
        gaps = np.abs(positions[:, None] - positions[None, :]) + 1
        raw = gaps * (gaps - 1) / 2
        return 1 - raw / raw.max()
    x = np.asarray(categories, dtype=float) if _is_numeric(categories) else positions
    span = x.max() - x.min()
    distance = np.abs(x[:, None] - x[None, :]) / span
    return 1 - (distance if weights == "linear" else distance**2)


def _kappa_weights(q: int, weights: KappaWeights) -> np.ndarray:
    """Agreement weights of Cohen's weighted kappa on category positions (as scikit-learn and
    vcd: linear 1 - |i - j| / (q - 1), quadratic 1 - (i - j)^2 / (q - 1)^2)."""
    if weights is None or q < 2:
        return np.eye(q)
    positions = np.arange(q, dtype=float)
    distance = np.abs(positions[:, None] - positions[None, :]) / (q - 1)
    return 1 - (distance if weights == "linear" else distance**2)


@dataclass
class _GwetResult:
    value: float
    se: float
    pa: float
    pe: float
    n: int  # units with >= 1 rating (irrCAC's n)
    n2: int  # units with >= 2 ratings


def _gwet(counts: np.ndarray, w: np.ndarray, coefficient: str) -> _GwetResult:
    """Percent agreement, Gwet's AC1/AC2 or Fleiss' kappa with missing ratings, and Gwet's
    variance, following Gwet's Handbook (2014) as coded in irrCAC's pa.coeff.raw,
    gwet.ac1.raw and fleiss.kappa.raw.

    `counts`: units x categories rating counts of the units with at least one rating. Units
    with a single rating add nothing to observed agreement but count in the category
    prevalences pi_k (that is the missing-data formulation: no unit is dropped).
    """
    n, q = counts.shape
    r = counts.sum(axis=1)
    weighted = counts @ w.T
    sum_q = (counts * (weighted - 1)).sum(axis=1)
    two = r >= 2
    n2 = int(two.sum())
    nan = float("nan")
    if n2 == 0 or q == 0:
        return _GwetResult(nan, nan, nan, nan, n, n2)
    pa = float(np.sum(sum_q[two] / (r[two] * (r[two] - 1))) / n2)
    pi = (counts / r[:, None]).mean(axis=0)
    if coefficient == "pa":
        pe = 0.0
    elif coefficient == "ac1":
        pe = float(w.sum() * np.sum(pi * (1 - pi)) / (q * (q - 1))) if q >= 2 else 1.0
    else:
        pe = float(np.sum(w * np.outer(pi, pi))) if q >= 2 else 1.0
    if pe >= 1:  # a single category: chance agreement is certain, the coefficient undefined
        return _GwetResult(nan, nan, pa, pe, n, n2)
    value = (pa - pe) / (1 - pe)
    # Per-unit linearised contributions (Gwet 2008); a unit with < 2 ratings has pa_i = 0.
    denominator = np.where(two, r * (r - 1), 1.0)
    pa_i = np.where(two, sum_q / denominator, 0.0)
    if coefficient == "pa":
        contribution = (n / n2) * pa_i
    else:
        coef_i = (n / n2) * (pa_i - pe * two) / (1 - pe)
        if coefficient == "ac1":
            pe_i = (w.sum() / (q * (q - 1))) * (counts @ (1 - pi)) / r
        else:
            pe_i = (counts @ ((w @ pi + w.T @ pi) / 2)) / r
        contribution = coef_i - 2 * (1 - value) * (pe_i - pe) / (1 - pe)
    se = float(np.sqrt(np.sum((contribution - value) ** 2) / (n * (n - 1)))) if n >= 2 else nan
    return _GwetResult(float(value), se, pa, pe, n, n2)


def _gwet_estimate(
    coded: _Coded,
    counts: np.ndarray,
    excluded: dict[str, int],
    *,
    weights: AgreementWeights | None,
    coefficient: str,
    name: str,
    conflev: float,
    bounds: tuple[float, float],
    extra_warnings: Sequence[str] = (),
) -> Agreement:
    """A Gwet-family coefficient from the units x categories counts of the units kept."""
    categories = coded.categories
    w = agreement_weights(categories, weights)
    result = _gwet(counts, w, coefficient)
    single = int((counts.sum(axis=1) == 1).sum())
    excluded = dict(excluded)
    notes = list(extra_warnings)
    if single:
        excluded["units_with_one_rating"] = single
        notes.append(
            f"{single} of {result.n} units have a single rating: left out of observed "
            "agreement" + ("" if coefficient == "pa" else ", kept in the category prevalences")
        )
    if result.n2 == 0:
        notes.append("no unit has two ratings: undefined")
    elif not np.isfinite(result.value):
        notes.append("a single category in use: chance agreement is 1 and the value undefined")
    low, high = _t_interval(result.value, result.se, result.n, conflev, bounds)
    weight_name = "identity" if weights in (None, "identity") else weights
    return Agreement(
        value=result.value,
        ci_low=low,
        ci_high=high,
        n=result.n2,
        method=f"{name}{'' if weight_name == 'identity' else f' ({weight_name} weights)'}; "
        f"Gwet's variance, {conflev:.0%} t interval (irrCAC)",
        details={"pa": result.pa, "pe": result.pe, "q": float(len(categories))},
        se=None if not np.isfinite(result.se) else result.se,
        ci_method=f"analytic (Gwet 2008/2014 linearisation, t with {result.n - 1} df; units "
        "treated as independent)",
        n_units=result.n,
        n_raters=len(coded.raters),
        n_ratings=int(counts.sum()),
        excluded=excluded,
        warnings=notes,
        weights=weight_name,
        categories=[_plain(c) for c in categories],
        categories_from=coded.source,
    )


# --------------------------------------------------------------------------------------------
# Coefficients
# --------------------------------------------------------------------------------------------


def percent_agreement(
    df: pd.DataFrame,
    *,
    labels: Sequence | None = None,
    weights: AgreementWeights | None = None,
    conflev: float = CONFLEV,
) -> Agreement:
    """Observed agreement: the share of agreeing rater pairs per unit, averaged over units.

    For a unit with r ratings of which r_k fall into category k, the unit's agreement is
    sum_k r_k (r_k - 1) / (r (r - 1)); units with fewer than two ratings are left out; every
    unit weighs the same. With two raters this is the plain proportion of matching units. It
    is the `pa` of Gwet's AC1 and of Fleiss' kappa. `n` counts the units used. The CI is
    Gwet's (irrCAC pa.coeff.raw); `weights` gives the weighted percent agreement.
    """
    coded = _coded(df, labels)
    return _gwet_estimate(
        coded, coded.counts(), coded.excluded, weights=weights, coefficient="pa",
        name="percent agreement (pairwise, mean over units with >= 2 ratings)",
        conflev=conflev, bounds=(0.0, 1.0),
    )


def gwet_ac1(
    df: pd.DataFrame,
    *,
    labels: Sequence | None = None,
    weights: AgreementWeights | None = None,
    conflev: float = CONFLEV,
) -> Agreement:
    """Gwet's (2008) AC1 (AC2 with `weights`) for any number of raters, missing ratings allowed.

    AC1 = (pa - pe) / (1 - pe), following Gwet's Handbook (and R irrCAC's gwet.ac1.raw):
    pa = mean over units with r_i >= 2 ratings of sum_k r_ik (r*_ik - 1) / (r_i (r_i - 1))
    (r*_ik = sum_l w_kl r_il); pi_k = mean over all units with >= 1 rating of r_ik / r_i;
    pe = sum(w) sum_k pi_k (1 - pi_k) / (q (q - 1)), with q the number of categories: those in
    `labels` when given (unobserved ones included), else the observed ones. `n` counts units
    with >= 2 ratings; `details` holds pa, pe and q. NaN when q < 2 or no unit has two ratings.
    The CI uses Gwet's variance (t with n - 1 df, n = units with >= 1 rating).
    """
    coded = _coded(df, labels)
    weighted = weights not in (None, "identity")
    return _gwet_estimate(
        coded, coded.counts(), coded.excluded, weights=weights, coefficient="ac1",
        name="Gwet's AC2" if weighted else "Gwet's AC1", conflev=conflev, bounds=(-1.0, 1.0),
    )


def _kappa_from_tables(tables: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted kappa of (..., q, q) contingency tables (rows: first rater) with agreement
    weights `w`; NaN where undefined (no pairs, or chance agreement 1)."""
    total = tables.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = tables / total[..., None, None]
        rows, cols = p.sum(axis=-1), p.sum(axis=-2)
        po = (w * p).sum(axis=(-2, -1))
        pe = (w * rows[..., :, None] * cols[..., None, :]).sum(axis=(-2, -1))
        kappa = (po - pe) / (1 - pe)
    return np.where((total > 0) & (1 - pe > 1e-12), kappa, np.nan)


def _kappa_se(table: np.ndarray, w: np.ndarray, kappa: float) -> float:
    """Large-sample SE of (weighted) kappa: Fleiss, Cohen & Everitt (1969), as in irrCAC's
    kappa2.table and vcd::Kappa. `table` may hold fractional weights; n is its total."""
    n = table.sum()
    if n < 2 or not np.isfinite(kappa):
        return float("nan")
    p = table / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    pa = float((w * p).sum())
    pe = float((w * np.outer(rows, cols)).sum())
    row_bar, col_bar = w @ cols, w.T @ rows
    inner = (w - (1 - kappa) * (row_bar[:, None] + col_bar[None, :])) ** 2
    variance = (float((p * inner).sum()) - (pa - 2 * (1 - kappa) * pe) ** 2) / (n * (1 - pe) ** 2)
    return float(np.sqrt(max(variance, 1e-100)))


def cohen_kappa(
    a: Sequence,
    b: Sequence,
    weights: KappaWeights = None,
    labels: Sequence | None = None,
    sample_weight: Sequence[float] | None = None,
    conflev: float = CONFLEV,
) -> Agreement:
    """Cohen's kappa for two raters' paired ratings `a[i]`, `b[i]`, with its analytic CI.

    Pairs with a missing value on either side are dropped (`excluded["missing_pairs"]`); `n`
    counts the pairs used. Weighted kappa (`weights="linear"` or `"quadratic"`) penalises a
    disagreement by the distance between the two categories' positions in the category order
    (positions, not numeric differences): pass `labels` in order unless the values are numbers,
    whose numeric order is used. Non-numeric values without `labels` are refused for weighted
    kappa, because sorting them alphabetically would silently invent an order. Symmetric in
    `a` and `b`. `sample_weight` weighs pairs (the human ceiling uses it to split tied
    majorities). The SE is Fleiss, Cohen & Everitt's (1969) (irrCAC kappa2.table), the CI
    kappa +- t(n-1) SE clipped to [-1, 1]. NaN when kappa is undefined (both raters always use
    the same single category).
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
    categories, source = _categories(both, labels)
    q = len(categories)
    sw = (np.ones(int(keep.sum())) if sample_weight is None
          else np.asarray(sample_weight, dtype=float)[keep])
    method = "Cohen's kappa" if weights is None else f"Cohen's kappa ({weights} weights)"
    n = int(keep.sum())
    dropped = int((~keep).sum())
    common = {
        "n_units": n, "n_raters": 2, "n_ratings": 2 * n,
        "excluded": {"missing_pairs": dropped} if dropped else {},
        "weights": weights or "identity", "categories": [_plain(c) for c in categories],
        "categories_from": source,
    }
    if n == 0 or q < 2:
        return Agreement(float("nan"), None, None, n, method,
                         warnings=["fewer than two categories or no pairs: undefined"], **common)
    table = np.zeros((q, q))
    np.add.at(table, (_codes(a_kept, categories), _codes(b_kept, categories)), sw)
    w = _kappa_weights(q, weights)
    value = float(_kappa_from_tables(table, w))
    se = _kappa_se(table, w, value)
    low, high = _t_interval(value, se, n, conflev, (-1.0, 1.0))
    notes = [] if np.isfinite(value) else ["both raters use a single category: undefined"]
    return Agreement(
        value=value, ci_low=low, ci_high=high, n=n,
        method=f"{method}; Fleiss-Cohen-Everitt SE, {conflev:.0%} t interval",
        se=se if np.isfinite(se) else None,
        ci_method=f"analytic (Fleiss, Cohen & Everitt 1969; t with {n - 1} df)",
        warnings=notes, **common,
    )


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
    unbalanced: Literal["raise", "drop", "gwet"] = "raise",
    weights: AgreementWeights | None = None,
    conflev: float = CONFLEV,
) -> Agreement:
    """Fleiss' (1971) kappa for many raters, with Gwet's variance and CI.

    Fleiss' kappa was defined for the same number m >= 2 of ratings on every unit (who the
    raters are may differ from unit to unit). Other patterns:
    - `unbalanced="gwet"`: Gwet's missing-data formulation (irrCAC fleiss.kappa.raw): every
      unit with a rating counts in the category prevalences, every unit with >= 2 ratings in
      observed agreement; nothing is dropped. On balanced data it equals Fleiss' kappa.
    - `"raise"` (default): any unbalanced pattern raises `ValueError`.
    - `"drop"`: only the units carrying the most common number of ratings (at least 2; the
      larger number on a tie) are kept; the result carries a warning saying how many units
      were dropped (`excluded["units_dropped_unbalanced"]`, `details["units_dropped"]`).
    `n` counts the units used for observed agreement.
    """
    if unbalanced not in ("raise", "drop", "gwet"):
        raise ValueError(f"unbalanced must be 'raise', 'drop' or 'gwet', not {unbalanced!r}")
    coded = _coded(df, labels)
    excluded = dict(coded.excluded)
    counts = coded.counts()
    per_unit = counts.sum(axis=1)
    multiple = per_unit[per_unit >= 2].astype(int)
    name = "Fleiss' kappa"
    if multiple.size == 0:
        return Agreement(float("nan"), None, None, 0, name, n_units=len(per_unit),
                         n_raters=len(coded.raters), n_ratings=int(per_unit.sum()),
                         excluded=excluded, warnings=["no unit has two ratings: undefined"],
                         categories=[_plain(c) for c in coded.categories],
                         categories_from=coded.source)
    notes: list[str] = []
    dropped = 0
    frequency = np.bincount(multiple)
    m = int(np.flatnonzero(frequency == frequency.max()).max())  # larger m on a tie
    if unbalanced == "gwet":
        name = "Fleiss' kappa (Gwet's missing-data formulation)"
    elif np.unique(per_unit).size != 1:
        if unbalanced == "raise":
            raise ValueError(
                "Fleiss' kappa needs the same number of ratings on every unit; found "
                f"{sorted(np.unique(per_unit).astype(int).tolist())}. Use unbalanced='gwet' "
                "(Gwet's missing-data formulation) or 'drop'"
            )
        kept = per_unit == m
        dropped = int((~kept).sum())
        counts = counts[kept]
        excluded["units_dropped_unbalanced"] = dropped
        notes.append(
            f"{dropped} of {len(per_unit)} units dropped: they do not carry {m} ratings "
            "(use Gwet's missing-data formulation to keep them)"
        )
    result = _gwet_estimate(
        coded, counts, excluded, weights=weights, coefficient="fleiss", name=name,
        conflev=conflev, bounds=(-1.0, 1.0), extra_warnings=notes,
    )
    if unbalanced != "gwet":
        result.details.update({"ratings_per_unit": float(m), "units_dropped": float(dropped)})
    return result


# --------------------------------------------------------------------------------------------
# Krippendorff's alpha (from the coincidence matrix; no wide table)
# --------------------------------------------------------------------------------------------


def _alpha_from_coincidence(
    coincidence: np.ndarray, level: str, values: np.ndarray | None
) -> np.ndarray:
    """alpha = 1 - (n - 1) sum o_ck d_ck / sum n_c n_k d_ck (Krippendorff 2011) for
    (..., V, V) coincidence matrices over values in order. The ordinal metric
    d_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2 equals (G_k - G_c)^2 with the mid-ranks
    G = cumsum(n) - n / 2, computed per matrix (it depends on the marginals)."""
    marginals = coincidence.sum(axis=-1)
    n = marginals.sum(axis=-1)
    size = coincidence.shape[-1]
    if level == "nominal":
        delta = 1.0 - np.eye(size)
    elif level == "ordinal":
        mid = np.cumsum(marginals, axis=-1) - marginals / 2
        delta = (mid[..., :, None] - mid[..., None, :]) ** 2
    elif level == "interval":
        delta = (values[:, None] - values[None, :]) ** 2
    else:
        total = values[:, None] + values[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = np.where(total == 0, 0.0, ((values[:, None] - values[None, :]) / total) ** 2)
    observed = (coincidence * delta).sum(axis=(-2, -1))
    expected = (marginals[..., :, None] * marginals[..., None, :] * delta).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = 1 - (n - 1) * observed / expected
    return np.where(expected > 0, alpha, np.nan)


@dataclass
class _Pairable:
    """The pairable values (units with >= 2 ratings) on integer codes."""

    unit: np.ndarray  # per rating: pairable unit index 0..U-1
    code: np.ndarray  # per rating: value index 0..V-1 (order of `values`)
    values: np.ndarray  # numeric value of each code (positions for nominal/ordinal labels)
    m: np.ndarray  # ratings per pairable unit
    n_units: int
    n_values: int
    unit_labels: np.ndarray  # the unit of each pairable unit index


def _pairable(rated: pd.DataFrame, unit_index: np.ndarray, units: np.ndarray, level: str,
              labels: Sequence | None) -> tuple[_Pairable, list]:
    """Code the ratings (categories by `labels` or sorted, numbers by value) and keep pairable
    units. Returns the coded data and the category list (or distinct numbers)."""
    if level in ("interval", "ratio") or (level == "ordinal" and labels is None):
        if level == "ordinal" and not _is_numeric(pd.unique(rated["value"])):
            raise ValueError("ordinal alpha on non-numeric values needs labels in order")
        raw, uniques = pd.factorize(rated["value"].to_numpy(dtype=float), sort=True)
        values, code = np.asarray(uniques, dtype=float), raw.astype(np.int64)
        categories = values.tolist()
    else:
        code, categories, _ = _category_codes(rated["value"], labels)
        values = np.arange(len(categories), dtype=float)
    per_unit = np.bincount(unit_index, minlength=len(units))
    keep_unit = per_unit >= 2
    new_index = np.cumsum(keep_unit) - 1
    rows = keep_unit[unit_index]
    coded = _Pairable(
        unit=new_index[unit_index[rows]],
        code=code[rows],
        values=values,
        m=per_unit[keep_unit].astype(float),
        n_units=int(keep_unit.sum()),
        n_values=len(values),
        unit_labels=units[keep_unit],
    )
    return coded, categories


def _unit_value_counts(data: _Pairable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit, code, count) for every value present in a unit, sorted by unit: one bincount
    over unit x value cells when that table is small enough, else one sort of int keys."""
    keys = data.unit.astype(np.int64) * data.n_values + data.code
    cells = data.n_units * data.n_values
    if cells <= 20_000_000:
        count = np.bincount(keys, minlength=cells)
        uniq = np.flatnonzero(count)
        count = count[uniq]
    else:
        uniq, count = np.unique(keys, return_counts=True)
    return uniq // data.n_values, uniq % data.n_values, count.astype(float)


def _alpha_point(data: _Pairable, level: str) -> float:
    """alpha on the pairable data in O(ratings): closed forms for nominal (matches within
    units), interval and ordinal (within-unit sums of squares, ordinal on mid-ranks); ratio
    through the sparse coincidence matrix."""
    n = float(data.m.sum())
    inv = 1.0 / (data.m - 1)
    if level == "nominal":
        unit, code, count = _unit_value_counts(data)
        matches = float(np.sum(count * (count - 1) * inv[unit]))
        marginals = np.bincount(data.code, minlength=data.n_values).astype(float)
        observed, expected = n - matches, n * n - float(np.sum(marginals**2))
    elif level in ("interval", "ordinal"):
        x = data.values
        if level == "ordinal":
            marginals = np.bincount(data.code, minlength=data.n_values).astype(float)
            x = np.cumsum(marginals) - marginals / 2
        v = x[data.code]
        s1 = np.bincount(data.unit, weights=v, minlength=data.n_units)
        s2 = np.bincount(data.unit, weights=v * v, minlength=data.n_units)
        observed = float(np.sum(2 * (data.m * s2 - s1 * s1) * inv))
        expected = 2 * n * float(np.sum(v * v)) - 2 * float(np.sum(v)) ** 2
    else:
        unit, code, count = _unit_value_counts(data)
        counts = sparse.csr_matrix((count, (unit, code)), shape=(data.n_units, data.n_values))
        # N' diag(1 / (m - 1)) N: the coincidences up to the diagonal, which the ratio metric
        # (0 on the diagonal) ignores.
        coincidence = (counts.T @ (sparse.diags(inv) @ counts)).tocoo()
        x = data.values
        total = x[coincidence.row] + x[coincidence.col]
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(total == 0, 0.0,
                         ((x[coincidence.row] - x[coincidence.col]) / total) ** 2)
        observed = float(np.sum(coincidence.data * d))
        marginals = np.bincount(data.code, minlength=data.n_values).astype(float)
        expected = 0.0
        for start in range(0, data.n_values, 2048):  # V x V in slices: bounded memory
            rows = slice(start, start + 2048)
            tot = x[rows, None] + x[None, :]
            with np.errstate(invalid="ignore", divide="ignore"):
                d = np.where(tot == 0, 0.0, ((x[rows, None] - x[None, :]) / tot) ** 2)
            expected += float(marginals[rows] @ d @ marginals)
    if expected <= 0:
        return float("nan")
    return float(1 - (n - 1) * observed / expected)


def krippendorff_alpha(
    df: pd.DataFrame,
    level: Level,
    *,
    labels: Sequence | None = None,
    n_boot: int = 0,
    seed: int = 0,
    cluster: Cluster = "unit",
    conflev: float = CONFLEV,
) -> Agreement:
    """Krippendorff's alpha at an explicit level of measurement, with an optional bootstrap CI.

    `level` is required (no silent "interval" default): nominal takes any categories; ordinal
    takes numbers (their numeric order) or categories ordered by `labels`; interval and ratio
    take numbers only (ratio assumes a true zero and non-negative values). Any missing pattern
    is fine; units with a single rating are not pairable and do not count
    (`excluded["units_with_one_rating"]`). `n` counts pairable units. Computed from the
    coincidence matrix on integer codes (Krippendorff 2011), in time linear in the ratings and
    without a raters x units table. NaN when fewer than two distinct values occur (0/0).

    `n_boot > 0` adds a percentile bootstrap CI resampling units (or, with `cluster="item"`,
    whole items with all their units) with replacement, vectorised over replicates (the
    coincidence matrix of a replicate is a weighted sum of per-cluster matrices); `seed` makes
    it reproducible. At the nominal, ordinal and ratio levels this needs at most 64 distinct
    values (else the CI is left out with a warning); interval data have no such limit.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    if level in ("interval", "ratio") and labels is not None:
        raise ValueError("labels apply to nominal and ordinal levels only")
    rated, unit_index, units, _, raters = _validated(
        df, numeric=level in ("interval", "ratio"))
    data, categories = _pairable(rated, unit_index, units, level, labels)
    all_units = len(units)
    excluded = _missing(df)
    notes: list[str] = []
    if all_units - data.n_units:
        excluded["units_with_one_rating"] = all_units - data.n_units
        notes.append(f"{all_units - data.n_units} of {all_units} units have a single rating "
                     "and are not pairable")
    method = f"Krippendorff's alpha ({level})"
    distinct = np.unique(data.code).size if data.n_units else 0
    if data.n_units == 0 or distinct < 2:
        value = float("nan")
        notes.append("fewer than two distinct values in pairable units: undefined")
    else:
        value = _alpha_point(data, level)
    categorical = level == "nominal" or (level == "ordinal" and labels is not None)
    result = Agreement(
        value=value, ci_low=None, ci_high=None, n=data.n_units, method=method,
        n_units=data.n_units,
        n_raters=len(raters), n_ratings=int(data.unit.size),
        excluded=excluded, warnings=notes, level=level,
        categories=[_plain(c) for c in categories] if categorical else None,
        categories_from=("labels" if labels is not None else "observed values")
        if categorical else None,
    )
    if n_boot > 0 and np.isfinite(value):
        _alpha_bootstrap(result, rated, data, level, n_boot=n_boot, seed=seed,
                         cluster=cluster, conflev=conflev)
    return result


def _cluster_of_units(rated: pd.DataFrame, unit_labels: np.ndarray, cluster: Cluster
                      ) -> tuple[np.ndarray, int]:
    """Cluster index of each unit in `unit_labels` (units themselves, or their item)."""
    if cluster == "unit":
        return np.arange(len(unit_labels)), len(unit_labels)
    if cluster != "item":
        raise ValueError(f"cluster must be 'unit' or 'item', not {cluster!r}")
    if "item" not in rated.columns:
        raise ValueError("cannot resample by 'item': no such column")
    item_of_unit = rated.drop_duplicates("unit").set_index("unit")["item"]
    if item_of_unit.isna().any():
        raise ValueError("every row needs a unit and an item to resample by")
    codes, items = pd.factorize(item_of_unit.reindex(unit_labels).to_numpy())
    return codes, len(items)


def _replicate_sums(
    cluster: np.ndarray,
    feature: np.ndarray,
    weight: np.ndarray,
    n_clusters: int,
    n_features: int,
    n_boot: int,
    seed: int,
) -> Iterator[np.ndarray]:
    """Blocks of bootstrap replicates of per-feature sums.

    Each replicate draws `n_clusters` clusters with replacement: the number of times each
    cluster is drawn is multinomial, and the replicate's sums are those counts times the
    per-cluster sums (a sparse clusters x features matrix), i.e. one sparse-dense product per
    block instead of rebuilding tables per replicate. Yields (block, n_features) arrays; the
    same `seed` gives the same replicates.
    """
    per_cluster = sparse.csr_matrix(
        (weight, (cluster, feature)), shape=(n_clusters, n_features)).T.tocsr()
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, _BLOCK_FLOATS // max(n_features, n_clusters, 1)))
    probabilities = np.full(n_clusters, 1.0 / n_clusters)
    done = 0
    while done < n_boot:
        size = min(block, n_boot - done)
        draws = rng.multinomial(n_clusters, probabilities, size=size).astype(float)
        yield np.asarray(per_cluster @ draws.T).T
        done += size


def _describe_boot(result: Agreement, n_boot: int, seed: int, cluster: str, invalid: int,
                   conflev: float) -> None:
    result.n_boot, result.seed, result.cluster = n_boot, seed, cluster
    result.ci_method = (f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, "
                        f"{conflev:.0%})")
    result.method += f"; {conflev:.0%} percentile bootstrap CI over {cluster}s"
    result.details.update({"n_boot": float(n_boot), "n_invalid": float(invalid)})
    if invalid:
        result.warnings.append(f"{invalid} of {n_boot} bootstrap replicates undefined "
                               "(skipped)")


def _alpha_bootstrap(result: Agreement, rated: pd.DataFrame, data: _Pairable, level: str, *,
                     n_boot: int, seed: int, cluster: Cluster, conflev: float) -> None:
    unit_cluster, n_clusters = _cluster_of_units(rated, data.unit_labels, cluster)
    v = data.n_values
    inv = 1.0 / (data.m - 1)
    if v <= _MAX_BOOT_VALUES:
        # Per-unit coincidences o_u[c, k] = (N_uc N_uk - [c = k] N_uc) / (m_u - 1), from the
        # (unit, value, count) triples: pairs of values within a unit, via a self-join.
        unit, code, count = _unit_value_counts(data)
        starts = np.searchsorted(unit, np.arange(data.n_units))
        ends = np.searchsorted(unit, np.arange(data.n_units), side="right")
        sizes = ends - starts
        left = np.repeat(np.arange(unit.size), sizes[unit])
        offsets = np.arange(left.size) - np.repeat(np.cumsum(sizes[unit]) - sizes[unit],
                                                   sizes[unit])
        right = starts[unit[left]] + offsets
        pair_weight = (count[left] * count[right] - np.where(left == right, count[left], 0.0)
                       ) * inv[unit[left]]
        feature = code[left] * v + code[right]
        replicates = np.empty(n_boot)
        done = 0
        for sums in _replicate_sums(unit_cluster[unit[left]], feature, pair_weight,
                                    n_clusters, v * v, n_boot, seed):
            replicates[done:done + len(sums)] = _alpha_from_coincidence(
                sums.reshape(-1, v, v), level, data.values)
            done += len(sums)
    elif level == "interval":
        # Sufficient statistics per unit: the observed term and the moments of the values.
        x = data.values[data.code]
        s1 = np.bincount(data.unit, weights=x, minlength=data.n_units)
        s2 = np.bincount(data.unit, weights=x * x, minlength=data.n_units)
        observed = 2 * (data.m * s2 - s1 * s1) * inv
        stacked = np.stack([observed, data.m, s1, s2], axis=1)
        unit_ids = np.repeat(np.arange(data.n_units), 4)
        replicates = np.empty(n_boot)
        done = 0
        for sums in _replicate_sums(unit_cluster[unit_ids], np.tile(np.arange(4), data.n_units),
                                    stacked.ravel(), n_clusters, 4, n_boot, seed):
            d_o, n, t1, t2 = sums.T
            with np.errstate(invalid="ignore", divide="ignore"):
                expected = 2 * n * t2 - 2 * t1 * t1
                replicates[done:done + len(sums)] = np.where(
                    expected > 0, 1 - (n - 1) * d_o / expected, np.nan)
            done += len(sums)
    else:
        result.warnings.append(f"no bootstrap CI: {v} distinct values at the {level} level "
                               f"(at most {_MAX_BOOT_VALUES})")
        return
    low, high, invalid = _percentile(replicates, conflev)
    result.ci_low, result.ci_high = low, high
    _describe_boot(result, n_boot, seed, cluster, invalid, conflev)


# --------------------------------------------------------------------------------------------
# Intraclass correlations: ANOVA on complete designs, REML variance components otherwise
# --------------------------------------------------------------------------------------------


@dataclass
class VarianceComponents:
    """REML estimates of y = mu + item + rater + e with crossed random item and rater effects
    (lme4: `lmer(y ~ 1 + (1|item) + (1|rater))`), or of the one-way y = mu + item + e
    (`lmer(y ~ 1 + (1|item))`, `rater` None). Variances, not SDs. `reml_criterion` is -2 times
    the restricted log-likelihood (lme4's "REML criterion at convergence")."""

    intercept: float
    item: float
    rater: float | None
    residual: float
    reml_criterion: float
    n: int
    n_items: int
    n_raters: int | None
    converged: bool
    message: str = ""


class _REML:
    """Profiled REML for one or two crossed random intercepts on integer codes.

    Parameters are the variance ratios gamma = sigma2_b / sigma2 >= 0: the criterion is even
    in the relative SD theta = sqrt(gamma), so in theta its gradient vanishes at 0 and a
    gradient optimiser stops on the boundary (it did, at rater variance 0 where lme4 finds
    0.0041); in gamma the boundary is an ordinary bound. The criterion needs log|A| and
    quadratic forms in A^-1, A = Lambda Z'Z Lambda + I (Bates et al. 2015, lme4). Z'Z has a
    diagonal block per factor; the factor with more levels is eliminated (diagonal) and the
    Schur complement on the other one is dense of its size, so a fit on 100,000 ratings of
    2,000 outputs by 200 raters factorises 200 x 200 matrices. The cross-product term
    N' diag(1 / (1 + gamma d)) N is a sum over the distinct counts d of precomputed N_d' N_d
    where that fits in memory. y enters only through its sums per level, its total and its
    sum of squares, so the parametric bootstrap refits from those.
    """

    _MAX_PRECOMPUTED = 30_000_000  # floats held by the N_d' N_d blocks

    def __init__(self, item: np.ndarray, n_items: int, rater: np.ndarray | None,
                 n_raters: int) -> None:
        self.n = int(item.size)
        self.crossed = rater is not None
        self.swap = bool(self.crossed and n_raters > n_items)
        first, second = (rater, item) if self.swap else (item, rater)
        self.first, self.second = first, second
        self.l1 = n_raters if self.swap else n_items
        self.d1 = np.bincount(first, minlength=self.l1).astype(float)
        self.blocks: list[tuple[float, np.ndarray]] | None = None
        if self.crossed:
            self.l2 = n_items if self.swap else n_raters
            self.d2 = np.bincount(second, minlength=self.l2).astype(float)
            self.cross = sparse.csr_matrix((np.ones(self.n), (first, second)),
                                           shape=(self.l1, self.l2))
            self.cross_t = self.cross.T.tocsr()
            distinct = np.unique(self.d1[self.d1 > 0])
            if distinct.size * self.l2 * self.l2 <= self._MAX_PRECOMPUTED:
                self.blocks = []
                for count in distinct:
                    rows = self.cross[np.flatnonzero(self.d1 == count)]
                    self.blocks.append((float(count), (rows.T @ rows).toarray()))

    def sums(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float, float]:
        by_first = np.bincount(self.first, weights=y, minlength=self.l1)
        by_second = (np.bincount(self.second, weights=y, minlength=self.l2)
                     if self.crossed else None)
        return by_first, by_second, float(y.sum()), float(y @ y)

    def _order(self, gamma: np.ndarray) -> tuple[float, float]:
        """(gamma of the eliminated factor, gamma of the dense one) from (item, rater)."""
        if not self.crossed:
            return float(gamma[0]), 0.0
        g = (float(gamma[1]), float(gamma[0])) if self.swap else (float(gamma[0]),
                                                                  float(gamma[1]))
        return g

    def criterion(self, gamma: np.ndarray, sums: tuple) -> tuple[float, float, float]:
        """(-2 restricted log-likelihood, intercept, sigma^2) at variance ratios `gamma`."""
        g1, g2 = self._order(np.maximum(gamma, 0.0))
        t1, t2 = np.sqrt(g1), np.sqrt(g2)
        y1, y2, sy, syy = sums
        p = 1 + g1 * self.d1
        rhs1 = np.column_stack([t1 * y1, t1 * self.d1])
        logdet = float(np.sum(np.log(p)))
        if self.crossed:
            c = t1 * t2
            if self.blocks is not None:
                schur = np.zeros((self.l2, self.l2))
                for count, block in self.blocks:
                    schur -= (g1 * g2 / (1 + g1 * count)) * block
            else:
                scaled = self.cross.multiply((1 / p)[:, None]).tocsr()
                schur = -(g1 * g2) * (self.cross_t @ scaled).toarray()
            schur[np.diag_indices_from(schur)] += 1 + g2 * self.d2
            try:
                factor = cho_factor(schur, lower=True, check_finite=False)
            except np.linalg.LinAlgError:
                return float("inf"), float("nan"), float("nan")
            logdet += 2 * float(np.sum(np.log(np.diag(factor[0]))))
            rhs2 = np.column_stack([t2 * y2, t2 * self.d2])
            s2 = cho_solve(factor, rhs2 - c * (self.cross_t @ (rhs1 / p[:, None])),
                           check_finite=False)
            s1 = (rhs1 - c * (self.cross @ s2)) / p[:, None]
            quad = rhs1.T @ s1 + rhs2.T @ s2
        else:
            quad = rhs1.T @ (rhs1 / p[:, None])
        yhy = syy - quad[0, 0]
        xhy = sy - quad[1, 0]
        xhx = self.n - quad[1, 1]
        if xhx <= 0:
            return float("inf"), float("nan"), float("nan")
        beta = xhy / xhx
        sigma2 = (yhy - beta * xhy) / (self.n - 1)
        if not sigma2 > 0:
            return float("inf"), float("nan"), float("nan")
        value = logdet + np.log(xhx) + (self.n - 1) * (1 + np.log(2 * np.pi * sigma2))
        return float(value), float(beta), float(sigma2)

    def fit(self, sums: tuple, start: np.ndarray | None = None
            ) -> tuple[np.ndarray, float, float, float, bool]:
        """Minimise over gamma >= 0 (boundary fits allowed, as lme4). Returns (gamma,
        criterion, intercept, sigma^2, converged). Without `start` (the point estimate) a
        quasi-Newton search from gamma = 1 is polished by Newton steps; with one (bootstrap
        refits, warm-started at the estimate) Newton steps alone."""
        size = 2 if self.crossed else 1

        def objective(g: np.ndarray) -> float:
            return self.criterion(g, sums)[0]

        warm = start
        if start is None:
            first = optimize.minimize(objective, np.ones(size), method="L-BFGS-B",
                                      bounds=[(0.0, None)] * size)
            start = np.maximum(first.x, 0.0)
        # Bootstrap refits stop at a relative step of 1e-6 in gamma (ICCs to ~6 digits).
        gamma, converged = _newton_nonnegative(objective, np.asarray(start, float),
                                               xtol=1e-9 if warm is None else 1e-6)
        best = self.criterion(gamma, sums)
        return gamma, best[0], best[1], best[2], converged


def _newton_nonnegative(f: Callable[[np.ndarray], float], x0: np.ndarray, *,
                        max_iter: int = 60, tol: float = 1e-11, xtol: float = 1e-9
                        ) -> tuple[np.ndarray, bool]:
    """Projected Newton for a smooth f of one or two variables on x >= 0, with
    finite-difference derivatives (one-sided at the bound) and an Armijo backtracking line
    search; coordinates at the bound with a positive gradient stay there (KKT). Written out
    because scipy.optimize.minimize costs ~20 ms of overhead per call, and the parametric
    bootstrap calls it a thousand times."""
    x = np.maximum(x0, 0.0)
    fx = f(x)
    dim = x.size
    eye = np.eye(dim)
    for _ in range(max_iter):
        h = 1e-4 * np.maximum(x, 1e-2)
        grad = np.empty(dim)
        hess = np.empty((dim, dim))
        plus = np.empty(dim)
        for j in range(dim):
            plus[j] = f(x + h[j] * eye[j])
            if x[j] >= h[j]:
                minus = f(x - h[j] * eye[j])
                grad[j] = (plus[j] - minus) / (2 * h[j])
                hess[j, j] = (plus[j] - 2 * fx + minus) / h[j] ** 2
            else:
                twice = f(x + 2 * h[j] * eye[j])
                grad[j] = (-3 * fx + 4 * plus[j] - twice) / (2 * h[j])
                hess[j, j] = (fx - 2 * plus[j] + twice) / h[j] ** 2
        for i in range(dim):
            for j in range(i + 1, dim):
                both = f(x + h[i] * eye[i] + h[j] * eye[j])
                hess[i, j] = hess[j, i] = (both - plus[i] - plus[j] + fx) / (h[i] * h[j])
        free = ~((x <= 0) & (grad > 0))
        if not free.any():
            return x, True
        direction = np.zeros(dim)
        sub = hess[np.ix_(free, free)]
        try:
            if np.all(np.linalg.eigvalsh(sub) > 0):
                direction[free] = -np.linalg.solve(sub, grad[free])
            else:
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:  # not convex here: a scaled gradient step
            direction[free] = -grad[free] / np.maximum(np.abs(np.diag(sub)), 1e-8)
        slope = float(grad @ direction)
        if np.max(np.abs(direction) / (1 + np.abs(x))) < xtol:
            trial = np.maximum(x + direction, 0.0)
            f_trial = f(trial)
            return (trial, True) if f_trial <= fx else (x, True)
        step = 1.0
        for _ in range(40):
            trial = np.maximum(x + step * direction, 0.0)
            f_trial = f(trial)
            if f_trial <= fx + 1e-4 * step * min(slope, 0.0):
                break
            step /= 2
        else:
            return x, abs(slope) < 1e-6
        moved = np.max(np.abs(trial - x) / (1 + np.abs(x)))
        gain = fx - f_trial
        x, fx = trial, f_trial
        if gain <= tol * (1 + abs(fx)) and moved < 1e-7:
            return x, True
    return x, False


def variance_components(
    df: pd.DataFrame, *, crossed: bool = True
) -> VarianceComponents:
    """REML variance components of the ratings (`value`) with random `unit` (the rated
    object: lme4's item) and, if `crossed`, random `rater` intercepts. Any incomplete design
    works (Latin squares, crowds); only connectedness limits what can be separated."""
    rated = ratings_frame(df, numeric=True)
    item, items = pd.factorize(rated["unit"])
    rater, raters = pd.factorize(rated["rater"])
    model = _REML(item, len(items), rater if crossed else None, len(raters))
    with threadpool_limits(1):  # small dense factorisations: threads only add overhead
        gamma, value, beta, sigma2, converged = model.fit(
            model.sums(rated["value"].to_numpy(float)))
    return VarianceComponents(
        intercept=beta, item=float(gamma[0] * sigma2),
        rater=float(gamma[1] * sigma2) if crossed else None, residual=sigma2,
        reml_criterion=value, n=model.n, n_items=len(items),
        n_raters=len(raters) if crossed else None, converged=converged,
    )


def _iccs_from_components(item: float, rater: float, residual: float, item_1: float,
                          within_1: float, k: float) -> dict[str, float]:
    """The six forms from variance components: crossed (item, rater, residual) for ICC2/3,
    one-way (item_1, within_1) for ICC1; k raters for the averaged forms."""
    def ratio(top: float, bottom: float) -> float:
        return top / bottom if bottom > 0 else float("nan")

    return {
        "ICC1": ratio(item_1, item_1 + within_1),
        "ICC2": ratio(item, item + rater + residual),
        "ICC3": ratio(item, item + residual),
        "ICC1k": ratio(item_1, item_1 + within_1 / k),
        "ICC2k": ratio(item, item + (rater + residual) / k),
        "ICC3k": ratio(item, item + residual / k),
    }


def _guard_icc(result: Agreement) -> Agreement:
    """Never report an ICC outside [-1, 1], a CI outside it or a CI with low > high.

    ANOVA estimates on few units can leave the range (ICC2k = 2.33, ICC1k = -26.4 were
    printed from 2 units): such a value is withheld (None) with a warning giving the raw
    number, an impossible CI is withheld, a CI bound beyond the range is clipped, and a
    negative estimate (between-unit variance estimated below zero) is flagged.
    """
    value = result.value
    if not np.isfinite(value) or value < -1 - 1e-9 or value > 1 + 1e-9:
        result.warnings.append(
            f"estimate {value:.4g} outside [-1, 1]: withheld (the design cannot support this "
            f"ICC; {result.n} units)")
        result.value, result.ci_low, result.ci_high = float("nan"), None, None
        return result
    if value < 0:
        result.warnings.append(
            "negative estimate: the between-unit variance is estimated below zero (read as no "
            "reliability)")
    low, high = result.ci_low, result.ci_high
    if low is not None and high is not None:
        if not (np.isfinite(low) and np.isfinite(high)) or low > high:
            result.warnings.append(f"CI [{low:.4g}, {high:.4g}] is not an interval: withheld")
            result.ci_low, result.ci_high = None, None
        elif low < -1 or high > 1:
            result.warnings.append(f"CI [{low:.4g}, {high:.4g}] clipped to [-1, 1]")
            result.ci_low, result.ci_high = max(low, -1.0), min(high, 1.0)
    return result


def _anova_icc(matrix: np.ndarray, conflev: float) -> dict[str, dict]:
    """Shrout & Fleiss (1979) / McGraw & Wong (1996) ICCs, F tests and CIs on a complete
    units x raters matrix (the formulas of R irr::icc and pingouin.intraclass_corr)."""
    n, k = matrix.shape
    grand = matrix.mean()
    ss_rows = k * float(np.sum((matrix.mean(axis=1) - grand) ** 2))
    ss_cols = n * float(np.sum((matrix.mean(axis=0) - grand) ** 2))
    ss_err = float(np.sum((matrix - grand) ** 2)) - ss_rows - ss_cols
    msb = ss_rows / (n - 1)
    msj = ss_cols / (k - 1)
    mse = ss_err / ((n - 1) * (k - 1))
    msw = (ss_cols + ss_err) / (n * (k - 1))
    alpha = 1 - conflev
    df1, df1w, df2e = n - 1, n * (k - 1), (n - 1) * (k - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = msb / msw
        f3 = msb / mse
        icc1 = (msb - msw) / (msb + (k - 1) * msw)
        icc2 = (msb - mse) / (msb + (k - 1) * mse + k * (msj - mse) / n)
        icc3 = (msb - mse) / (msb + (k - 1) * mse)
        f1l = f1 / sps.f.ppf(1 - alpha / 2, df1, df1w)
        f1u = f1 * sps.f.ppf(1 - alpha / 2, df1w, df1)
        f3l = f3 / sps.f.ppf(1 - alpha / 2, df1, df2e)
        f3u = f3 * sps.f.ppf(1 - alpha / 2, df2e, df1)
        # ICC(A,1): Satterthwaite's df for the denominator mean square (McGraw & Wong 1996).
        fj = msj / mse
        vn = df2e * (k * icc2 * fj + n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        vd = df1 * k**2 * icc2**2 * fj**2 + (
            n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        v = vn / vd
        f2u = sps.f.ppf(1 - alpha / 2, df1, v)
        f2l = sps.f.ppf(1 - alpha / 2, v, df1)
        l2 = n * (msb - f2u * mse) / (f2u * (k * msj + (k * n - k - n) * mse) + n * msb)
        u2 = n * (f2l * msb - mse) / (k * msj + (k * n - k - n) * mse + n * f2l * msb)
    p1 = float(sps.f.sf(f1, df1, df1w))
    p3 = float(sps.f.sf(f3, df1, df2e))
    return {
        "ICC1": {"value": icc1, "ci": ((f1l - 1) / (f1l + k - 1), (f1u - 1) / (f1u + k - 1)),
                 "F": f1, "df1": df1, "df2": df1w, "p": p1},
        "ICC2": {"value": icc2, "ci": (l2, u2), "F": f3, "df1": df1, "df2": df2e, "p": p3,
                 "satterthwaite_df": v},
        "ICC3": {"value": icc3, "ci": ((f3l - 1) / (f3l + k - 1), (f3u - 1) / (f3u + k - 1)),
                 "F": f3, "df1": df1, "df2": df2e, "p": p3},
        "ICC1k": {"value": (msb - msw) / msb, "ci": (1 - 1 / f1l, 1 - 1 / f1u),
                  "F": f1, "df1": df1, "df2": df1w, "p": p1},
        "ICC2k": {"value": (msb - mse) / (msb + (msj - mse) / n),
                  "ci": (l2 * k / (1 + l2 * (k - 1)), u2 * k / (1 + u2 * (k - 1))),
                  "F": f3, "df1": df1, "df2": df2e, "p": p3, "satterthwaite_df": v},
        "ICC3k": {"value": (msb - mse) / msb, "ci": (1 - 1 / f3l, 1 - 1 / f3u),
                  "F": f3, "df1": df1, "df2": df2e, "p": p3},
    }


IccMethod = Literal["auto", "reml", "listwise"]


def icc(
    df: pd.DataFrame,
    *,
    raters: Sequence | None = None,
    method: IccMethod = "auto",
    n_boot: int = N_BOOT_ICC,
    seed: int = 0,
    conflev: float = CONFLEV,
) -> dict[str, Agreement]:
    """The six Shrout & Fleiss (1979) intraclass correlations with 95% CIs.

    Returns {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"} -> Agreement. Values must be
    numeric. `raters` first restricts the table to those raters (default: all).

    - Complete designs (every unit rated by every rater; `method="auto"`): the two-way ANOVA
      of Shrout & Fleiss with McGraw & Wong's (1996) F-based CIs (as R irr::icc); `p_value`
      and `details` F, df1, df2 are the F test of ICC = 0.
    - Incomplete designs (`"auto"` or `"reml"`; Latin squares and crowd work, where few or no
      units have every rater): variance components of the crossed random-effects model
      y = mu + unit + rater + e by REML (lme4's `lmer(y ~ 1 + (1|item) + (1|rater))`) on all
      ratings; ICC1 from the one-way model y = mu + unit + e. ICC2 = s2_unit / (s2_unit +
      s2_rater + s2_e), ICC3 = s2_unit / (s2_unit + s2_e), ICC1 = s2_unit' / (s2_unit' + s2_w);
      the averaged forms use k = the harmonic mean of ratings per unit. CIs: percentile
      parametric bootstrap (`n_boot` simulations from the fitted model on the same design,
      refitted by REML; `seed`).
    - `"listwise"`: the old behaviour, ANOVA on the units rated by every rater, with the
      number of units dropped reported and warned about.

    Every result carries n_units/n_raters/n_ratings, what was excluded and warnings; an
    estimate outside [-1, 1] or a CI with low > high is never returned (see `_guard_icc`).
    Raises `ValueError` when there are fewer than 2 units with >= 2 ratings or 2 raters.
    """
    if method not in ("auto", "reml", "listwise"):
        raise ValueError(f"method must be 'auto', 'reml' or 'listwise', not {method!r}")
    rated = ratings_frame(df, numeric=True)
    excluded = _missing(df)
    if raters is not None:
        keep = rated["rater"].isin(list(raters))
        if (~keep).sum():
            excluded["ratings_of_other_raters"] = int((~keep).sum())
        rated = rated[keep]
    units = rated["unit"].nunique()
    n_raters = rated["rater"].nunique()
    complete = len(rated) == units * n_raters
    if method == "listwise" or (method == "auto" and complete):
        return _icc_anova(rated, excluded, conflev, listwise=not complete)
    return _icc_reml(rated, excluded, n_boot=n_boot, seed=seed, conflev=conflev)


def _icc_anova(rated: pd.DataFrame, excluded: dict[str, int], conflev: float,
               listwise: bool) -> dict[str, Agreement]:
    unit_index, units = pd.factorize(rated["unit"])
    rater_index, raters = pd.factorize(rated["rater"])
    matrix = np.full((len(units), len(raters)), np.nan)
    matrix[unit_index, rater_index] = rated["value"].to_numpy(float)
    complete_rows = ~np.isnan(matrix).any(axis=1)
    matrix = matrix[complete_rows]
    dropped = int((~complete_rows).sum())
    if matrix.shape[0] < 2 or matrix.shape[1] < 2:
        raise ValueError(
            f"ICC needs >= 2 units rated by all of >= 2 raters; have {matrix.shape[0]} "
            f"complete units and {matrix.shape[1]} raters ({dropped} incomplete units dropped)"
        )
    excluded = dict(excluded)
    notes = []
    if dropped:
        excluded["units_dropped_incomplete"] = dropped
        notes.append(f"listwise deletion: {dropped} of {len(units)} units lack a rating from "
                     f"some of the {len(raters)} raters and were dropped")
    if matrix.shape[0] < 5:
        notes.append(f"only {matrix.shape[0]} units: the ANOVA estimates are unstable")
    forms = _anova_icc(matrix, conflev)
    result: dict[str, Agreement] = {}
    for name, description in ICC_FORMS:
        form = forms[name]
        details = {"F": float(form["F"]), "df1": float(form["df1"]), "df2": float(form["df2"]),
                   "raters": float(matrix.shape[1]), "units_dropped": float(dropped)}
        if "satterthwaite_df" in form:
            details["satterthwaite_df"] = float(form["satterthwaite_df"])
        result[name] = _guard_icc(Agreement(
            value=float(form["value"]),
            ci_low=float(form["ci"][0]), ci_high=float(form["ci"][1]),
            n=int(matrix.shape[0]),
            method=f"{description}; two-way ANOVA, {conflev:.0%} F-based CI (McGraw & Wong)",
            p_value=float(form["p"]), details=details,
            ci_method="analytic (F distribution; Satterthwaite df for ICC(A,.))",
            n_units=int(matrix.shape[0]), n_raters=int(matrix.shape[1]),
            n_ratings=int(matrix.size), excluded=dict(excluded), warnings=list(notes),
        ))
    return result


def _icc_reml(rated: pd.DataFrame, excluded: dict[str, int], *, n_boot: int, seed: int,
              conflev: float) -> dict[str, Agreement]:
    # Hundreds of small dense Cholesky factorisations: one BLAS thread is several times
    # faster than two on a busy machine (thread start-up dominates at 200 x 200).
    with threadpool_limits(1):
        return _icc_reml_fits(rated, excluded, n_boot=n_boot, seed=seed, conflev=conflev)


def _icc_reml_fits(rated: pd.DataFrame, excluded: dict[str, int], *, n_boot: int, seed: int,
                   conflev: float) -> dict[str, Agreement]:
    item, items = pd.factorize(rated["unit"])
    rater, raters = pd.factorize(rated["rater"])
    per_unit = np.bincount(item, minlength=len(items))
    if (per_unit >= 2).sum() < 2 or len(raters) < 2:
        raise ValueError(
            f"ICC needs >= 2 units with >= 2 ratings and >= 2 raters; have "
            f"{int((per_unit >= 2).sum())} such units and {len(raters)} raters")
    y = rated["value"].to_numpy(float)
    crossed = _REML(item, len(items), rater, len(raters))
    oneway = _REML(item, len(items), None, 0)
    k = float(len(per_unit) / np.sum(1.0 / per_unit))  # harmonic mean of ratings per unit

    def components(sums_c: tuple, sums_1: tuple, start_c=None, start_1=None):
        th_c, crit, beta, s2, ok_c = crossed.fit(sums_c, start_c)
        th_1, _, _, s2_1, ok_1 = oneway.fit(sums_1, start_1)
        values = _iccs_from_components(th_c[0] * s2, th_c[1] * s2, s2, th_1[0] * s2_1, s2_1, k)
        return values, (th_c, crit, beta, s2, ok_c), (th_1, s2_1, ok_1)

    point, fit_c, fit_1 = components(crossed.sums(y), oneway.sums(y))
    th_c, crit, beta, s2, ok_c = fit_c
    s2_item, s2_rater = th_c[0] * s2, th_c[1] * s2
    notes = []
    if not (ok_c and fit_1[2]):
        notes.append("REML optimiser reported non-convergence")
    if th_c[0] < 1e-8:
        notes.append("singular fit: the unit variance is estimated at 0, so every ICC is 0")
    if (per_unit >= 2).sum() < 10:
        notes.append(f"only {int((per_unit >= 2).sum())} units with >= 2 ratings: the "
                     "variance components are imprecise")
    single = int((per_unit == 1).sum())
    if single:
        notes.append(f"{single} units have a single rating (kept: they inform the rater and "
                     "residual variances)")
    # Parametric bootstrap: simulate the fitted model on the same design, refit both models.
    rng = np.random.default_rng(seed)
    sd = np.sqrt([s2_item, s2_rater, s2])
    replicates = {name: np.empty(n_boot) for name, _ in ICC_FORMS}
    failed = 0
    for b in range(n_boot):
        y_star = (beta + sd[0] * rng.standard_normal(len(items))[item]
                  + sd[1] * rng.standard_normal(len(raters))[rater]
                  + sd[2] * rng.standard_normal(y.size))
        try:
            values, fit_b, _ = components(crossed.sums(y_star), oneway.sums(y_star),
                                          th_c, fit_1[0])
        except (ValueError, np.linalg.LinAlgError):
            values, failed = dict.fromkeys(replicates, float("nan")), failed + 1
        for name in replicates:
            replicates[name][b] = values[name]
    if failed:
        notes.append(f"{failed} of {n_boot} bootstrap refits failed (skipped)")
    details_common = {
        "var_unit": float(s2_item), "var_rater": float(s2_rater), "var_residual": float(s2),
        "var_unit_oneway": float(fit_1[0][0] * fit_1[1]), "var_within_oneway":
        float(fit_1[1]), "intercept": float(beta), "reml_criterion": float(crit),
        "k": k, "raters": float(len(raters)), "units_dropped": 0.0,
        "n_boot": float(n_boot),
    }
    result: dict[str, Agreement] = {}
    for name, description in ICC_FORMS:
        low, high, invalid = _percentile(replicates[name], conflev)
        result[name] = _guard_icc(Agreement(
            value=float(point[name]), ci_low=low, ci_high=high, n=len(items),
            method=f"{description}; REML variance components of the crossed random-effects "
            f"model (incomplete design), {conflev:.0%} parametric bootstrap CI"
            + (f"; k = {k:.2f} (harmonic mean)" if name.endswith("k") else ""),
            details=dict(details_common),
            se=float(np.std(replicates[name][np.isfinite(replicates[name])], ddof=1))
            if np.isfinite(replicates[name]).sum() >= 2 else None,
            ci_method=f"parametric bootstrap (B={n_boot}, seed={seed}, REML refits)",
            n_units=len(items), n_raters=len(raters), n_ratings=int(y.size),
            excluded=dict(excluded), warnings=list(notes), n_boot=n_boot, seed=seed,
        ))
    return result


# --------------------------------------------------------------------------------------------
# Bootstrap (generic, for custom statistics) and pairwise kappas
# --------------------------------------------------------------------------------------------


def _as_float(result: float | Estimate) -> float:
    return float(result.value if isinstance(result, Estimate) else result)


def bootstrap_ci(
    df: pd.DataFrame,
    statistic: Callable[[pd.DataFrame], float | Estimate],
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = CONFLEV,
    cluster: Cluster = "unit",
) -> Agreement:
    """Percentile bootstrap CI for any `statistic(df)`, resampling units (or items).

    Each replicate draws as many clusters as there are, with replacement, and keeps all rows
    of each drawn cluster (all of a unit's ratings; with `cluster="item"` all units of the
    item). A cluster drawn twice must count as two units, so in replicates `unit` (and `item`)
    are replaced by fresh integer ids; `statistic` must therefore use them only as keys.
    Deterministic for a given `seed` and row order. Replicates where the statistic is NaN
    (e.g. a single category drawn) are skipped and counted in `details["n_invalid"]`.
    `value` is the statistic on the full data; `n` counts clusters.

    This recomputes the statistic through pandas per replicate: fine for custom statistics on
    small tables. The coefficients of this module have vectorised bootstraps instead
    (`krippendorff_alpha(n_boot=...)`, `pairwise_kappas`, `human_ceiling(n_boot=...)`).
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
    low, high, invalid = _percentile(replicates, level)
    method = f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, level={level})"
    return Agreement(
        value=point, ci_low=low, ci_high=high, n=n_clusters, method=method,
        details={"n_boot": float(n_boot), "n_invalid": float(invalid)}, ci_method=method,
        n_boot=n_boot, seed=seed, cluster=cluster,
        warnings=[f"{invalid} of {n_boot} bootstrap replicates undefined (skipped)"]
        if invalid else [],
    )


def _finite_mean(values: np.ndarray, axis: int) -> np.ndarray:
    """Mean of the finite entries along `axis` (NaN where none), without warnings."""
    finite = np.isfinite(values)
    count = finite.sum(axis=axis)
    total = np.where(finite, values, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def pairwise_kappas(
    df: pd.DataFrame,
    pairs: Sequence[tuple[Hashable, Hashable]],
    *,
    labels: Sequence | None = None,
    weightings: Sequence[KappaWeights] = (None,),
    n_boot: int = N_BOOT,
    seed: int = 0,
    cluster: Cluster = "unit",
    conflev: float = CONFLEV,
) -> tuple[list[dict], dict[str, Agreement]]:
    """Cohen's kappa of each rater pair on the units both rated, and the mean over pairs.

    Returns (rows, means). A row: {"rater_a", "rater_b", "n" (shared units), one value per
    weighting ("unweighted", "linear", "quadratic"), "ci": {weighting: [low, high]}} with
    Fleiss-Cohen-Everitt CIs. `means[weighting]`: the unweighted mean of the pairs' kappas
    (undefined pairs skipped) with a percentile bootstrap CI: a replicate draws units (or
    items) once for all pairs, so the pairs' shared units move together; vectorised over
    replicates. All kappas use the same category set (`labels`, the declared scale).
    """
    coded = _coded(df, labels)
    rated, unit, units, code = coded.rated, coded.unit, coded.units, coded.code
    categories, source = coded.categories, coded.source
    if labels is None and any(w is not None for w in weightings) and not _is_numeric(
            categories):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    q = len(categories)
    order = np.argsort(coded.rater, kind="stable")
    bounds = np.searchsorted(coded.rater[order], np.arange(len(coded.raters) + 1))
    by_rater = {
        _plain(rater): (unit[order[bounds[k]:bounds[k + 1]]], code[order[bounds[k]:bounds[k + 1]]])
        for k, rater in enumerate(coded.raters)
    }
    names = [w or "unweighted" for w in weightings]
    kernels = {name: _kappa_weights(q, w) for name, w in zip(names, weightings, strict=True)}
    rows: list[dict] = []
    cells: list[tuple[np.ndarray, np.ndarray]] = []  # per pair: shared units, cell index
    for a, b in pairs:
        ua, ca = by_rater.get(a, (np.empty(0, int), np.empty(0, int)))
        ub, cb = by_rater.get(b, (np.empty(0, int), np.empty(0, int)))
        shared, ia, ib = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
        cell = ca[ia] * q + cb[ib]
        cells.append((shared, cell))
        table = np.bincount(cell, minlength=q * q).reshape(q, q).astype(float)
        row: dict = {"rater_a": _plain(a), "rater_b": _plain(b), "n": int(shared.size),
                     "ci": {}}
        for name, w in kernels.items():
            value = float(_kappa_from_tables(table, w)) if q >= 2 else float("nan")
            se = _kappa_se(table, w, value)
            row[name] = value
            row["ci"][name] = list(_t_interval(value, se, int(shared.size), conflev,
                                               (-1.0, 1.0)))
        rows.append(row)
    units_used = np.unique(np.concatenate([c[0] for c in cells])) if cells else np.empty(0)
    raters_used = {r for pair in pairs for r in pair}
    means: dict[str, Agreement] = {}
    for name in names:
        values = np.array([r[name] for r in rows], dtype=float)
        means[name] = Agreement(
            value=float(_finite_mean(values, 0)) if values.size else float("nan"),
            ci_low=None, ci_high=None, n=int(np.isfinite(values).sum()),
            method=f"mean of Cohen's kappa ({name}) over rater pairs",
            n_units=int(units_used.size), n_raters=len(raters_used),
            n_ratings=int(sum(2 * c[0].size for c in cells)),
            excluded={"pairs_undefined": int((~np.isfinite(values)).sum())}
            if (~np.isfinite(values)).any() else {},
            weights=name if name != "unweighted" else "identity",
            categories=[_plain(c) for c in categories], categories_from=source,
        )
    if n_boot > 0 and rows and q >= 2:
        unit_cluster, n_clusters = _cluster_of_units(rated, np.asarray(units), cluster)
        pair_ids = np.concatenate([np.full(c[0].size, k) for k, c in enumerate(cells)])
        shared_units = np.concatenate([c[0] for c in cells])
        features = pair_ids * q * q + np.concatenate([c[1] for c in cells])
        replicates = {name: np.empty(n_boot) for name in names}
        done = 0
        for sums in _replicate_sums(unit_cluster[shared_units], features,
                                    np.ones(features.size), n_clusters, len(rows) * q * q,
                                    n_boot, seed):
            tables = sums.reshape(len(sums), len(rows), q, q)
            for name, w in kernels.items():
                replicates[name][done:done + len(sums)] = _finite_mean(
                    _kappa_from_tables(tables, w), 1)
            done += len(sums)
        for name in names:
            low, high, invalid = _percentile(replicates[name], conflev)
            means[name].ci_low, means[name].ci_high = low, high
            _describe_boot(means[name], n_boot, seed, cluster, invalid, conflev)
    return rows, means


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
    statistic. For proxies with a bootstrap: `kappa_ci`, `percent_agreement_ci` and the gap to
    the human ceiling (`kappa_minus_ceiling`, its CI from the same replicates).
    """

    rater: object
    n_units: int
    kappa: float
    percent_agreement: float
    extra: float | None = None
    kappa_ci: tuple[float | None, float | None] | None = None
    percent_agreement_ci: tuple[float | None, float | None] | None = None
    kappa_minus_ceiling: float | None = None
    kappa_minus_ceiling_ci: tuple[float | None, float | None] | None = None


@dataclass
class HumanCeiling:
    """Leave-one-rater-out agreement of each human, their unweighted means, and proxies.

    `kappa_ci`/`percent_agreement_ci`: percentile bootstrap CIs of the means (None without a
    bootstrap). `n_units` units with a reference, `n_humans`, `n_proxies`; `excluded`,
    `warnings`, the category set and weights as in `Agreement`.
    """

    humans: list[RaterAgreement]
    mean_kappa: float
    mean_percent_agreement: float
    mean_extra: float | None
    proxies: list[RaterAgreement]
    method: str
    kappa_ci: tuple[float | None, float | None] | None = None
    percent_agreement_ci: tuple[float | None, float | None] | None = None
    n_units: int = 0
    n_humans: int = 0
    n_proxies: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    weights: str | None = None
    categories: list | None = None
    categories_from: str | None = None
    ci_method: str | None = None
    n_boot: int | None = None
    seed: int | None = None
    cluster: str | None = None


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


def _percent_from_tables(tables: np.ndarray) -> np.ndarray:
    total = tables.sum(axis=(-2, -1))
    agree = np.trace(tables, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, agree / np.where(total > 0, total, 1), np.nan)


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
    n_boot: int = 0,
    seed: int = 0,
    cluster: Cluster = "unit",
    conflev: float = CONFLEV,
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
    weight)` adds a custom agreement measure reported as `extra`. `n_boot > 0` adds percentile
    bootstrap CIs (units, or items with `cluster="item"`, resampled once per replicate for
    all raters, vectorised) for the mean kappa and agreement, each proxy's, and each proxy's
    gap to the human ceiling. Computed on integer codes (no units x raters table).
    """
    if tie_break not in ("split", "lowest", "drop"):
        raise ValueError(f"tie_break must be 'split', 'lowest' or 'drop', not {tie_break!r}")
    if min_others < 1:
        raise ValueError("min_others must be at least 1")
    rated = ratings_frame(df)
    excluded = _missing(df)
    proxies = list(proxies)
    if humans is None:
        humans = [r for r in pd.unique(rated["rater"]) if r not in set(proxies)]
    humans = list(humans)
    if set(humans) & set(proxies):
        raise ValueError("a rater cannot be both a human and a proxy")
    if len(humans) < 2:
        raise ValueError("the human ceiling needs at least two humans")
    keep = rated["rater"].isin(humans + proxies).to_numpy()
    if (~keep).any():
        excluded["ratings_of_other_raters"] = int((~keep).sum())
    rated = rated[keep]
    code, categories, source = _category_codes(rated["value"], labels)
    if labels is None and weights is not None and not _is_numeric(categories):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    q = len(categories)
    unit, units = pd.factorize(rated["unit"])
    n_h, n_p = len(humans), len(proxies)
    rater_of_row = rated["rater"].to_numpy()
    h_index = pd.Series(rater_of_row).map({h: i for i, h in enumerate(humans)}).to_numpy(float)
    is_h = ~np.isnan(h_index)
    hu, hc, hh = unit[is_h], code[is_h], h_index[is_h].astype(int)
    counts = np.zeros((len(units), q))
    np.add.at(counts, (hu, hc), 1.0)
    others = counts[hu]
    others[np.arange(hu.size), hc] -= 1
    eligible = others.sum(axis=1) >= min_others
    others[~eligible] = 0
    rows, ref, w = _majority_reference(others, tie_break)
    if (~eligible).any():
        excluded["human_ratings_without_reference"] = int((~eligible).sum())
    if tie_break == "drop" and eligible.sum() > np.unique(rows).size:
        excluded["human_ratings_with_tied_majority"] = int(eligible.sum() - np.unique(rows).size)
    r_unit, r_h, r_mine = hu[rows], hh[rows], hc[rows]
    kernel = _kappa_weights(q, weights)
    first_rows = np.unique(rows)
    units_per_h = np.bincount(hh[first_rows], minlength=n_h)

    proxy_code = np.full((n_p, len(units)), -1)
    for p, proxy in enumerate(proxies):
        mine = rater_of_row == proxy
        proxy_code[p, unit[mine]] = code[mine]
    theirs = proxy_code[:, r_unit] if n_p else np.empty((0, rows.size), int)
    units_per_ph = np.zeros((n_p, n_h), dtype=int)
    for p in range(n_p):
        seen = np.unique(rows[theirs[p] >= 0])
        units_per_ph[p] = np.bincount(hh[seen], minlength=n_h)

    # Features of one long vector: human tables h x mine x ref, then proxy tables
    # p x h x theirs x ref; the point estimate and every replicate are sums of them.
    size_h = n_h * q * q
    feature_h = (r_h * q + r_mine) * q + ref
    proxy_parts = [(p, np.flatnonzero(theirs[p] >= 0)) for p in range(n_p)]
    feature_p = [size_h + ((p * n_h + r_h[i]) * q + theirs[p, i]) * q + ref[i]
                 for p, i in proxy_parts]
    features = np.concatenate([feature_h, *feature_p]).astype(np.int64)
    weight_all = np.concatenate([w, *[w[i] for _, i in proxy_parts]])
    unit_all = np.concatenate([r_unit, *[r_unit[i] for _, i in proxy_parts]])
    n_features = size_h + n_p * n_h * q * q

    def summarise(sums: np.ndarray) -> dict[str, np.ndarray]:
        """Per replicate (rows of `sums`): mean kappa/agreement over humans, per proxy."""
        tables_h = sums[:, :size_h].reshape(-1, n_h, q, q)
        kappa_h = _kappa_from_tables(tables_h, kernel)
        pct_h = _percent_from_tables(tables_h)
        out = {"kappa_h": kappa_h, "pct_h": pct_h, "kappa": _finite_mean(kappa_h, 1),
               "pct": _finite_mean(pct_h, 1)}
        if n_p:
            tables_p = sums[:, size_h:].reshape(-1, n_p, n_h, q, q)
            kappa_ph = _kappa_from_tables(tables_p, kernel)
            out["kappa_ph"] = kappa_ph
            out["pct_ph"] = _percent_from_tables(tables_p)
            out["proxy_kappa"] = _finite_mean(kappa_ph, 2)
            out["proxy_pct"] = _finite_mean(out["pct_ph"], 2)
        return out

    totals = np.bincount(features, weights=weight_all, minlength=n_features)[None, :]
    point = summarise(totals)
    nan = float("nan")
    human_rows: list[RaterAgreement] = []
    for j, h in enumerate(humans):
        if units_per_h[j] == 0:
            human_rows.append(RaterAgreement(_plain(h), 0, nan, nan, nan if statistic else None))
            continue
        extra = None
        if statistic:
            mask = r_h == j
            extra = float(statistic(r_mine[mask], ref[mask], w[mask]))
        human_rows.append(RaterAgreement(
            _plain(h), int(units_per_h[j]), float(point["kappa_h"][0, j]),
            float(point["pct_h"][0, j]), extra))
    proxy_rows: list[RaterAgreement] = []
    for p, proxy in enumerate(proxies):
        scored = units_per_ph[p] > 0
        kappas = np.where(scored, point["kappa_ph"][0, p], np.nan)
        pcts = np.where(scored, point["pct_ph"][0, p], np.nan)
        extra = None
        if statistic:
            values = []
            for j in np.flatnonzero(scored):
                mask = (r_h == j) & (theirs[p] >= 0)
                values.append(float(statistic(theirs[p, mask], ref[mask], w[mask])))
            extra = _nanmean(values)
        proxy_rows.append(RaterAgreement(
            rater=_plain(proxy), n_units=int(units_per_ph[p].sum()),
            kappa=_nanmean(list(kappas)), percent_agreement=_nanmean(list(pcts)), extra=extra))
    scored_humans = [r for r in human_rows if r.n_units]
    mean_kappa = _nanmean([r.kappa for r in scored_humans])
    for row in proxy_rows:
        row.kappa_minus_ceiling = row.kappa - mean_kappa if np.isfinite(row.kappa) else None
    notes: list[str] = []
    unscored = [str(r.rater) for r in human_rows if not r.n_units]
    if unscored:
        excluded["humans_without_reference"] = len(unscored)
        notes.append(f"{len(unscored)} human(s) share no unit with another human and have no "
                     "ceiling row")
    result = HumanCeiling(
        humans=human_rows,
        mean_kappa=mean_kappa,
        mean_percent_agreement=_nanmean([r.percent_agreement for r in scored_humans]),
        mean_extra=_nanmean([r.extra for r in scored_humans]) if statistic else None,
        proxies=proxy_rows,
        method=(
            "leave-one-rater-out: each human vs the majority of the other humans "
            f"(ties: {tie_break}; kappa weights: {weights or 'none'}; unweighted mean over humans)"
        ),
        n_units=int(np.unique(r_unit).size), n_humans=n_h, n_proxies=n_p,
        excluded=excluded, warnings=notes, weights=weights or "identity",
        categories=[_plain(c) for c in categories], categories_from=source,
    )
    if n_boot > 0 and rows.size and q >= 2:
        unit_cluster, n_clusters = _cluster_of_units(rated, np.asarray(units), cluster)
        keys = ["kappa", "pct"] + (["proxy_kappa", "proxy_pct"] if n_p else [])
        replicates = {"kappa": np.empty(n_boot), "pct": np.empty(n_boot)}
        if n_p:
            replicates.update({k: np.empty((n_boot, n_p)) for k in keys[2:]})
        done = 0
        for sums in _replicate_sums(unit_cluster[unit_all], features, weight_all, n_clusters,
                                    n_features, n_boot, seed):
            out = summarise(sums)
            for key in keys:
                replicates[key][done:done + len(sums)] = out[key]
            done += len(sums)
        low, high, invalid = _percentile(replicates["kappa"], conflev)
        result.kappa_ci = (low, high)
        low, high, _ = _percentile(replicates["pct"], conflev)
        result.percent_agreement_ci = (low, high)
        for p, row in enumerate(proxy_rows):
            row.kappa_ci = _percentile(replicates["proxy_kappa"][:, p], conflev)[:2]
            row.percent_agreement_ci = _percentile(replicates["proxy_pct"][:, p], conflev)[:2]
            row.kappa_minus_ceiling_ci = _percentile(
                replicates["proxy_kappa"][:, p] - replicates["kappa"], conflev)[:2]
        result.n_boot, result.seed, result.cluster = n_boot, seed, cluster
        result.ci_method = (f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, "
                            f"{conflev:.0%}); references recomputed from the same ratings")
        if invalid:
            result.warnings.append(f"{invalid} of {n_boot} bootstrap replicates undefined")
    return result
