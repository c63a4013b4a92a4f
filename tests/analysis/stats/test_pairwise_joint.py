"""The joint preference-and-level model of pairwise answers (analysis.stats.pairwise_joint),
on simulated data with known parameters, and against Davidson's model fitted directly."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from scipy.special import expit

from analysis.stats.pairwise_joint import (
    _Data,
    _Layout,
    _negloglik,
    joint_preference_model,
)

THETA = np.array([0.0, 0.5, -0.3, 1.0])
TRUTH = {"nu": 0.8, "position": 0.2, "beta": 1.5, "cuts": (-0.5, 0.7)}


def simulate(rng: np.random.Generator, n: int, *, theta: np.ndarray = THETA,
             nu: float = 0.8, position: float = 0.2, beta: float = 1.5,
             cuts: tuple[float, ...] = (-0.5, 0.7), allow_tie: bool = True,
             allow_both: bool = True) -> pd.DataFrame:
    """Answers drawn from the model itself: Davidson's preference, then the level of a
    no-preference answer from the cumulative logit on the pair's mean quality."""
    n_systems = len(theta)
    a = rng.integers(0, n_systems, n)
    b = (a + rng.integers(1, n_systems, n)) % n_systems
    u = theta[a] - theta[b] + position
    p_a, p_b = np.exp(u / 2), np.exp(-u / 2)
    total = p_a + p_b + nu
    draw = rng.random(n)
    answer = np.where(draw < p_a / total, "A", np.where(draw < (p_a + p_b) / total, "B", "N"))
    m = (theta[a] + theta[b]) / 2
    draw = rng.random(n)
    if allow_both and allow_tie:
        level = np.where(draw < expit(cuts[0] - beta * m), "both_bad",
                         np.where(draw < expit(cuts[1] - beta * m), "tie", "both_good"))
    elif allow_both:
        level = np.where(draw < expit(cuts[0] - beta * m), "both_bad", "both_good")
    else:
        level = np.full(n, "tie")
    names = np.array([f"s{i}" for i in range(n_systems)])
    return pd.DataFrame({"system": names[a], "system_b": names[b],
                         "value": np.where(answer == "N", level, answer)})


def _params(fit):
    return {"s1": fit.theta[1], "s2": fit.theta[2], "s3": fit.theta[3], "nu": fit.nu,
            "position": fit.position, "beta": fit.beta, "c1": fit.cuts[0], "c2": fit.cuts[1]}


TRUE_VALUES = {"s1": 0.5, "s2": -0.3, "s3": 1.0, "nu": 0.8, "position": 0.2, "beta": 1.5,
               "c1": -0.5, "c2": 0.7}


def test_recovers_known_parameters():
    data = simulate(np.random.default_rng(20240917), 8000)
    fit = joint_preference_model(data, allow_tie=True, allow_both=True)
    assert fit.converged and not fit.warnings
    assert fit.systems == ["s0", "s1", "s2", "s3"] and fit.levels == ["both_bad", "tie",
                                                                       "both_good"]
    for name, param in _params(fit).items():
        truth = TRUE_VALUES[name]
        assert param.ci_low <= truth <= param.ci_high, (name, param, truth)
        assert abs(param.estimate - truth) < 3.5 * param.se, (name, param)
    # Contrasts: s3 - s1 = 0.5, with its interval.
    contrast = next(c for c in fit.contrasts if c.name == "s1 - s3")
    assert contrast.ci_low <= -0.5 <= contrast.ci_high
    assert sum(fit.counts.values()) == fit.n == 8000


def test_intervals_cover_the_truth_at_about_the_nominal_rate():
    rng = np.random.default_rng(7)
    hits = dict.fromkeys(("s3", "nu", "beta", "c2"), 0)
    reps = 150
    for _ in range(reps):
        params = _params(joint_preference_model(simulate(rng, 1500), allow_tie=True,
                                                allow_both=True))
        for name in hits:
            param = params[name]
            hits[name] += param.ci_low <= TRUE_VALUES[name] <= param.ci_high
    for name, count in hits.items():
        assert 0.89 <= count / reps <= 0.995, (name, count / reps)


def test_gradient_is_the_derivative_of_the_likelihood():
    data = simulate(np.random.default_rng(3), 600)
    index = {f"s{i}": i for i in range(4)}
    for layout, levels in ((_Layout(3, True, True, 2, True), ["both_bad", "tie", "both_good"]),
                           (_Layout(3, False, True, 1, True), ["both_bad", "both_good"])):
        values = data["value"].to_numpy()
        if len(levels) == 2:
            values = np.where(values == "tie", "both_good", values)
        cells = _Data(data["system"].map(index).to_numpy(),
                      data["system_b"].map(index).to_numpy(), values, np.ones(len(data)), 4,
                      levels)
        x = np.random.default_rng(4).normal(scale=0.5, size=layout.size)
        error = optimize.check_grad(lambda v, lay=layout, c=cells: _negloglik(v, lay, c)[0],
                                    lambda v, lay=layout, c=cells: _negloglik(v, lay, c)[1], x)
        assert error < 1e-3


