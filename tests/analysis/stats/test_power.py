"""Power by simulation: calibration under the null, monotonicity, determinism, design search."""

from __future__ import annotations

import dataclasses

import pytest

from analysis.stats import power as P

BASE = {"n_raters": 30, "ratings_per_output": 3, "rater_sd": 1.0, "item_sd": 1.0}


def test_null_power_is_alpha():
    r = P.power_binary(n_items=40, effect=0.0, n_sim=1000, seed=11, **BASE)
    assert r.ci_low <= 0.05 <= r.ci_high
    assert abs(r.mean_difference) < 0.01
    r10 = P.power_binary(n_items=40, effect=0.0, alpha=0.10, n_sim=1000, seed=12, **BASE)
    assert r10.ci_low <= 0.10 <= r10.ci_high


def test_power_increases_with_items_and_effect():
    small = P.power_binary(n_items=20, effect=0.6, n_sim=200, seed=1, **BASE)
    large = P.power_binary(n_items=100, effect=0.6, n_sim=200, seed=1, **BASE)
    assert large.power > small.power + 0.2
    assert large.ci_low > small.ci_high
    bigger = P.power_binary(n_items=20, effect=1.2, n_sim=200, seed=1, **BASE)
    assert bigger.power > small.power
    assert 0 < small.mean_difference < large.mean_difference + 0.05


def test_deterministic_with_seed():
    a = P.power_binary(n_items=30, effect=0.5, n_sim=200, seed=42, **BASE)
    b = P.power_binary(n_items=30, effect=0.5, n_sim=200, seed=42, **BASE)
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    da.pop("elapsed_s")
    db.pop("elapsed_s")
    assert da == db
    c = P.power_binary(n_items=30, effect=0.5, n_sim=200, seed=43, **BASE)
    assert c.mean_difference != a.mean_difference


def test_simulated_design_is_latin_square():
    d = P.BinaryDesign(n_raters=10, n_items=8, ratings_per_output=2, effect=0.5, rater_sd=1,
                       item_sd=1)
    df = P.simulate_binary_study(d, seed=3)
    assert len(df) == d.n_judgments == 8 * 2 * 2
    assert set(df.columns) == {"y", "system", "rater", "item"}
    assert not df.duplicated(["rater", "item"]).any()  # no rater sees an item twice
    assert (df.groupby(["item", "system"]).size() == 2).all()
    few = P.power_binary(n_raters=3, n_items=10, ratings_per_output=2, effect=0.0, n_sim=20,
                         seed=1)
    assert few.warnings and "with replacement" in few.warnings[0]


def test_logit_cluster_test_runs():
    r = P.power_binary(n_items=30, effect=0.8, n_sim=40, seed=2, test="logit_cluster", **BASE)
    assert r.test == "logit_cluster" and 0 <= r.power <= 1
    with pytest.raises(ValueError):
        P.power_binary(n_items=30, effect=0.8, n_sim=10, test="glmm", **BASE)


def test_smallest_design_search():
    params = {**BASE, "effect": 0.6, "n_sim": 200, "seed": 5}
    s = P.smallest_design(0.8, "items", hi=400, **params)
    assert s.value is not None and s.result.power >= 0.8
    assert s.value - 1 in s.evaluated and s.evaluated[s.value - 1].power < 0.8
    direct = P.power_binary(n_items=s.value, **params)
    assert direct.power == s.result.power  # common random numbers: reproducible
    none = P.smallest_design(0.99, "items", hi=10, **params)
    assert none.value is None and none.result is None
    cons = P.smallest_design(0.8, "items", hi=400, criterion="ci_low", **params)
    assert cons.value >= s.value
    with pytest.raises(ValueError):
        P.smallest_design(0.8, "items", n_items=5, **params)


def test_sds_from_fit():
    class Fit:
        random_effects = {"rater": 0.25, "item": 1.0}
        coefficients = [type("C", (), {"term": "(Intercept)", "estimate": -0.3})()]

    assert P.sds_from_fit(Fit()) == {"rater_sd": 0.5, "item_sd": 1.0, "baseline": -0.3}
