"""Binary outcomes: binomial GLMMs (R ``lme4::glmer``; optionally pymer4), their penalised
form for data with separation (``blme::bglmer``, ``brglm2::brglmFit``), and the statsmodels
population-averaged fallback with cluster-robust SEs."""

from __future__ import annotations

import importlib.metadata
import math
import re
import threading
import time
import warnings as warnings_module
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import rbridge
from analysis.stats.models.base import (
    DEFAULT_GLMM_FORMULA,
    RANDOM_EFFECTS_DROPPED,
    ModelFit,
    PreparedData,
    coefficient_of,
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
from analysis.stats.models.convergence import judge_convergence
from analysis.stats.models.separation import diagnose_separation

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

NON_CONVERGENCE = re.compile(
    r"failed to converge|convergence code|unable to evaluate|degenerate|"
    r"Hessian is numerically singular|very large eigenvalue|not positive definite",
    re.IGNORECASE,
)
#: lme4's messages about the Hessian at the estimate, which its optimiser code and gradient do
#: not cover (the gradient's "failed to converge with max|grad|" message is their test).
HESSIAN_TROUBLE = re.compile(
    r"unable to evaluate|degenerate|Hessian is numerically singular|very large eigenvalue|"
    r"not positive definite", re.IGNORECASE)


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
    cluster-robust SEs; see the package docstring).
    Coefficients are log-odds; ``extra["odds_ratios"]`` maps each term to
    ``{"odds_ratio", "ci_low", "ci_high"}`` (for ``(Intercept)`` these are the odds of the
    reference condition). The Wald CI uses ``conf_level``; pymer4's own CI is 95 %.
    """
    parsed = parse_model_formula(df, formula, allow_cbind=True)
    is_cbind = len(parsed.response) == 2
    response_type = "cbind" if is_cbind else "binary"
    prep = prepare_model_data(df, parsed, response_type=response_type, reference=reference,
                    levels=levels)
    eng = engine.lower()
    if use_r(engine):
        if eng == "pymer4" and not is_cbind:
            fit = _fit_glmm_pymer4(prep, conf_level)
        else:
            fit = _fit_glmm_r(prep, conf_level)
    else:
        if is_cbind:
            raise ValueError("the statsmodels fallback needs a 0/1 response, not cbind()")
        fit = _fit_logit_cluster(prep, conf_level)
    fit.extra["estimation"] = "maximum likelihood"
    diagnose_separation(prep, fit, response_type=response_type)
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
    "why"}`` and ``extra["separation"]`` (see :func:`diagnose_separation`). Estimates of
    separated levels are shrunk towards 0 by the prior: they say "large", not how large.
    """
    if not (prior_sd > 0 and intercept_prior_sd > 0):
        raise ValueError("prior SDs must be positive")
    parsed = parse_model_formula(df, formula, allow_cbind=True)
    is_cbind = len(parsed.response) == 2
    response_type = "cbind" if is_cbind else "binary"
    prep = prepare_model_data(df, parsed, response_type=response_type, reference=reference,
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
        version = " ".join(r_strings(fit.extra.pop("r_blme", None)))
        fit.engine = (f"R blme::bglmer {version} (lme4::glmer with normal priors on the fixed "
                      f"effects: SD {intercept_prior_sd:g} intercept, {prior_sd:g} "
                      f"coefficients; posterior mode) via Rscript (R {engine_versions().get('R')})")
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
    diagnose_separation(prep, fit, response_type=response_type, penalised=True)
    _odds_ratios(fit)
    return fit

def _fit_brglm_r(prep: PreparedData, conf_level: float) -> ModelFit:
    t0 = time.perf_counter()
    rdf = rbridge.RFrame(prep.data, levels=prep.factors)
    out = rbridge.r_function("evalstudy_brglm")(prep.formula.text, rdf)
    names = r_strings(out["names"])
    est, se, p = r_floats(out["est"]), r_floats(out["se"]), r_floats(out["p"])
    vc = r_floats(out["vcov"]).reshape(len(names), len(names))
    coefs = [coefficient_of(n, e, s_, conf_level, pv) for n, e, s_, pv in zip(names, est, se, p,
                                                                      strict=True)]
    warnings = list(prep.warnings) + r_strings(out["warnings"])
    converged = bool(out["converged"][0]) and all(math.isfinite(c.se) for c in coefs)
    if not converged:
        warnings.append("brglmFit did not converge")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        "vcov": vcov_extra(names, vc),
        "r_seconds": float(r_floats(out["seconds"])[0]),
        "elapsed_s": time.perf_counter() - t0,
        "fallback": False,
    }
    engine = (f"R brglm2::brglmFit {' '.join(r_strings(out['brglm2']))} (logistic regression, "
              f"Firth's mean bias reduction) via Rscript (R {engine_versions().get('R')})")
    return ModelFit(formula=prep.formula.text, engine=engine, family="binomial", link="logit",
                    n_obs=int(r_floats(out["nobs"])[0]), coefficients=coefs, thresholds=[],
                    random_effects={}, converged=converged, warnings=warnings, extra=extra)


