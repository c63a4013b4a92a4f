"""Cluster bootstraps: the vectorised replicate sums behind the coefficients' CIs, and a
generic percentile bootstrap for custom statistics."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
from scipy import sparse

from analysis.stats.agreement.base import BLOCK_FLOATS, CONFLEV, N_BOOT, Agreement, Cluster
from kit.estimate import Estimate


def percentile_interval(replicates: np.ndarray, conflev: float
                        ) -> tuple[float | None, float | None, int]:
    """Percentile interval of the finite replicates, and how many were not finite."""
    finite = replicates[np.isfinite(replicates)]
    invalid = int(replicates.size - finite.size)
    if not finite.size:
        return None, None, invalid
    tail = (1 - conflev) / 2
    low, high = np.quantile(finite, [tail, 1 - tail])
    return float(low), float(high), invalid


def cluster_of_units(rated: pd.DataFrame, unit_labels: np.ndarray, cluster: Cluster
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


def replicate_sums(
    cluster: np.ndarray,
    feature: np.ndarray,
    weight: np.ndarray,
    n_clusters: int,
    n_features: int,
    n_boot: int,
    seed: int,
    *,
    width: int | None = None,
) -> Iterator[np.ndarray]:
    """Blocks of bootstrap replicates of per-feature sums.

    Each replicate draws `n_clusters` clusters with replacement: the number of times each
    cluster is drawn is multinomial, and the replicate's sums are those counts times the
    per-cluster sums (a sparse clusters x features matrix), i.e. one sparse-dense product per
    block instead of rebuilding tables per replicate. Yields (block, n_features) arrays; the
    same `seed` gives the same replicates. Blocks hold about _BLOCK_FLOATS / `width` replicates
    (default `n_features`; a caller that expands each replicate to more values says how many).
    """
    per_cluster = sparse.csr_matrix(
        (weight, (cluster, feature)), shape=(n_clusters, n_features)).T.tocsr()
    rng = np.random.default_rng(seed)
    width = n_features if width is None else width
    block = max(1, min(n_boot, BLOCK_FLOATS // max(width, n_clusters, 1)))
    probabilities = np.full(n_clusters, 1.0 / n_clusters)
    done = 0
    while done < n_boot:
        size = min(block, n_boot - done)
        draws = rng.multinomial(n_clusters, probabilities, size=size).astype(float)
        yield np.asarray(per_cluster @ draws.T).T
        done += size


def describe_bootstrap(result: Agreement, n_boot: int, seed: int, cluster: str, invalid: int,
                   conflev: float) -> None:
    result.n_boot, result.seed, result.cluster = n_boot, seed, cluster
    result.ci_method = (f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, "
                        f"{conflev:.0%})")
    result.method += f"; {conflev:.0%} percentile bootstrap CI over {cluster}s"
    result.details.update({"n_boot": float(n_boot), "n_invalid": float(invalid)})
    if invalid:
        result.warnings.append(f"{invalid} of {n_boot} bootstrap replicates undefined "
                               "(skipped)")


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
    small tables. The coefficients of this package have vectorised bootstraps instead
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
    low, high, invalid = percentile_interval(replicates, level)
    method = f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, level={level})"
    return Agreement(
        value=point, ci_low=low, ci_high=high, n=n_clusters, method=method,
        details={"n_boot": float(n_boot), "n_invalid": float(invalid)}, ci_method=method,
        n_boot=n_boot, seed=seed, cluster=cluster,
        warnings=[f"{invalid} of {n_boot} bootstrap replicates undefined (skipped)"]
        if invalid else [],
    )


def finite_mean(values: np.ndarray, axis: int) -> np.ndarray:
    """Mean of the finite entries along `axis` (NaN where none), without warnings."""
    finite = np.isfinite(values)
    count = finite.sum(axis=axis)
    total = np.where(finite, values, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
