"""What every model family here shares: result types, formula preparation, engine choice.

The fitters (:mod:`.ordinal`, :mod:`.binomial`, :mod:`.preference`) turn a tidy frame into
a :class:`PreparedData` (formula parsed against the frame's columns, factors built, incomplete
rows dropped), fit it with the engine :func:`use_r` picks, and return a :class:`ModelFit`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.stats import rbridge
from analysis.stats.formula import Formula, parse_formula, r_coefficient_name

DEFAULT_CLMM_FORMULA = "rating ~ system + (1|rater) + (1|item)"
DEFAULT_CLM_FORMULA = "rating ~ system"
DEFAULT_GLMM_FORMULA = "y ~ system + (1|rater) + (1|item)"


def for_frame(formula: str, frame: pd.DataFrame) -> str:
    """A default formula for the rows it will fit: with a single system there is no system
    effect to estimate, so `system` gives way to the intercept ("y ~ 1 + (1|rater) + ..."),
    instead of the fit failing on a factor with one level."""
    if "system" in frame.columns and frame["system"].nunique() < 2:
        return re.sub(r"~\s*system\b", "~ 1", formula)
    return formula

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
        ``separation`` (see :func:`diagnose_separation`); per model: ``nominal_test``,
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# helpers


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def z_quantile(conf_level: float) -> float:
    return float(sps.norm.ppf(0.5 + conf_level / 2.0))


def coefficient_of(term: str, est: float, se: float, conf_level: float, p: float | None = None,
          with_p: bool = True) -> Coefficient:
    est, se = float(est), float(se)
    z = est / se if se > 0 and math.isfinite(se) else math.nan
    if with_p and p is None:
        p = float(2 * sps.norm.sf(abs(z))) if math.isfinite(z) else math.nan
    half = z_quantile(conf_level) * se
    return Coefficient(term, est, se, est - half, est + half,
                       (float(p) if p is not None else None) if with_p else None, z)


def parse_model_formula(df: pd.DataFrame, formula: str | Formula, *,
                        allow_cbind: bool = False) -> Formula:
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
class PreparedData:
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


def prepare_model_data(
    df: pd.DataFrame,
    formula: Formula,
    *,
    response_type: str,
    reference: str | Mapping[str, Any] | None,
    levels: Mapping[str, Sequence[Any]] | None,
) -> PreparedData:
    """Select the formula's columns, drop incomplete rows, build factors (see the docstring of
    :mod:`analysis.stats.models`). ``formula`` comes from :func:`_parse` on the same ``df``."""
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
    if response_type == "ordinal":
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
    elif response_type == "binary" and len(response) == 1:
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
    if response_type == "ordinal" and len(lv[response[0]]) < 2:
        raise ValueError("the ordinal response needs at least two observed categories")
    return PreparedData(data, response, lv, groups, formula, warnings)


def vcov_extra(terms: Sequence[str], matrix: np.ndarray) -> dict[str, Any]:
    return {"terms": list(terms), "matrix": np.asarray(matrix, dtype=float).tolist()}


def engine_versions() -> dict[str, str | None]:
    return rbridge.r_versions()


def r_engine(what: str, pkg: str) -> str:
    v = engine_versions()
    return f"R {what} {v.get(pkg)} via Rscript (R {v.get('R')})"


def use_r(engine: str) -> bool:
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


def r_strings(v: Any) -> list[str]:
    """An R character vector from a reply (a list; None for R's NULL) -> strings."""
    if v is None:
        return []
    return [str(x) for x in v]


def r_floats(v: Any) -> np.ndarray:
    """An R numeric vector or matrix (list of rows) from a reply -> float array (null -> nan)."""
    if v is None:
        return np.array([], dtype=float)
    return np.asarray(v, dtype=float)


def r_style_name(name: str) -> str:
    """patsy ``temp[T.warm]:contact[T.yes]`` -> R ``tempwarm:contactyes``."""
    return r_coefficient_name(name)


def patsy_matrix(prep: PreparedData, **kwargs: Any) -> pd.DataFrame:
    """patsy's design matrix of the fixed effects. The formula text is rebuilt from parsed
    column names; the empty evaluation environment keeps even that text from seeing this
    module's names (patsy still provides its own Q())."""
    import patsy

    return patsy.dmatrix(prep.fixed_rhs, prep.data, eval_env=patsy.EvalEnvironment([{}]),
                         return_type="dataframe", **kwargs)
