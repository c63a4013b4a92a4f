"""Pairwise A/B preferences: win shares with Wilson CIs and a Bradley-Terry model with a
position (left/"A") term, fitted with statsmodels."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.stats import rbridge
from analysis.stats.models.base import Coefficient, ModelFit, coefficient_of, vcov_extra
from analysis.stats.rbridge import level_label


@dataclass
class PreferenceShare:
    """How often a system won its A/B comparisons, with Wilson CIs, ties excluded
    (wins / (wins + losses)) and ties counted as half ((wins + ties/2) / n)."""

    system: str
    n: int
    wins: int
    losses: int
    ties: int
    share_ties_excluded: float | None
    ci_ties_excluded: tuple[float, float] | None
    share_ties_half: float | None
    ci_ties_half: tuple[float, float] | None


@dataclass
class PreferenceResult:
    """Output of :func:`preference_model`.

    ``ties_excluded`` / ``ties_half``: Bradley-Terry logistic models
    P(choose left) = logit^-1(position + beta_left - beta_right), fitted without ties and with
    ties as half a win for each side (response 0.5). ``position_*`` is the position (left/"A")
    effect on the log-odds scale: > 0 means "A" is chosen more often than the systems'
    strengths explain. ``extra['left_share_*']`` gives the raw share of "A" choices with a
    Wilson CI (and an exact binomial test against 0.5, ties excluded).
    """

    n_comparisons: int
    n_ties: int
    shares: list[PreferenceShare]
    ties_excluded: ModelFit | None
    ties_half: ModelFit | None
    position_ties_excluded: Coefficient | None
    position_ties_half: Coefficient | None
    extra: dict[str, Any] = field(default_factory=dict)


_LEFT = {"a", "left", "l"}
_RIGHT = {"b", "right", "r"}
# No preference: a tie, and a criterion's absolute answers "both good" / "both bad", which
# prefer neither side (their level is read by the joint model, `stats.pairwise_joint`).
_TIE = {"tie", "t", "equal", "same", "=", "both_good", "both_bad"}


def _wilson(count: float, n: float, conf_level: float) -> tuple[float, float] | None:
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return None
    lo, hi = proportion_confint(count, n, alpha=1 - conf_level, method="wilson")
    return float(lo), float(hi)


def preference_model(
    df: pd.DataFrame,
    *,
    left: str = "left_system",
    right: str = "right_system",
    choice: str = "choice",
    reference: str | None = None,
    cluster: str | None = None,
    conf_level: float = 0.95,
    position_known: bool = True,
    weight: str | None = None,
) -> PreferenceResult:
    """Pairwise A/B preferences: shares per system and a Bradley-Terry model with a position term.

    Rows: ``left_system`` (shown as "A"), ``right_system`` ("B"), ``choice`` in {"A", "B",
    "tie"} (case-insensitive; "left"/"right" accepted too; "both_good" and "both_bad" count as
    ties: no preference). Model (statsmodels GLM,
    Binomial/logit): P(choose left) = logit^-1(position + beta_left - beta_right), with
    beta_reference = 0 (``reference``: default the first system in sorted order). Coefficients:
    ``"position (A/left)"`` (the intercept) and ``"system<level>"`` (strength relative to the
    reference, log-odds of winning against it). ``cluster="rater"`` gives cluster-robust SEs by
    that column (default: model-based SEs). Fitted twice: ties excluded, and ties counted as
    half (response 0.5 for a tie).

    ``position_known=False`` (A/B is only a data set's order, not what people saw first): the
    model has no position term. ``weight``: a column of counts (aggregated judgments, one row
    per unit and answer, `annotation.votes`), used as frequency weights in the shares and the
    model; such rows have no rater, so the SEs are model-based. A design in which the position
    and the systems cannot be told apart (every pair shows the same system as A) or the
    systems are not connected by comparisons is detected and explained in
    ``extra["not_estimable"]``, with no model fitted, instead of failing on a singular matrix.
    """
    import statsmodels
    import statsmodels.api as sm
    from scipy.special import expit

    for col in (left, right, choice) + ((cluster,) if cluster else ()):
        if col not in df.columns:
            raise ValueError(f"missing column {col!r}")
    data = df.dropna(subset=[left, right, choice]).copy()
    data[left] = data[left].map(level_label)
    data[right] = data[right].map(level_label)
    ch = data[choice].astype(str).str.strip().str.lower()
    side = np.where(ch.isin(_LEFT), 1.0, np.where(ch.isin(_RIGHT), 0.0,
                                                    np.where(ch.isin(_TIE), 0.5, np.nan)))
    if np.isnan(side).any():
        bad = sorted(set(data[choice][np.isnan(side)].astype(str)))
        raise ValueError(f"unknown choice values {bad}; expected A/B/tie")
    if (data[left] == data[right]).any():
        raise ValueError("a comparison of a system with itself")
    data["_y"] = side
    data["_w"] = data[weight].astype(float) if weight else 1.0
    data = data[data["_w"] > 0]
    systems = rbridge.factor_levels(pd.concat([data[left], data[right]], ignore_index=True),
                                    reference=reference)
    n_ties = _count(data["_w"][data["_y"] == 0.5])

    shares = []
    for s in systems:
        is_l, is_r = data[left] == s, data[right] == s
        wins = _count(data["_w"][(is_l & (data["_y"] == 1)) | (is_r & (data["_y"] == 0))])
        losses = _count(data["_w"][(is_l & (data["_y"] == 0)) | (is_r & (data["_y"] == 1))])
        ties = _count(data["_w"][(is_l | is_r) & (data["_y"] == 0.5)])
        n = wins + losses + ties
        shares.append(PreferenceShare(
            system=s, n=n, wins=wins, losses=losses, ties=ties,
            share_ties_excluded=wins / (wins + losses) if wins + losses else None,
            ci_ties_excluded=_wilson(wins, wins + losses, conf_level),
            share_ties_half=(wins + 0.5 * ties) / n if n else None,
            ci_ties_half=_wilson(wins + 0.5 * ties, n, conf_level),
        ))

    def design(d: pd.DataFrame) -> pd.DataFrame:
        X = pd.DataFrame(index=d.index)
        if position_known:
            X["position (A/left)"] = np.ones(len(d))
        for s in systems[1:]:
            X[f"system{s}"] = (d[left] == s).astype(float) - (d[right] == s).astype(float)
        return X

    def fit(d: pd.DataFrame, label: str) -> ModelFit | None:
        if len(d) == 0 or design(d).shape[1] == 0:
            return None
        X = design(d)
        y = d["_y"].to_numpy(dtype=float)
        t0 = time.perf_counter()
        model = sm.GLM(y, X, family=sm.families.Binomial(),
                       freq_weights=d["_w"].to_numpy(dtype=float) if weight else None)
        warns: list[str] = []
        if cluster is not None and not weight:
            codes = pd.factorize(d[cluster].astype(str))[0]
            res = model.fit(cov_type="cluster", cov_kwds={"groups": codes})
            se_kind = f"cluster-robust SEs by {cluster}"
        else:
            res = model.fit()
            se_kind = "model-based SEs"
        cov = np.asarray(res.cov_params(), dtype=float)
        names = list(X.columns)
        coefs = [coefficient_of(n, e, math.sqrt(max(cov[i, i], 0.0)), conf_level)
                 for i, (n, e) in enumerate(zip(names, np.asarray(res.params), strict=True))]
        converged = bool(getattr(res, "converged", True)) and all(
            math.isfinite(c.se) and c.se < 1e3 for c in coefs)
        if not converged:
            warns.append("preference model did not converge (separation or a disconnected "
                         "comparison graph?)")
        return ModelFit(
            formula="P(choose A/left) = logit^-1(position + beta_left - beta_right)"
            if position_known else "P(choose A) = logit^-1(beta_A - beta_B), no position term "
                                   "(A/B is not what people saw first)",
            engine=f"statsmodels {statsmodels.__version__} GLM Binomial(logit), {se_kind}",
            family="bradley-terry (binomial)", link="logit", n_obs=len(d),
            coefficients=coefs, converged=converged, warnings=warns,
            extra={"ties": label, "conf_level": conf_level, "levels": {"system": systems},
                   "reference": {"system": systems[0]},
                   "vcov": vcov_extra(names, cov), "elapsed_s": time.perf_counter() - t0,
                   **({"p_left_at_equal_strength": float(expit(coefs[0].estimate)),
                       "p_left_ci": (float(expit(coefs[0].ci_low)),
                                     float(expit(coefs[0].ci_high)))}
                      if position_known else {})},
        )

    no_ties = data[data["_y"] != 0.5]
    extra: dict[str, Any] = {"systems": systems, "reference": systems[0],
                             "position_known": position_known, "weighted_by": weight}
    problem = _not_estimable(design(data), data, left, right, position_known)
    if problem:
        extra["not_estimable"] = problem
        fit_ex = fit_half = None
    else:
        fit_ex = fit(no_ties, "excluded")
        fit_half = fit(data, "counted as half")
    both = ch.loc[data.index].isin(["both_good", "both_bad"])
    if both.any():  # what the ties are made of, for the report to say so
        extra["ties_by_answer"] = {answer: _count(data["_w"][ch.loc[data.index] == answer])
                                   for answer in ("tie", "both_good", "both_bad")}
    n_left = _count(no_ties["_w"][no_ties["_y"] == 1])
    n_no_ties = _count(no_ties["_w"])
    n_all = _count(data["_w"])
    if n_no_ties:
        bt = sps.binomtest(n_left, n_no_ties, 0.5)
        extra["left_share_ties_excluded"] = {
            "share": n_left / n_no_ties, "ci": _wilson(n_left, n_no_ties, conf_level),
            "n": n_no_ties, "binomial_test_p": float(bt.pvalue)}
    if n_all:
        cnt = n_left + 0.5 * n_ties
        extra["left_share_ties_half"] = {
            "share": cnt / n_all, "ci": _wilson(cnt, n_all, conf_level), "n": n_all}
    return PreferenceResult(
        n_comparisons=n_all, n_ties=n_ties, shares=shares,
        ties_excluded=fit_ex, ties_half=fit_half,
        position_ties_excluded=fit_ex.coefficients[0] if fit_ex and position_known else None,
        position_ties_half=fit_half.coefficients[0] if fit_half and position_known else None,
        extra=extra,
    )


def _count(weights: pd.Series) -> int:
    return int(round(float(weights.sum())))


def _not_estimable(X: pd.DataFrame, data: pd.DataFrame, left: str, right: str,
                   position_known: bool) -> str | None:
    """Why the Bradley-Terry design cannot be estimated, in words, or None when it can: the
    position term and the systems confounded (every comparison shows the same system as A),
    or systems that no chain of comparisons connects."""
    if X.shape[1] == 0 or len(X) == 0:
        return None
    matrix = X.drop_duplicates().to_numpy(dtype=float)
    if np.linalg.matrix_rank(matrix) == X.shape[1]:
        return None
    orders = sorted(set(zip(data[left], data[right], strict=True)))
    if position_known:
        systems_only = X.drop(columns=["position (A/left)"]).drop_duplicates().to_numpy(float)
        if systems_only.shape[1] == 0 or np.linalg.matrix_rank(systems_only) == \
                systems_only.shape[1]:
            shown = "; ".join(f"{a} as A against {b}" for a, b in orders[:5])
            return ("position and system cannot be told apart: every comparison shows the "
                    f"same system as A ({shown}), so a preference for that system and a "
                    "preference for the first position are the same numbers. No model is "
                    "fitted; the shares below are per system as shown. Show each pair in "
                    "both orders (the design's counterbalancing), or, if A/B was not what "
                    "people saw first, import with the position declared unknown.")
    return ("the systems are not all connected by comparisons (some groups of systems were "
            "never compared with each other), so their strengths have no common scale. No "
            "model is fitted.")