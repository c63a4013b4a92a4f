"""Continuous scores (sliders, direct assessment): a linear mixed model, R ``lmerTest::lmer``
(REML; Satterthwaite degrees of freedom) in the separate R process, and, without R, ordinary
least squares with cluster-robust standard errors (not a mixed model: said so)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.stats import rbridge
from analysis.stats.models.base import (
    RANDOM_EFFECTS_DROPPED,
    Coefficient,
    ModelFit,
    PreparedData,
    engine_versions,
    parse_model_formula,
    patsy_matrix,
    prepare_model_data,
    r_engine,
    r_floats,
    r_strings,
    r_style_name,
    use_r,
    vcov_extra,
)
from analysis.stats.models.binomial import NON_CONVERGENCE

DEFAULT_LMM_FORMULA = "score ~ system + (1|rater) + (1|item)"
PYMER4_NOT_FOR_LMM = (
    "engine='pymer4' is offered for the binomial GLMM only; the continuous model runs "
    "lmerTest::lmer in the R process (engine='auto' or 'R'), the same lme4 fit pymer4's Lmer "
    "would make, with Satterthwaite degrees of freedom")


def fit_lmm(
    df: pd.DataFrame,
    formula: str = DEFAULT_LMM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    engine: str = "auto",
    conf_level: float = 0.95,
) -> ModelFit:
    """Linear mixed model of a numeric response (e.g. ``score ~ system + (1|rater) +
    (1|item)``). Coefficients are in the response's units; each has a t test and CI on its
    Satterthwaite degrees of freedom (``extra["df"]``). ``extra["residual_variance"]`` is the
    residual variance; ``random_effects`` the random-effect variances."""
    if engine.lower() == "pymer4":
        raise ValueError(PYMER4_NOT_FOR_LMM)
    parsed = parse_model_formula(df, formula)
    prep = prepare_model_data(df, parsed, response_type="gaussian", reference=reference,
                              levels=levels)
    response = prep.response[0]
    if not pd.api.types.is_numeric_dtype(prep.data[response].dtype):
        raise ValueError(f"the response {response!r} must be numeric")
    fit = (_fit_lmm_r(prep, conf_level) if use_r(engine)
           else _fit_ols_cluster(prep, conf_level))
    fit.extra["estimation"] = "REML" if fit.random_effects else "least squares"
    return fit


def _t_coef(term: str, est: float, se: float, df: float, conf_level: float,
            p: float | None = None) -> Coefficient:
    df = df if math.isfinite(df) and df > 0 else math.inf
    t = est / se if se > 0 and math.isfinite(se) else math.nan
    if p is None:
        p = float(2 * sps.t.sf(abs(t), df)) if math.isfinite(t) else math.nan
    half = float(sps.t.ppf(0.5 + conf_level / 2.0, df)) * se
    return Coefficient(term, float(est), float(se), est - half, est + half, float(p), t)


def _common_extra(prep: PreparedData, conf_level: float) -> dict[str, Any]:
    response = set(prep.response)
    fixed = {k: v for k, v in prep.factors.items() if k not in response and k not in prep.groups}
    return {"conf_level": conf_level, "levels": fixed,
            "reference": {k: v[0] for k, v in fixed.items()}, "versions": engine_versions()}


def _fit_lmm_r(prep: PreparedData, conf_level: float) -> ModelFit:
    started = time.perf_counter()
    out = rbridge.r_function("evalstudy_lmer")(prep.formula.text,
                                               rbridge.RFrame(prep.data, levels=prep.factors))
    names = r_strings(out["names"])
    est, se, p, dfs = (r_floats(out[k]) for k in ("est", "se", "p", "df"))
    coefficients = [_t_coef(n, e, s, d, conf_level, pv)
                    for n, e, s, d, pv in zip(names, est, se, dfs, p, strict=True)]
    random_effects = {
        (g if n == "(Intercept)" else f"{g}:{n}"): float(v)
        for g, n, v in zip(r_strings(out["re_group"]), r_strings(out["re_name"]),
                           r_floats(out["re_var"]), strict=True)
    }
    conv, warns = r_strings(out["conv"]), r_strings(out["warnings"])
    warnings = list(prep.warnings) + [w for w in warns if w not in conv] + conv
    singular = bool(out["singular"][0])
    if singular and not any("singular" in w for w in warnings):
        warnings.append("boundary (singular) fit: a random-effect variance is ~0")
    converged = (not any(NON_CONVERGENCE.search(m) for m in conv + warns)
                 and all(math.isfinite(c.se) for c in coefficients))
    mixed = bool(out["mixed"][0])
    what = "lmerTest::lmer (REML, Satterthwaite df)" if mixed else "stats::lm"
    extra = {
        **_common_extra(prep, conf_level),
        "vcov": vcov_extra(names, r_floats(out["vcov"]).reshape(len(names), len(names))),
        "df": dict(zip(names, [float(d) for d in dfs], strict=True)),
        "residual_variance": float(r_floats(out["sigma2"])[0]),
        "n_groups": {n: int(k) for n, k in zip(r_strings(out["ngrps_names"]),
                                              r_floats(out["ngrps"]), strict=True)},
        "random_effects_sd": {k: math.sqrt(max(v, 0.0)) for k, v in random_effects.items()},
        "loglik": float(r_floats(out["loglik"])[0]), "aic": float(r_floats(out["aic"])[0]),
        "singular": singular, "elapsed_s": time.perf_counter() - started,
        "r_seconds": float(r_floats(out["seconds"])[0]), "fallback": False,
    }
    if "reml" in out:
        extra["reml_criterion"] = float(r_floats(out["reml"])[0])
    return ModelFit(formula=prep.formula.text,
                    engine=r_engine(what, "lmerTest" if mixed else "lme4"),
                    family="gaussian", link="identity", n_obs=int(r_floats(out["nobs"])[0]),
                    coefficients=coefficients, random_effects=random_effects,
                    converged=converged, warnings=warnings, extra=extra)


def _fit_ols_cluster(prep: PreparedData, conf_level: float) -> ModelFit:
    import statsmodels
    import statsmodels.api as sm

    started = time.perf_counter()
    design = patsy_matrix(prep)
    design.columns = ["(Intercept)" if c == "Intercept" else r_style_name(c)
                      for c in design.columns]
    y = prep.data[prep.response[0]].to_numpy(dtype=float)
    groups = prep.groups[:2]
    model = sm.OLS(y, design)
    if groups:
        codes = np.column_stack([pd.factorize(prep.data[g].astype(str))[0] for g in groups])
        result = model.fit(cov_type="cluster",
                           cov_kwds={"groups": codes if len(groups) == 2 else codes[:, 0]})
        se_kind = ("two-way " if len(groups) == 2 else "") + "cluster-robust SEs by " + \
            " and ".join(groups)
    else:
        result = model.fit()
        se_kind = "model-based SEs"
    warnings = list(prep.warnings)
    if prep.formula.random:
        warnings.append(RANDOM_EFFECTS_DROPPED)
    names = list(design.columns)
    cov = np.asarray(result.cov_params(), dtype=float)
    se = np.sqrt(np.diag(cov))
    # With cluster-robust SEs the t reference has G - 1 degrees of freedom (G: the fewest
    # clusters of a grouping factor), not n - p: a handful of raters is a handful of values.
    df = (float(min(prep.data[g].nunique() for g in groups) - 1) if groups
          else float(result.df_resid))
    coefficients = [_t_coef(n, e, s, df, conf_level)
                    for n, e, s in zip(names, np.asarray(result.params, dtype=float), se,
                                       strict=True)]
    extra = {**_common_extra(prep, conf_level), "vcov": vcov_extra(names, cov),
             "df": dict.fromkeys(names, df), "residual_variance": float(result.scale),
             "n_groups": {g: int(prep.data[g].nunique()) for g in prep.groups},
             "cluster_by": groups, "elapsed_s": time.perf_counter() - started,
             "fallback": True}
    return ModelFit(formula=prep.formula.text,
                    engine=f"statsmodels {statsmodels.__version__} OLS with {se_kind} - "
                           "fallback, NOT a mixed model (no random effects)",
                    family="gaussian", link="identity", n_obs=len(y),
                    coefficients=coefficients, converged=bool(np.isfinite(se).all()),
                    warnings=warnings, extra=extra)
