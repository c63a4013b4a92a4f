"""The continuous model (sliders): lme4's sleepstudy reproduced to the published figures, the
fallback saying what it is, and contrasts in score points."""

from __future__ import annotations

import io
import subprocess

import numpy as np
import pandas as pd
import pytest

from analysis.stats import rbridge as rb
from analysis.stats.models import fit_lmm, pairwise_contrasts

needs_r = pytest.mark.skipif(not rb.r_available(),
                             reason=f"R unavailable: {rb.r_unavailable_reason()}")


def _sleepstudy() -> pd.DataFrame:
    csv = subprocess.run(["Rscript", "-e", "write.csv(lme4::sleepstudy, row.names = FALSE)"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    frame = pd.read_csv(io.StringIO(csv))
    return frame.assign(Subject=frame["Subject"].astype(str))


@needs_r
def test_sleepstudy_reproduces_bates_et_al_2015():
    # Bates, Maechler, Bolker & Walker (2015), "Fitting linear mixed-effects models using
    # lme4", J. Stat. Softw. 67(1), section 5 (fm1): fixed effects 251.405 (SE 6.825) and
    # 10.467 (SE 1.546); random-effect SDs 24.741 and 5.922, residual SD 25.592; REML
    # criterion 1743.6. lmerTest's Satterthwaite df for Days is 17 (18 subjects).
    fit = fit_lmm(_sleepstudy(), "Reaction ~ Days + (1 + Days|Subject)")
    intercept, days = fit.coefficient("(Intercept)"), fit.coefficient("Days")
    assert (round(intercept.estimate, 3), round(intercept.se, 3)) == (251.405, 6.825)
    assert (round(days.estimate, 3), round(days.se, 3)) == (10.467, 1.546)
    assert round(np.sqrt(fit.random_effects["Subject"]), 3) == 24.741
    assert round(np.sqrt(fit.random_effects["Subject:Days"]), 3) == 5.922
    assert round(np.sqrt(fit.extra["residual_variance"]), 3) == 25.592
    assert round(fit.extra["reml_criterion"], 1) == 1743.6
    assert round(fit.extra["df"]["Days"]) == 17 and days.p_value < 1e-5
    assert fit.engine.startswith("R lmerTest::lmer") and fit.converged


def _da(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    rater_bias = rng.normal(0, 8, 12)
    item_level = rng.normal(0, 10, 30)
    for rater in range(12):
        for item in range(30):
            for system, effect in (("base", 0.0), ("new", 6.0), ("worse", -4.0)):
                score = 60 + effect + rater_bias[rater] + item_level[item] + rng.normal(0, 10)
                rows.append({"rater": f"r{rater}", "item": f"i{item}", "system": system,
                             "score": float(np.clip(round(score), 0, 100))})
    return pd.DataFrame(rows)


@needs_r
def test_system_effects_and_contrasts_are_in_score_points():
    fit = fit_lmm(_da())
    assert abs(fit.coefficient("systemnew").estimate - 6) < 1.5
    assert set(fit.random_effects) == {"rater", "item"}
    contrasts = pairwise_contrasts(fit, "system")
    assert contrasts.scale == "score points"
    new_vs_worse = next(c for c in contrasts.contrasts
                        if {c.level_a, c.level_b} == {"new", "worse"})
    assert abs(abs(new_vs_worse.estimate) - 10) < 2 and new_vs_worse.p_adjusted < 0.001


def test_without_r_the_fallback_says_it_is_not_a_mixed_model():
    fit = fit_lmm(_da(), engine="statsmodels")
    assert "NOT a mixed model" in fit.engine and fit.random_effects == {}
    assert any("random effects were NOT modelled" in w for w in fit.warnings)
    assert abs(fit.coefficient("systemnew").estimate - 6) < 1.5
    with pytest.raises(ValueError, match="binomial GLMM only"):
        fit_lmm(_da(), engine="pymer4")


def test_the_fallbacks_intervals_use_the_number_of_clusters_not_of_judgments():
    few = _da()[lambda d: d["rater"].isin(["r0", "r1", "r2", "r3"])]
    fit = fit_lmm(few, "score ~ system + (1|rater)", engine="statsmodels")
    assert set(fit.extra["df"].values()) == {3.0}  # four raters
    new = fit.coefficient("systemnew")
    from scipy import stats

    assert new.ci_high - new.estimate == pytest.approx(stats.t.ppf(0.975, 3) * new.se)
