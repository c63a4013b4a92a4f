"""Regression models for human-evaluation data: ordinal (Likert), binary and pairwise preference.

Input convention: a tidy pandas DataFrame, one row per judgment, with ``rating`` (ordinal) or
``y`` (binary 0/1), ``system``, ``rater``, ``item`` and possibly other factor columns (system
metadata such as ``temp``/``contact``). Formulas use a small subset of R / lme4 syntax (see
:mod:`analysis.stats.formula`): columns of ``df``, ``1``, ``a:b``, ``a*b`` and random terms
``(1|rater)``, ``(1 + x|g)``. Every formula is parsed against ``df``'s columns and the engines
receive only the text rebuilt from the parsed terms, never the caller's text: patsy and R
evaluate formulas as code, so this holds for direct calls too, not just user entry points.
Any column named in the formula is used; non-numeric columns and all grouping factors of
random terms become factors; numeric fixed-effect columns stay numeric (covariates). Rows with
a missing value in a used column are dropped (with a warning).

Reference levels: the first level of each factor is the reference of R's treatment contrasts,
so ``system`` coefficients read "level minus reference". Level order: ``levels={col: [...]}``
if given, else a pandas Categorical's order, else sorted values (numerically when numeric).
``reference="B"`` (or ``{"system": "B", "temp": "warm"}``) moves that level to the front.
Coefficient names follow R: factor name + level, e.g. ``systemB``, ``tempwarm``; the
statsmodels fallbacks are renamed to the same convention.

Engines (``ModelFit.engine`` always says which one ran, with versions read at run time):

* ``fit_clmm`` / ``fit_clm``: R ``ordinal::clmm`` / ``ordinal::clm`` (logit link), run in a
  separate R process (:mod:`analysis.stats.rbridge`; the R code is in ``analysis/stats/r/``).
  Without R (or ``engine="statsmodels"``): statsmodels ``OrderedModel(distr="logit")``
  fitted with BFGS, no constant -> the same model as R's ``clm``; random-effect terms are
  dropped and a warning says so.
* ``fit_binomial_glmm``: ``lme4::glmer`` (binomial, Laplace) in the same separate R process
  (``engine="auto"`` or ``"R"``; also accepts a ``cbind(successes, failures)`` response).
  ``engine="pymer4"`` goes through pymer4 ``Lmer(..., family="binomial")`` instead, only when
  the user has installed pymer4 (optional, not installed by default: it embeds R, GPL, in the
  Python process through rpy2). Without R (or ``engine="statsmodels"``): a plain
  logistic regression (statsmodels GLM Binomial/logit) with cluster-robust standard errors by
  the grouping factors of the random terms (two-way when there are two, e.g. rater and item).
  That is NOT glmer: estimates are population-averaged (marginal) log-odds, which are smaller
  in magnitude than glmer's conditional ones when the random-effect variance is large; no
  variances are estimated. The engine string and a warning say so.
* ``fit_binomial_penalised``: the same binomial model with a weakly informative normal prior
  on the fixed effects (R ``blme::bglmer``; ``brglm2::brglmFit`` without random terms), for
  data with separation, where glmer's estimates are infinite.

Separation (a factor level whose outcomes are all alike: a system at 100% "yes", or rated only
in the top category) is diagnosed on every fit (``extra["separation"]``, a warning naming the
level), and the fit's warnings travel with the numbers derived from it
(:func:`pairwise_contrasts`).

Results are plain dataclasses (:class:`Coefficient`, :class:`ModelFit`, ...).
Confidence intervals are Wald intervals (estimate +- z * SE) at ``conf_level``; p-values are
two-sided Wald z tests.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
import threading
import time
import warnings as warnings_module
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.stats import rbridge
from analysis.stats.formula import Formula, parse_formula, r_coefficient_name
from analysis.stats.rbridge import level_label

__all__ = [
    "Coefficient",
    "Contrast",
    "ModelFit",
    "PairwiseContrasts",
    "PreferenceResult",
    "PreferenceShare",
    "fit_binomial_glmm",
    "fit_binomial_penalised",
    "fit_clm",
    "fit_clmm",
    "holm_adjust",
    "pairwise_contrasts",
    "preference_model",
]

DEFAULT_CLMM_FORMULA = "rating ~ system + (1|rater) + (1|item)"
DEFAULT_CLM_FORMULA = "rating ~ system"
DEFAULT_GLMM_FORMULA = "y ~ system + (1|rater) + (1|item)"

#: ``ModelFit.warnings`` entry of the statsmodels fallbacks for models with random terms.
RANDOM_EFFECTS_DROPPED = (
    "random effects were NOT modelled (R unavailable or statsmodels engine forced): "
    "fixed-effects-only fit"
)


# --------------------------------------------------------------------------------------------
# result types


@dataclass
class Coefficient:
    """One estimated parameter.

    ``estimate`` is on the model's link scale (log-odds for logit models). ``ci_low``/``ci_high``
    is the Wald interval at the fit's ``conf_level``; ``p_value`` the two-sided Wald z test of
    ``estimate == 0`` (None for ordinal thresholds, where that test is meaningless);
    ``statistic`` the z value.
    """

    term: str
    estimate: float
    se: float
    ci_low: float
    ci_high: float
    p_value: float | None
    statistic: float | None = None

    @property
    def odds_ratio(self) -> float:
        """exp(estimate): an odds ratio for logit-link coefficients."""
        return _safe_exp(self.estimate)

    @property
    def odds_ratio_ci(self) -> tuple[float, float]:
        return _safe_exp(self.ci_low), _safe_exp(self.ci_high)


@dataclass
class ModelFit:
    """A fitted model.

    Fields
    ------
    formula: the formula as fitted, rebuilt from the parsed terms (``a*b`` written out as
        ``a + b + a:b``; random terms included even when the engine dropped them).
    engine: what actually fitted it, with versions, e.g.
        ``"R ordinal::clmm 2022.11-16 via Rscript (R 4.2.2)"``.
    family, link: ``"cumulative"``/``"binomial"``/``"bradley-terry (binomial)"``; ``"logit"``.
    n_obs: rows used (after dropping missing values; for a ``cbind`` response: rows, not trials).
    coefficients: fixed effects (binomial models include ``(Intercept)``; ordinal ones have
        no intercept, the thresholds play that role). Ordinal sign convention as R's clm:
        logit P(Y <= j) = theta_j - x'beta, so a positive coefficient means higher ratings.
    thresholds: ordinal cut points ``"1|2"``, ``"2|3"``, ... (empty for binary models).
    random_effects: variances of the random effects: ``{"rater": 0.41, "item": 1.2}`` for
        random intercepts; a random slope ``x`` of ``rater`` appears as ``"rater:x"``.
        Empty for the fallbacks (not modelled).
    converged: optimiser reported success, the gradient is small and all SEs are finite.
    warnings: optimiser/R warnings, singular fits, dropped rows, fallback notices.
    extra: ``conf_level``; ``levels`` {fixed-effect factor: level order, first = reference};
        ``reference`` {factor: reference level}; ``vcov`` {"terms": [...], "matrix": [[...]]}
        (covariance of ``coefficients``, used by :func:`pairwise_contrasts`); ``loglik``,
        ``aic``; ``n_groups`` {grouping factor: number of levels}; ``random_effects_sd``;
        ``elapsed_s`` (wall time of the fit); ``versions``; ``fallback`` (bool);
        ``separation`` (see :func:`_diagnose_separation`); per model: ``nominal_test``,
        ``nominal_test_status`` and ``proportional_odds_violations`` (fit_clm),
        ``odds_ratios``, ``estimation`` ("maximum likelihood" / "penalised maximum
        likelihood") and ``penalty`` (binomial), ``cond_hessian``, ...
    """

    formula: str
    engine: str
    family: str
    link: str
    n_obs: int
    coefficients: list[Coefficient]
    thresholds: list[Coefficient] = field(default_factory=list)
    random_effects: dict[str, float] = field(default_factory=dict)
    converged: bool = True
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def coefficient(self, term: str) -> Coefficient:
        for c in [*self.coefficients, *self.thresholds]:
            if c.term == term:
                return c
        raise KeyError(f"no term {term!r}; have {[c.term for c in self.coefficients]}")

    def estimates(self) -> dict[str, float]:
        return {c.term: c.estimate for c in self.coefficients}

    def coefficient_frame(self) -> pd.DataFrame:
        rows = [{"kind": "coefficient", **asdict(c)} for c in self.coefficients]
        rows += [{"kind": "threshold", **asdict(c)} for c in self.thresholds]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([{**asdict(c), "contrast": c.label} for c in self.contrasts])


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


# --------------------------------------------------------------------------------------------
# helpers


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _z(conf_level: float) -> float:
    return float(sps.norm.ppf(0.5 + conf_level / 2.0))


def _coef(term: str, est: float, se: float, conf_level: float, p: float | None = None,
          with_p: bool = True) -> Coefficient:
    est, se = float(est), float(se)
    z = est / se if se > 0 and math.isfinite(se) else math.nan
    if with_p and p is None:
        p = float(2 * sps.norm.sf(abs(z))) if math.isfinite(z) else math.nan
    half = _z(conf_level) * se
    return Coefficient(term, est, se, est - half, est + half,
                       (float(p) if p is not None else None) if with_p else None, z)


def _parse(df: pd.DataFrame, formula: str | Formula, *, allow_cbind: bool = False) -> Formula:
    """The formula parsed against ``df``'s columns (a :class:`Formula` is re-checked from its
    rebuilt text: the columns it names must be ``df``'s)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError("df must be a pandas DataFrame")
    text = formula.text if isinstance(formula, Formula) else formula
    return parse_formula(text, [str(c) for c in df.columns], allow_cbind=allow_cbind)


def _normalise_reference(reference: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if reference is None:
        return {}
    if isinstance(reference, Mapping):
        return dict(reference)
    return {"system": reference}


@dataclass
class _Prepared:
    data: pd.DataFrame
    response: list[str]
    factors: dict[str, list[str]]
    groups: list[str]
    formula: Formula  # what the engines fit: only its rebuilt texts reach R and patsy
    warnings: list[str]

    @property
    def fixed_rhs(self) -> str:
        """The fixed-effects right-hand side for patsy (names wrapped where needed)."""
        return self.formula.patsy_rhs()


def _prepare(
    df: pd.DataFrame,
    formula: Formula,
    *,
    kind: str,
    reference: str | Mapping[str, Any] | None,
    levels: Mapping[str, Sequence[Any]] | None,
) -> _Prepared:
    """Select the formula's columns, drop incomplete rows, build factors (see module doc).
    ``formula`` comes from :func:`_parse` on the same ``df``."""
    cols = [str(c) for c in df.columns]
    response = list(formula.response)
    groups = formula.groups
    used = [c for c in cols if c in formula.columns]
    ref = _normalise_reference(reference)
    for col in ref:
        if col not in used:
            raise ValueError(f"reference given for {col!r}, which the formula does not use")
    warnings: list[str] = []
    data = df[used].copy()
    n0 = len(data)
    data = data.dropna()
    if len(data) < n0:
        warnings.append(f"dropped {n0 - len(data)} of {n0} rows with missing values")
    if data.empty:
        raise ValueError("no complete rows for this formula")
    levels = dict(levels or {})
    factor_cols = []
    for col in used:
        if col in response:
            continue
        s = data[col]
        if (
            col in groups
            or col in levels
            or col in ref
            or not (pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s))
        ):
            factor_cols.append(col)
    ordered: list[str] = []
    if kind == "ordinal":
        if len(response) != 1:
            raise ValueError("an ordinal model needs one response column")
        r = data[response[0]]
        if not (pd.api.types.is_numeric_dtype(r.dtype) or isinstance(r.dtype, pd.CategoricalDtype)
                or response[0] in levels):
            raise ValueError(
                f"ordinal response {response[0]!r} has text values: give their order with "
                f"levels={{{response[0]!r}: [...]}} or use an ordered pandas Categorical")
        factor_cols.append(response[0])
        ordered = [response[0]]
    elif kind == "binary" and len(response) == 1:
        y = data[response[0]]
        if pd.api.types.is_bool_dtype(y.dtype):
            data[response[0]] = y.astype(int)
        elif not pd.api.types.is_numeric_dtype(y.dtype) or not set(
            np.unique(y.to_numpy(dtype=float))
        ) <= {0.0, 1.0}:
            raise ValueError(f"binary response {response[0]!r} must be 0/1 (or bool)")
    data, lv = rbridge.make_factors(data, factor_cols, levels=levels, reference=ref,
                                    ordered=ordered)
    for col, order in lv.items():
        if col not in response and len(order) < 2 and col not in groups:
            raise ValueError(f"factor {col!r} has fewer than two observed levels: {order}")
    if kind == "ordinal" and len(lv[response[0]]) < 2:
        raise ValueError("the ordinal response needs at least two observed categories")
    return _Prepared(data, response, lv, groups, formula, warnings)


def _vcov_extra(terms: Sequence[str], matrix: np.ndarray) -> dict[str, Any]:
    return {"terms": list(terms), "matrix": np.asarray(matrix, dtype=float).tolist()}


def _versions() -> dict[str, str | None]:
    return rbridge.r_versions()


def _r_engine(what: str, pkg: str) -> str:
    v = _versions()
    return f"R {what} {v.get(pkg)} via Rscript (R {v.get('R')})"


def _use_r(engine: str) -> bool:
    e = engine.lower()
    if e == "statsmodels":
        return False
    if e in ("r", "pymer4"):
        if not rbridge.r_available():
            raise rbridge.RUnavailableError(
                f"engine={engine!r} requested but R is unavailable: "
                f"{rbridge.r_unavailable_reason()}"
            )
        return True
    if e == "auto":
        return rbridge.r_available()
    raise ValueError(f"unknown engine {engine!r}")


def _strs(v: Any) -> list[str]:
    """An R character vector from a reply (a list; None for R's NULL) -> strings."""
    if v is None:
        return []
    return [str(x) for x in v]


def _floats(v: Any) -> np.ndarray:
    """An R numeric vector or matrix (list of rows) from a reply -> float array (null -> nan)."""
    if v is None:
        return np.array([], dtype=float)
    return np.asarray(v, dtype=float)


# --------------------------------------------------------------------------------------------
# separation

#: |estimate| (log-odds, or latent logit for ordinal models) or SE from which a coefficient is
#: taken as a sign of separation. An odds ratio of e^10 (about 22,000) is no effect that human
#: judgments show, and an SE of 10 on this scale means a flat likelihood: either way the number
#: is where the optimiser stopped on its way to infinity (glmer stops around 20-30 with SEs in
#: the hundreds, or with tiny SEs when lme4 falls back to an approximate covariance matrix).
SEPARATION_LIMIT = 10.0


def _separated_levels(prep: _Prepared, kind: str) -> list[dict[str, Any]]:
    """Levels of the fixed-effect factors whose outcomes are all alike: all 0 or all 1
    (binary; all successes or all failures for ``cbind``), all in the lowest or all in the
    highest category (ordinal). Each makes that level's maximum-likelihood effect infinite."""
    resp = prep.response
    data = prep.data
    factors = [t[0] for t in prep.formula.fixed
               if len(t) == 1 and t[0] in prep.factors and t[0] not in resp]
    found: list[dict[str, Any]] = []
    for factor in dict.fromkeys(factors):
        reference = prep.factors[factor][0]
        for level, rows in data.groupby(factor, observed=True, sort=False):
            n = len(rows)
            if kind == "ordinal":
                categories = prep.factors[resp[0]]
                values = rows[resp[0]].astype(str)
                if (values == categories[-1]).all():
                    outcome = f"all in the highest category ({categories[-1]})"
                elif (values == categories[0]).all():
                    outcome = f"all in the lowest category ({categories[0]})"
                else:
                    continue
            elif len(resp) == 2:
                successes, failures = float(rows[resp[0]].sum()), float(rows[resp[1]].sum())
                n = int(successes + failures)
                if failures == 0:
                    outcome = "all successes"
                elif successes == 0:
                    outcome = "all failures"
                else:
                    continue
            else:
                y = rows[resp[0]].to_numpy(dtype=float)
                if (y == 1).all():
                    outcome = "all 1"
                elif (y == 0).all():
                    outcome = "all 0"
                else:
                    continue
            level = str(level)
            found.append({"factor": factor, "level": level, "n": int(n), "outcome": outcome,
                          "term": None if level == reference else f"{factor}{level}"})
    return found


def _diagnose_separation(prep: _Prepared, fit: ModelFit, *, kind: str,
                         penalised: bool = False) -> None:
    """Sets ``fit.extra["separation"]`` and adds a warning naming what is separated.

    ``extra["separation"]``: ``{"detected", "penalised", "levels": [{"factor", "level",
    "term", "n", "outcome"}], "terms": [{"term", "estimate", "se", "reason"}], "limit",
    "diagnosis", "remedy"}``. ``levels``: factor levels whose outcomes are all alike (see
    :func:`_separated_levels`; ``term`` is None for the reference level, whose separation
    moves the intercept and every coefficient of the factor); ``terms``: coefficients with
    |estimate| or SE >= :data:`SEPARATION_LIMIT` or a non-finite SE. ``detected`` when either
    is non-empty. For a penalised fit (``penalised=True``) separated levels are expected (the
    penalty is there for them): the warning says that their estimates are finite because of
    the prior, and only runaway coefficients would count as a failure of the penalty.
    """
    levels = _separated_levels(prep, kind)
    terms = []
    for c in fit.coefficients:
        if not math.isfinite(c.se) or not math.isfinite(c.estimate):
            reason = "non-finite estimate or SE"
        elif abs(c.estimate) >= SEPARATION_LIMIT:
            reason = f"|estimate| >= {SEPARATION_LIMIT:g}"
        elif c.se >= SEPARATION_LIMIT:
            reason = f"SE >= {SEPARATION_LIMIT:g}"
        else:
            continue
        terms.append({"term": c.term, "estimate": c.estimate, "se": c.se, "reason": reason})
    detected = bool(levels or terms)
    by_term = {c.term: c for c in fit.coefficients}
    scale = "latent logit" if kind == "ordinal" else "log-odds"

    def what(level: dict[str, Any]) -> str:
        c = by_term.get(level["term"]) if level["term"] else by_term.get("(Intercept)")
        numbers = f" ({c.estimate:+.3g}, SE {c.se:.3g})" if c is not None else ""
        if level["term"] is None:
            return (f"as the reference level it moves the intercept{numbers} and every "
                    f"{level['factor']} coefficient: none is an estimate")
        return f"{level['term']}{numbers} is not an estimate"

    parts = [f"{lv['factor']} {lv['level']!r}: {lv['n']} outcomes, {lv['outcome']}"
             for lv in levels]
    explained = {lv["term"] for lv in levels}
    runaway = [t for t in terms if t["term"] not in explained]
    diagnosis = remedy = None
    if penalised and levels:
        diagnosis = (
            "separation in the data (" + "; ".join(parts) + "): this penalised fit keeps the "
            "estimates finite, but for the separated levels they reflect the prior as much "
            "as the data: read them as 'large', not as measured sizes")
        if runaway:
            diagnosis += ("; the penalty did not hold for "
                          + ", ".join(f"{t['term']} ({t['reason']})" for t in runaway))
    elif detected:
        lines = [f"{part}: its {scale} effect is infinite under maximum likelihood, so "
                 f"{what(lv)}, and no contrast, odds ratio, CI or p-value involving "
                 f"{lv['level']!r} means anything" for part, lv in zip(parts, levels,
                                                                       strict=True)]
        lines += [f"{t['term']} = {t['estimate']:+.3g} (SE {t['se']:.3g}; {t['reason']}): "
                  "quasi-complete separation or an empty cell" for t in runaway]
        diagnosis = "separation: " + "; ".join(lines)
        remedy = ("report the raw proportions of the separated levels, and the penalised fit "
                  "(analysis option separation='penalised'; models.fit_binomial_penalised)"
                  if kind != "ordinal" else
                  "report the rating distribution of the separated levels (no penalised "
                  "ordinal model is offered) or merge sparse categories")
        fit.warnings.append(f"{diagnosis}. Remedy: {remedy}")
    if penalised and diagnosis:
        fit.warnings.append(diagnosis)
    fit.extra["separation"] = {
        "detected": detected, "penalised": penalised, "levels": levels, "terms": terms,
        "limit": SEPARATION_LIMIT, "diagnosis": diagnosis, "remedy": remedy,
    }


# --------------------------------------------------------------------------------------------
# ordinal models


def fit_clmm(
    df: pd.DataFrame,
    formula: str = DEFAULT_CLMM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    link: str = "logit",
    engine: str = "auto",
    conf_level: float = 0.95,
) -> ModelFit:
    """Cumulative link mixed model (R ``ordinal::clmm``, Laplace approximation).

    ``df``'s response (``rating``) is treated as ordered: numeric values in numeric order, a
    pandas Categorical in its category order, or ``levels={"rating": [...]}``. ``reference``:
    the reference level of ``system`` (str) or ``{column: level}``. ``engine``: ``"auto"``
    (R when available, else statsmodels), ``"R"`` (required), ``"statsmodels"`` (forced
    fallback: fixed effects only, see the module docstring).
    Example: ``fit_clmm(wine, "rating ~ temp + contact + (1|judge)")``. A formula without
    random-effect terms is fitted with ``ordinal::clm``.
    """
    return _fit_ordinal(df, formula, reference, levels, link, engine, conf_level,
                        mixed=True, nominal=False)


def fit_clm(
    df: pd.DataFrame,
    formula: str = DEFAULT_CLM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    link: str = "logit",
    engine: str = "auto",
    conf_level: float = 0.95,
    nominal_test: bool = True,
    alpha: float = 0.05,
) -> ModelFit:
    """Cumulative link model without random effects (R ``ordinal::clm``) plus the
    proportional-odds check ``ordinal::nominal_test`` (likelihood-ratio test per term of the
    model with that term's effect allowed to differ per threshold).

    ``extra["nominal_test"]``: list of ``{"term", "df", "loglik", "aic", "lrt", "p_value",
    "tested", "reason"}`` (the first row, ``"<none>"``, is the proportional-odds model itself;
    ``tested`` is False, with the ``reason``, for a term nominal_test could not test: its
    model with that term nominal failed or did not converge, e.g. because a level has no
    ratings in some categories). ``extra["nominal_test_status"]``: ``{"status": "computed" |
    "partial" | "not computed", "tested": [terms], "untested": [{"term", "reason"}],
    "reason": why nothing or not everything was tested, or None}``.
    ``extra["proportional_odds_violations"]``: the tested terms with p < ``alpha`` (a warning
    is added for each); None when nothing was tested (never ``[]``, which would read "no
    violation"). Each untested term adds a warning. With the statsmodels engine the test is
    not available (``None``, status "not computed" + a warning).
    """
    if _parse(df, formula).random:
        raise ValueError("fit_clm takes no random-effect terms; use fit_clmm")
    fit = _fit_ordinal(df, formula, reference, levels, link, engine, conf_level,
                       mixed=False, nominal=nominal_test)
    if nominal_test:
        _nominal_status(fit, alpha)
    return fit


def _nominal_status(fit: ModelFit, alpha: float) -> None:
    """``nominal_test_status`` and ``proportional_odds_violations`` of a clm fit (see
    :func:`fit_clm`), with a warning for each term that could not be tested."""
    nt = fit.extra.get("nominal_test")
    rows = [r for r in nt or [] if r["term"] != "<none>"]
    tested = [r for r in rows if r.get("tested", r["p_value"] is not None)]
    untested = [{"term": r["term"], "reason": r.get("reason") or "no test statistic"}
                for r in rows if r not in tested]
    reason = None
    if nt is None:
        failed = [w for w in fit.warnings if w.startswith("nominal_test failed")]
        reason = (failed[0] if failed else
                  "nominal_test needs R's ordinal package (this fit used the statsmodels "
                  "engine)" if fit.extra.get("fallback") else "nominal_test returned nothing")
        status = "not computed"
    elif not rows:
        reason, status = "the model has no terms to test", "not computed"
    elif not tested:
        status = "not computed"
    else:
        status = "partial" if untested else "computed"
    if untested:
        reason = "; ".join(f"{u['term']}: {u['reason']}" for u in untested)
    for u in untested:
        fit.warnings.append(f"proportional-odds check (nominal_test) could not be computed "
                            f"for {u['term']!r}: {u['reason']}")
    if nt is None and not any(w.startswith(("nominal_test", "proportional-odds check"))
                              for w in fit.warnings):
        fit.warnings.append(f"proportional-odds check (nominal_test) not computed: {reason}")
    fit.extra["nominal_test_status"] = {
        "status": status, "tested": [r["term"] for r in tested], "untested": untested,
        "reason": reason,
    }
    if status == "not computed":
        fit.extra["proportional_odds_violations"] = None
        return
    bad = [r["term"] for r in tested if r["p_value"] < alpha]
    fit.extra["proportional_odds_violations"] = bad
    for term in bad:
        fit.warnings.append(
            f"proportional-odds assumption questionable for {term!r} "
            f"(nominal_test p < {alpha})"
        )


def _fit_ordinal(df, formula, reference, levels, link, engine, conf_level, *, mixed, nominal):
    prep = _prepare(df, _parse(df, formula), kind="ordinal", reference=reference,
                    levels=levels)
    has_random = bool(prep.formula.random)
    if _use_r(engine):
        fit = _fit_ordinal_r(prep, link, conf_level, mixed=mixed and has_random,
                             nominal=nominal)
        _diagnose_separation(prep, fit, kind="ordinal")
        return fit
    if link != "logit":
        raise ValueError("the statsmodels fallback supports link='logit' only")
    fit = _fit_ordinal_statsmodels(prep, conf_level)
    if has_random:
        fit.warnings.append(RANDOM_EFFECTS_DROPPED)
    if nominal:
        fit.extra["nominal_test"] = None
        fit.warnings.append("nominal_test (proportional odds) not computed: needs R ordinal")
    _diagnose_separation(prep, fit, kind="ordinal")
    return fit


def _fit_ordinal_r(prep: _Prepared, link: str, conf_level: float, *,
                   mixed: bool, nominal: bool) -> ModelFit:
    resp = prep.response[0]
    formula = prep.formula.text
    t0 = time.perf_counter()
    rdf = rbridge.RFrame(prep.data, levels=prep.factors, ordered=[resp])
    out = rbridge.r_function("evalstudy_ordinal")(formula, rdf, link, mixed, nominal)
    names = _strs(out["names"])
    est, se, p = _floats(out["est"]), _floats(out["se"]), _floats(out["p"])
    alpha_names, beta_names = _strs(out["alpha"]), _strs(out["beta"])
    vcov = _floats(out["vcov"])
    vcov_names = _strs(out["vcov_names"])
    r_warn = _strs(out["warnings"])
    conv_code = int(_floats(out["conv_code"])[0])
    conv_msg = " ".join(_strs(out["conv_msg"]))
    maxgrad = float(_floats(out["maxgrad"])[0])
    cond_h = float(_floats(out["cond_h"])[0])
    extra: dict[str, Any] = {
        "loglik": float(_floats(out["loglik"])[0]),
        "aic": float(_floats(out["aic"])[0]),
        "max_gradient": maxgrad,
        "cond_hessian": cond_h,
        "convergence_code": conv_code,
        "convergence_message": conv_msg,
        "r_seconds": float(_floats(out["seconds"])[0]),  # the fit and summaries, inside R
    }
    n_obs = int(_floats(out["nobs"])[0])
    random_effects: dict[str, float] = {}
    if mixed:
        for g, nm, v in zip(_strs(out["re_group"]), _strs(out["re_name"]),
                            _floats(out["re_var"]), strict=True):
            random_effects[g if nm == "(Intercept)" else f"{g}:{nm}"] = float(v)
        extra["n_groups"] = {
            n: int(k) for n, k in zip(_strs(out["ngrps_names"]), _floats(out["ngrps"]),
                                      strict=True)
        }
    if nominal and "nt_terms" in out:
        terms = _strs(out["nt_terms"])
        reasons = _strs(out.get("nt_reason")) or [""] * len(terms)
        extra["nominal_test"] = [
            {"term": t, "df": _nan_none(d), "loglik": _nan_none(ll), "aic": _nan_none(a),
             "lrt": _nan_none(lr), "p_value": _nan_none(pv),
             "tested": None if t == "<none>" else _nan_none(pv) is not None,
             "reason": (_untested_reason(prep, t, why)
                        if t != "<none>" and _nan_none(pv) is None else None)}
            for t, d, ll, a, lr, pv, why in zip(
                terms, _floats(out["nt_df"]), _floats(out["nt_loglik"]),
                _floats(out["nt_aic"]), _floats(out["nt_lrt"]), _floats(out["nt_p"]),
                reasons, strict=True)
        ]
    elif nominal:
        extra["nominal_test"] = None
    elapsed = time.perf_counter() - t0
    row = {n: i for i, n in enumerate(names)}
    coefs = [_coef(b, est[row[b]], se[row[b]], conf_level, p[row[b]]) for b in beta_names
             if b in row]
    thresholds = [_coef(a, est[row[a]], se[row[a]], conf_level, with_p=False)
                  for a in alpha_names if a in row]
    idx = [vcov_names.index(b) for b in beta_names if b in vcov_names]
    vc = vcov[np.ix_(idx, idx)] if idx else np.zeros((0, 0))
    warnings = list(prep.warnings) + r_warn
    finite = all(math.isfinite(c.se) for c in coefs + thresholds)
    converged = conv_code == 0 and maxgrad < 1e-3 and finite
    if not converged:
        warnings.append(
            f"model did not converge cleanly (code {conv_code}: {conv_msg}; "
            f"max |gradient| {maxgrad:.2g}; finite SEs: {finite})"
        )
    if math.isfinite(cond_h) and cond_h > 1e5:
        warnings.append(f"Hessian condition number {cond_h:.3g} is large: model may be "
                        "ill-defined (e.g. a level with only one rating category)")
    if mixed:
        for g, v in random_effects.items():
            if v < 1e-6:
                warnings.append(f"random-effect variance of {g!r} is ~0 (singular fit)")
    extra.update(
        conf_level=conf_level,
        levels={k: v for k, v in prep.factors.items()
                if k != prep.response[0] and k not in prep.groups},
        response_levels=prep.factors[prep.response[0]],
        reference={k: v[0] for k, v in prep.factors.items()
                   if k != prep.response[0] and k not in prep.groups},
        vcov=_vcov_extra([c.term for c in coefs], vc),
        random_effects_sd={k: math.sqrt(max(v, 0.0)) for k, v in random_effects.items()},
        elapsed_s=elapsed,
        versions=_versions(),
        fallback=False,
    )
    return ModelFit(
        formula=formula,
        engine=_r_engine("ordinal::clmm" if mixed else "ordinal::clm", "ordinal"),
        family="cumulative",
        link=link,
        n_obs=n_obs,
        coefficients=coefs,
        thresholds=thresholds,
        random_effects=random_effects,
        converged=converged,
        warnings=warnings,
        extra=extra,
    )


def _untested_reason(prep: _Prepared, term: str, why: str) -> str:
    """R's reason why nominal_test could not test ``term`` (see models.R), plus the usual
    cause when the term is a factor: a level without ratings in some categories, whose own
    thresholds (what the nominal model estimates) then do not exist."""
    resp = prep.response[0]
    parts = term.split(":")
    reason = why or "nominal_test gave no statistic"
    if not all(c in prep.factors and c not in prep.groups for c in parts):
        return reason
    categories = prep.factors[resp]
    data = prep.data
    key = data[parts[0]].astype(str)
    for c in parts[1:]:
        key = key + ":" + data[c].astype(str)
    table = pd.crosstab(key, data[resp].astype(str)).reindex(columns=categories, fill_value=0)
    empty = [f"{level!r} has no ratings in {', '.join(str(c) for c in row.index[row == 0])}"
             for level, row in table.iterrows() if (row == 0).any()]
    if empty:
        reason += (f"; {term} level " + "; ".join(empty) + " (of categories "
                   f"{', '.join(map(str, categories))}): the nominal model cannot estimate "
                   "thresholds for categories a level never used")
    return reason


def _nan_none(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _r_style(name: str) -> str:
    """patsy ``temp[T.warm]:contact[T.yes]`` -> R ``tempwarm:contactyes``."""
    return r_coefficient_name(name)


def _patsy_matrix(prep: _Prepared, **kwargs: Any) -> pd.DataFrame:
    """patsy's design matrix of the fixed effects. The formula text is rebuilt from parsed
    column names; the empty evaluation environment keeps even that text from seeing this
    module's names (patsy still provides its own Q())."""
    import patsy

    return patsy.dmatrix(prep.fixed_rhs, prep.data, eval_env=patsy.EvalEnvironment([{}]),
                         return_type="dataframe", **kwargs)


def _design(prep: _Prepared) -> pd.DataFrame:
    X = _patsy_matrix(prep, NA_action="raise")
    X = X.drop(columns=[c for c in X.columns if c == "Intercept"])
    X.columns = [_r_style(c) for c in X.columns]
    return X


def _fit_ordinal_statsmodels(prep: _Prepared, conf_level: float) -> ModelFit:
    import statsmodels
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    t0 = time.perf_counter()
    resp = prep.response[0]
    X = _design(prep)
    if X.shape[1] == 0:
        raise ValueError("the statsmodels fallback needs at least one fixed effect")
    y = prep.data[resp]
    model = OrderedModel(y, X, distr="logit")
    res = model.fit(method="bfgs", disp=False, maxiter=2000, gtol=1e-8)
    k = X.shape[1]
    params = np.asarray(res.params, dtype=float)
    try:
        cov = np.asarray(res.cov_params(), dtype=float)
    except ValueError:
        # Hessian not invertible (separation, e.g. a level rated only in the top category):
        # no SEs; the fit is kept so that _diagnose_separation can name the cause.
        cov = np.full((len(params), len(params)), np.nan)
    coefs = [_coef(name, params[i], math.sqrt(cov[i, i]), conf_level)
             for i, name in enumerate(X.columns)]
    # thresholds: statsmodels uses (cut_1, log(cut_2 - cut_1), ...); delta method for SEs.
    raw = params[k:]
    cuts = model.transform_threshold_params(params)[1:-1]
    jac = np.zeros((len(raw), len(raw)))
    for j in range(len(raw)):
        jac[j, 0] = 1.0
        for m in range(1, j + 1):
            jac[j, m] = math.exp(raw[m])
    tcov = jac @ cov[k:, k:] @ jac.T
    lv = prep.factors[resp]
    thresholds = [_coef(f"{lv[j]}|{lv[j + 1]}", cuts[j], math.sqrt(tcov[j, j]), conf_level,
                        with_p=False) for j in range(len(cuts))]
    converged = bool(res.mle_retvals.get("converged", False)) and all(
        math.isfinite(c.se) for c in coefs)
    warnings = list(prep.warnings)
    if not converged:
        warnings.append("statsmodels OrderedModel (BFGS) did not converge")
    elapsed = time.perf_counter() - t0
    return ModelFit(
        formula=prep.formula.text,
        engine=(f"statsmodels {statsmodels.__version__} OrderedModel (logit, BFGS, no "
                "constant) - fixed effects only, equivalent to R ordinal::clm"),
        family="cumulative",
        link="logit",
        n_obs=len(y),
        coefficients=coefs,
        thresholds=thresholds,
        random_effects={},
        converged=converged,
        warnings=warnings,
        extra={
            "conf_level": conf_level,
            "levels": {k_: v for k_, v in prep.factors.items()
                       if k_ != resp and k_ not in prep.groups},
            "response_levels": lv,
            "reference": {k_: v[0] for k_, v in prep.factors.items()
                          if k_ != resp and k_ not in prep.groups},
            "vcov": _vcov_extra([c.term for c in coefs], cov[:k, :k]),
            "loglik": float(res.llf),
            "aic": float(res.aic),
            "fixed_formula": prep.formula.fixed_only().text,
            "elapsed_s": elapsed,
            "versions": _versions(),
            "fallback": True,
        },
    )


# --------------------------------------------------------------------------------------------
# binary models


# The optional pymer4 engine's R side: analysis/stats/r/models.R, sourced into pymer4's
# embedded R once (the R engine calls the same file's functions in the R worker).
_PYMER4_LOCK = threading.RLock()
_PYMER4_STATE: dict[str, Any] = {"sourced": False}
PYMER4_MISSING = (
    "engine='pymer4' needs the optional package pymer4 (0.8.2 works with Debian's R 4.2, with "
    "rpy2 3.5.17), which is not installed: evalstudy does not install it by default because "
    "pymer4 loads R (GPL) into the Python process through rpy2, whereas evalstudy (Apache-2.0) "
    "runs R as a separate process. engine='auto' or 'R' fits the same lme4::glmer model "
    "without it."
)

_NON_CONVERGENCE = re.compile(
    r"failed to converge|convergence code|unable to evaluate|degenerate|"
    r"Hessian is numerically singular|very large eigenvalue|not positive definite",
    re.IGNORECASE,
)


def fit_binomial_glmm(
    df: pd.DataFrame,
    formula: str = DEFAULT_GLMM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    engine: str = "auto",
    conf_level: float = 0.95,
) -> ModelFit:
    """Binomial GLMM with logit link (lme4::glmer, Laplace approximation).

    ``engine``: ``"auto"`` (R when available, else the statsmodels fallback), ``"R"``
    (``lme4::glmer`` in the separate R process; the response may be
    ``cbind(successes, failures)``, two columns of ``df``: formulas hold no arithmetic such as
    ``size - incidence``), ``"pymer4"`` (pymer4 0.8 ``Lmer(formula, data,
    family="binomial").fit()``, only if the user installed pymer4: see :data:`PYMER4_MISSING`;
    a ``cbind`` response still goes to R directly), ``"statsmodels"`` (logistic regression with
    cluster-robust SEs; see module docstring).
    Coefficients are log-odds; ``extra["odds_ratios"]`` maps each term to
    ``{"odds_ratio", "ci_low", "ci_high"}`` (for ``(Intercept)`` these are the odds of the
    reference condition). The Wald CI uses ``conf_level``; pymer4's own CI is 95 %.
    """
    parsed = _parse(df, formula, allow_cbind=True)
    is_cbind = len(parsed.response) == 2
    prep = _prepare(df, parsed, kind="cbind" if is_cbind else "binary", reference=reference,
                    levels=levels)
    eng = engine.lower()
    if _use_r(engine):
        if eng == "pymer4" and not is_cbind:
            fit = _fit_glmm_pymer4(prep, conf_level)
        else:
            fit = _fit_glmm_r(prep, conf_level)
    else:
        if is_cbind:
            raise ValueError("the statsmodels fallback needs a 0/1 response, not cbind()")
        fit = _fit_logit_cluster(prep, conf_level)
    fit.extra["estimation"] = "maximum likelihood"
    _diagnose_separation(prep, fit, kind="cbind" if is_cbind else "binary")
    _odds_ratios(fit)
    return fit


def _odds_ratios(fit: ModelFit) -> None:
    fit.extra["odds_ratios"] = {
        c.term: {"odds_ratio": c.odds_ratio, "ci_low": c.odds_ratio_ci[0],
                 "ci_high": c.odds_ratio_ci[1]}
        for c in fit.coefficients
    }


#: Prior SDs of :func:`fit_binomial_penalised` on the log-odds scale: blme's default normal
#: prior, after the scales Gelman et al. (2008, "A weakly informative default prior
#: distribution for logistic and other regression models", Ann. Appl. Stat. 2:1360-1383)
#: recommend: 10 for the intercept, 2.5 for every other coefficient (a difference of 5 on the
#: log-odds scale, 0.5 -> 0.99, is two prior SDs away).
PENALISED_INTERCEPT_SD = 10.0
PENALISED_COEF_SD = 2.5


def fit_binomial_penalised(
    df: pd.DataFrame,
    formula: str = DEFAULT_GLMM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    prior_sd: float = PENALISED_COEF_SD,
    intercept_prior_sd: float = PENALISED_INTERCEPT_SD,
    conf_level: float = 0.95,
) -> ModelFit:
    """The binomial model of :func:`fit_binomial_glmm`, penalised so that its estimates stay
    finite under separation (a level with all 0 or all 1 outcomes).

    With random-effect terms: R ``blme::bglmer`` (glmer plus independent normal priors with
    mean 0 on the fixed effects, SD ``intercept_prior_sd`` for ``(Intercept)`` and ``prior_sd``
    for every other coefficient; no prior on the random-effect variances); the estimate is the
    posterior mode, i.e. penalised maximum likelihood, with Wald SEs from the penalised
    curvature. Without random terms: ``brglm2::brglmFit`` (Firth's mean bias reduction; no
    prior SDs). Needs R with blme / brglm2 (raises :class:`rbridge.RUnavailableError` or
    :class:`rbridge.RError` saying which package is missing); there is no statsmodels
    fallback.

    The result says what it is: ``extra["estimation"] = "penalised maximum likelihood"``,
    ``extra["penalty"] = {"method", "prior", "intercept_sd", "coef_sd", "random_effects_prior",
    "why"}`` and ``extra["separation"]`` (see :func:`_diagnose_separation`). Estimates of
    separated levels are shrunk towards 0 by the prior: they say "large", not how large.
    """
    if not (prior_sd > 0 and intercept_prior_sd > 0):
        raise ValueError("prior SDs must be positive")
    parsed = _parse(df, formula, allow_cbind=True)
    is_cbind = len(parsed.response) == 2
    prep = _prepare(df, parsed, kind="cbind" if is_cbind else "binary", reference=reference,
                    levels=levels)
    if not rbridge.r_available():
        raise rbridge.RUnavailableError(
            "the penalised fit needs R with blme (or brglm2 without random effects): "
            f"{rbridge.r_unavailable_reason()}")
    why = ("maximum-likelihood estimates are infinite under separation; the penalty keeps "
           "them finite and shrinks them towards 0")
    if prep.formula.random:
        fit = _fit_glmm_r(prep, conf_level, r_function="evalstudy_bglmer",
                          r_args=(float(intercept_prior_sd), float(prior_sd)))
        version = " ".join(_strs(fit.extra.pop("r_blme", None)))
        fit.engine = (f"R blme::bglmer {version} (lme4::glmer with normal priors on the fixed "
                      f"effects: SD {intercept_prior_sd:g} intercept, {prior_sd:g} "
                      f"coefficients; posterior mode) via Rscript (R {_versions().get('R')})")
        fit.extra["penalty"] = {
            "method": "blme::bglmer", "prior": "normal(mean 0)",
            "intercept_sd": float(intercept_prior_sd), "coef_sd": float(prior_sd),
            "random_effects_prior": None, "why": why,
            "reference": "Chung et al. 2013 (blme); prior scales after Gelman et al. 2008",
        }
    else:
        fit = _fit_brglm_r(prep, conf_level)
        fit.extra["penalty"] = {
            "method": "brglm2::brglmFit (AS_mean)", "prior": "Jeffreys (Firth 1993)",
            "intercept_sd": None, "coef_sd": None, "random_effects_prior": None, "why": why,
            "reference": "Firth 1993; Kosmidis and Firth 2021",
        }
    fit.extra["estimation"] = "penalised maximum likelihood"
    _diagnose_separation(prep, fit, kind="cbind" if is_cbind else "binary", penalised=True)
    _odds_ratios(fit)
    return fit


#: Values of the analysis option ``separation``: ``"auto"`` (default) fits the penalised model
#: too when the maximum-likelihood fit shows separation; ``"penalised"`` always fits it;
#: ``"off"`` only diagnoses (the warnings and flags stay).
SEPARATION_OPTIONS = ("auto", "penalised", "off")


def wants_penalised(fit: ModelFit, option: str = "auto") -> bool:
    """Whether the analysis option ``separation`` asks for a penalised refit of ``fit``."""
    if option not in SEPARATION_OPTIONS:
        raise ValueError(f"separation must be one of {', '.join(SEPARATION_OPTIONS)}")
    detected = bool((fit.extra.get("separation") or {}).get("detected"))
    return fit.family == "binomial" and (option == "penalised"
                                         or (option == "auto" and detected))


def separation_report(fit: ModelFit, *, option: str = "auto", key: str = "glmm",
                      penalised: ModelFit | None = None, penalised_key: str | None = None,
                      penalised_error: str | None = None) -> dict[str, Any]:
    """What a report says about separation for one criterion, and which fit is which.

    ``{"option", "detected", "diagnosis", "levels", "terms", "fits": {key: {"estimation",
    "engine", "role"}, ...}, "read", "penalised_fit", "note"}``: ``fits`` describes the
    maximum-likelihood fit (``key``) and, when there is one, the penalised fit
    (``penalised_key``); ``read`` names the fit to read for the system effects (the penalised
    one when there is separation and it was fitted); ``penalised_fit`` is ``"fitted"``,
    ``"not requested"``, ``"not offered for ordinal models"`` or ``"failed: <why>"``.
    """
    sep = fit.extra.get("separation") or {}
    detected = bool(sep.get("detected"))
    fits: dict[str, Any] = {key: {
        "estimation": fit.extra.get("estimation", "maximum likelihood"), "engine": fit.engine,
        "role": ("the model as specified, by maximum likelihood"
                 + (": separated levels have infinite estimates, so its numbers for them "
                    "(and every contrast, flagged) are not estimates" if detected else "")),
    }}
    if penalised is not None and penalised_key:
        fits[penalised_key] = {
            "estimation": penalised.extra.get("estimation"), "engine": penalised.engine,
            "penalty": penalised.extra.get("penalty"),
            "role": ("the same model with a weakly informative prior on the fixed effects: "
                     "finite estimates, shrunk towards 0; sizes for separated levels "
                     "reflect the prior"),
        }
    if penalised is not None:
        status = "fitted"
    elif penalised_error:
        status = f"failed: {penalised_error}"
    elif fit.family != "binomial":
        status = "not offered for ordinal models"
    else:
        status = "not requested"
    read = penalised_key if (penalised is not None and detected) else key
    if not detected:
        note = "no separation detected"
    elif penalised is not None:
        note = (f"separation: read {penalised_key!r} for the system effects; {key!r} is "
                "kept to show what maximum likelihood gives")
    else:
        note = (f"separation: {key!r}'s numbers for the separated levels are not estimates; "
                + ("no penalised fit: " + status if status != "not requested" else
                   "set the analysis option separation='penalised' or 'auto' for a "
                   "penalised fit"))
    return {
        "option": option, "detected": detected, "diagnosis": sep.get("diagnosis"),
        "levels": sep.get("levels", []), "terms": sep.get("terms", []), "fits": fits,
        "read": read, "penalised_fit": status, "note": note,
    }


def _fit_brglm_r(prep: _Prepared, conf_level: float) -> ModelFit:
    t0 = time.perf_counter()
    rdf = rbridge.RFrame(prep.data, levels=prep.factors)
    out = rbridge.r_function("evalstudy_brglm")(prep.formula.text, rdf)
    names = _strs(out["names"])
    est, se, p = _floats(out["est"]), _floats(out["se"]), _floats(out["p"])
    vc = _floats(out["vcov"]).reshape(len(names), len(names))
    coefs = [_coef(n, e, s_, conf_level, pv) for n, e, s_, pv in zip(names, est, se, p,
                                                                      strict=True)]
    warnings = list(prep.warnings) + _strs(out["warnings"])
    converged = bool(out["converged"][0]) and all(math.isfinite(c.se) for c in coefs)
    if not converged:
        warnings.append("brglmFit did not converge")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        "vcov": _vcov_extra(names, vc),
        "r_seconds": float(_floats(out["seconds"])[0]),
        "elapsed_s": time.perf_counter() - t0,
        "fallback": False,
    }
    engine = (f"R brglm2::brglmFit {' '.join(_strs(out['brglm2']))} (logistic regression, "
              f"Firth's mean bias reduction) via Rscript (R {_versions().get('R')})")
    return ModelFit(formula=prep.formula.text, engine=engine, family="binomial", link="logit",
                    n_obs=int(_floats(out["nobs"])[0]), coefficients=coefs, thresholds=[],
                    random_effects={}, converged=converged, warnings=warnings, extra=extra)


def _glmm_common_extra(prep: _Prepared, conf_level: float) -> dict[str, Any]:
    resp = set(prep.response)
    return {
        "conf_level": conf_level,
        "levels": {k: v for k, v in prep.factors.items()
                   if k not in resp and k not in prep.groups},
        "reference": {k: v[0] for k, v in prep.factors.items()
                      if k not in resp and k not in prep.groups},
        "versions": _versions(),
    }


def _finish_glmm(prep, engine, names, est, se, p, vc, random_effects, n_groups,
                 n_obs, conv_msgs, other_warnings, singular, conf_level, elapsed, extra):
    coefs = [_coef(n, e, s, conf_level, pv) for n, e, s, pv in zip(names, est, se, p,
                                                                    strict=True)]
    warnings = list(prep.warnings) + [w for w in other_warnings if w not in conv_msgs]
    warnings += conv_msgs
    converged = not any(_NON_CONVERGENCE.search(m) for m in conv_msgs + other_warnings)
    converged = converged and all(math.isfinite(c.se) for c in coefs)
    if singular and not any("singular" in w for w in warnings):
        warnings.append("boundary (singular) fit: a random-effect variance is ~0")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        **extra,
        "vcov": _vcov_extra(names, vc),
        "n_groups": n_groups,
        "random_effects_sd": {k: math.sqrt(max(v, 0.0)) for k, v in random_effects.items()},
        "singular": bool(singular),
        "elapsed_s": elapsed,
        "fallback": False,
    }
    return ModelFit(formula=prep.formula.text, engine=engine, family="binomial", link="logit",
                    n_obs=n_obs, coefficients=coefs, thresholds=[],
                    random_effects=random_effects, converged=converged, warnings=warnings,
                    extra=extra)