def test_both_answers_move_the_level_not_the_preference():
    rng = np.random.default_rng(11)
    data = simulate(rng, 6000, beta=2.0)
    joint = joint_preference_model(data, allow_tie=True, allow_both=True)
    assert joint.beta.ci_low > 1.0  # better pairs are "both good" more often

    # The same answers with "both good" and "both bad" swapped: the level reverses.
    swapped = data.assign(value=data["value"].replace({"both_good": "both_bad",
                                                       "both_bad": "both_good"}))
    mirrored = joint_preference_model(swapped, allow_tie=True, allow_both=True)
    assert mirrored.beta.estimate == pytest.approx(-joint.beta.estimate, abs=1e-3)

    # Levels drawn regardless of quality: no beta.
    flat = simulate(np.random.default_rng(12), 6000, beta=0.0)
    level_free = joint_preference_model(flat, allow_tie=True, allow_both=True)
    assert level_free.beta.ci_low < 0 < level_free.beta.ci_high

    # Every no-preference answer read as a plain tie (Davidson's model): where the level does
    # not follow quality, the qualities do not move; where it does, both fits find the true
    # qualities and the joint one is surer of them (the "both" answers say something about
    # the systems' quality too, through beta).
    def as_ties(frame):
        return joint_preference_model(
            frame.assign(value=frame["value"].replace({"both_good": "tie", "both_bad": "tie"})),
            allow_tie=True, allow_both=False)

    davidson = as_ties(flat)
    assert davidson.beta is None and davidson.cuts == [] and davidson.levels == []
    for theirs, ours in zip(davidson.theta[1:], level_free.theta[1:], strict=True):
        assert abs(theirs.estimate - ours.estimate) < 0.1 * ours.se
    assert davidson.nu.estimate == pytest.approx(level_free.nu.estimate, rel=0.01)
    davidson = as_ties(data)
    for truth, theirs, ours in zip(THETA[1:], davidson.theta[1:], joint.theta[1:], strict=True):
        assert abs(theirs.estimate - truth) < 3 * theirs.se
        assert abs(ours.estimate - truth) < 3 * ours.se
        assert abs(theirs.estimate - ours.estimate) < theirs.se
        assert 0.8 * theirs.se < ours.se <= theirs.se
    assert davidson.nu.estimate == pytest.approx(joint.nu.estimate, rel=0.02)


def _davidson_direct(data: pd.DataFrame) -> tuple[np.ndarray, float, float]:
    """Davidson's model in its own parametrisation (strengths pi, tie parameter nu, an order
    effect gamma on the first-shown side), fitted by Nelder-Mead without any gradient."""
    systems = sorted(set(data["system"]) | set(data["system_b"]))
    a = data["system"].map(systems.index).to_numpy()
    b = data["system_b"].map(systems.index).to_numpy()
    value = data["value"].to_numpy()

    def nll(x):
        pi = np.exp(np.concatenate([[0.0], x[:len(systems) - 1]]))
        nu, gamma = math.exp(x[-2]), math.exp(x[-1])
        pa, pb = gamma * pi[a], pi[b]
        tie = nu * np.sqrt(pa * pb)
        total = pa + pb + tie
        return -np.sum(np.log(np.where(value == "A", pa, np.where(value == "B", pb, tie))
                              / total))

    result = optimize.minimize(nll, np.zeros(len(systems) + 1), method="Nelder-Mead",
                               options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 40000,
                                        "maxfev": 40000})
    return result.x[:len(systems) - 1], math.exp(result.x[-2]), math.log(math.exp(result.x[-1]))


def test_without_both_answers_it_is_davidsons_model():
    data = simulate(np.random.default_rng(5), 3000, allow_both=False)
    assert set(data["value"]) == {"A", "B", "tie"}
    fit = joint_preference_model(data, allow_tie=True, allow_both=False)
    theta, nu, position = _davidson_direct(data)
    assert [p.estimate for p in fit.theta[1:]] == pytest.approx(list(theta), abs=1e-4)
    assert fit.nu.estimate == pytest.approx(nu, abs=1e-4)
    assert fit.position.estimate == pytest.approx(position, abs=1e-4)
    assert fit.roles["tie"] == {"preference": "no preference: P = nu sqrt(pi_A pi_B) / D",
                                "level": "not modelled (no level part)"}
    assert "both_good" not in fit.roles


