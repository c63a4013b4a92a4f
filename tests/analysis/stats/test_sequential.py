"""Group-sequential boundaries and alpha spending, pinned against published values and checked
against an independent computation (scipy's multivariate normal CDF)."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

from analysis.stats import sequential

FIVE = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_classic_obrien_fleming_five_looks_matches_the_published_boundaries():
    # O'Brien & Fleming (1979); Jennison & Turnbull (2000) Table 2.3: C_B(5, 0.05) = 2.040.
    bounds = sequential.classic_boundaries(5, 0.05, "obrien_fleming")
    assert [round(c, 2) for c in bounds] == [4.56, 3.23, 2.63, 2.28, 2.04]


def test_classic_pocock_five_looks_matches_the_published_constant():
    # Pocock (1977); Jennison & Turnbull (2000) Table 2.1: C_P(5, 0.05) = 2.413.
    bounds = sequential.classic_boundaries(5, 0.05, "pocock")
    assert bounds == pytest.approx([2.413] * 5, abs=5e-4)


def test_lan_demets_spending_boundaries_match_the_published_tables():
    # DeMets & Lan (1994), as ldbounds and gsDesign print them: two-sided 0.05, 5 equal looks.
    obf = sequential.spending_boundaries(FIVE, 0.05, "obrien_fleming")
    assert obf == pytest.approx([4.8769, 3.3569, 2.6803, 2.2898, 2.0310], abs=2e-4)
    pocock = sequential.spending_boundaries(FIVE, 0.05, "pocock")
    assert pocock == pytest.approx([2.4380, 2.4268, 2.4101, 2.3966, 2.3859], abs=2e-4)


def test_spending_functions_start_at_zero_end_at_alpha_and_increase():
    for kind in sequential.SPENDING_FUNCTIONS:
        values = [sequential.spent_alpha(t, 0.05, kind) for t in np.linspace(0, 1, 21)]
        assert values[0] == 0.0
        assert values[-1] == pytest.approx(0.05, abs=1e-12)
        assert all(b > a for a, b in itertools.pairwise(values))
    # O'Brien-Fleming type keeps almost everything for the end; Pocock type spends evenly.
    assert sequential.spent_alpha(0.2, 0.05, "obrien_fleming") < 1e-5
    assert sequential.spent_alpha(0.2, 0.05, "pocock") == pytest.approx(
        0.05 * math.log(1 + (math.e - 1) * 0.2))
    with pytest.raises(ValueError, match="unknown spending function"):
        sequential.spent_alpha(0.5, 0.05, "haybittle")


def test_unequal_observed_fractions_spend_exactly_the_function_by_an_independent_method():
    # Looks where they happened (not where planned): the boundaries, put into the joint null
    # distribution of the z statistics (corr sqrt(t_j / t_k)) computed by scipy's multivariate
    # normal CDF, must cross with total probability alpha*(t_last).
    fractions = [0.13, 0.41, 0.55, 0.9]
    bounds = sequential.spending_boundaries(fractions, 0.05, "pocock")
    t = np.array(fractions)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    rng_seed = 1
    inside = multivariate_normal(mean=np.zeros(4), cov=cov, seed=rng_seed).cdf(
        np.array(bounds), lower_limit=-np.array(bounds))
    assert 1 - inside == pytest.approx(sequential.spent_alpha(0.9, 0.05, "pocock"), abs=3e-4)


def test_a_boundary_once_used_does_not_move_when_later_looks_are_added():
    early = sequential.spending_boundaries([0.3, 0.5], 0.05, "obrien_fleming")
    later = sequential.spending_boundaries([0.3, 0.5, 0.8, 1.0], 0.05, "obrien_fleming")
    assert later[:2] == pytest.approx(early, abs=1e-9)


def test_nominal_looks_at_196_inflate_the_error_which_the_spending_boundaries_do_not():
    # Armitage, McPherson & Rowe (1969): five looks at 1.96 reject a true null about 14 %.
    assert sequential.crossing_probability(FIVE, [1.96] * 5) == pytest.approx(0.142, abs=2e-3)
    bounds = sequential.spending_boundaries(FIVE, 0.05, "obrien_fleming")
    assert sequential.crossing_probability(FIVE, bounds) == pytest.approx(0.05, abs=1e-6)


def test_looks_report_the_spent_alpha_and_the_nominal_alpha_of_each_boundary():
    looks = sequential.looks(FIVE, 0.05, "pocock")
    assert [look.number for look in looks] == [1, 2, 3, 4, 5]
    assert looks[-1].alpha_spent == pytest.approx(0.05)
    assert looks[0].nominal_alpha == pytest.approx(2 * norm.sf(looks[0].boundary))


def test_observed_fractions_and_input_errors():
    assert sequential.observed_fractions([100, 100, 250, 600], 500) == [0.2, 0.5, 1.0]
    with pytest.raises(ValueError, match="increase"):
        sequential.spending_boundaries([0.5, 0.5], 0.05, "pocock")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sequential.spending_boundaries([0.0, 0.5], 0.05, "pocock")


def test_repeated_ci_and_repeated_p_value():
    assert sequential.repeated_ci(1.0, 0.5, 2.0) == (0.0, 2.0)
    # One look: the repeated p-value is the ordinary two-sided p-value.
    assert sequential.repeated_p_value([2.0], [1.0], 0.05, "pocock") == pytest.approx(
        2 * norm.sf(2.0), rel=2e-3)
    # Two looks at the same z: larger than the one-look p-value (the correction).
    two = sequential.repeated_p_value([2.0, 2.0], [0.5, 1.0], 0.05, "pocock")
    assert two > 2 * norm.sf(2.0)