def _fit_glmm_r(prep: _Prepared, conf_level: float, *, r_function: str = "evalstudy_glmer",
                r_args: tuple[Any, ...] = ()) -> ModelFit:
    """glmer (or, with ``r_function="evalstudy_bglmer"``, bglmer: same reply) in the R worker."""
    t0 = time.perf_counter()
    formula = prep.formula.text
    rdf = rbridge.RFrame(prep.data, levels=prep.factors)
    out = rbridge.r_function(r_function)(formula, rdf, *r_args)
    names = _strs(out["names"])
    est, se, p = _floats(out["est"]), _floats(out["se"]), _floats(out["p"])
    vc = _floats(out["vcov"]).reshape(len(names), len(names))
    random_effects = {
        (g if n == "(Intercept)" else f"{g}:{n}"): float(v)
        for g, n, v in zip(_strs(out["re_group"]), _strs(out["re_name"]),
                           _floats(out["re_var"]), strict=True)
    }
    n_groups = {n: int(k) for n, k in zip(_strs(out["ngrps_names"]),
                                          _floats(out["ngrps"]), strict=True)}
    n_obs = int(_floats(out["nobs"])[0])
    conv = _strs(out["conv"])
    warns = _strs(out["warnings"])
    singular = bool(out["singular"][0])
    extra = {"loglik": float(_floats(out["loglik"])[0]),
             "aic": float(_floats(out["aic"])[0]),
             "r_seconds": float(_floats(out["seconds"])[0])}  # glmer + summaries, inside R
    if "blme" in out:
        extra["r_blme"] = out["blme"]
    return _finish_glmm(prep, _r_engine("lme4::glmer", "lme4"), names, est, se, p,
                        vc, random_effects, n_groups, n_obs, conv, warns, singular,
                        conf_level, time.perf_counter() - t0, extra)


