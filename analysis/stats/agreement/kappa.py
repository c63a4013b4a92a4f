"""Cohen's (weighted) kappa for two raters, and every pair of raters at once with a
shared cluster bootstrap."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats.agreement.base import (
    CONFLEV,
    N_BOOT,
    Agreement,
    Cluster,
    KappaWeights,
    category_set,
    coded_ratings,
    codes_in,
    is_numeric_values,
    plain_scalar,
    ratings_frame,
    t_interval,
)
from analysis.stats.agreement.bootstrap import (
    cluster_of_units,
    describe_bootstrap,
    finite_mean,
    percentile_interval,
    replicate_sums,
)


def kappa_weights(q: int, weights: KappaWeights) -> np.ndarray:
    """Agreement weights of Cohen's weighted kappa on category positions (as scikit-learn and
    vcd: linear 1 - |i - j| / (q - 1), quadratic 1 - (i - j)^2 / (q - 1)^2)."""
    if weights is None or q < 2:
        return np.eye(q)
    positions = np.arange(q, dtype=float)
    distance = np.abs(positions[:, None] - positions[None, :]) / (q - 1)
    return 1 - (distance if weights == "linear" else distance**2)


def kappa_from_tables(tables: np.ndarray, w: np.ndarray) -> np.ndarray:
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
    if labels is None and weights is not None and len(both) and not is_numeric_values(both):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    categories, source = category_set(both, labels)
    q = len(categories)
    sw = (np.ones(int(keep.sum())) if sample_weight is None
          else np.asarray(sample_weight, dtype=float)[keep])
    method = "Cohen's kappa" if weights is None else f"Cohen's kappa ({weights} weights)"
    n = int(keep.sum())
    dropped = int((~keep).sum())
    common: dict[str, Any] = {
        "n_units": n, "n_raters": 2, "n_ratings": 2 * n,
        "excluded": {"missing_pairs": dropped} if dropped else {},
        "weights": weights or "identity", "categories": [plain_scalar(c) for c in categories],
        "categories_from": source,
    }
    if n == 0 or q < 2:
        return Agreement(float("nan"), None, None, n, method,
                         warnings=["fewer than two categories or no pairs: undefined"], **common)
    table = np.zeros((q, q))
    np.add.at(table, (codes_in(a_kept, categories), codes_in(b_kept, categories)), sw)
    w = kappa_weights(q, weights)
    value = float(kappa_from_tables(table, w))
    se = _kappa_se(table, w, value)
    low, high = t_interval(value, se, n, conflev, (-1.0, 1.0))
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
    coded = coded_ratings(df, labels)
    rated, unit, units, code = coded.rated, coded.unit, coded.units, coded.code
    categories, source = coded.categories, coded.source
    if labels is None and any(w is not None for w in weightings) and not is_numeric_values(
            categories):
        raise ValueError("weighted kappa needs ordered categories: pass labels in order")
    q = len(categories)
    order = np.argsort(coded.rater, kind="stable")
    bounds = np.searchsorted(coded.rater[order], np.arange(len(coded.raters) + 1))
    by_rater = {
        plain_scalar(rater): (unit[order[bounds[k]:bounds[k + 1]]],
                              code[order[bounds[k]:bounds[k + 1]]])
        for k, rater in enumerate(coded.raters)
    }
    names = [w or "unweighted" for w in weightings]
    kernels = {name: kappa_weights(q, w) for name, w in zip(names, weightings, strict=True)}
    rows: list[dict] = []
    cells: list[tuple[np.ndarray, np.ndarray]] = []  # per pair: shared units, cell index
    for a, b in pairs:
        ua, ca = by_rater.get(a, (np.empty(0, int), np.empty(0, int)))
        ub, cb = by_rater.get(b, (np.empty(0, int), np.empty(0, int)))
        shared, ia, ib = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
        cell = ca[ia] * q + cb[ib]
        cells.append((shared, cell))
        table = np.bincount(cell, minlength=q * q).reshape(q, q).astype(float)
        row: dict = {"rater_a": plain_scalar(a), "rater_b": plain_scalar(b), "n": int(shared.size),
                     "ci": {}}
        for name, w in kernels.items():
            value = float(kappa_from_tables(table, w)) if q >= 2 else float("nan")
            se = _kappa_se(table, w, value)
            row[name] = value
            row["ci"][name] = list(t_interval(value, se, int(shared.size), conflev,
                                               (-1.0, 1.0)))
        rows.append(row)
    units_used = np.unique(np.concatenate([c[0] for c in cells])) if cells else np.empty(0)
    raters_used = {r for pair in pairs for r in pair}
    means: dict[str, Agreement] = {}
    for name in names:
        values = np.array([r[name] for r in rows], dtype=float)
        means[name] = Agreement(
            value=float(finite_mean(values, 0)) if values.size else float("nan"),
            ci_low=None, ci_high=None, n=int(np.isfinite(values).sum()),
            method=f"mean of Cohen's kappa ({name}) over rater pairs",
            n_units=int(units_used.size), n_raters=len(raters_used),
            n_ratings=int(sum(2 * c[0].size for c in cells)),
            excluded={"pairs_undefined": int((~np.isfinite(values)).sum())}
            if (~np.isfinite(values)).any() else {},
            weights=name if name != "unweighted" else "identity",
            categories=[plain_scalar(c) for c in categories], categories_from=source,
        )
    if n_boot > 0 and rows and q >= 2:
        unit_cluster, n_clusters = cluster_of_units(rated, np.asarray(units), cluster)
        pair_ids = np.concatenate([np.full(c[0].size, k) for k, c in enumerate(cells)])
        shared_units = np.concatenate([c[0] for c in cells])
        features = pair_ids * q * q + np.concatenate([c[1] for c in cells])
        replicates = {name: np.empty(n_boot) for name in names}
        done = 0
        for sums in replicate_sums(unit_cluster[shared_units], features,
                                    np.ones(features.size), n_clusters, len(rows) * q * q,
                                    n_boot, seed):
            tables = sums.reshape(len(sums), len(rows), q, q)
            for name, w in kernels.items():
                replicates[name][done:done + len(sums)] = finite_mean(
                    kappa_from_tables(tables, w), 1)
            done += len(sums)
        for name in names:
            low, high, invalid = percentile_interval(replicates[name], conflev)
            means[name].ci_low, means[name].ci_high = low, high
            describe_bootstrap(means[name], n_boot, seed, cluster, invalid, conflev)
    return rows, means