def test_two_systems_match_davidsons_closed_form():
    # Two systems, no position term: the model is saturated, so P(A)/P(B) and
    # P(tie)/sqrt(P(A) P(B)) equal the observed ratios: theta = log(wins1/wins0),
    # nu = ties / sqrt(wins0 * wins1).
    rows = ([("x", "y", "A")] * 30 + [("y", "x", "B")] * 20 + [("x", "y", "B")] * 25
            + [("y", "x", "tie")] * 15)
    data = pd.DataFrame(rows, columns=["system", "system_b", "value"])
    fit = joint_preference_model(data, allow_tie=True, allow_both=False, position=False)
    wins_x, wins_y, ties = 50, 25, 15
    assert fit.theta[1].name == "y"
    assert fit.theta[1].estimate == pytest.approx(math.log(wins_y / wins_x), abs=1e-5)
    assert fit.nu.estimate == pytest.approx(ties / math.sqrt(wins_x * wins_y), abs=1e-5)
    # Wald SE of a log odds ratio of two counts: sqrt(1/50 + 1/25), ties or not (the tie
    # count only informs nu, and the two are orthogonal at this saturated maximum).
    assert fit.theta[1].se == pytest.approx(math.sqrt(1 / wins_x + 1 / wins_y), rel=1e-3)
    assert fit.position is None


def test_weights_count_like_repeated_rows():
    data = simulate(np.random.default_rng(9), 1000)
    counted = data.value_counts().rename("count").reset_index()
    by_rows = joint_preference_model(data, allow_tie=True, allow_both=True)
    by_counts = joint_preference_model(counted, allow_tie=True, allow_both=True,
                                       weight="count")
    assert by_counts.n == 1000
    for ours, theirs in zip(by_rows.theta + by_rows.cuts, by_counts.theta + by_counts.cuts,
                            strict=True):
        assert ours.estimate == pytest.approx(theirs.estimate, abs=1e-5)


def test_without_tie_answer_one_cut_point():
    data = simulate(np.random.default_rng(13), 5000, allow_tie=False, cuts=(0.2,))
    fit = joint_preference_model(data, allow_tie=False, allow_both=True)
    assert fit.levels == ["both_bad", "both_good"] and len(fit.cuts) == 1
    assert fit.cuts[0].ci_low <= 0.2 <= fit.cuts[0].ci_high
    assert fit.beta.ci_low <= 1.5 <= fit.beta.ci_high
    assert "tie" not in fit.roles
    assert fit.roles["both_good"]["level"] == "both above the cut point"


def test_what_cannot_be_estimated_is_said_not_guessed():
    data = simulate(np.random.default_rng(17), 2000)
    # Two systems: every pair has the same mean quality, so beta is fixed at 0.
    two = data[data["system"].isin(["s0", "s1"]) & data["system_b"].isin(["s0", "s1"])]
    fit = joint_preference_model(two, allow_tie=True, allow_both=True)
    assert fit.beta.se is None and "fixed at 0" in fit.beta.note
    assert any("beta" in w for w in fit.warnings)
    # No "both bad" at all: the level part is left out, the preference part stays.
    no_bad = data[data["value"] != "both_bad"]
    fit = joint_preference_model(no_bad, allow_tie=True, allow_both=True)
    assert fit.levels == [] and fit.beta is None and fit.nu is not None
    assert any("both_bad" in w for w in fit.warnings)
    # Only A/B answers: nu is 0 (plain Bradley-Terry), said so.
    ab = data[data["value"].isin(["A", "B"])]
    fit = joint_preference_model(ab, allow_tie=True, allow_both=True)
    assert fit.nu is None and any("nu is 0" in w for w in fit.warnings)
    # Disconnected systems, answers the criterion does not offer, a system against itself.
    apart = pd.DataFrame({"system": ["s0", "s2"], "system_b": ["s1", "s3"],
                          "value": ["A", "B"]})
    with pytest.raises(ValueError, match="not connected"):
        joint_preference_model(apart, allow_tie=False, allow_both=False)
    with pytest.raises(ValueError, match="both_good"):
        joint_preference_model(data, allow_tie=True, allow_both=False)
    with pytest.raises(ValueError, match="itself"):
        joint_preference_model(pd.DataFrame({"system": ["s0"], "system_b": ["s0"],
                                             "value": ["A"]}),
                               allow_tie=False, allow_both=False)


def test_pair_shares_are_oriented_by_system_order():
    data = pd.DataFrame({"system": ["y", "x", "x", "y"], "system_b": ["x", "y", "y", "x"],
                         "value": ["A", "A", "both_bad", "tie"]})
    fit = joint_preference_model(data, allow_tie=True, allow_both=True)
    assert fit.pair_shares == [{"first": "x", "second": "y", "n": 4, "first_better": 1,
                                "second_better": 1, "tie": 1, "both_good": 0,
                                "both_bad": 1}]