def _pymer4_lmer() -> Any:
    """pymer4's ``Lmer``, imported on first use: pymer4 is optional (see PYMER4_MISSING)."""
    try:
        from pymer4.models import Lmer
    except ImportError as exc:
        raise ImportError(PYMER4_MISSING) from exc
    return Lmer


def _fit_glmm_pymer4(prep: _Prepared, conf_level: float) -> ModelFit:
    """The optional pymer4 engine. pymer4 embeds R through rpy2: that R is not thread-safe (one
    fit at a time here) and writes to its console (captured, reported as warnings)."""
    Lmer = _pymer4_lmer()
    import logging

    import rpy2.robjects as ro
    from rpy2.rinterface_lib import callbacks
    from rpy2.robjects.conversion import localconverter

    # rpy2's atexit hook logs "Embedded R already ended." at INFO, after test runners / log
    # configurations may have closed their streams.
    logging.getLogger("rpy2.rinterface_lib.embedded").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    console: list[str] = []
    with _PYMER4_LOCK:
        old_warn, old_print = callbacks.consolewrite_warnerror, callbacks.consolewrite_print
        callbacks.consolewrite_warnerror = callbacks.consolewrite_print = console.append
        try:
            # rpy2 keeps its conversion rules per thread (a fresh thread has none).
            with localconverter(ro.default_converter):
                if not _PYMER4_STATE["sourced"]:
                    ro.r["sys.source"](str(rbridge.R_DIR / "models.R"), envir=ro.globalenv)
                    _PYMER4_STATE["sourced"] = True
                data = prep.data.copy()
                for col in prep.factors:  # Categoricals -> R factors with the same level order
                    data[col] = pd.Categorical(data[col].astype(object),
                                               categories=prep.factors[col])
                model = Lmer(prep.formula.text, data=data, family="binomial")
                with warnings_module.catch_warnings():
                    # pymer4 0.8.2 calls DataFrame.applymap (deprecated in pandas 2.1+)
                    warnings_module.simplefilter("ignore", FutureWarning)
                    model.fit(summarize=False, verbose=False, no_warnings=True,
                              conf_int="Wald")
                res = ro.globalenv["evalstudy_glmer_summary"](model.model_obj)
                out = {str(k): None if isinstance(v, type(ro.NULL)) else list(v)
                       for k, v in zip(res.names, res, strict=True)}
        finally:
            callbacks.consolewrite_warnerror = old_warn
            callbacks.consolewrite_print = old_print
    coefs_df = model.coefs
    names = [str(n) for n in coefs_df.index]
    vc = _floats(out["vcov"]).reshape(len(names), len(names))  # symmetric: order irrelevant
    n_groups = {n: int(k) for n, k in zip(_strs(out["ngrps_names"]), _floats(out["ngrps"]),
                                          strict=True)}
    n_obs = int(_floats(out["nobs"])[0])
    singular = bool(out["singular"][0])
    rv = model.ranef_var
    random_effects = {
        (str(grp) if str(row["Name"]) == "(Intercept)" else f"{grp}:{row['Name']}"):
            float(row["Var"])
        for grp, row in rv.iterrows()
    }
    conv = [str(w) for w in (model.warnings or [])]
    other = _strs(out["warnings"]) + [
        f"R console: {line.strip()}" for line in "".join(console).splitlines()
        if line.strip() and "site-library" not in line and "contains no packages" not in line
    ]
    est = coefs_df["Estimate"].to_numpy(dtype=float)
    se = coefs_df["SE"].to_numpy(dtype=float)
    p = coefs_df["P-val"].to_numpy(dtype=float)
    extra = {"loglik": float(model.logLike), "aic": float(model.AIC)}
    v = _versions()
    engine = (f"pymer4 {v.get('pymer4')} Lmer(family='binomial') -> R lme4::glmer "
              f"{v.get('lme4')} via rpy2 {importlib.metadata.version('rpy2')} "
              f"(R {v.get('R')}, embedded)")
    fit = _finish_glmm(prep, engine, names, est, se, p, vc, random_effects,
                       n_groups, n_obs, conv, other, singular, conf_level,
                       time.perf_counter() - t0, extra)
    if abs(conf_level - 0.95) < 1e-12:  # keep pymer4's own Wald interval when it applies
        for c, lo, hi in zip(fit.coefficients, coefs_df["2.5_ci"], coefs_df["97.5_ci"],
                             strict=True):
            c.ci_low, c.ci_high = float(lo), float(hi)
    return fit


