"""Models: R ordinal::clmm/clm and lme4::glmer (R in a separate process through rbridge; the
optional pymer4 engine when installed), statsmodels fallbacks, pairwise contrasts with Holm
adjustment, and the A/B preference model.

Pinned references:
- ordinal's ``wine`` data: clmm(rating ~ temp + contact + (1|judge)) -> tempwarm 3.063,
  contactyes 1.835, judge variance 1.279; clm(rating ~ temp + contact) -> tempwarm 2.503,
  contactyes 1.528 (ordinal's documentation / Christensen's tutorial).
- lme4's ``cbpp`` example: glmer(cbind(incidence, size - incidence) ~ period + (1 | herd))
  -> (Intercept) -1.3983, period2 -0.9919, period3 -1.1282, period4 -1.5797, herd var 0.4123.
The data sets are embedded below (so the fallback tests run without R) and checked against R's
own copies when R is available. The R worker starts once per process (rbridge keeps it); the
bridge itself is tested in test_rbridge.py.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
import threading

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from analysis.stats import models as M
from analysis.stats import rbridge as rb

R_OK = rb.r_available()
needs_r = pytest.mark.skipif(not R_OK, reason=f"R unavailable: {rb.r_unavailable_reason()}")
HAS_PYMER4 = importlib.util.find_spec("pymer4") is not None
needs_pymer4 = pytest.mark.skipif(
    not HAS_PYMER4, reason="pymer4 is not installed: it is optional and not installed by default "
    "(it embeds R, GPL, in the Python process through rpy2); the R engine is tested instead")

# ordinal::wine: 9 judges x 8 bottles; bottles 1-4 cold, 5-8 warm; contact no for 1,2,5,6.
_WINE_RATINGS = "233444551213235423325544323232532343333332322454112223232223333412323244"


def make_wine() -> pd.DataFrame:
    judge = np.repeat(np.arange(1, 10), 8)
    bottle = np.tile(np.arange(1, 9), 9)
    return pd.DataFrame({
        "rating": [int(c) for c in _WINE_RATINGS],
        "temp": np.where(bottle <= 4, "cold", "warm"),
        "contact": np.where(np.isin(bottle, [3, 4, 7, 8]), "yes", "no"),
        "bottle": bottle,
        "judge": judge,
    })


_CBPP = {
    "herd": [1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8,
             9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14,
             14, 14, 15, 15, 15, 15],
    "incidence": [2, 3, 4, 0, 3, 1, 1, 8, 2, 0, 2, 2, 0, 2, 0, 5, 0, 0, 1, 3, 0, 0, 1, 8, 1, 3,
                  0, 12, 2, 0, 0, 0, 1, 1, 0, 2, 0, 5, 3, 1, 2, 1, 0, 0, 1, 2, 0, 0, 11, 0, 0,
                  0, 1, 1, 1, 0],
    "size": [14, 12, 9, 5, 22, 18, 21, 22, 16, 16, 20, 10, 10, 9, 6, 18, 25, 24, 4, 17, 17, 18,
             20, 16, 10, 9, 5, 34, 9, 6, 8, 6, 22, 22, 18, 22, 25, 27, 22, 22, 10, 8, 6, 5, 21,
             24, 19, 23, 19, 2, 3, 2, 19, 15, 15, 15],
    "period": [1, 2, 3, 4, 1, 2, 3, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4,
               1, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2,
               3, 4],
}


def make_cbpp() -> pd.DataFrame:
    # period is a factor in R's cbpp; numeric columns would be covariates here
    return pd.DataFrame(_CBPP).astype({"period": str})


def expand_bernoulli(cbpp: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r in cbpp.itertuples():
        rows += [(r.herd, r.period, 1)] * r.incidence
        rows += [(r.herd, r.period, 0)] * (r.size - r.incidence)
    return pd.DataFrame(rows, columns=["herd", "period", "y"])


WINE_CLM_R = {  # summary(clm(rating ~ temp + contact, data = wine)), R 4.2.2, ordinal 2022.11-16
    "tempwarm": (2.5031, 0.5287), "contactyes": (1.5278, 0.4766),
    "1|2": (-1.3444, 0.5171), "2|3": (1.2508, 0.4379), "3|4": (3.4669, 0.5978),
    "4|5": (5.0064, 0.7309),
}
CBPP_PUBLISHED = {"(Intercept)": -1.3983, "period2": -0.9919, "period3": -1.1282,
                  "period4": -1.5797}


@pytest.fixture(scope="module")
def wine() -> pd.DataFrame:
    return make_wine()


def _r_eval(code: str, *args):
    """Reference R code (a function definition) run in the R worker."""
    return rb.r_call(code, *args)


def _named(values: dict) -> dict[str, float]:
    """An R named list of numbers (``as.list(c(...))``) -> {name: float}."""
    return {str(k): float(v[0]) for k, v in values.items()}


# --------------------------------------------------------------------------------------------
# rbridge (the bridge's own tests are in test_rbridge.py)


def test_r_available_never_raises_and_versions():
    assert isinstance(rb.r_available(), bool)
    v = rb.r_versions()
    for key in ("R", "ordinal", "lme4", "jsonlite", "bridge", "statsmodels"):
        assert key in v
    assert "rpy2" not in v and ("pymer4" in v) == HAS_PYMER4
    if R_OK:
        assert v["R"] and v["ordinal"] and v["lme4"] and v["jsonlite"]
        assert "-" in v["ordinal"]  # DESCRIPTION version, e.g. 2022.11-16


def test_factor_levels_order_and_reference():
    s = pd.Series([10, 2, 3, 2, None])
    assert rb.factor_levels(s) == ["2", "3", "10"]  # numeric order, not string order
    assert rb.factor_levels(s, reference=10) == ["10", "2", "3"]
    assert rb.factor_levels(pd.Series(["b", "a", "c"]), levels=["c", "b", "a", "z"]) == [
        "c", "b", "a"]  # unobserved levels dropped
    cat = pd.Series(pd.Categorical(["x", "y"], categories=["y", "x", "w"]))
    assert rb.factor_levels(cat) == ["y", "x"]
    with pytest.raises(ValueError):
        rb.factor_levels(pd.Series(["a", "q"]), levels=["a"])
    with pytest.raises(ValueError):
        rb.factor_levels(pd.Series(["a"]), reference="b")
    assert rb.level_label(4.0) == "4" and rb.level_label(2.5) == "2.5"


@needs_r
def test_embedded_data_equal_r_copies(wine):
    rw = _r_eval('function() { e <- new.env(); data(wine, package = "ordinal", envir = e); '
                 'as.integer(as.character(e$wine$rating)) }')
    assert list(rw) == list(wine["rating"])
    rc = _r_eval("function() lme4::cbpp$incidence")
    assert list(rc) == _CBPP["incidence"]


@needs_r
def test_concurrent_fits_agree(wine):
    # Threads share one R worker; rbridge serialises their requests (see test_rbridge.py).
    results, errors = [], []

    def work():
        try:
            results.append(M.fit_clm(wine, "rating ~ temp + contact").estimates())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    assert len(results) == 4 and all(r == results[0] for r in results)


# --------------------------------------------------------------------------------------------
# ordinal models


@needs_r
def test_clmm_wine_matches_r_and_published(wine):
    fit = M.fit_clmm(wine, "rating ~ temp + contact + (1|judge)")
    ref = _r_eval(
        # the documented R usage, on R's own copy of the data (in R's global environment)
        'function() { data(wine, package = "ordinal", envir = globalenv()); '
        "m <- ordinal::clmm(rating ~ temp + contact + (1|judge), data = wine); "
        "s <- summary(m)$coefficients; "
        "as.list(c(s[, 1], setNames(s[, 2], paste0('se:', rownames(s))), "
        "judge = as.numeric(ordinal::VarCorr(m)$judge))) }")
    r = _named(ref)
    for term in ("tempwarm", "contactyes"):
        c = fit.coefficient(term)
        assert c.estimate == pytest.approx(r[term], abs=1e-6)
        assert c.se == pytest.approx(r[f"se:{term}"], abs=1e-6)
        assert c.ci_low == pytest.approx(c.estimate - 1.959964 * c.se, abs=1e-5)
    for t in fit.thresholds:
        assert t.estimate == pytest.approx(r[t.term], abs=1e-6) and t.p_value is None
    assert fit.random_effects["judge"] == pytest.approx(r["judge"], abs=1e-6)
    # published values (ordinal documentation), to 3 decimals
    assert round(fit.coefficient("tempwarm").estimate, 3) == 3.063
    assert round(fit.coefficient("contactyes").estimate, 3) == 1.835
    assert round(fit.random_effects["judge"], 3) == 1.279
    assert fit.coefficient("tempwarm").p_value == pytest.approx(2.68e-7, rel=1e-2)
    assert [t.term for t in fit.thresholds] == ["1|2", "2|3", "3|4", "4|5"]
    assert fit.converged and fit.warnings == [] and fit.n_obs == 72
    assert fit.extra["n_groups"] == {"judge": 9}
    assert fit.engine.startswith("R ordinal::clmm 2") and "via Rscript" in fit.engine
    assert fit.extra["reference"] == {"temp": "cold", "contact": "no"}


@needs_r
def test_clm_wine_and_nominal_test(wine):
    fit = M.fit_clm(wine, "rating ~ temp + contact")
    ref = _r_eval(
        'function() { data(wine, package = "ordinal", envir = globalenv()); '
        "m <- ordinal::clm(rating ~ temp + contact, data = wine); "
        "nt <- ordinal::nominal_test(m); "
        "as.list(c(coef(m), lrt = nt$LRT[-1], p = nt[-1, 5])) }")
    r = _named(ref)
    for c in [*fit.coefficients, *fit.thresholds]:
        assert c.estimate == pytest.approx(r[c.term], abs=1e-8)
    assert round(fit.coefficient("tempwarm").estimate, 3) == 2.503
    assert round(fit.coefficient("contactyes").estimate, 3) == 1.528
    for term, (est, se) in WINE_CLM_R.items():
        assert fit.coefficient(term).estimate == pytest.approx(est, abs=1e-4)
        assert fit.coefficient(term).se == pytest.approx(se, abs=1e-4)
    nt = {row["term"]: row for row in fit.extra["nominal_test"]}
    assert nt["temp"]["lrt"] == pytest.approx(r["lrt1"], abs=1e-8)
    assert nt["contact"]["p_value"] == pytest.approx(r["p2"], abs=1e-8)
    assert nt["temp"]["df"] == 3 and round(nt["temp"]["p_value"], 4) == 0.3654
    assert fit.extra["proportional_odds_violations"] == []
    assert fit.engine.startswith("R ordinal::clm ")


@needs_r
def test_clmm_default_formula_reference_and_contrasts_vs_emmeans():
    rng = np.random.default_rng(5)
    n_r, n_i = 15, 20
    rows = [(f"r{r}", f"i{i}", s) for r in range(n_r) for i in range(n_i) for s in "ABC"
            if rng.random() < 0.5]
    df = pd.DataFrame(rows, columns=["rater", "item", "system"])
    u = dict(zip([f"r{r}" for r in range(n_r)], rng.normal(0, 0.8, n_r), strict=True))
    v = dict(zip([f"i{i}" for i in range(n_i)], rng.normal(0, 0.8, n_i), strict=True))
    lat = (df.system.map({"A": 0.0, "B": 1.0, "C": 0.6}) + df.rater.map(u) + df.item.map(v)
           + rng.logistic(size=len(df)))
    df["rating"] = np.digitize(lat, [-1, 0, 1, 2]) + 1
    fit = M.fit_clmm(df)
    assert [c.term for c in fit.coefficients] == ["systemB", "systemC"]
    assert set(fit.random_effects) == {"rater", "item"}
    assert fit.extra["levels"]["system"] == ["A", "B", "C"]
    refit = M.fit_clmm(df, reference="C")
    assert [c.term for c in refit.coefficients] == ["systemA", "systemB"]
    assert refit.coefficient("systemA").estimate == pytest.approx(
        -fit.coefficient("systemC").estimate, abs=1e-3)

    pc = M.pairwise_contrasts(fit)
    assert [c.label for c in pc.contrasts] == ["A - B", "A - C", "B - C"]
    rdf = rb.RFrame(df[["rating", "system", "rater", "item"]],
                    levels={"system": ["A", "B", "C"]}, ordered=["rating"])
    em = _r_eval(
        "function(d) { m <- ordinal::clmm(rating ~ system + (1|rater) + (1|item), data = d);"
        " x <- as.data.frame(pairs(emmeans::emmeans(m, ~ system, mode = 'latent'),"
        " adjust = 'holm')); list(x$estimate, x$SE, x$p.value) }", rdf)
    for c, e, s, p in zip(pc.contrasts, em[0], em[1], em[2], strict=True):
        assert c.estimate == pytest.approx(e, abs=1e-6)
        assert c.se == pytest.approx(s, abs=1e-6)
        assert c.p_adjusted == pytest.approx(p, rel=1e-5, abs=1e-12)


def test_clm_fallback_matches_r_clm(wine):
    fit = M.fit_clm(wine, "rating ~ temp + contact", engine="statsmodels")
    assert "statsmodels" in fit.engine and "OrderedModel" in fit.engine
    assert fit.extra["fallback"] is True and fit.converged
    for term, (est, se) in WINE_CLM_R.items():
        assert fit.coefficient(term).estimate == pytest.approx(est, abs=1e-3)
        assert fit.coefficient(term).se == pytest.approx(se, abs=1e-3)
    assert fit.extra["nominal_test"] is None
    if R_OK:
        r = M.fit_clm(wine, "rating ~ temp + contact")
        for a, b in zip(r.coefficients + r.thresholds, fit.coefficients + fit.thresholds,
                        strict=True):
            assert a.term == b.term
            assert a.estimate == pytest.approx(b.estimate, abs=1e-3)
            assert a.se == pytest.approx(b.se, abs=1e-3)
            assert (a.p_value or 0) == pytest.approx(b.p_value or 0, abs=1e-3)


def test_clmm_fallback_drops_random_effects_and_says_so(wine):
    fit = M.fit_clmm(wine, "rating ~ temp + contact + (1|judge)", engine="statsmodels")
    assert fit.random_effects == {}
    assert M.RANDOM_EFFECTS_DROPPED in fit.warnings
    assert json.loads(json.dumps(fit.to_dict()))["engine"] == fit.engine  # plain data
    assert "fixed effects only" in fit.engine
    assert fit.coefficient("tempwarm").estimate == pytest.approx(2.5031, abs=1e-3)
    rev = M.fit_clmm(wine, "rating ~ temp + contact + (1|judge)",
                     reference={"temp": "warm"}, engine="statsmodels")
    assert rev.coefficient("tempcold").estimate == pytest.approx(-2.5031, abs=1e-3)


def test_auto_engine_falls_back_when_r_unavailable(wine, monkeypatch):
    monkeypatch.setattr(rb, "r_available", lambda: False)
    monkeypatch.setattr(rb, "r_unavailable_reason", lambda: "test")
    fit = M.fit_clmm(wine, "rating ~ temp + contact + (1|judge)")
    assert fit.extra["fallback"] and "statsmodels" in fit.engine
    with pytest.raises(rb.RUnavailableError):
        M.fit_clmm(wine, "rating ~ temp + contact + (1|judge)", engine="R")
    g = M.fit_binomial_glmm(expand_bernoulli(make_cbpp()), "y ~ period + (1|herd)")
    assert "NOT glmer" in g.engine


def test_bad_inputs():
    df = pd.DataFrame({"y": [0, 2, 1], "system": ["a", "b", "a"]})
    with pytest.raises(ValueError):
        M.fit_binomial_glmm(df, "y ~ system", engine="statsmodels")
    with pytest.raises(ValueError):
        M.fit_clm(make_wine(), "rating ~ temp + (1|judge)")
    with pytest.raises(ValueError):
        M.fit_clm(make_wine(), "rating ~ temp", reference="A")  # no system column used
    text = pd.DataFrame({"rating": ["good", "bad", "good"], "system": ["a", "b", "b"]})
    with pytest.raises(ValueError, match="text values"):
        M.fit_clm(text, engine="statsmodels")  # alphabetical order would be a silent error


# --------------------------------------------------------------------------------------------
# binomial GLMM


@needs_r
def test_glmer_cbpp_published_values():
    # lme4's example is cbind(incidence, size - incidence); formulas hold no arithmetic (see
    # analysis/stats/formula.py), so the failures are a column of their own.
    cbpp = make_cbpp().assign(failures=lambda d: d["size"] - d["incidence"])
    fit = M.fit_binomial_glmm(cbpp, "cbind(incidence, failures) ~ period + (1 | herd)",
                              engine="R")
    for term, value in CBPP_PUBLISHED.items():
        assert round(fit.coefficient(term).estimate, 4) == value
    assert round(fit.random_effects["herd"], 4) == 0.4123
    assert fit.coefficient("period2").se == pytest.approx(0.3032, abs=1e-4)
    assert fit.n_obs == 56 and fit.converged and fit.extra["n_groups"] == {"herd": 15}
    assert fit.engine.startswith("R lme4::glmer 1")
    assert fit.extra["odds_ratios"]["period2"]["odds_ratio"] == pytest.approx(
        math.exp(-0.9919), abs=1e-3)


@needs_r
def test_glmer_bernoulli_rows_match_cbind_fit():
    long = expand_bernoulli(make_cbpp())
    assert len(long) == sum(_CBPP["size"])
    fit = M.fit_binomial_glmm(long, "y ~ period + (1|herd)")  # auto -> lme4::glmer in R
    assert fit.engine.startswith("R lme4::glmer 1") and "via Rscript" in fit.engine
    for term, value in CBPP_PUBLISHED.items():
        c = fit.coefficient(term)
        assert c.estimate == pytest.approx(value, abs=2e-4)
        assert c.odds_ratio == pytest.approx(math.exp(c.estimate))
        lo, hi = fit.extra["odds_ratios"][term]["ci_low"], fit.extra["odds_ratios"][term]["ci_high"]
        assert lo == pytest.approx(math.exp(c.ci_low)) and hi == pytest.approx(math.exp(c.ci_high))
    assert fit.random_effects["herd"] == pytest.approx(0.4123, abs=2e-4)
    assert fit.coefficient("period2").se == pytest.approx(0.3032, abs=2e-4)
    direct = M.fit_binomial_glmm(long, "y ~ period + (1|herd)", engine="R")
    for a, b in zip(fit.coefficients, direct.coefficients, strict=True):
        assert a.estimate == pytest.approx(b.estimate, abs=1e-6)
        assert a.se == pytest.approx(b.se, abs=1e-6)
    assert fit.n_obs == 842 and fit.converged
    assert 0 < fit.extra["r_seconds"] <= fit.extra["elapsed_s"]


@needs_r
@needs_pymer4
def test_pymer4_engine_matches_r_engine():
    long = expand_bernoulli(make_cbpp())
    fit = M.fit_binomial_glmm(long, "y ~ period + (1|herd)", engine="pymer4")
    assert fit.engine.startswith("pymer4 0.8") and "glmer" in fit.engine
    direct = M.fit_binomial_glmm(long, "y ~ period + (1|herd)", engine="R")
    for a, b in zip(fit.coefficients, direct.coefficients, strict=True):
        assert a.term == b.term
        assert a.estimate == pytest.approx(b.estimate, abs=1e-6)
        assert a.se == pytest.approx(b.se, abs=1e-6)
    assert fit.random_effects["herd"] == pytest.approx(direct.random_effects["herd"], abs=1e-6)
    assert fit.n_obs == 842 and fit.converged and fit.extra["n_groups"] == {"herd": 15}


@needs_r
def test_pymer4_engine_without_pymer4_says_it_is_optional(monkeypatch):
    # None in sys.modules makes the import fail as if pymer4 were not installed.
    monkeypatch.setitem(sys.modules, "pymer4", None)
    monkeypatch.setitem(sys.modules, "pymer4.models", None)
    long = expand_bernoulli(make_cbpp())
    with pytest.raises(ImportError, match="optional") as caught:
        M.fit_binomial_glmm(long, "y ~ period + (1|herd)", engine="pymer4")
    assert "rpy2" in str(caught.value) and "engine='auto' or 'R'" in str(caught.value)
    # auto never needs it
    assert M.fit_binomial_glmm(long, "y ~ period + (1|herd)").engine.startswith("R lme4")


def test_glmm_fallback_is_labelled():
    fit = M.fit_binomial_glmm(expand_bernoulli(make_cbpp()), "y ~ period + (1|herd)",
                              engine="statsmodels")
    assert "NOT glmer" in fit.engine and "cluster-robust" in fit.engine
    assert fit.random_effects == {} and fit.extra["fallback"]
    assert fit.extra["cluster_by"] == ["herd"]
    assert any("NOT glmer" in w for w in fit.warnings)
    # marginal log-odds: same sign as glmer's
    assert all(fit.coefficient(t).estimate < 0 for t in CBPP_PUBLISHED)


@needs_r
def test_glmm_two_crossed_effects_and_contrasts_vs_emmeans():
    rng = np.random.default_rng(3)
    rows = [(f"r{r}", f"i{i}", s) for r in range(20) for i in range(30) for s in "ABC"
            if rng.random() < 0.4]
    df = pd.DataFrame(rows, columns=["rater", "item", "system"])
    u = {f"r{r}": x for r, x in enumerate(rng.normal(0, 0.7, 20))}
    v = {f"i{i}": x for i, x in enumerate(rng.normal(0, 1.0, 30))}
    eta = df.system.map({"A": 0.0, "B": 0.8, "C": 0.3}) + df.rater.map(u) + df.item.map(v)
    df["y"] = (rng.random(len(df)) < 1 / (1 + np.exp(-eta))).astype(int)
    fit = M.fit_binomial_glmm(df, engine="R")
    assert set(fit.random_effects) == {"rater", "item"}
    pc = M.pairwise_contrasts(fit)
    em = _r_eval(
        "function(d) { m <- lme4::glmer(y ~ system + (1|rater) + (1|item), data = d,"
        " family = binomial); x <- as.data.frame(pairs(emmeans::emmeans(m, ~ system),"
        " adjust = 'holm')); list(x$estimate, x$SE, x$p.value) }",
        rb.RFrame(df, levels={"system": ["A", "B", "C"]}))
    for c, e, s, p in zip(pc.contrasts, em[0], em[1], em[2], strict=True):
        assert c.estimate == pytest.approx(e, abs=1e-6)
        assert c.se == pytest.approx(s, abs=1e-6)
        assert c.p_adjusted == pytest.approx(p, rel=1e-5, abs=1e-12)


# --------------------------------------------------------------------------------------------
# Holm and pairwise contrasts


def test_holm_hand_example():
    # sorted p: 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone: 0.03, 0.06, 0.06
    assert M.holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert M.holm_adjust([0.001, 0.02, 0.03, 0.5]) == pytest.approx([0.004, 0.06, 0.06, 0.5])
    # 0.5 * 2 = 1.0, then max(1.0, 0.9 * 1) = 1.0: capped at 1 and monotone
    assert M.holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert M.holm_adjust([]) == []


def _fake_fit() -> M.ModelFit:
    return M.ModelFit(
        formula="y ~ system", engine="test", family="binomial", link="logit", n_obs=100,
        coefficients=[M.Coefficient("(Intercept)", 0.1, 0.1, 0, 0, 0.3),
                      M.Coefficient("systemB", 1.0, 0.2, 0, 0, 0.0),
                      M.Coefficient("systemC", 0.4, 0.3, 0, 0, 0.2)],
        extra={"levels": {"system": ["A", "B", "C"]}, "conf_level": 0.95,
               "vcov": {"terms": ["(Intercept)", "systemB", "systemC"],
                        "matrix": [[0.01, 0.0, 0.0], [0.0, 0.04, 0.01], [0.0, 0.01, 0.09]]}},
    )


def test_pairwise_contrasts_from_covariance():
    pc = M.pairwise_contrasts(_fake_fit())
    by = {c.label: c for c in pc.contrasts}
    assert by["A - B"].estimate == pytest.approx(-1.0) and by["A - B"].se == pytest.approx(0.2)
    assert by["A - C"].estimate == pytest.approx(-0.4) and by["A - C"].se == pytest.approx(0.3)
    # Var(B - C) = 0.04 + 0.09 - 2 * 0.01
    assert by["B - C"].estimate == pytest.approx(0.6)
    assert by["B - C"].se == pytest.approx(math.sqrt(0.11))
    z = [-5.0, -0.4 / 0.3, 0.6 / math.sqrt(0.11)]
    p = [2 * sps.norm.sf(abs(x)) for x in z]
    assert [c.p_value for c in pc.contrasts] == pytest.approx(p)
    assert [c.p_adjusted for c in pc.contrasts] == pytest.approx(
        list(multipletests(p, method="holm")[1]))
    # by hand: p sorted ascending: p1 * 3, then max(prev, p3 * 2), then max(prev, p2 * 1)
    order = np.argsort(p)
    hand = np.empty(3)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, p[i] * (3 - rank)))
        hand[i] = running
    assert [c.p_adjusted for c in pc.contrasts] == pytest.approx(list(hand))
    assert by["A - B"].ci_low == pytest.approx(-1.0 - 1.959964 * 0.2, abs=1e-6)
    with pytest.raises(ValueError):
        M.pairwise_contrasts(_fake_fit(), factor="temp")


def test_pairwise_contrasts_on_dataframe_fallback():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"system": np.repeat(["x", "y", "z"], 200),
                       "rater": np.tile(np.arange(20), 30), "item": np.tile(np.arange(40), 15)})
    df["y"] = (rng.random(len(df)) < np.where(df.system == "z", 0.8, 0.5)).astype(int)
    pc = M.pairwise_contrasts(df, engine="statsmodels")
    assert len(pc.contrasts) == 3 and "NOT glmer" in pc.engine
    by = {c.label: c for c in pc.contrasts}
    assert by["x - z"].p_adjusted < 0.001 and by["x - z"].estimate < 0


# --------------------------------------------------------------------------------------------
# preferences


def test_preference_model_hand_example():
    # A left vs B right: A chosen 30 of 40; B left vs A right: B (left) chosen 20 of 40.
    rows = ([("A", "B", "A")] * 30 + [("A", "B", "B")] * 10
            + [("B", "A", "A")] * 20 + [("B", "A", "B")] * 20 + [("A", "B", "tie")] * 10)
    df = pd.DataFrame(rows, columns=["left_system", "right_system", "choice"])
    res = M.preference_model(df)
    lg = math.log(0.75 / 0.25)
    pos = res.position_ties_excluded
    # saturated model: pos - b = logit(.75), pos + b = logit(.5) = 0
    assert pos.estimate == pytest.approx(lg / 2, abs=1e-6)
    assert res.ties_excluded.coefficient("systemB").estimate == pytest.approx(-lg / 2, abs=1e-6)
    se = math.sqrt((1 / (40 * 0.75 * 0.25) + 1 / (40 * 0.25)) / 4)
    assert pos.se == pytest.approx(se, abs=1e-6)
    assert res.ties_excluded.n_obs == 80 and res.ties_half.n_obs == 90 and res.n_ties == 10
    shares = {s.system: s for s in res.shares}
    a = shares["A"]
    assert (a.wins, a.losses, a.ties, a.n) == (50, 30, 10, 90)
    assert a.share_ties_excluded == pytest.approx(50 / 80)
    assert a.share_ties_half == pytest.approx(55 / 90)
    from analysis.stats.descriptives import wilson_ci

    assert a.ci_ties_excluded == pytest.approx(wilson_ci(50, 80))
    assert a.ci_ties_half == pytest.approx(wilson_ci(55, 90))
    assert res.extra["left_share_ties_excluded"]["share"] == pytest.approx(50 / 80)
    assert res.extra["left_share_ties_excluded"]["binomial_test_p"] == pytest.approx(
        sps.binomtest(50, 80, 0.5).pvalue)
    # ties as half: the tie rows pull P(left) towards 0.5
    assert 0 < res.position_ties_half.estimate < pos.estimate
    # separation is flagged, not hidden
    tiny = pd.DataFrame([("A", "B", "A"), ("B", "A", "tie"), ("A", "B", "B"), ("B", "A", "A")],
                        columns=["left_system", "right_system", "choice"])
    sep = M.preference_model(tiny)
    assert not sep.ties_excluded.converged and sep.ties_excluded.warnings


def test_preference_model_recovers_position_bias():
    rng = np.random.default_rng(1)
    strength = {"base": 0.0, "s1": 0.5, "s2": 1.0, "s3": 0.0}
    systems = list(strength)
    rows = []
    for i in range(3000):
        a, b = rng.choice(systems, 2, replace=False)
        p_left = 1 / (1 + math.exp(-(0.4 + strength[a] - strength[b])))
        c = "tie" if rng.random() < 0.1 else ("A" if rng.random() < p_left else "B")
        rows.append((a, b, c, f"r{i % 25}"))
    df = pd.DataFrame(rows, columns=["left_system", "right_system", "choice", "rater"])
    res = M.preference_model(df, cluster="rater")
    pos = res.position_ties_excluded
    assert pos.ci_low < 0.4 < pos.ci_high and pos.p_value < 1e-6
    fit = res.ties_excluded
    assert fit.coefficient("systems2").ci_low < 1.0 < fit.coefficient("systems2").ci_high
    assert "cluster-robust" in fit.engine
    pc = M.pairwise_contrasts(fit)
    assert len(pc.contrasts) == 6
    with pytest.raises(ValueError):
        M.preference_model(df.assign(choice="maybe"))


# --------------------------------------------------------------------------------------------
# separation: a fit's warnings follow the contrasts; the penalised fit


def make_separated() -> pd.DataFrame:
    """Three systems judged by 12 raters on 20 items (each rater sees each item in one
    system), system C at 100% "yes"; A and B follow a deterministic pattern with item and
    rater effects. Built exactly as the R code in ``test_penalised_fit_matches_bglmer_in_r``
    builds it (same rows, same order)."""
    rows = []
    for s_index, system in enumerate("ABC"):
        for rater in range(1, 13):
            for item in range(1, 21):
                if (item + rater) % 3 != s_index:
                    continue
                base = 4 if system == "A" else 7
                y = int((7 * item + 5 * rater) % 11
                        < base + 2 * (item % 4) - 3 + 2 * (rater % 3) - 2)
                rows.append((item, rater, system, 1 if system == "C" else y))
    return pd.DataFrame(rows, columns=["item", "rater", "system", "y"])


@needs_r
def test_separation_is_named_and_follows_the_contrasts():
    df = make_separated()
    assert df.groupby("system")["y"].mean().to_dict() == {"A": 0.4, "B": 0.625, "C": 1.0}
    fit = M.fit_binomial_glmm(df)
    # glmer's answer under separation: +21.9 with SE 274 (R: see the penalised test below)
    c = fit.coefficient("systemC")
    assert c.estimate > 15 and c.se > 100 and c.p_value > 0.9
    sep = fit.extra["separation"]
    assert sep["detected"] and not sep["penalised"]
    assert sep["levels"] == [{"factor": "system", "level": "C", "n": 80, "outcome": "all 1",
                              "term": "systemC"}]
    assert [t["term"] for t in sep["terms"]] == ["systemC"]
    assert any("separation: system 'C'" in w and "not an estimate" in w for w in fit.warnings)
    pc = M.pairwise_contrasts(fit)
    by = {k.label: k for k in pc.contrasts}
    # the defect: Holm's p_adj 1.00 for A - C, printed as if it were a finding
    assert by["A - C"].p_adjusted == pytest.approx(1.0)
    assert not by["A - C"].reliable and not by["B - C"].reliable
    assert "not estimable" in by["A - C"].flags[0] and "'C'" in by["A - C"].flags[0]
    assert not by["A - B"].reliable and "separation elsewhere" in by["A - B"].flags[0]
    assert pc.separation == sep and pc.estimation == "maximum likelihood"
    assert any(w.startswith("contrasts from a fit with separation ('C')") for w in pc.warnings)
    assert [w for w in pc.warnings if w.startswith("from the fit: ")] == [
        f"from the fit: {w}" for w in fit.warnings]
    as_json = json.loads(json.dumps(dataclasses.asdict(pc)))
    assert as_json["separation"]["levels"][0]["level"] == "C"
    assert as_json["contrasts"][1]["reliable"] is False and as_json["contrasts"][1]["flags"]


@needs_r
def test_penalised_fit_matches_bglmer_in_r():
    # Reference: blme 1.0-5 (lme4 1.1-31, R 4.2.2), run directly with Rscript:
    #   library(blme)
    #   d <- expand.grid(item = 1:20, rater = 1:12, system = c("A", "B", "C"))
    #   d <- d[(d$item + d$rater) %% 3 == as.integer(d$system) - 1, ]
    #   d$y <- as.integer((7 * d$item + 5 * d$rater) %% 11 <
    #                     ifelse(d$system == "A", 4, 7) + 2 * (d$item %% 4) - 3 +
    #                     2 * (d$rater %% 3) - 2)
    #   d$y[d$system == "C"] <- 1L
    #   d$rater <- factor(d$rater); d$item <- factor(d$item)
    #   b <- bglmer(y ~ system + (1|rater) + (1|item), data = d, family = binomial,
    #               fixef.prior = normal(sd = c(10, 2.5)), cov.prior = NULL)
    #   fixef(b); sqrt(diag(vcov(b))); as.data.frame(VarCorr(b))$vcov
    # (glmer on the same data: systemC 21.8762148, SE 273.6756785, p 0.936)
    # bglmer itself is not bit-reproducible between R processes (same answer within one):
    # runs of this R code gave systemC 5.1927069068 or 5.1927068530, SE 1.0507525286 or
    # 1.0507590776; hence 1e-6 on estimates and 2e-5 on SEs and variances.
    reference = {"(Intercept)": (-0.4007828983, 0.2918818178),
                 "systemB": (0.9634978547, 0.3489922614),
                 "systemC": (5.1927069068, 1.0507525286)}
    if not rb.r_call("function() requireNamespace('blme', quietly = TRUE)")[0]:
        pytest.skip("R package blme not installed (Debian: r-cran-blme)")
    fit = M.fit_binomial_penalised(make_separated())
    assert fit.engine.startswith("R blme::bglmer 1.0-5 ") and "SD 10 intercept" in fit.engine
    for term, (est, se) in reference.items():
        assert fit.coefficient(term).estimate == pytest.approx(est, abs=1e-6)
        assert fit.coefficient(term).se == pytest.approx(se, abs=2e-5)
    assert fit.random_effects["item"] == pytest.approx(0.41259936752, abs=2e-5)
    assert fit.random_effects["rater"] == pytest.approx(0.07818355687, abs=2e-5)
    assert fit.extra["estimation"] == "penalised maximum likelihood"
    assert fit.extra["penalty"]["intercept_sd"] == 10 and fit.extra["penalty"]["coef_sd"] == 2.5
    sep = fit.extra["separation"]
    assert sep["detected"] and sep["penalised"] and sep["terms"] == []  # finite, sane
    assert any("reflect the prior" in w for w in fit.warnings)
    pc = M.pairwise_contrasts(fit)
    by = {k.label: k for k in pc.contrasts}
    assert pc.estimation == "penalised maximum likelihood"
    assert all(k.reliable for k in pc.contrasts) and by["A - C"].p_adjusted < 0.001
    assert "penalised estimate" in by["A - C"].flags[0] and by["A - B"].flags == []


@needs_r
def test_penalised_fixed_effects_only_is_brglm2():
    df = make_separated()
    if not rb.r_call("function() requireNamespace('brglm2', quietly = TRUE)")[0]:
        pytest.skip("R package brglm2 not installed (Debian: r-cran-brglm2)")
    fit = M.fit_binomial_penalised(df, "y ~ system")
    ref = _named(_r_eval(
        "function(d) as.list(coef(suppressWarnings(glm(y ~ system, data = d,"
        " family = binomial('logit'), method = brglm2::brglmFit, type = 'AS_mean'))))",
        rb.RFrame(df[["y", "system"]], levels={"system": ["A", "B", "C"]})))
    for term, value in ref.items():
        assert fit.coefficient(term).estimate == pytest.approx(value, abs=1e-8)
    # Firth's estimate for a 80/80 level: log((80.5 / 0.5) / odds(A)), finite
    assert 3 < fit.coefficient("systemC").estimate < 8
    assert "brglm2::brglmFit" in fit.engine and fit.extra["penalty"]["coef_sd"] is None
    assert not any("non-integer" in w for w in fit.warnings)  # brglmFit's artefact, dropped


def test_separation_in_the_fallback_and_ordinal_fits():
    # statsmodels' logistic regression (no R): the same level check names the level
    fit = M.fit_binomial_glmm(make_separated(), engine="statsmodels")
    assert fit.extra["separation"]["levels"][0]["level"] == "C"
    assert any("separation: system 'C'" in w for w in fit.warnings)
    # an ordinal model: a system whose ratings are all in the top category
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"system": np.repeat(["A", "B", "C"], 40),
                       "rating": rng.integers(1, 6, 120)})
    df.loc[df.system == "C", "rating"] = 5
    clm = M.fit_clm(df, engine="statsmodels", nominal_test=False)
    lv = clm.extra["separation"]["levels"]
    assert lv == [{"factor": "system", "level": "C", "n": 40,
                   "outcome": "all in the highest category (5)", "term": "systemC"}]
    assert "no penalised ordinal model" in clm.extra["separation"]["remedy"]


def test_contrasts_carry_the_fit_warnings():
    fit = _fake_fit()
    fit.warnings = ["boundary (singular) fit: see help('isSingular')"]
    pc = M.pairwise_contrasts(fit)
    assert pc.warnings == ["from the fit: boundary (singular) fit: see help('isSingular')"]
    assert pc.fit_converged and pc.separation is None
    assert all(c.reliable and c.flags == [] for c in pc.contrasts)
    fit.converged = False
    pc = M.pairwise_contrasts(fit)
    assert not pc.fit_converged and all(not c.reliable for c in pc.contrasts)
    assert all("did not converge" in c.flags[0] for c in pc.contrasts)


def test_separation_report_says_which_fit_is_which():
    fit = _fake_fit()
    fit.extra["separation"] = {"detected": True, "penalised": False, "diagnosis": "d",
                               "levels": [], "terms": []}
    pen = _fake_fit()
    pen.engine = "R blme::bglmer"
    pen.extra["estimation"] = "penalised maximum likelihood"
    report = M.separation_report(fit, penalised=pen, penalised_key="glmm_penalised")
    assert report["read"] == "glmm_penalised" and report["penalised_fit"] == "fitted"
    assert set(report["fits"]) == {"glmm", "glmm_penalised"}
    assert report["fits"]["glmm_penalised"]["estimation"] == "penalised maximum likelihood"
    alone = M.separation_report(fit, option="off")
    assert alone["read"] == "glmm" and alone["penalised_fit"] == "not requested"
    assert M.wants_penalised(fit, "auto") and not M.wants_penalised(fit, "off")
    with pytest.raises(ValueError):
        M.wants_penalised(fit, "sometimes")


# --------------------------------------------------------------------------------------------
# proportional odds: a test that could not run says so


def make_unobserved_categories() -> pd.DataFrame:
    """Three systems; C never rated 1 or 2, so nominal_test's model for `system` (thresholds
    per system) cannot converge; `x` is a covariate it can test."""
    rng = np.random.default_rng(2)
    system = np.repeat(["A", "B", "C"], 60)
    latent = pd.Series(system).map({"A": 0.0, "B": 0.5, "C": 1.5}).to_numpy()
    rating = np.digitize(latent + rng.logistic(size=180), [-1, 0, 1, 2]) + 1
    rating[(system == "C") & (rating < 3)] = 3
    return pd.DataFrame({"system": system, "rating": rating, "x": rng.normal(size=180)})


@needs_r
def test_nominal_test_that_could_not_run_says_why():
    fit = M.fit_clm(make_unobserved_categories(), "rating ~ system")
    row = next(r for r in fit.extra["nominal_test"] if r["term"] == "system")
    assert row["lrt"] is None and row["tested"] is False
    status = fit.extra["nominal_test_status"]
    assert status["status"] == "not computed" and status["tested"] == []
    assert status["untested"][0]["term"] == "system"
    reason = status["untested"][0]["reason"]
    assert "did not converge" in reason and "'C' has no ratings in 1, 2" in reason
    assert status["reason"].startswith("system: ")
    # not "[]", which a report prints as "no violation"
    assert fit.extra["proportional_odds_violations"] is None
    assert any(w.startswith("proportional-odds check (nominal_test) could not be computed for "
                            "'system'") for w in fit.warnings)
    both = M.fit_clm(make_unobserved_categories(), "rating ~ system + x")
    status = both.extra["nominal_test_status"]
    assert status["status"] == "partial" and status["tested"] == ["x"]
    assert [u["term"] for u in status["untested"]] == ["system"]
    assert both.extra["proportional_odds_violations"] == []  # of the terms tested


def test_nominal_test_without_r_is_not_computed():
    fit = M.fit_clm(make_wine(), "rating ~ temp + contact", engine="statsmodels")
    status = fit.extra["nominal_test_status"]
    assert status["status"] == "not computed" and "statsmodels" in status["reason"]
    assert fit.extra["proportional_odds_violations"] is None
