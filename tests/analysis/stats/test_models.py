"""Models: R ordinal::clmm/clm, lme4::glmer (pymer4 and rpy2), statsmodels fallbacks,
pairwise contrasts with Holm adjustment, and the A/B preference model.

Pinned references:
- ordinal's ``wine`` data: clmm(rating ~ temp + contact + (1|judge)) -> tempwarm 3.063,
  contactyes 1.835, judge variance 1.279; clm(rating ~ temp + contact) -> tempwarm 2.503,
  contactyes 1.528 (ordinal's documentation / Christensen's tutorial).
- lme4's ``cbpp`` example: glmer(cbind(incidence, size - incidence) ~ period + (1 | herd))
  -> (Intercept) -1.3983, period2 -0.9919, period3 -1.1282, period4 -1.5797, herd var 0.4123.
The data sets are embedded below (so the fallback tests run without R) and checked against R's
own copies when R is available. R starts once per process (rbridge caches it).
"""

from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from analysis.stats import models as M
from analysis.stats import rbridge as rb

R_OK = rb.r_available()
needs_r = pytest.mark.skipif(not R_OK, reason=f"R unavailable: {rb.r_unavailable_reason()}")

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
    with rb.r_session():
        return rb.r_function(code)(*args)


def _named(vec) -> dict[str, float]:
    return {str(k): float(v) for k, v in zip(vec.names, vec, strict=True)}


# --------------------------------------------------------------------------------------------
# rbridge


def test_r_available_never_raises_and_versions():
    assert isinstance(rb.r_available(), bool)
    v = rb.r_versions()
    for key in ("R", "ordinal", "lme4", "rpy2", "pymer4", "statsmodels"):
        assert key in v
    if R_OK:
        assert v["R"] and v["ordinal"] and v["lme4"]
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
def test_to_r_dataframe_factors():
    df = pd.DataFrame({"rating": [1, 3, 2, 5, np.nan], "system": ["b", "a", "c", "a", None],
                       "rater": [10, 2, 3, 2, 2], "x": [0.1, 0.2, np.nan, 1, 2]})
    with rb.r_session() as s:
        rdf = rb.to_r_dataframe(df, levels={"system": ["c", "a", "b"], "rater": None},
                                ordered=["rating"])
        info = rb.r_function(
            "function(d) list(levels(d$system), is.ordered(d$rating), levels(d$rating), "
            "as.character(d$system), class(d$x), sum(is.na(d$x)), class(d$rater))")(rdf)
        back = rb.from_r_dataframe(rdf)
    assert list(info[0]) == ["c", "a", "b"]  # first level = reference level in R
    assert bool(info[1][0]) and list(info[2]) == ["1", "2", "3", "5"]
    assert list(info[3])[:4] == ["b", "a", "c", "a"]
    assert list(info[4]) == ["numeric"] and int(info[5][0]) == 1
    assert list(info[6]) == ["factor"]
    assert list(back["system"].cat.categories) == ["c", "a", "b"]
    assert s.console_text() == ""


@needs_r
def test_embedded_data_equal_r_copies(wine):
    rw = _r_eval('function() { e <- new.env(); data(wine, package = "ordinal", envir = e); '
                 'as.integer(as.character(e$wine$rating)) }')
    assert list(rw) == list(wine["rating"])
    rc = _r_eval("function() lme4::cbpp$incidence")
    assert list(rc) == _CBPP["incidence"]


@needs_r
def test_r_session_serialises_threads(wine):
    results, errors = [], []

    def work():
        try:
            results.append(M.fit_clm(wine, "rating ~ temp + contact").estimates())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    # a thread must wait while another holds the R lock
    entered = threading.Event()

    def blocked():
        with rb.r_session():
            entered.set()

    with rb.r_lock():
        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.2)
        assert not entered.is_set()
    t.join(5)
    assert entered.is_set()

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
        "c(s[, 1], setNames(s[, 2], paste0('se:', rownames(s))), "
        "judge = as.numeric(ordinal::VarCorr(m)$judge)) }")
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
    assert fit.engine.startswith("R ordinal::clmm 2") and "via rpy2" in fit.engine
    assert fit.extra["reference"] == {"temp": "cold", "contact": "no"}


@needs_r
def test_clm_wine_and_nominal_test(wine):
    fit = M.fit_clm(wine, "rating ~ temp + contact")
    ref = _r_eval(
        'function() { data(wine, package = "ordinal", envir = globalenv()); '
        "m <- ordinal::clm(rating ~ temp + contact, data = wine); "
        "nt <- ordinal::nominal_test(m); "
        "c(coef(m), lrt = nt$LRT[-1], p = nt[-1, 5]) }")
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
    with rb.r_session():
        rdf = rb.to_r_dataframe(df[["rating", "system", "rater", "item"]],
                                levels={"system": ["A", "B", "C"]}, ordered=["rating"])
        em = rb.r_function(
            "function(d) { m <- ordinal::clmm(rating ~ system + (1|rater) + (1|item), data = d);"
            " x <- as.data.frame(pairs(emmeans::emmeans(m, ~ system, mode = 'latent'),"
            " adjust = 'holm')); list(x$estimate, x$SE, x$p.value) }")(rdf)
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
    monkeypatch.setattr(M.rbridge, "r_available", lambda: False)
    monkeypatch.setattr(M.rbridge, "r_unavailable_reason", lambda: "test")
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
def test_pymer4_bernoulli_rows_match_cbind_fit():
    long = expand_bernoulli(make_cbpp())
    assert len(long) == sum(_CBPP["size"])
    fit = M.fit_binomial_glmm(long, "y ~ period + (1|herd)")  # auto -> pymer4
    assert fit.engine.startswith("pymer4 0.8") and "glmer" in fit.engine
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
    with rb.r_session():
        rdf = rb.to_r_dataframe(df, levels={"system": ["A", "B", "C"]})
        em = rb.r_function(
            "function(d) { m <- lme4::glmer(y ~ system + (1|rater) + (1|item), data = d,"
            " family = binomial); x <- as.data.frame(pairs(emmeans::emmeans(m, ~ system),"
            " adjust = 'holm')); list(x$estimate, x$SE, x$p.value) }")(rdf)
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
