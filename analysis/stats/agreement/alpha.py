"""Krippendorff's alpha from the coincidence matrix (no wide table), with a vectorised
cluster bootstrap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from analysis.stats.agreement.base import (
    CONFLEV,
    LEVELS,
    MAX_BOOT_VALUES,
    Agreement,
    Cluster,
    Level,
    category_codes,
    is_numeric_values,
    missing_counts,
    plain_scalar,
    validated_ratings,
)
from analysis.stats.agreement.bootstrap import (
    cluster_of_units,
    describe_bootstrap,
    percentile_interval,
    replicate_sums,
)


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
    elif values is None:
        raise ValueError(f"the {level} metric needs the values of the categories")
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
        if level == "ordinal" and not is_numeric_values(pd.unique(rated["value"])):
            raise ValueError("ordinal alpha on non-numeric values needs labels in order")
        raw, uniques = pd.factorize(rated["value"].to_numpy(dtype=float), sort=True)
        values, code = np.asarray(uniques, dtype=float), raw.astype(np.int64)
        categories = values.tolist()
    else:
        code, categories, _ = category_codes(rated["value"], labels)
        values = np.arange(len(categories), dtype=float)
    per_unit = np.bincount(unit_index, minlength=len(units))
    keep_unit = per_unit >= 2
    if keep_unit.all():  # the usual case: no unit to drop, no copy of the ratings
        unit, kept_code = np.asarray(unit_index, dtype=np.int64), code
    else:
        new_index = np.cumsum(keep_unit) - 1
        rows = keep_unit[unit_index]
        unit, kept_code = new_index[unit_index[rows]], code[rows]
    coded = _Pairable(
        unit=unit,
        code=kept_code,
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
    rated, unit_index, units, _, raters = validated_ratings(
        df, numeric=level in ("interval", "ratio"))
    data, categories = _pairable(rated, unit_index, units, level, labels)
    all_units = len(units)
    excluded = missing_counts(df)
    notes: list[str] = []
    if all_units - data.n_units:
        excluded["units_with_one_rating"] = all_units - data.n_units
        notes.append(f"{all_units - data.n_units} of {all_units} units have a single rating "
                     "and are not pairable")
    method = f"Krippendorff's alpha ({level})"
    distinct = (np.count_nonzero(np.bincount(data.code, minlength=data.n_values))
                if data.n_units else 0)
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
        categories=[plain_scalar(c) for c in categories] if categorical else None,
        categories_from=("labels" if labels is not None else "observed values")
        if categorical else None,
    )
    if n_boot > 0 and np.isfinite(value):
        _alpha_bootstrap(result, rated, data, level, n_boot=n_boot, seed=seed,
                         cluster=cluster, conflev=conflev)
    return result


def _alpha_bootstrap(result: Agreement, rated: pd.DataFrame, data: _Pairable, level: str, *,
                     n_boot: int, seed: int, cluster: Cluster, conflev: float) -> None:
    unit_cluster, n_clusters = cluster_of_units(rated, data.unit_labels, cluster)
    v = data.n_values
    inv = 1.0 / (data.m - 1)
    if v <= MAX_BOOT_VALUES:
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
        for sums in replicate_sums(unit_cluster[unit[left]], feature, pair_weight,
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
        for sums in replicate_sums(unit_cluster[unit_ids], np.tile(np.arange(4), data.n_units),
                                    stacked.ravel(), n_clusters, 4, n_boot, seed):
            d_o, n, t1, t2 = sums.T
            with np.errstate(invalid="ignore", divide="ignore"):
                expected = 2 * n * t2 - 2 * t1 * t1
                replicates[done:done + len(sums)] = np.where(
                    expected > 0, 1 - (n - 1) * d_o / expected, np.nan)
            done += len(sums)
    else:
        result.warnings.append(f"no bootstrap CI: {v} distinct values at the {level} level "
                               f"(at most {MAX_BOOT_VALUES})")
        return
    low, high, invalid = percentile_interval(replicates, conflev)
    result.ci_low, result.ci_high = low, high
    describe_bootstrap(result, n_boot, seed, cluster, invalid, conflev)