def _glmm_common_extra(prep: PreparedData, conf_level: float) -> dict[str, Any]:
    resp = set(prep.response)
    return {
        "conf_level": conf_level,
        "levels": {k: v for k, v in prep.factors.items()
                   if k not in resp and k not in prep.groups},
        "reference": {k: v[0] for k, v in prep.factors.items()
                      if k not in resp and k not in prep.groups},
        "versions": engine_versions(),
    }


def _finish_glmm(prep, engine, names, est, se, p, vc, random_effects, n_groups,
                 n_obs, conv_msgs, other_warnings, singular, conf_level, elapsed, extra,
                 optimiser=None):
    coefs = [coefficient_of(n, e, s, conf_level, pv) for n, e, s, pv in zip(names, est, se, p,
                                                                    strict=True)]
    warnings = list(prep.warnings) + [w for w in other_warnings if w not in conv_msgs]
    warnings += conv_msgs
    finite = all(math.isfinite(c.se) for c in coefs)
    messages = conv_msgs + other_warnings
    if optimiser is not None and optimiser["code"] is not None:
        # lme4's optimiser code and gradient decide (its gradient message is the same test,
        # worded); what else lme4 says of the Hessian still marks the fit.
        found = judge_convergence(code=optimiser["code"], message="",
                                  max_gradient=optimiser["max_gradient"],
                                  scaled_gradient=optimiser["scaled_gradient"],
                                  finite_se=finite)
        trouble = [m for m in messages if HESSIAN_TROUBLE.search(m)]
        converged = found.converged and not trouble
        extra = {**extra, "convergence": found.label if converged or not found.converged
                 else f"did not converge (lme4: {trouble[0]})",
                 "convergence_code": optimiser["code"],
                 "max_gradient": optimiser["max_gradient"],
                 "scaled_gradient": optimiser["scaled_gradient"]}
    else:
        converged = not any(NON_CONVERGENCE.search(m) for m in messages) and finite
    if singular and not any("singular" in w for w in warnings):
        warnings.append("boundary (singular) fit: a random-effect variance is ~0")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        **extra,
        "vcov": vcov_extra(names, vc),
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


def _fit_glmm_r(prep: PreparedData, conf_level: float, *, r_function: str = "evalstudy_glmer",
                r_args: tuple[Any, ...] = ()) -> ModelFit:
    """glmer (or, with ``r_function="evalstudy_bglmer"``, bglmer: same reply) in the R worker."""
    t0 = time.perf_counter()
    formula = prep.formula.text
    rdf = rbridge.RFrame(prep.data, levels=prep.factors)
    out = rbridge.r_function(r_function)(formula, rdf, *r_args)
    names = r_strings(out["names"])
    est, se, p = r_floats(out["est"]), r_floats(out["se"]), r_floats(out["p"])
    vc = r_floats(out["vcov"]).reshape(len(names), len(names))
    random_effects = {
        (g if n == "(Intercept)" else f"{g}:{n}"): float(v)
        for g, n, v in zip(r_strings(out["re_group"]), r_strings(out["re_name"]),
                           r_floats(out["re_var"]), strict=True)
    }
    n_groups = {n: int(k) for n, k in zip(r_strings(out["ngrps_names"]),
                                          r_floats(out["ngrps"]), strict=True)}
    n_obs = int(r_floats(out["nobs"])[0])
    conv = r_strings(out["conv"])
    warns = r_strings(out["warnings"])
    singular = bool(out["singular"][0])
    extra = {"loglik": float(r_floats(out["loglik"])[0]),
             "aic": float(r_floats(out["aic"])[0]),
             "r_seconds": float(r_floats(out["seconds"])[0])}  # glmer + summaries, inside R
    if "blme" in out:
        extra["r_blme"] = out["blme"]
    return _finish_glmm(prep, r_engine("lme4::glmer", "lme4"), names, est, se, p,
                        vc, random_effects, n_groups, n_obs, conv, warns, singular,
                        conf_level, time.perf_counter() - t0, extra, _optimiser(out))


