"""The human ceiling: leave-one-rater-out agreement of each human with the majority of
the others, and proxies judged against the same references."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.stats.agreement.base import (
    CONFLEV,
    Cluster,
    KappaWeights,
    TieBreak,
    category_codes,
    is_numeric_values,
    mean_of_finite,
    missing_counts,
    plain_scalar,
    ratings_frame,
)
from analysis.stats.agreement.bootstrap import (
    cluster_of_units,
    finite_mean,
    percentile_interval,
    replicate_sums,
)
from analysis.stats.agreement.kappa import kappa_from_tables, kappa_weights


@dataclass
class RaterAgreement:
    """One rater's agreement with a reference (the majority of other humans).

    For a human: against the majority of the other humans on the units it rated. For a proxy:
    the mean over held-out humans h of its agreement with the majority of the humans other
    than h, on the units h rated (the same references the humans faced). `n_units` counts
    units compared (for a proxy, summed over held-out humans). `extra` is the optional custom
    statistic. For proxies with a bootstrap: `kappa_ci`, `percent_agreement_ci` and the gap to
    the human ceiling (`kappa_minus_ceiling`, its CI from the same replicates). `n_excluded`
    and `excluded_because`: for a proxy, the units of its answers left out before it was
    scored (the dev split its threshold was chosen on; set by the caller that knows them).
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
    n_excluded: int = 0
    excluded_because: str | None = None


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


