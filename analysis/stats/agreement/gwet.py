"""The Gwet family on units x categories counts: percent agreement, Gwet's AC1/AC2 and
Fleiss' kappa, with missing ratings and Gwet's variance (irrCAC)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.stats.agreement.base import (
    CONFLEV,
    Agreement,
    AgreementWeights,
    CodedRatings,
    coded_ratings,
    is_numeric_values,
    plain_scalar,
    t_interval,
)


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
    x = np.asarray(categories, dtype=float) if is_numeric_values(categories) else positions
    span = x.max() - x.min()
    distance = np.abs(x[:, None] - x[None, :]) / span
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
    coded: CodedRatings,
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
    low, high = t_interval(result.value, result.se, result.n, conflev, bounds)
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
        categories=[plain_scalar(c) for c in categories],
        categories_from=coded.source,
    )


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
    coded = coded_ratings(df, labels)
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
    coded = coded_ratings(df, labels)
    weighted = weights not in (None, "identity")
    return _gwet_estimate(
        coded, coded.counts(), coded.excluded, weights=weights, coefficient="ac1",
        name="Gwet's AC2" if weighted else "Gwet's AC1", conflev=conflev, bounds=(-1.0, 1.0),
    )


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
    coded = coded_ratings(df, labels)
    excluded = dict(coded.excluded)
    counts = coded.counts()
    per_unit = counts.sum(axis=1)
    multiple = per_unit[per_unit >= 2].astype(int)
    name = "Fleiss' kappa"
    if multiple.size == 0:
        return Agreement(float("nan"), None, None, 0, name, n_units=len(per_unit),
                         n_raters=len(coded.raters), n_ratings=int(per_unit.sum()),
                         excluded=excluded, warnings=["no unit has two ratings: undefined"],
                         categories=[plain_scalar(c) for c in coded.categories],
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