def _fit_logit_cluster(prep: _Prepared, conf_level: float) -> ModelFit:
    import statsmodels
    import statsmodels.api as sm

    t0 = time.perf_counter()
    resp = prep.response[0]
    X = _patsy_matrix(prep)
    X.columns = ["(Intercept)" if c == "Intercept" else _r_style(c) for c in X.columns]
    y = prep.data[resp].to_numpy(dtype=float)
    groups = prep.groups[:2]
    model = sm.GLM(y, X, family=sm.families.Binomial())
    warnings = list(prep.warnings)
    if groups:
        codes = np.column_stack([pd.factorize(prep.data[g].astype(str))[0] for g in groups])
        res = model.fit(cov_type="cluster", cov_kwds={"groups": codes if len(groups) == 2
                                                      else codes[:, 0]})
        se_kind = ("two-way " if len(groups) == 2 else "") + "cluster-robust SEs by " + \
            " and ".join(groups)
    else:
        res = model.fit()
        se_kind = "model-based SEs"
    if len(prep.groups) > 2:
        warnings.append(f"cluster-robust SEs use only {groups} (at most two-way clustering)")
    if prep.formula.random:
        warnings.append(RANDOM_EFFECTS_DROPPED)
    warnings.append(
        "fallback: population-averaged logistic regression, NOT glmer; estimates are marginal "
        "log-odds (attenuated relative to glmer when random-effect variance is large)"
    )
    names = list(X.columns)
    est = np.asarray(res.params, dtype=float)
    cov = np.asarray(res.cov_params(), dtype=float)
    se = np.sqrt(np.diag(cov))
    coefs = [_coef(n, e, s, conf_level) for n, e, s in zip(names, est, se, strict=True)]
    converged = bool(getattr(res, "converged", True)) and all(np.isfinite(se))
    engine = (f"statsmodels {statsmodels.__version__} GLM Binomial(logit) with {se_kind} - "
              "fallback, NOT glmer (no random effects)")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        "vcov": _vcov_extra(names, cov),
        "loglik": float(res.llf),
        "n_groups": {g: int(prep.data[g].nunique()) for g in prep.groups},
        "cluster_by": groups,
        "elapsed_s": time.perf_counter() - t0,
        "fallback": True,
    }
    return ModelFit(formula=prep.formula.text, engine=engine, family="binomial", link="logit",
                    n_obs=len(y), coefficients=coefs, thresholds=[], random_effects={},
                    converged=converged, warnings=warnings, extra=extra)


