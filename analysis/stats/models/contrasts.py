"""Pairwise contrasts between the levels of a factor of a fitted model, with adjusted p-values
and the fit's problems (separation, non-convergence) carried onto each contrast."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.stats.models.base import ModelFit, z_quantile
from analysis.stats.models.binomial import fit_binomial_glmm
from analysis.stats.models.ordinal import fit_clmm


@dataclass
class Contrast:
    """``level_a - level_b`` on the model's scale (log-odds / latent logit)."""

    level_a: str
    level_b: str
    estimate: float
    se: float
    statistic: float
    ci_low: float
    ci_high: float
    p_value: float
    p_adjusted: float
    #: False when the fit's problems (separation, non-convergence) make this contrast's
    #: estimate, SE and p-values meaningless; ``flags`` says why, in words.
    reliable: bool = True
    flags: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.level_a} - {self.level_b}"


@dataclass
class PairwiseContrasts:
    """All pairwise contrasts of one factor. CIs are unadjusted Wald intervals; ``p_adjusted``
    uses ``adjust`` (Holm by default) over the whole family.

    Numbers derived from a fit carry its problems: ``warnings`` holds the contrasts' own
    warnings, a separation diagnosis when the fit has one, and every warning of the fit
    (prefixed ``"from the fit: "``); ``fit_converged``, ``estimation`` (``"maximum
    likelihood"`` or ``"penalised maximum likelihood"``) and ``separation`` (the fit's
    ``extra["separation"]`` when it detected separation, else None) come from the fit, and
    each :class:`Contrast` says whether it can be read (``reliable``, ``flags``)."""

    factor: str
    scale: str
    adjust: str
    conf_level: float
    contrasts: list[Contrast]
    engine: str
    warnings: list[str] = field(default_factory=list)
    fit_converged: bool = True
    estimation: str = "maximum likelihood"
    separation: dict[str, Any] | None = None


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels ``multipletests(method="holm")``)."""
    from statsmodels.stats.multitest import multipletests

    if len(p_values) == 0:
        return []
    return [float(x) for x in multipletests(list(p_values), method="holm")[1]]


def pairwise_contrasts(
    fit: ModelFit | pd.DataFrame,
    factor: str = "system",
    *,
    adjust: str = "holm",
    conf_level: float | None = None,
    **fit_kwargs: Any,
) -> PairwiseContrasts:
    """All pairwise contrasts between the levels of ``factor`` with adjusted p-values.

    ``fit``: a :class:`ModelFit` with treatment-coded ``factor`` (all the fitters here), or a
    DataFrame, which is first fitted with :func:`fit_binomial_glmm` when it has a ``y`` column
    and no ``rating`` column, else with :func:`fit_clmm` (``fit_kwargs`` are passed on).

    Each contrast ``a - b`` (a before b in level order) is ``beta_a - beta_b`` (the reference
    level's beta is 0), with SE ``sqrt(v_aa + v_bb - 2 v_ab)`` from the model's covariance
    matrix, a Wald z test and an unadjusted Wald CI. ``adjust`` is any
    ``statsmodels.stats.multitest.multipletests`` method (default Holm). If ``factor`` interacts
    with other terms, the contrasts hold at the reference levels of those terms (warned).

    The fit's problems travel with the contrasts (see :class:`PairwiseContrasts`): its
    warnings, its convergence, and under separation a flag on every contrast. A contrast
    involving a separated level is not an estimate (maximum likelihood puts that level at
    +-infinity: glmer reported e.g. +28 with SE 724, so Holm's p_adj 1.00, or +3e5 with SE 0.007,
    so p_adj 0); the others are flagged too, since the covariance matrix they come from is
    that of a degenerate fit. From a penalised fit (:func:`fit_binomial_penalised`) the
    contrasts stay ``reliable`` but carry a flag that the separated level's size is the prior's.
    """
    from statsmodels.stats.multitest import multipletests

    if isinstance(fit, pd.DataFrame):
        df = fit
        if "y" in df.columns and "rating" not in df.columns:
            fit = fit_binomial_glmm(df, **fit_kwargs)
        else:
            fit = fit_clmm(df, **fit_kwargs)
    cl = conf_level if conf_level is not None else float(fit.extra.get("conf_level", 0.95))
    levels = fit.extra.get("levels", {}).get(factor)
    if not levels:
        raise ValueError(f"the fit has no factor {factor!r} (levels: {fit.extra.get('levels')})")
    vterms = fit.extra["vcov"]["terms"]
    V = np.asarray(fit.extra["vcov"]["matrix"], dtype=float)
    est = {c.term: c.estimate for c in fit.coefficients}
    warnings: list[str] = []
    index: dict[str, int | None] = {levels[0]: None}
    for lv in levels[1:]:
        term = f"{factor}{lv}"
        if term not in vterms or term not in est:
            raise ValueError(f"coefficient {term!r} not in the fit (aliased or not "
                             "treatment-coded?)")
        index[lv] = vterms.index(term)
    if any(":" in t and re.search(rf"(^|:){re.escape(factor)}", t) for t in vterms):
        warnings.append(f"{factor!r} interacts with other terms: contrasts are at the reference "
                        "levels of the interacting factors")
    rows = []
    z = z_quantile(cl)
    for a, b in combinations(levels, 2):
        w = np.zeros(len(vterms))
        if index[a] is not None:
            w[index[a]] += 1.0
        if index[b] is not None:
            w[index[b]] -= 1.0
        beta = np.array([est[t] for t in vterms])
        d = float(w @ beta)
        se = float(math.sqrt(max(w @ V @ w, 0.0)))
        stat = d / se if se > 0 else math.nan
        p = float(2 * sps.norm.sf(abs(stat))) if math.isfinite(stat) else math.nan
        rows.append((a, b, d, se, stat, d - z * se, d + z * se, p))
    pvals = [r[-1] for r in rows]
    if rows and all(math.isfinite(x) for x in pvals):
        adj = [float(x) for x in multipletests(pvals, method=adjust)[1]]
    else:
        adj = [math.nan] * len(rows)
    contrasts = [Contrast(*r, p_adjusted=pa) for r, pa in zip(rows, adj, strict=True)]
    separation = fit.extra.get("separation") or {}
    if separation.get("detected"):
        warnings.append(_flag_separated_contrasts(contrasts, factor, separation))
    if not fit.converged:
        for c in contrasts:
            c.reliable = False
            c.flags.append("the fit did not converge (see its warnings)")
    warnings += [f"from the fit: {w}" for w in fit.warnings]
    scale = ("latent logit (positive: higher ratings)" if fit.family == "cumulative"
             else "score points" if fit.family == "gaussian" else "log-odds")
    return PairwiseContrasts(
        factor=factor, scale=scale, adjust=adjust, conf_level=cl, contrasts=contrasts,
        engine=fit.engine, warnings=warnings, fit_converged=bool(fit.converged),
        estimation=str(fit.extra.get("estimation") or "maximum likelihood"),
        separation=separation if separation.get("detected") else None)


def _flag_separated_contrasts(contrasts: list[Contrast], factor: str,
                              separation: Mapping[str, Any]) -> str:
    """Flags each contrast of a fit with separation; returns the contrasts' warning."""
    levels = {lv["level"]: lv for lv in separation.get("levels", []) if lv["factor"] == factor}
    runaway = {t["term"] for t in separation.get("terms", [])}
    # A separated reference level: every coefficient of the factor is measured from infinity.
    involved_all = (any(lv["term"] is None for lv in levels.values())
                    or "(Intercept)" in runaway)
    penalised = bool(separation.get("penalised"))
    for c in contrasts:
        mine = [lv for lv in (c.level_a, c.level_b)
                if lv in levels or f"{factor}{lv}" in runaway]
        if penalised:
            if mine:
                c.flags.append(
                    f"penalised estimate: {', '.join(repr(m) for m in mine)} separated in the "
                    "data (outcomes all alike); finite thanks to the prior, its size reflects "
                    "the prior as much as the data")
            continue
        c.reliable = False
        if mine or involved_all:
            named = ", ".join(repr(m) for m in mine) or "the reference level"
            c.flags.append(f"not estimable: {named} separated (outcomes all alike): the "
                           "maximum-likelihood difference is infinite; estimate, SE and "
                           "p-values are meaningless")
        else:
            c.flags.append("the fit shows separation elsewhere: its covariance matrix, hence "
                           "this SE and p-value, may be wrong")
    if penalised:
        return ("contrasts from a penalised fit: estimates involving separated levels are "
                "shrunk by the prior (see each contrast's flags)")
    named = ", ".join(f"{lv['level']!r}" for lv in levels.values()) or ", ".join(
        sorted(runaway))
    return (f"contrasts from a fit with separation ({named}): every contrast is flagged "
            "unreliable (see each one's flags); read the penalised fit's contrasts instead "
            "(analysis option separation='penalised')")
