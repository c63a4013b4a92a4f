"""Power by simulation: the analysis model refitted per simulated study (binomial GLMM, CLMM),
calibration under the null, monotonicity, reproducibility whatever the chunking, progress,
failed refits; the fast paired-t screen; the design search; pilots.

The refit tests run glmer in the R worker (about 0.05 s per refit of these small designs)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.special import expit

from analysis.stats import power as P
from analysis.stats import rbridge as rb

R_OK = rb.r_available()
needs_r = pytest.mark.skipif(not R_OK, reason=f"R unavailable: {rb.r_unavailable_reason()}")

BASE = {"n_raters": 30, "ratings_per_output": 3, "rater_sd": 1.0, "item_sd": 1.0}
# A small design for the refit tests: 12 raters, 16 items, 2 judgments per output (64 rows).
SMALL = {"n_raters": 12, "n_items": 16, "ratings_per_output": 2, "rater_sd": 0.5,
         "item_sd": 0.8}


def _without_time(result) -> dict:
    data = dataclasses.asdict(result)
    for key in ("elapsed_s", "seconds_per_simulation", "chunk_size", "n_chunks"):
        data.pop(key)
    return data


# --------------------------------------------------------------------------------------------
# the analysis model, refitted


@needs_r
def test_default_test_refits_the_glmm():
    r = P.power_binary(effect=0.5, n_sim=4, seed=1, **SMALL)
    assert r.test == "glmm" and r.n_sim == 4 and r.seed == 1
    assert "lme4::glmer(y ~ system + (1|rater) + (1|item)" in r.model
    assert r.engine.startswith("R lme4::glmer 1") and r.chunk_size == P.DEFAULT_CHUNK_SIZE
    assert r.failed_policy == "counted as not significant"
    assert r.ci_method.startswith("Wilson") and r.elapsed_s > 0
    assert r.design["outcome"] == "binary"


@needs_r
def test_glmm_type_one_error_near_alpha():
    # No effect: the share of Wald tests rejecting at 0.05 must be 0.05 up to Monte Carlo
    # error: 3 binomial SEs, sqrt(0.05 * 0.95 / 200) = 0.0154, so [0.004, 0.096]. Seeded:
    # the same 200 studies every run (6 of them rejected when this was written: Wald tests
    # of small GLMMs with many singular fits are somewhat conservative).
    n_sim, alpha = 200, 0.05
    r = P.power_binary(effect=0.0, n_sim=n_sim, seed=11, alpha=alpha, **SMALL)
    assert abs(r.power - alpha) <= 3 * math.sqrt(alpha * (1 - alpha) / n_sim)
    assert r.ci_low <= alpha <= r.ci_high
    assert abs(r.mean_difference) < 0.02 and abs(r.mean_estimate) < 0.1
    assert r.n_failed < n_sim / 10  # a few glmer convergence warnings on 64 rows


@needs_r
def test_glmm_power_increases_with_effect_and_items():
    # the same seed: the same raters, items and noise, only the effect differs
    none = P.power_binary(effect=0.0, n_sim=40, seed=5, **SMALL)
    big = P.power_binary(effect=1.5, n_sim=40, seed=5, **SMALL)
    assert big.power > none.power + 0.3 and big.ci_low > none.ci_high
    assert big.mean_estimate > 1.0
    more = P.power_binary(effect=1.5, n_sim=40, seed=5, **{**SMALL, "n_items": 32})
    assert more.power >= big.power


@needs_r
def test_same_seed_same_result_whatever_the_chunking():
    calls = []
    one = P.power_binary(effect=0.8, n_sim=12, seed=3, chunk_size=5, keep_simulations=True,
                         progress=lambda done, total: calls.append((done, total)), **SMALL)
    assert calls == [(5, 12), (10, 12), (12, 12)] and one.n_chunks == 3
    whole = P.power_binary(effect=0.8, n_sim=12, seed=3, chunk_size=12, keep_simulations=True,
                           **SMALL)
    forked = P.power_binary(effect=0.8, n_sim=12, seed=3, chunk_size=4, cores=2,
                            keep_simulations=True, **SMALL)
    assert _without_time(one) == _without_time(whole) == _without_time(forked)
    assert [s["sim"] for s in one.simulations] == list(range(12))
    # the first studies of a longer run are the same studies
    longer = P.power_binary(effect=0.8, n_sim=15, seed=3, keep_simulations=True, **SMALL)
    assert longer.simulations[:12] == one.simulations
    other = P.power_binary(effect=0.8, n_sim=12, seed=4, keep_simulations=True, **SMALL)
    assert other.simulations != one.simulations


@needs_r
def test_failed_refits_are_counted_and_not_significant():
    # 2 items, 4 judgments per study: glmer errs (a constant response) or does not
    # converge (unable to evaluate the gradient, a degenerate Hessian) on most of them
    r = P.power_binary(n_raters=4, n_items=2, ratings_per_output=1, effect=3.0, rater_sd=1.0,
                       item_sd=1.0, n_sim=6, seed=2, keep_simulations=True)
    assert r.n_failed > 0 and r.failure_messages
    failed = [s for s in r.simulations if s["failed"]]
    assert all(s["p"] == 1.0 for s in failed)  # never a rejection
    assert r.rejections <= r.n_sim - r.n_failed
    assert any("refits failed" in w for w in r.warnings)
    if r.n_failed < r.n_sim:
        assert r.power_converged == pytest.approx(r.rejections / (r.n_sim - r.n_failed))
    else:
        assert r.power_converged is None


@needs_r
def test_likert_power_refits_the_clmm():
    r = P.power_likert(n_raters=8, n_items=8, ratings_per_output=2, effect=1.0,
                       thresholds=[-1.0, 0.0, 1.0], rater_sd=0.5, item_sd=0.5, n_sim=2, seed=1)
    assert r.test == "clmm" and "ordinal::clmm(rating ~ system + (1|rater) + (1|item)" in r.model
    assert r.engine.startswith("R ordinal::clmm") and r.design["thresholds"] == [-1.0, 0.0, 1.0]
    assert r.design["outcome"] == "likert" and "baseline" not in r.design
    assert r.n_sim == 2 and (r.mean_estimate is not None or r.n_failed == 2)


def test_simulated_ratings_follow_the_cumulative_logit():
    # effect 0, no random effects: P(rating <= j) = expit(theta_j), the model's definition
    theta = [-1.0, 0.2, 1.5]
    d = P.LikertDesign(n_raters=50, n_items=4000, ratings_per_output=1, effect=0.0,
                       thresholds=tuple(theta))
    ratings = P.simulate_likert_study(d, seed=9)["rating"].to_numpy()
    cumulative = [(ratings <= j + 1).mean() for j in range(3)]
    n = len(ratings)
    for observed, t in zip(cumulative, theta, strict=True):
        expected = expit(t)
        assert abs(observed - expected) < 4 * math.sqrt(expected * (1 - expected) / n)
    # a positive effect moves system B's ratings up (clm's sign convention)
    up = P.LikertDesign(n_raters=50, n_items=2000, ratings_per_output=1, effect=1.0,
                        thresholds=tuple(theta))
    df = P.simulate_likert_study(up, seed=9)
    means = df.groupby("system")["rating"].mean()
    assert means["B"] > means["A"] + 0.3
    with pytest.raises(ValueError):
        P.LikertDesign(n_raters=5, n_items=5, ratings_per_output=1, effect=0,
                       thresholds=(1.0, 0.5))


def test_model_test_without_r_says_so(monkeypatch):
    monkeypatch.setattr(rb, "r_available", lambda: False)
    monkeypatch.setattr(rb, "r_unavailable_reason", lambda: "test")
    with pytest.raises(rb.RUnavailableError, match="paired_t"):
        P.power_binary(effect=0.5, n_sim=2, seed=1, **SMALL)


# --------------------------------------------------------------------------------------------
# the fast screen (explicitly named)


def test_null_power_is_alpha():
    r = P.power_binary(n_items=40, effect=0.0, n_sim=1000, seed=11, test="paired_t", **BASE)
    assert r.ci_low <= 0.05 <= r.ci_high
    assert abs(r.mean_difference) < 0.01
    assert "NOT the analysis's model" in r.model and r.n_failed == 0
    r10 = P.power_binary(n_items=40, effect=0.0, alpha=0.10, n_sim=1000, seed=12,
                         test="paired_t", **BASE)
    assert r10.ci_low <= 0.10 <= r10.ci_high


def test_power_increases_with_items_and_effect():
    common = {"n_sim": 200, "seed": 1, "test": "paired_t", **BASE}
    small = P.power_binary(n_items=20, effect=0.6, **common)
    large = P.power_binary(n_items=100, effect=0.6, **common)
    assert large.power > small.power + 0.2
    assert large.ci_low > small.ci_high
    bigger = P.power_binary(n_items=20, effect=1.2, **common)
    assert bigger.power > small.power
    assert 0 < small.mean_difference < large.mean_difference + 0.05


def test_deterministic_with_seed():
    common = {"n_items": 30, "effect": 0.5, "n_sim": 200, "test": "paired_t", **BASE}
    a = P.power_binary(seed=42, **common)
    b = P.power_binary(seed=42, **common)
    assert _without_time(a) == _without_time(b)
    c = P.power_binary(seed=43, **common)
    assert c.mean_difference != a.mean_difference
    drawn = P.power_binary(seed=None, **common)
    assert isinstance(drawn.seed, int)  # drawn, and reported so that it can be repeated
    assert _without_time(P.power_binary(seed=drawn.seed, **common)) == _without_time(drawn)


def test_simulated_design_is_latin_square():
    d = P.BinaryDesign(n_raters=10, n_items=8, ratings_per_output=2, effect=0.5, rater_sd=1,
                       item_sd=1)
    df = P.simulate_binary_study(d, seed=3)
    assert len(df) == d.n_judgments == 8 * 2 * 2
    assert set(df.columns) == {"y", "system", "rater", "item"}
    assert not df.duplicated(["rater", "item"]).any()  # no rater sees an item twice
    assert (df.groupby(["item", "system"]).size() == 2).all()
    few = P.power_binary(n_raters=3, n_items=10, ratings_per_output=2, effect=0.0, n_sim=20,
                         seed=1, test="paired_t")
    assert few.warnings and "with replacement" in few.warnings[0]


def test_logit_cluster_test_runs():
    r = P.power_binary(n_items=30, effect=0.8, n_sim=40, seed=2, test="logit_cluster", **BASE)
    assert r.test == "logit_cluster" and 0 <= r.power <= 1
    with pytest.raises(ValueError):
        P.power_binary(n_items=30, effect=0.8, n_sim=10, test="anova", **BASE)
    with pytest.raises(ValueError):
        P.power_likert(n_items=30, effect=0.8, thresholds=[0.0], n_sim=10, test="glmm", **BASE)


# --------------------------------------------------------------------------------------------
# the design search


def test_smallest_design_search():
    params = {**BASE, "effect": 0.6, "n_sim": 200, "seed": 5, "test": "paired_t"}
    s = P.smallest_design(0.8, "items", hi=400, **params)
    assert s.value is not None and s.result.power >= 0.8
    assert s.value - 1 in s.evaluated and s.evaluated[s.value - 1].power < 0.8
    assert s.failing_below == s.value - 1 and s.n_sim_per_step == 200
    direct = P.power_binary(n_items=s.value, **params)
    assert direct.power == s.result.power  # common random numbers: reproducible
    none = P.smallest_design(0.99, "items", hi=10, **params)
    assert none.value is None and none.result is None
    cons = P.smallest_design(0.8, "items", hi=400, criterion="ci_low", **params)
    assert cons.value >= s.value
    # from a planned design above the answer: halving, then bisection, the same answer
    down = P.smallest_design(0.8, "items", hi=400, start=300, **params)
    assert down.value == s.value
    with pytest.raises(ValueError):
        P.smallest_design(0.8, "items", n_items=5, **params)


@needs_r
def test_smallest_design_with_refits_uses_fewer_simulations_per_step():
    steps = []
    s = P.smallest_design(0.7, "items", hi=64, start=8, n_sim=20, n_sim_per_step=8,
                          effect=1.5, seed=2, progress=lambda d, t: steps.append((d, t)),
                          **{k: v for k, v in SMALL.items() if k != "n_items"})
    assert s.value is not None and s.n_sim_per_step == 8 and s.n_sim == 20
    # the planned design (start) with all 20 simulations, the other steps with at most 8
    assert s.evaluated[8].n_sim == 20
    assert all(r.n_sim <= 8 and r.test == "glmm" for v, r in s.evaluated.items() if v != 8)
    assert s.result.n_sim == 20 and s.resolution == 0.1 and "bisection" in s.search
    # the chosen design's 20 simulations reuse its step's (the same studies): no refit twice
    run = sum(r.n_sim for r in s.evaluated.values())
    if s.value != 8:
        run += 20 - s.evaluated[s.value].n_sim
    assert steps and steps[-1][0] == steps[-1][1] == run
    direct = P.power_binary(n_items=s.value, n_sim=20, effect=1.5, seed=2,
                            **{k: v for k, v in SMALL.items() if k != "n_items"})
    assert _without_time(direct) == _without_time(s.result)


# --------------------------------------------------------------------------------------------
# pilots


def test_sds_from_fit():
    class Fit:
        random_effects = {"rater": 0.25, "item": 1.0}
        coefficients = [type("C", (), {"term": "(Intercept)", "estimate": -0.3})()]

    assert P.sds_from_fit(Fit()) == {"rater_sd": 0.5, "item_sd": 1.0, "baseline": -0.3}


def test_pilot_from_fit_carries_the_fit_warnings():
    fit_json = {  # a ModelFit as the analysis stores it (JSON)
        "engine": "R ordinal::clmm", "formula": "rating ~ system + (1|rater) + (1|item)",
        "n_obs": 120, "random_effects": {"rater": 0.0, "item": 0.64}, "converged": True,
        "coefficients": [{"term": "systemB", "estimate": 0.4}],
        "thresholds": [{"term": "1|2", "estimate": -1.2}, {"term": "2|3", "estimate": 0.9}],
        "warnings": ["random-effect variance of 'rater' is ~0 (singular fit)"],
        "extra": {"fallback": False},
    }
    params, pilot = P.pilot_from_fit(fit_json)
    assert params == {"rater_sd": 0.0, "item_sd": 0.8, "thresholds": [-1.2, 0.9]}
    assert pilot["warnings"] == fit_json["warnings"] and pilot["converged"]
    fallback = {**fit_json, "random_effects": {}, "extra": {"fallback": True}}
    _, pilot = P.pilot_from_fit(fallback)
    assert any("overstates power" in w for w in pilot["warnings"])


def test_power_option_checks():
    criteria = [{"key": "ok", "kind": "binary"}, {"key": "note", "kind": "text"}]
    assert P.check_option({"effect": 0.5, "n_sim": 10}, criteria) == {"effect": 0.5,
                                                                       "n_sim": 10}
    assert P.check_option({"effect": 0.5, "target_power": 0.8, "criterion": "ci_low",
                           "pilot": "ok"}, criteria)
    for bad in ({"n_sim": 10}, {"effect": 1, "colour": 2}, {"effect": 1, "test": "anova"},
                {"effect": 1, "n_sim": 0}, {"effect": 1, "n_sim": 10**6},
                {"effect": 1, "pilot": "note"}, {"effect": 1, "vary": "items"}, "power"):
        with pytest.raises(ValueError):
            P.check_option(bad, criteria)


@needs_r
def test_power_option_takes_the_pilot_from_the_analysis():
    entry = {"key": "ok", "kind": "binary", "glmm": {
        "engine": "R lme4::glmer", "random_effects": {"rater": 0.25, "item": 0.64},
        "coefficients": [{"term": "(Intercept)", "estimate": 0.3}], "converged": True,
        "warnings": ["boundary (singular) fit: see help('isSingular')"], "extra": {}}}
    calls = []
    r = P.run_option({"pilot": "ok", "effect": 1.0, "n_raters": 12, "n_items": 10,
                      "ratings_per_output": 2, "n_sim": 3, "seed": 1},
                     [entry], progress=lambda d, t: calls.append(d))
    assert r.design["rater_sd"] == 0.5 and r.design["item_sd"] == 0.8
    assert r.design["baseline"] == 0.3 and r.pilot["criterion"] == "ok"
    assert r.pilot["warnings"] == entry["glmm"]["warnings"] and calls == [3]
    with pytest.raises(ValueError, match="no pilot model"):
        P.run_option({"pilot": "ok", "effect": 1.0}, [{"key": "ok", "kind": "binary",
                                                           "glmm": {"error": "boom"}}])
    assert np.isfinite(r.power)