# --------------------------------------------------------------------------------------------
# pairwise contrasts


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
    z = _z(cl)
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
        rows.append([a, b, d, se, stat, d - z * se, d + z * se, p])
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
             else "log-odds")
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


# --------------------------------------------------------------------------------------------
# pairwise preferences


_LEFT = {"a", "left", "l"}
_RIGHT = {"b", "right", "r"}
_TIE = {"tie", "t", "equal", "same", "="}


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
) -> PreferenceResult:
    """Pairwise A/B preferences: shares per system and a Bradley-Terry model with a position term.

    Rows: ``left_system`` (shown as "A"), ``right_system`` ("B"), ``choice`` in {"A", "B",
    "tie"} (case-insensitive; "left"/"right" accepted too). Model (statsmodels GLM,
    Binomial/logit): P(choose left) = logit^-1(position + beta_left - beta_right), with
    beta_reference = 0 (``reference``: default the first system in sorted order). Coefficients:
    ``"position (A/left)"`` (the intercept) and ``"system<level>"`` (strength relative to the
    reference, log-odds of winning against it). ``cluster="rater"`` gives cluster-robust SEs by
    that column (default: model-based SEs). Fitted twice: ties excluded, and ties counted as
    half (response 0.5 for a tie).
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
    systems = rbridge.factor_levels(pd.concat([data[left], data[right]], ignore_index=True),
                                    reference=reference)
    n_ties = int((side == 0.5).sum())

    shares = []
    for s in systems:
        is_l, is_r = data[left] == s, data[right] == s
        wins = int(((is_l & (data["_y"] == 1)) | (is_r & (data["_y"] == 0))).sum())
        losses = int(((is_l & (data["_y"] == 0)) | (is_r & (data["_y"] == 1))).sum())
        ties = int(((is_l | is_r) & (data["_y"] == 0.5)).sum())
        n = wins + losses + ties
        shares.append(PreferenceShare(
            system=s, n=n, wins=wins, losses=losses, ties=ties,
            share_ties_excluded=wins / (wins + losses) if wins + losses else None,
            ci_ties_excluded=_wilson(wins, wins + losses, conf_level),
            share_ties_half=(wins + 0.5 * ties) / n if n else None,
            ci_ties_half=_wilson(wins + 0.5 * ties, n, conf_level),
        ))

    def design(d: pd.DataFrame) -> pd.DataFrame:
        X = pd.DataFrame({"position (A/left)": np.ones(len(d))}, index=d.index)
        for s in systems[1:]:
            X[f"system{s}"] = (d[left] == s).astype(float) - (d[right] == s).astype(float)
        return X

    def fit(d: pd.DataFrame, label: str) -> ModelFit | None:
        if len(d) == 0:
            return None
        X = design(d)
        y = d["_y"].to_numpy(dtype=float)
        t0 = time.perf_counter()
        model = sm.GLM(y, X, family=sm.families.Binomial())
        warns: list[str] = []
        if cluster is not None:
            codes = pd.factorize(d[cluster].astype(str))[0]
            res = model.fit(cov_type="cluster", cov_kwds={"groups": codes})
            se_kind = f"cluster-robust SEs by {cluster}"
        else:
            res = model.fit()
            se_kind = "model-based SEs"
        cov = np.asarray(res.cov_params(), dtype=float)
        names = list(X.columns)
        coefs = [_coef(n, e, math.sqrt(max(cov[i, i], 0.0)), conf_level)
                 for i, (n, e) in enumerate(zip(names, np.asarray(res.params), strict=True))]
        converged = bool(getattr(res, "converged", True)) and all(
            math.isfinite(c.se) and c.se < 1e3 for c in coefs)
        if not converged:
            warns.append("preference model did not converge (separation or a disconnected "
                         "comparison graph?)")
        return ModelFit(
            formula="P(choose A/left) = logit^-1(position + beta_left - beta_right)",
            engine=f"statsmodels {statsmodels.__version__} GLM Binomial(logit), {se_kind}",
            family="bradley-terry (binomial)", link="logit", n_obs=len(d),
            coefficients=coefs, converged=converged, warnings=warns,
            extra={"ties": label, "conf_level": conf_level, "levels": {"system": systems},
                   "reference": {"system": systems[0]},
                   "vcov": _vcov_extra(names, cov), "elapsed_s": time.perf_counter() - t0,
                   "p_left_at_equal_strength": float(expit(coefs[0].estimate)),
                   "p_left_ci": (float(expit(coefs[0].ci_low)), float(expit(coefs[0].ci_high)))},
        )

    no_ties = data[data["_y"] != 0.5]
    fit_ex = fit(no_ties, "excluded")
    fit_half = fit(data, "counted as half")
    n_left = int((no_ties["_y"] == 1).sum())
    extra: dict[str, Any] = {"systems": systems, "reference": systems[0]}
    if len(no_ties):
        bt = sps.binomtest(n_left, len(no_ties), 0.5)
        extra["left_share_ties_excluded"] = {
            "share": n_left / len(no_ties), "ci": _wilson(n_left, len(no_ties), conf_level),
            "n": len(no_ties), "binomial_test_p": float(bt.pvalue)}
    if len(data):
        cnt = n_left + 0.5 * n_ties
        extra["left_share_ties_half"] = {
            "share": cnt / len(data), "ci": _wilson(cnt, len(data), conf_level), "n": len(data)}
    return PreferenceResult(
        n_comparisons=len(data), n_ties=n_ties, shares=shares,
        ties_excluded=fit_ex, ties_half=fit_half,
        position_ties_excluded=fit_ex.coefficients[0] if fit_ex else None,
        position_ties_half=fit_half.coefficients[0] if fit_half else None,
        extra=extra,
    )