def _optimiser(out: dict[str, Any]) -> dict[str, Any] | None:
    """lme4's optimiser code (`optinfo$conv$opt`) and gradients (`optinfo$derivs`) from an R
    reply; None where R gave none (a reply without them, or no derivatives computed)."""
    def first(key: str) -> float | None:
        values = np.atleast_1d(r_floats(out.get(key)))
        return float(values[0]) if len(values) and math.isfinite(values[0]) else None

    code, gradient = first("conv_opt"), first("max_gradient")
    if code is None or gradient is None:
        return None
    return {"code": int(code), "max_gradient": gradient,
            "scaled_gradient": first("scaled_gradient")}


def _pymer4_lmer() -> Any:
    """pymer4's ``Lmer``, imported on first use: pymer4 is optional (see PYMER4_MISSING)."""
    try:
        from pymer4.models import Lmer
    except ImportError as exc:
        raise ImportError(PYMER4_MISSING) from exc
    return Lmer


def _fit_glmm_pymer4(prep: PreparedData, conf_level: float) -> ModelFit:
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
    vc = r_floats(out["vcov"]).reshape(len(names), len(names))  # symmetric: order irrelevant
    n_groups = {n: int(k) for n, k in zip(r_strings(out["ngrps_names"]), r_floats(out["ngrps"]),
                                          strict=True)}
    n_obs = int(r_floats(out["nobs"])[0])
    singular = bool(r_floats(out["singular"])[0])
    rv = model.ranef_var
    random_effects = {
        (str(grp) if str(row["Name"]) == "(Intercept)" else f"{grp}:{row['Name']}"):
            float(row["Var"])
        for grp, row in rv.iterrows()
    }
    conv = [str(w) for w in (model.warnings or [])]
    other = r_strings(out["warnings"]) + [
        f"R console: {line.strip()}" for line in "".join(console).splitlines()
        if line.strip() and "site-library" not in line and "contains no packages" not in line
    ]
    est = coefs_df["Estimate"].to_numpy(dtype=float)
    se = coefs_df["SE"].to_numpy(dtype=float)
    p = coefs_df["P-val"].to_numpy(dtype=float)
    extra = {"loglik": float(model.logLike), "aic": float(model.AIC)}
    v = engine_versions()
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


def _fit_logit_cluster(prep: PreparedData, conf_level: float) -> ModelFit:
    import statsmodels
    import statsmodels.api as sm

    t0 = time.perf_counter()
    resp = prep.response[0]
    X = patsy_matrix(prep)
    X.columns = ["(Intercept)" if c == "Intercept" else r_style_name(c) for c in X.columns]
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
    coefs = [coefficient_of(n, e, s, conf_level) for n, e, s in zip(names, est, se, strict=True)]
    converged = bool(getattr(res, "converged", True)) and all(np.isfinite(se))
    engine = (f"statsmodels {statsmodels.__version__} GLM Binomial(logit) with {se_kind} - "
              "fallback, NOT glmer (no random effects)")
    extra = {
        **_glmm_common_extra(prep, conf_level),
        "vcov": vcov_extra(names, cov),
        "loglik": float(res.llf),
        "n_groups": {g: int(prep.data[g].nunique()) for g in prep.groups},
        "cluster_by": groups,
        "elapsed_s": time.perf_counter() - t0,
        "fallback": True,
    }
    return ModelFit(formula=prep.formula.text, engine=engine, family="binomial", link="logit",
                    n_obs=len(y), coefficients=coefs, thresholds=[], random_effects={},
                    converged=converged, warnings=warnings, extra=extra)