class _CeilingTables:
    """The ceiling's contingency tables as few features as their content allows.

    A crowd rater who judged one unit has a table with a single cell, in every replicate of
    the bootstrap too (a replicate only counts that unit 0, 1, 2... times): its agreement is 1
    or 0, whatever the count, and undefined when the unit is not drawn. Its kappa is
    undefined: the formula gives NaN on the diagonal (chance agreement 1) and 0 off it, and
    keeping those zeros while dropping the NaNs averaged a crowd of one-judgment raters to a
    ceiling kappa of 0.000 (the raters who agreed dropped, those who disagreed kept). Such a
    table is one feature (its total weight) instead of q x q,
    and its coefficients a constant where the total is positive: the same values, bit for
    bit (w / w is exactly 1), as from the full table, at a fraction of the cost (7,150 raters
    x 25 cells x 2,000 replicates took 15 s). Tables with several cells keep their q x q
    features; tables with none are undefined throughout."""

    def __init__(self, table: np.ndarray, cell: np.ndarray, n_tables: int, q: int,
                 kernel: np.ndarray) -> None:
        self.n_tables, self.q, self.kernel = n_tables, q, kernel
        self.n_cells = n_tables * q * q  # features of full tables for every table
        present = np.unique(table * (q * q) + cell)
        cells_per_table = np.bincount(present // (q * q), minlength=n_tables)
        self.multi = np.flatnonzero(cells_per_table > 1)
        self.single = np.flatnonzero(cells_per_table == 1)
        size_multi = self.multi.size * q * q
        position = np.full(n_tables, -1, dtype=np.int64)
        position[self.multi] = np.arange(self.multi.size)
        position[self.single] = np.arange(self.single.size)
        is_multi = cells_per_table[table] > 1
        self.features = np.where(is_multi, position[table] * (q * q) + cell,
                                 size_multi + position[table])
        self.size_multi = size_multi
        self.n_features = size_multi + self.single.size
        # The single cell of each single-cell table, and its coefficients as a table.
        only_cell = np.zeros(n_tables, dtype=np.int64)
        only_cell[present // (q * q)] = present % (q * q)
        flat = np.zeros((self.single.size, q * q))
        flat[np.arange(self.single.size), only_cell[self.single]] = 1.0
        one_hot = flat.reshape(self.single.size, q, q)
        self.single_kappa = np.full(self.single.size, np.nan)  # see the docstring
        self.single_pct = _percent_from_tables(one_hot)

    def coefficients(self, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(kappa, percent agreement) of every table, (replicates, tables), from the feature
        sums of each replicate."""
        kappa = np.full((len(sums), self.n_tables), np.nan)
        pct = np.full((len(sums), self.n_tables), np.nan)
        if self.multi.size:
            full = sums[:, :self.size_multi].reshape(-1, self.multi.size, self.q, self.q)
            # A table whose weight sits in one cell (in a replicate) has no kappa, on the
            # diagonal or off it, as a single-cell table (see the class docstring).
            one_cell = (full > 0).sum(axis=(-2, -1)) == 1
            kappa[:, self.multi] = np.where(one_cell, np.nan,
                                            kappa_from_tables(full, self.kernel))
            pct[:, self.multi] = _percent_from_tables(full)
        if self.single.size:
            drawn = sums[:, self.size_multi:] > 0
            kappa[:, self.single] = np.where(drawn, self.single_kappa, np.nan)
            pct[:, self.single] = np.where(drawn, self.single_pct, np.nan)
        return kappa, pct


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
    excluded = missing_counts(df)
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
    code, categories, source = category_codes(rated["value"], labels)
    if labels is None and weights is not None and not is_numeric_values(categories):
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
    kernel = kappa_weights(q, weights)
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

    # One contingency table per human (mine x reference) and per proxy and human (theirs x
    # reference); the point estimate and every bootstrap replicate are sums of weights over
    # the tables' cells (see `_CeilingTables`).
    proxy_parts = [(p, np.flatnonzero(theirs[p] >= 0)) for p in range(n_p)]
    table_of = np.concatenate([r_h, *[n_h + p * n_h + r_h[i] for p, i in proxy_parts]])
    cell_of = np.concatenate([r_mine * q + ref, *[theirs[p, i] * q + ref[i]
                                                  for p, i in proxy_parts]])
    weight_all = np.concatenate([w, *[w[i] for _, i in proxy_parts]])
    unit_all = np.concatenate([r_unit, *[r_unit[i] for _, i in proxy_parts]])
    tables = _CeilingTables(table_of.astype(np.int64), cell_of.astype(np.int64),
                            n_h + n_p * n_h, q, kernel)
    features, n_features = tables.features, tables.n_features

    def summarise(sums: np.ndarray) -> dict[str, np.ndarray]:
        """Per replicate (rows of `sums`): mean kappa/agreement over humans, per proxy."""
        kappa_t, pct_t = tables.coefficients(sums)
        kappa_h, pct_h = kappa_t[:, :n_h], pct_t[:, :n_h]
        out = {"kappa_h": kappa_h, "pct_h": pct_h, "kappa": finite_mean(kappa_h, 1),
               "pct": finite_mean(pct_h, 1)}
        if n_p:
            kappa_ph = kappa_t[:, n_h:].reshape(-1, n_p, n_h)
            out["kappa_ph"] = kappa_ph
            out["pct_ph"] = pct_t[:, n_h:].reshape(-1, n_p, n_h)
            out["proxy_kappa"] = finite_mean(kappa_ph, 2)
            out["proxy_pct"] = finite_mean(out["pct_ph"], 2)
        return out

    totals = np.bincount(features, weights=weight_all, minlength=n_features)[None, :]
    point = summarise(totals)
    nan = float("nan")
    human_rows: list[RaterAgreement] = []
    for j, h in enumerate(humans):
        if units_per_h[j] == 0:
            human_rows.append(RaterAgreement(plain_scalar(h), 0, nan, nan,
                                             nan if statistic else None))
            continue
        extra = None
        if statistic:
            mask = r_h == j
            extra = float(statistic(r_mine[mask], ref[mask], w[mask]))
        human_rows.append(RaterAgreement(
            plain_scalar(h), int(units_per_h[j]), float(point["kappa_h"][0, j]),
            float(point["pct_h"][0, j]), extra))
    proxy_rows: list[RaterAgreement] = []
    for p, proxy in enumerate(proxies):
        scored = units_per_ph[p] > 0
        kappas = np.where(scored, point["kappa_ph"][0, p], np.nan)
        pcts = np.where(scored, point["pct_ph"][0, p], np.nan)
        extra = None
        if statistic:
            values = []
            for j in np.flatnonzero(scored).tolist():
                mask = (r_h == j) & (theirs[p] >= 0)
                values.append(float(statistic(theirs[p, mask], ref[mask], w[mask])))
            extra = mean_of_finite(values)
        proxy_rows.append(RaterAgreement(
            rater=plain_scalar(proxy), n_units=int(units_per_ph[p].sum()),
            kappa=mean_of_finite(list(kappas)), percent_agreement=mean_of_finite(list(pcts)),
            extra=extra))
    scored_humans = [r for r in human_rows if r.n_units]
    mean_kappa = mean_of_finite([r.kappa for r in scored_humans])
    for row in proxy_rows:
        row.kappa_minus_ceiling = row.kappa - mean_kappa if np.isfinite(row.kappa) else None
    notes: list[str] = []
    undefined = [r for r in scored_humans if not np.isfinite(r.kappa)]
    if undefined:
        notes.append(f"{len(undefined)} of {len(scored_humans)} human(s) have no kappa "
                     "(a single unit compared, or no variation in their answers or the "
                     "references): the mean kappa is over the others"
                     + ("; with none left it is undefined (use the percent agreement, or "
                        "aggregated counts for data sets whose raters judged one unit each)"
                        if len(undefined) == len(scored_humans) else ""))
    unscored = [str(r.rater) for r in human_rows if not r.n_units]
    if unscored:
        excluded["humans_without_reference"] = len(unscored)
        notes.append(f"{len(unscored)} human(s) share no unit with another human and have no "
                     "ceiling row")
    result = HumanCeiling(
        humans=human_rows,
        mean_kappa=mean_kappa,
        mean_percent_agreement=mean_of_finite([r.percent_agreement for r in scored_humans]),
        mean_extra=mean_of_finite([r.extra for r in scored_humans]) if statistic else None,
        proxies=proxy_rows,
        method=(
            "leave-one-rater-out: each human vs the majority of the other humans "
            f"(ties: {tie_break}; kappa weights: {weights or 'none'}; unweighted mean over humans)"
        ),
        n_units=int(np.unique(r_unit).size), n_humans=n_h, n_proxies=n_p,
        excluded=excluded, warnings=notes, weights=weights or "identity",
        categories=[plain_scalar(c) for c in categories], categories_from=source,
    )
    if n_boot > 0 and rows.size and q >= 2:
        unit_cluster, n_clusters = cluster_of_units(rated, np.asarray(units), cluster)
        keys = ["kappa", "pct"] + (["proxy_kappa", "proxy_pct"] if n_p else [])
        replicates = {"kappa": np.empty(n_boot), "pct": np.empty(n_boot)}
        if n_p:
            replicates.update({k: np.empty((n_boot, n_p)) for k in keys[2:]})
        done = 0
        # Blocks of replicates sized as for a full table per human and proxy-human pair, as
        # they were: the same blocks give the same draws.
        for sums in replicate_sums(unit_cluster[unit_all], features, weight_all, n_clusters,
                                    n_features, n_boot, seed, width=tables.n_cells):
            out = summarise(sums)
            for key in keys:
                replicates[key][done:done + len(sums)] = out[key]
            done += len(sums)
        low, high, invalid = percentile_interval(replicates["kappa"], conflev)
        result.kappa_ci = (low, high)
        low, high, _ = percentile_interval(replicates["pct"], conflev)
        result.percent_agreement_ci = (low, high)
        for p, row in enumerate(proxy_rows):
            row.kappa_ci = percentile_interval(replicates["proxy_kappa"][:, p], conflev)[:2]
            row.percent_agreement_ci = percentile_interval(replicates["proxy_pct"][:, p],
                                                           conflev)[:2]
            row.kappa_minus_ceiling_ci = percentile_interval(
                replicates["proxy_kappa"][:, p] - replicates["kappa"], conflev)[:2]
        result.n_boot, result.seed, result.cluster = n_boot, seed, cluster
        result.ci_method = (f"percentile bootstrap over {cluster}s (B={n_boot}, seed={seed}, "
                            f"{conflev:.0%}); references recomputed from the same ratings")
        if invalid:
            result.warnings.append(f"{invalid} of {n_boot} bootstrap replicates undefined")
    return result
