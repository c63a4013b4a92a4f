"""The in-process Laplace CLMM (analysis/stats/models/clmm_laplace.py) is ordinal::clmm's model
and likelihood: pinned on the published wine fit, on R's own clmm for crossed raters and items
and for three grouping factors, and its objective equals clmm's log-likelihood at clmm's own
estimates. Which engine `auto` picks is tested too."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.stats import models as M
from analysis.stats import rbridge as rb
from analysis.stats.models import ordinal
from analysis.stats.models.clmm_laplace import LaplaceData, _Objective
from tests.analysis.stats.test_models import make_wine

needs_r = pytest.mark.skipif(not rb.r_available(),
                             reason=f"R unavailable: {rb.r_unavailable_reason()}")
CROSSED = "rating ~ system + (1|rater) + (1|item)"


def simulate_crossed(raters: int = 40, items: int = 80, per_item: int = 20,
                     seed: int = 7, session_sd: float = 0.0) -> pd.DataFrame:
    """Item i rated by `per_item` consecutive raters, system by parity (as bench/analysis.py)."""
    rng = np.random.default_rng(seed)
    item = np.repeat(np.arange(items), per_item)
    rater = (np.repeat(np.arange(items) * raters // items, per_item)
             + np.tile(np.arange(per_item), items)) % raters
    system = (item + rater) % 2
    session = (item + rater) % 5
    latent = (-0.4 * system + rng.normal(0, 0.7, raters)[rater]
              + rng.normal(0, 1.0, items)[item] + rng.normal(0, session_sd, 5)[session]
              + rng.logistic(size=len(item)))
    rating = np.digitize(latent, [-2.5, -1, 0.5, 2]) + 1
    return pd.DataFrame({"rating": rating, "system": np.where(system, "B", "A"),
                         "rater": [f"r{r:02d}" for r in rater],
                         "item": [f"i{i:03d}" for i in item],
                         "session": [f"s{k}" for k in session]})


def assert_same_fit(ours: M.ModelFit, r: M.ModelFit, *, est: float = 2e-4,
                    se: float = 1e-3) -> None:
    for mine, theirs in zip(ours.coefficients + ours.thresholds,
                            r.coefficients + r.thresholds, strict=True):
        assert mine.term == theirs.term
        assert mine.estimate == pytest.approx(theirs.estimate, abs=est)
        assert mine.se == pytest.approx(theirs.se, rel=se)
    assert ours.random_effects.keys() == r.random_effects.keys()
    for group, variance in r.random_effects.items():
        assert ours.random_effects[group] == pytest.approx(variance, rel=2e-3)
    # The same likelihood, maximised as well as clmm's nlminb does (clmm's inner modes stop
    # at its own tolerance: on the wine data its value is 3.5e-6 higher at the same point).
    assert ours.extra["loglik"] == pytest.approx(r.extra["loglik"], abs=1e-3)
    assert ours.extra["loglik"] >= r.extra["loglik"] - 1e-5
    assert ours.converged and ours.extra["convergence"].startswith("converged")


def test_wine_published_values_without_r():
    # Christensen's clmm tutorial (ordinal's wine data): tempwarm 3.063 (SE 0.595),
    # contactyes 1.835 (SE 0.513), judge variance 1.279, log-likelihood -81.57.
    fit = M.fit_clmm(make_wine(), "rating ~ temp + contact + (1|judge)", engine="laplace")
    coef = {c.term: c for c in fit.coefficients}
    assert coef["tempwarm"].estimate == pytest.approx(3.063, abs=5e-4)
    assert coef["tempwarm"].se == pytest.approx(0.595, abs=5e-4)
    assert coef["contactyes"].estimate == pytest.approx(1.835, abs=5e-4)
    assert coef["contactyes"].se == pytest.approx(0.513, abs=5e-4)
    assert fit.random_effects["judge"] == pytest.approx(1.279, abs=5e-4)
    assert fit.extra["loglik"] == pytest.approx(-81.57, abs=5e-3)
    assert [t.term for t in fit.thresholds] == ["1|2", "2|3", "3|4", "4|5"]
    assert "Laplace" in fit.engine and fit.extra["n_groups"] == {"judge": 9}


@needs_r
def test_wine_equals_r_clmm():
    wine = make_wine()
    formula = "rating ~ temp + contact + (1|judge)"
    assert_same_fit(M.fit_clmm(wine, formula, engine="laplace"),
                    M.fit_clmm(wine, formula, engine="R"))


@needs_r
def test_crossed_raters_and_items_equal_r_clmm():
    data = simulate_crossed()
    ours = M.fit_clmm(data, CROSSED, engine="laplace")
    r = M.fit_clmm(data, CROSSED, engine="R")
    assert "ordinal::clmm" in r.engine
    assert_same_fit(ours, r)
    assert ours.extra["n_groups"] == {"rater": 40, "item": 80}


@needs_r
def test_three_grouping_factors_equal_r_clmm():
    data = simulate_crossed(seed=11, session_sd=0.6)
    formula = "rating ~ system + (1|rater) + (1|item) + (1|session)"
    assert_same_fit(M.fit_clmm(data, formula, engine="laplace"),
                    M.fit_clmm(data, formula, engine="R"), est=5e-4, se=3e-3)


@needs_r
def test_objective_is_clmm_loglik_at_clmm_estimates():
    """Not only the same optimum: at R's own estimates, -objective equals R's logLik."""
    data = simulate_crossed(seed=3)
    r = M.fit_clmm(data, CROSSED, engine="R")
    levels = r.extra["response_levels"]
    codes = pd.Categorical(data["rating"].astype(str), categories=levels).codes
    groups = tuple(pd.factorize(data[g], sort=True)[0] for g in ("rater", "item"))
    objective = _Objective(LaplaceData(
        y=np.asarray(codes, dtype=np.int64), n_categories=len(levels),
        X=(data["system"] == "B").to_numpy(float)[:, None], groups=groups,
        group_sizes=tuple(int(g.max()) + 1 for g in groups)))
    theta = np.array([t.estimate for t in r.thresholds] + [r.coefficients[0].estimate]
                     + [0.5 * np.log(r.random_effects[g]) for g in ("rater", "item")])
    assert -objective(theta) == pytest.approx(r.extra["loglik"], abs=1e-6)


@needs_r
def test_auto_uses_laplace_from_the_row_threshold(monkeypatch):
    data = simulate_crossed(raters=20, items=40, per_item=10)
    assert "ordinal::clmm" in M.fit_clmm(data, CROSSED).engine  # 400 rows: R
    monkeypatch.setattr(ordinal, "LAPLACE_FROM_ROWS", 400)
    assert "Laplace" in M.fit_clmm(data, CROSSED).engine
    assert "ordinal::clmm" in M.fit_clmm(data, CROSSED, engine="R").engine
    # A random slope is R's to fit, whatever the size.
    sloped = M.fit_clmm(data, "rating ~ system + (1 + system|rater)")
    assert "ordinal::clmm" in sloped.engine


def test_laplace_refuses_what_it_cannot_fit():
    data = simulate_crossed(raters=10, items=20, per_item=5)
    with pytest.raises(ValueError, match="random slope"):
        M.fit_clmm(data, "rating ~ system + (1 + system|rater)", engine="laplace")
    with pytest.raises(ValueError, match="probit"):
        M.fit_clmm(data, CROSSED, engine="laplace", link="probit")
