"""Ordinal (Likert) models: cumulative link (mixed) models, R ``ordinal::clmm`` / ``clm`` in
the R worker, or statsmodels ``OrderedModel`` as the fixed-effects-only fallback."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import rbridge
from analysis.stats.models.base import (
    DEFAULT_CLM_FORMULA,
    DEFAULT_CLMM_FORMULA,
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


def fit_clmm(
    df: pd.DataFrame,
    formula: str = DEFAULT_CLMM_FORMULA,
    reference: str | Mapping[str, Any] | None = None,
    *,
    levels: Mapping[str, Sequence[Any]] | None = None,
    link: str = "logit",
    engine: str = "auto",
    conf_level: float = 0.95,
    progress: Callable[[int], None] | None = None,
) -> ModelFit:
    """Cumulative link mixed model (R ``ordinal::clmm``, Laplace approximation).

    ``df``'s response (``rating``) is treated as ordered: numeric values in numeric order, a
    pandas Categorical in its category order, or ``levels={"rating": [...]}``. ``reference``:
    the reference level of ``system`` (str) or ``{column: level}``. ``engine``: ``"auto"``
    (R when available, else statsmodels), ``"R"`` (required), ``"statsmodels"`` (forced
    fallback: fixed effects only, see the package docstring).
    Example: ``fit_clmm(wine, "rating ~ temp + contact + (1|judge)")``. A formula without
    random-effect terms is fitted with ``ordinal::clm``. From ``LAPLACE_FROM_ROWS`` ratings
    (``engine="auto"``, or ``engine="laplace"`` at any size) a random-intercept model is
    fitted in this process by the same likelihood (:mod:`.clmm_laplace`); `progress` hears
    its iterations.
    """
    return _fit_ordinal(df, formula, reference, levels, link, engine, conf_level,
                        mixed=True, nominal=False, progress=progress)


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
    if parse_model_formula(df, formula).random:
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


#: ``engine="auto"`` fits a CLMM of at least this many ratings in this process
#: (:mod:`analysis.stats.models.clmm_laplace`, the same Laplace likelihood as ``clmm``), where
#: ``ordinal::clmm`` would take minutes (13 s at 8,000 ratings, 132-160 s at 50,000 on a quiet
#: 2-core machine). Smaller ones, and ``engine="R"``, stay with ``ordinal::clmm``.
LAPLACE_FROM_ROWS = 5_000


def _laplace_declines(prep: PreparedData, link: str) -> str | None:
    """Why the in-process Laplace engine cannot fit this model (None: it can)."""
    from analysis.stats.models.clmm_laplace import supported

    sizes = [_group_codes(prep, t.group)[1] for t in prep.formula.random]
    return supported([(t.effects, t.group) for t in prep.formula.random], link, sizes)


def _group_codes(prep: PreparedData, group: Sequence[str]) -> tuple[np.ndarray, int]:
    """Integer codes of a grouping factor (``g1:g2``: of the observed combinations)."""
    key = prep.data[group[0]].astype(str)
    for name in group[1:]:
        key = key + ":" + prep.data[name].astype(str)
    codes, uniques = pd.factorize(key, sort=True)
    return np.asarray(codes, dtype=np.int64), len(uniques)


def _fit_ordinal(df, formula, reference, levels, link, engine, conf_level, *, mixed, nominal,
                 progress=None):
    prep = prepare_model_data(df, parse_model_formula(df, formula), response_type="ordinal",
                              reference=reference, levels=levels)
    has_random = bool(prep.formula.random)
    if mixed and has_random and engine.lower() in ("laplace", "auto"):
        declined = _laplace_declines(prep, link)
        if engine.lower() == "laplace" and declined:
            raise ValueError(f"engine='laplace' cannot fit {declined}; use engine='R'")
        if not declined and (engine.lower() == "laplace" or (
                rbridge.r_available() and len(prep.data) >= LAPLACE_FROM_ROWS)):
            fit = _fit_ordinal_laplace(prep, conf_level, progress)
            diagnose_separation(prep, fit, response_type="ordinal")
            return fit
    if use_r(engine):
        fit = _fit_ordinal_r(prep, link, conf_level, mixed=mixed and has_random,
                             nominal=nominal)
        diagnose_separation(prep, fit, response_type="ordinal")
        return fit
    if link != "logit":
        raise ValueError("the statsmodels fallback supports link='logit' only")
    fit = _fit_ordinal_statsmodels(prep, conf_level)
    if has_random:
        fit.warnings.append(RANDOM_EFFECTS_DROPPED)
    if nominal:
        fit.extra["nominal_test"] = None
        fit.warnings.append("nominal_test (proportional odds) not computed: needs R ordinal")
    diagnose_separation(prep, fit, response_type="ordinal")
    return fit


def _fit_ordinal_r(prep: PreparedData, link: str, conf_level: float, *,
                   mixed: bool, nominal: bool) -> ModelFit:
    resp = prep.response[0]
    formula = prep.formula.text
    t0 = time.perf_counter()
    rdf = rbridge.RFrame(prep.data, levels=prep.factors, ordered=[resp])
    out = rbridge.r_function("evalstudy_ordinal")(formula, rdf, link, mixed, nominal)
    names = r_strings(out["names"])
    est, se, p = r_floats(out["est"]), r_floats(out["se"]), r_floats(out["p"])
    alpha_names, beta_names = r_strings(out["alpha"]), r_strings(out["beta"])
    vcov = r_floats(out["vcov"])
    vcov_names = r_strings(out["vcov_names"])
    r_warn = r_strings(out["warnings"])
    conv_code = int(r_floats(out["conv_code"])[0])
    conv_msg = " ".join(r_strings(out["conv_msg"]))
    maxgrad = float(r_floats(out["maxgrad"])[0])
    scaled = np.atleast_1d(r_floats(out.get("scaled_gradient")))
    scaled_gradient = float(scaled[0]) if len(scaled) and math.isfinite(scaled[0]) else None
    cond_h = float(r_floats(out["cond_h"])[0])
    extra: dict[str, Any] = {
        "loglik": float(r_floats(out["loglik"])[0]),
        "aic": float(r_floats(out["aic"])[0]),
        "max_gradient": maxgrad,
        "scaled_gradient": scaled_gradient,
        "cond_hessian": cond_h,
        "convergence_code": conv_code,
        "convergence_message": conv_msg,
        "r_seconds": float(r_floats(out["seconds"])[0]),  # the fit and summaries, inside R
    }
    n_obs = int(r_floats(out["nobs"])[0])
    random_effects: dict[str, float] = {}
    if mixed:
        for g, nm, v in zip(r_strings(out["re_group"]), r_strings(out["re_name"]),
                            r_floats(out["re_var"]), strict=True):
            random_effects[g if nm == "(Intercept)" else f"{g}:{nm}"] = float(v)
        extra["n_groups"] = {
            n: int(k) for n, k in zip(r_strings(out["ngrps_names"]), r_floats(out["ngrps"]),
                                      strict=True)
        }
    if nominal and "nt_terms" in out:
        terms = r_strings(out["nt_terms"])
        reasons = r_strings(out.get("nt_reason")) or [""] * len(terms)
        extra["nominal_test"] = [
            {"term": t, "df": _nan_none(d), "loglik": _nan_none(ll), "aic": _nan_none(a),
             "lrt": _nan_none(lr), "p_value": _nan_none(pv),
             "tested": None if t == "<none>" else _nan_none(pv) is not None,
             "reason": (_untested_reason(prep, t, why)
                        if t != "<none>" and _nan_none(pv) is None else None)}
            for t, d, ll, a, lr, pv, why in zip(
                terms, r_floats(out["nt_df"]), r_floats(out["nt_loglik"]),
                r_floats(out["nt_aic"]), r_floats(out["nt_lrt"]), r_floats(out["nt_p"]),
                reasons, strict=True)
        ]
    elif nominal:
        extra["nominal_test"] = None
    elapsed = time.perf_counter() - t0
    row = {n: i for i, n in enumerate(names)}
    coefs = [coefficient_of(b, est[row[b]], se[row[b]], conf_level, p[row[b]]) for b in beta_names
             if b in row]
    thresholds = [coefficient_of(a, est[row[a]], se[row[a]], conf_level, with_p=False)
                  for a in alpha_names if a in row]
    idx = [vcov_names.index(b) for b in beta_names if b in vcov_names]
    vc = vcov[np.ix_(idx, idx)] if idx else np.zeros((0, 0))
    warnings = list(prep.warnings) + r_warn
    finite = all(math.isfinite(c.se) for c in coefs + thresholds)
    # From the optimiser's code and gradients, not its words ("relative convergence (4)" is
    # nlminb's success).
    convergence = judge_convergence(code=conv_code, message=conv_msg, max_gradient=maxgrad,
                                    scaled_gradient=scaled_gradient, finite_se=finite)
    converged = convergence.converged
    extra["convergence"] = convergence.label
    if not converged:
        warnings.append(f"model {convergence.label}")
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
        vcov=vcov_extra([c.term for c in coefs], vc),
        random_effects_sd={k: math.sqrt(max(v, 0.0)) for k, v in random_effects.items()},
        elapsed_s=elapsed,
        versions=engine_versions(),
        fallback=False,
    )
    return ModelFit(
        formula=formula,
        engine=r_engine("ordinal::clmm" if mixed else "ordinal::clm", "ordinal"),
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


def _fit_ordinal_laplace(prep: PreparedData, conf_level: float,
                         progress: Callable[[int], None] | None = None) -> ModelFit:
    """A random-intercept CLMM fitted in this process (see :mod:`.clmm_laplace`), read into
    the same :class:`ModelFit` as ``ordinal::clmm``'s."""
    import scipy

    from analysis.stats.models.clmm_laplace import LaplaceData, fit_laplace

    t0 = time.perf_counter()
    resp = prep.response[0]
    X = _design(prep)
    categories = prep.factors[resp]
    y = pd.Categorical(prep.data[resp].astype(str), categories=[str(c) for c in categories])
    groups = [_group_codes(prep, t.group) for t in prep.formula.random]
    names = [":".join(t.group) for t in prep.formula.random]
    data = LaplaceData(y=np.asarray(y.codes, dtype=np.int64), n_categories=len(categories),
                       X=X.to_numpy(dtype=float), groups=tuple(g[0] for g in groups),
                       group_sizes=tuple(g[1] for g in groups))
    result = fit_laplace(data, progress)
    n_alpha, p = len(result.alpha), len(result.beta)
    se = np.sqrt(np.where(np.diag(result.vcov) >= 0, np.diag(result.vcov), np.nan))
    alpha_names = [f"{categories[j]}|{categories[j + 1]}" for j in range(n_alpha)]
    coefs = [coefficient_of(name, result.beta[i], se[n_alpha + i], conf_level)
             for i, name in enumerate(X.columns)]
    thresholds = [coefficient_of(name, result.alpha[j], se[j], conf_level, with_p=False)
                  for j, name in enumerate(alpha_names)]
    gradient = result.gradient
    max_gradient = float(np.max(np.abs(gradient)))
    try:
        scaled: float | None = float(np.max(np.minimum(
            np.abs(np.linalg.solve(np.linalg.cholesky(result.hessian), gradient)),
            np.abs(gradient))))
    except np.linalg.LinAlgError:
        scaled = None
    # BFGS's "precision loss" is its way of saying the gradient is at the noise floor of the
    # numerical differences: judged by the gradient like every other fit.
    code = 0 if result.converged or "precision loss" in result.message else 1
    finite = all(math.isfinite(c.se) for c in coefs + thresholds)
    convergence = judge_convergence(code=code, message=result.message,
                                    max_gradient=max_gradient, scaled_gradient=scaled,
                                    finite_se=finite)
    warnings = list(prep.warnings)
    if not convergence.converged:
        warnings.append(f"model {convergence.label}")
    random_effects = {name: float(s ** 2) for name, s in zip(names, result.sigma, strict=True)}
    for g, v in random_effects.items():
        if v < 1e-6:
            warnings.append(f"random-effect variance of {g!r} is ~0 (singular fit)")
    eigen = np.linalg.eigvalsh(result.hessian)
    cond_h = float(eigen.max() / eigen.min()) if eigen.min() > 0 else math.inf
    vc = result.vcov[n_alpha:n_alpha + p, n_alpha:n_alpha + p]
    others = [k for k in prep.factors if k != resp and k not in prep.groups]
    extra: dict[str, Any] = {
        "loglik": result.loglik,
        "aic": -2 * result.loglik + 2 * result.n_parameters,
        "max_gradient": max_gradient,
        "scaled_gradient": scaled,
        "cond_hessian": cond_h,
        "convergence_code": code,
        "convergence_message": result.message,
        "convergence": convergence.label,
        "optimiser": {"method": "BFGS", "iterations": result.iterations,
                      "likelihood_evaluations": result.evaluations},
        "n_groups": {name: int(g[1]) for name, g in zip(names, groups, strict=True)},
        "conf_level": conf_level,
        "levels": {k: prep.factors[k] for k in others},
        "response_levels": categories,
        "reference": {k: prep.factors[k][0] for k in others},
        "vcov": vcov_extra([c.term for c in coefs], vc),
        "random_effects_sd": {k: math.sqrt(v) for k, v in random_effects.items()},
        "elapsed_s": time.perf_counter() - t0,
        "versions": engine_versions(),
        "fallback": False,
    }
    return ModelFit(
        formula=prep.formula.text,
        engine=(f"evalstudy Laplace CLMM (the likelihood of ordinal::clmm, random "
                f"intercepts, BFGS) with numpy {np.__version__}, scipy {scipy.__version__}"),
        family="cumulative", link="logit", n_obs=len(prep.data), coefficients=coefs,
        thresholds=thresholds, random_effects=random_effects,
        converged=convergence.converged, warnings=warnings, extra=extra)


def _untested_reason(prep: PreparedData, term: str, why: str) -> str:
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


def _design(prep: PreparedData) -> pd.DataFrame:
    X = patsy_matrix(prep, NA_action="raise")
    X = X.drop(columns=[c for c in X.columns if c == "Intercept"])
    X.columns = [r_style_name(c) for c in X.columns]
    return X


def _fit_ordinal_statsmodels(prep: PreparedData, conf_level: float) -> ModelFit:
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
        # no SEs; the fit is kept so that diagnose_separation can name the cause.
        cov = np.full((len(params), len(params)), np.nan)
    coefs = [coefficient_of(name, params[i], math.sqrt(cov[i, i]), conf_level)
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
    thresholds = [coefficient_of(f"{lv[j]}|{lv[j + 1]}", cuts[j], math.sqrt(tcov[j, j]), conf_level,
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
            "vcov": vcov_extra([c.term for c in coefs], cov[:k, :k]),
            "loglik": float(res.llf),
            "aic": float(res.aic),
            "fixed_formula": prep.formula.fixed_only().text,
            "elapsed_s": elapsed,
            "versions": engine_versions(),
            "fallback": True,
        },
    )
