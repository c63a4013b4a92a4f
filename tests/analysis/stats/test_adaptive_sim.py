"""Simulated studies with known Bradley-Terry strengths: adaptive allocation reaches the target
CI width with fewer judgments than the fixed pairwise Latin square, and the sequential test
keeps its false-positive rate at the nominal level (seeded, small versions of bench/adaptive)."""

import numpy as np
import pandas as pd
import pytest

from analysis.stats.adaptive_sim import Scenario, bt_fit, compare, error_rate, simulate
from analysis.stats.models import preference_model


def test_bt_fit_is_the_preference_model_of_the_report():
    rng = np.random.default_rng(3)
    truth = {"a": 0.0, "b": 0.7, "c": -0.4}
    rows = []
    for _ in range(600):
        left, right = rng.choice(list(truth), size=2, replace=False)
        p = 1 / (1 + np.exp(-(0.2 + truth[left] - truth[right])))
        rows.append((left, right, "A" if rng.random() < p else "B"))
    frame = pd.DataFrame(rows, columns=["left_system", "right_system", "choice"])
    report = preference_model(frame, reference="a").ties_excluded
    index = {"a": 0, "b": 1, "c": 2}
    grouped = frame.assign(win=frame["choice"] == "A").groupby(
        ["left_system", "right_system"])["win"].agg(["sum", "size"]).reset_index()
    fit = bt_fit(3, grouped["left_system"].map(index).to_numpy(),
                 grouped["right_system"].map(index).to_numpy(),
                 grouped["sum"].to_numpy(float), grouped["size"].to_numpy(float))
    coef = {c.term: c for c in report.coefficients}
    assert fit.position == pytest.approx(coef["position (A/left)"].estimate, abs=1e-6)
    assert fit.strengths[1] == pytest.approx(coef["systemb"].estimate, abs=1e-6)
    assert fit.strengths[2] == pytest.approx(coef["systemc"].estimate, abs=1e-6)
    assert np.sqrt(fit.covariance[1, 1]) == pytest.approx(coef["systemb"].se, rel=1e-5)


def test_adaptive_allocation_needs_fewer_judgments_than_the_fixed_latin_square():
    # Six systems, the plan's contrasts: the candidate (strongest) against each of the others.
    strengths = [0.0, 0.15, 0.3, 0.45, 0.6, 0.8]
    scenario = Scenario(strengths=strengths, contrasts=[(5, i) for i in range(5)],
                        items=120, seat_size=40, target_width=1.0, max_judgments=6000,
                        spending="pocock")
    result = compare(scenario, repetitions=6, seed=11)
    assert all(o.width_met for o in result.fixed + result.adaptive)
    assert result.ratio < 0.92
    assert result.mean_judgments(result.adaptive) < result.mean_judgments(result.fixed)


def test_false_positive_rate_under_no_effect_stays_nominal_while_naive_looks_inflate_it():
    # Three equal systems, ten looks, a target no study reaches: every look is a chance.
    scenario = Scenario(strengths=[0.0, 0.0, 0.0], items=60, seat_size=20, target_width=0.01,
                        max_judgments=200, spending="pocock")
    outcomes = [simulate(scenario, "adaptive", np.random.default_rng([5, r]))
                for r in range(400)]
    rate, se = error_rate(outcomes)
    assert rate <= 0.05 + 2 * se
    naive, _ = error_rate(outcomes, naive=True)
    assert naive > 0.05 + 2 * se  # the same looks at the fixed-sample z are not honest
