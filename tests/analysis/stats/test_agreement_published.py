"""Standard errors, CIs, weights, ICCs and variance components pinned to published values and
R output; the GPL packages `krippendorff` and `pingouin` appear here only as test oracles.

Sources:
- irrCAC (Gwet) README and weighting vignette, R package 1.0 (github.com/kgwet/irrCAC):
  cac.raw4raters (= Krippendorff 2011's 4 x 12 data), distrib.6raters, cont3x3abstractors.
- R irr::icc on irr's `anxiety` data (20 subjects x 3 raters): ICC(A,1) = 0.198,
  F(19, 39.7) = 1.83, 95% CI -0.039 < ICC < 0.494.
- Shrout & Fleiss (1979) Table 2 data and Table 4 ICCs.
- lme4 1.1.31 on R 4.2.2 for REML variance components (R code beside the numbers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats.agreement import (
    agreement_weights,
    bootstrap_ci,
    cohen_kappa,
    fleiss_kappa,
    gwet_ac1,
    human_ceiling,
    icc,
    krippendorff_alpha,
    pairwise_kappas,
    percent_agreement,
    variance_components,
)

N = np.nan
KRIPPENDORFF_4X12 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
]
DISTRIB_6RATERS = np.array([
    [0, 0, 0, 6, 0], [0, 3, 0, 0, 3], [0, 1, 4, 0, 1], [0, 0, 0, 0, 6], [0, 3, 0, 3, 0],
    [2, 0, 4, 0, 0], [0, 0, 4, 0, 2], [2, 0, 3, 1, 0], [2, 0, 0, 4, 0], [0, 0, 0, 0, 6],
    [1, 0, 0, 5, 0], [1, 1, 0, 4, 0], [0, 3, 3, 0, 0], [1, 0, 0, 5, 0], [0, 2, 0, 3, 1],
])
ABSTRACTORS = np.array([[13, 0, 0], [0, 20, 7], [0, 4, 56]])
# irr::anxiety: rater1, rater2, rater3 for 20 subjects.
ANXIETY = [
    (3, 3, 2), (3, 6, 1), (3, 4, 4), (4, 6, 4), (5, 2, 3), (5, 4, 2), (2, 2, 1), (3, 4, 6),
    (5, 3, 1), (2, 3, 1), (2, 2, 1), (6, 3, 2), (1, 3, 3), (5, 3, 3), (2, 2, 1), (2, 2, 1),
    (1, 1, 3), (2, 3, 3), (4, 3, 2), (3, 4, 2),
]
SHROUT_FLEISS = np.array(
    [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]
)


def from_matrix(matrix) -> pd.DataFrame:
    rows = [(u, r, v) for r, line in enumerate(matrix) for u, v in enumerate(line)
            if not np.isnan(v)]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


def from_distribution(distribution: np.ndarray) -> pd.DataFrame:
    rows = []
    for unit, counts in enumerate(distribution):
        values = np.repeat(np.arange(len(counts)), counts)
        rows += [(unit, rater, int(v)) for rater, v in enumerate(values)]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


def from_table(table: np.ndarray) -> tuple[list, list]:
    a, b = [], []
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            a += [i] * int(table[i, j])
            b += [j] * int(table[i, j])
    return a, b


def wide(matrix: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame([(f"t{t}", f"j{j}", float(matrix[t, j])) for t in range(matrix.shape[0])
                         for j in range(matrix.shape[1])], columns=["unit", "rater", "value"])


# --------------------------------------------------------------------------------------------
# Gwet's variance: percent agreement, AC1/AC2, Fleiss' kappa with missing ratings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "kwargs", "value", "se", "ci_low"),
    [
        # irrCAC README: pa.coeff.raw / gwet.ac1.raw / fleiss.kappa.raw(cac.raw4raters)
        (percent_agreement, {}, 0.8181818, 0.12561, 0.542),
        (gwet_ac1, {}, 0.77544, 0.14295, 0.461),
        (fleiss_kappa, {"unbalanced": "gwet"}, 0.76117, 0.15302, 0.424),
        # irrCAC weighting vignette: the same with weights = "quadratic"
        (percent_agreement, {"weights": "quadratic"}, 0.9753788, 0.09062, 0.776),
        (gwet_ac1, {"weights": "quadratic"}, 0.914, 0.10396, 0.685),
        (fleiss_kappa, {"unbalanced": "gwet", "weights": "quadratic"}, 0.86494, 0.14603, 0.544),
    ],
)
def test_gwet_family_on_krippendorffs_data_matches_irrcac(function, kwargs, value, se, ci_low):
    est = function(from_matrix(KRIPPENDORFF_4X12), **kwargs)
    assert est.value == pytest.approx(value, abs=5e-6 if value != 0.914 else 5e-4)
    assert est.se == pytest.approx(se, abs=5e-6)
    assert est.ci_low == pytest.approx(ci_low, abs=5e-4)
    assert est.ci_high == 1.0  # irrCAC caps the upper bound at 1
    assert est.n_units == 12 and est.n == 11 and est.n_raters == 4 and est.n_ratings == 41


def test_ac2_chance_agreement_matches_irrcac():
    # weighting vignette: gwet.ac1.raw(cac.raw4raters, weights = "quadratic"): pe 0.7137044;
    # fleiss.kappa.raw(..., "quadratic"): pe 0.8177083.
    df = from_matrix(KRIPPENDORFF_4X12)
    assert gwet_ac1(df, weights="quadratic").details["pe"] == pytest.approx(0.7137044, abs=1e-7)
    assert fleiss_kappa(df, unbalanced="gwet", weights="quadratic").details["pe"] == \
        pytest.approx(0.8177083, abs=1e-7)


def test_gwet_variance_on_distribution_data_matches_irrcac():
    # irrCAC README: gwet.ac1.dist(distrib.6raters) 0.4448007, stderr 0.08418757,
    # (0.264, 0.625); fleiss.kappa.dist 0.4139265, stderr 0.08119291, (0.24, 0.588).
    df = from_distribution(DISTRIB_6RATERS)
    ac1 = gwet_ac1(df)
    assert ac1.se == pytest.approx(0.08418757, abs=1e-8)
    assert (round(ac1.ci_low, 3), round(ac1.ci_high, 3)) == (0.264, 0.625)
    fleiss = fleiss_kappa(df)  # balanced: the classic formula and Gwet's coincide
    assert fleiss.value == pytest.approx(0.4139265, abs=1e-7)
    assert fleiss.se == pytest.approx(0.08119291, abs=1e-8)
    assert (round(fleiss.ci_low, 2), round(fleiss.ci_high, 3)) == (0.24, 0.588)
    assert fleiss_kappa(df, unbalanced="gwet").value == pytest.approx(fleiss.value)


def test_agreement_weights_match_irrcac_vignette():
    # irrCAC weighting vignette, linear/ordinal/quadratic.weights(1:3).
    assert agreement_weights([1, 2, 3], "linear")[0].tolist() == [1.0, 0.5, 0.0]
    assert agreement_weights([1, 2, 3], "ordinal")[0] == pytest.approx([1, 0.6666667, 0])
    assert agreement_weights([1, 2, 3], "quadratic")[0].tolist() == [1.0, 0.75, 0.0]
    assert agreement_weights(["lo", "mid", "hi"], "quadratic")[0].tolist() == [1.0, 0.75, 0.0]
    assert (agreement_weights([1, 2, 3], None) == np.eye(3)).all()


# --------------------------------------------------------------------------------------------
# Cohen's kappa: Fleiss-Cohen-Everitt standard error
# --------------------------------------------------------------------------------------------


def test_cohen_kappa_se_and_ci_match_irrcac_kappa2_table():
    # irrCAC README: kappa2.table(cont3x3abstractors) 0.7964094, se 0.05891072, (0.68, 0.913);
    # weighting vignette with quadratic weights: 0.8921569, se 0.03535151, (0.822, 0.962).
    a, b = from_table(ABSTRACTORS)
    plain = cohen_kappa(a, b)
    assert plain.se == pytest.approx(0.05891072, abs=1e-8)
    assert (round(plain.ci_low, 3), round(plain.ci_high, 3)) == (0.68, 0.913)
    quadratic = cohen_kappa(a, b, weights="quadratic")
    assert quadratic.value == pytest.approx(0.8921569, abs=1e-7)
    assert quadratic.se == pytest.approx(0.03535151, abs=1e-8)
    assert (round(quadratic.ci_low, 3), round(quadratic.ci_high, 3)) == (0.822, 0.962)


def test_pairwise_kappas_rows_equal_cohen_kappa_and_mean_has_bootstrap_ci():
    df = from_matrix(KRIPPENDORFF_4X12)
    rows, means = pairwise_kappas(df, [(0, 1), (1, 3)], weightings=(None, "linear"),
                                  n_boot=500, seed=3)
    shared = df.pivot(index="unit", columns="rater", values="value").dropna(subset=[0, 1])
    direct = cohen_kappa(shared[0], shared[1], labels=[1, 2, 3, 4, 5])
    assert rows[0]["unweighted"] == pytest.approx(direct.value)
    assert rows[0]["ci"]["unweighted"] == pytest.approx([direct.ci_low, direct.ci_high])
    assert rows[0]["n"] == 9
    mean = means["unweighted"]
    assert mean.value == pytest.approx((rows[0]["unweighted"] + rows[1]["unweighted"]) / 2)
    assert mean.ci_low <= mean.value <= mean.ci_high and mean.n_boot == 500


# --------------------------------------------------------------------------------------------
# ICC: ANOVA on complete designs, REML otherwise
# --------------------------------------------------------------------------------------------


def test_icc_agreement_on_irr_anxiety():
    # R irr: icc(anxiety, model = "twoway", type = "agreement"): ICC(A,1) = 0.198,
    # F(19,39.7) = 1.83, 95% CI -0.039 < ICC < 0.494.
    df = wide(np.array(ANXIETY))
    result = icc(df)
    est = result["ICC2"]
    assert est.value == pytest.approx(0.198, abs=5e-4)
    assert est.ci_low == pytest.approx(-0.039, abs=5e-4)
    assert est.ci_high == pytest.approx(0.494, abs=5e-4)
    assert est.details["satterthwaite_df"] == pytest.approx(39.7, abs=0.05)
    assert est.details["F"] == pytest.approx(1.83, abs=5e-3)
    assert est.n_units == 20 and est.n_raters == 3 and "ANOVA" in est.method


def test_icc_reml_on_complete_data_reproduces_shrout_fleiss():
    # On a balanced design with positive components REML = ANOVA, so the REML path gives
    # Shrout & Fleiss' Table 4 too. R: lmer(value ~ 1 + (1|unit) + (1|rater)) on Table 2:
    # unit 2.555562838, rater 5.244450767, Residual 1.019443365; REMLcrit 91.27866712.
    components = variance_components(wide(SHROUT_FLEISS))
    assert components.item == pytest.approx(2.555562838, rel=1e-5)
    assert components.rater == pytest.approx(5.244450767, rel=1e-5)
    assert components.residual == pytest.approx(1.019443365, rel=1e-5)
    assert components.reml_criterion == pytest.approx(91.27866712, abs=1e-6)
    result = icc(wide(SHROUT_FLEISS), method="reml", n_boot=50)
    for name, published in {"ICC2": 0.29, "ICC3": 0.71, "ICC2k": 0.62, "ICC3k": 0.91}.items():
        assert result[name].value == pytest.approx(published, abs=0.005), name


def test_variance_components_match_lme4_on_a_latin_square():
    # 15 outputs x 6 raters, each output rated by raters u, u+1, u+3 (mod 6). R:
    #   d <- read.csv("latin.csv"); d$unit <- factor(d$unit); d$rater <- factor(d$rater)
    #   m <- lmer(value ~ 1 + (1|unit) + (1|rater), data = d, REML = TRUE)
    #   -> unit 0.527469261882, rater 0.004114159608, Residual 0.419852157644,
    #      (Intercept) 2.977454305, REMLcrit 112.6575293
    #   m1 <- lmer(value ~ 1 + (1|unit), data = d) -> unit 0.5333333586,
    #      Residual 0.4222222155, (Intercept) 2.977777778, REMLcrit 112.6653063
    values = "242444334332333232344423323112545323434333231"
    cells = [(u, r) for u in range(15) for r in (u % 6, (u + 1) % 6, (u + 3) % 6)]
    df = pd.DataFrame({"unit": [f"o{u:02d}" for u, _ in cells],
                       "rater": [f"r{r}" for _, r in cells], "value": [float(v) for v in values]})
    crossed = variance_components(df)
    assert crossed.item == pytest.approx(0.527469261882, abs=2e-6)
    assert crossed.rater == pytest.approx(0.004114159608, abs=2e-6)
    assert crossed.residual == pytest.approx(0.419852157644, abs=2e-6)
    assert crossed.intercept == pytest.approx(2.977454305, abs=1e-6)
    assert crossed.reml_criterion == pytest.approx(112.6575293, abs=1e-6)
    oneway = variance_components(df, crossed=False)
    assert oneway.item == pytest.approx(0.5333333586, abs=2e-6)
    assert oneway.residual == pytest.approx(0.4222222155, abs=2e-6)
    assert oneway.reml_criterion == pytest.approx(112.6653063, abs=1e-6)


def test_icc_anova_equals_pingouin_oracle_on_random_complete_data():
    pingouin = pytest.importorskip("pingouin")
    rng = np.random.default_rng(5)
    matrix = rng.normal(0, 1, (12, 1)) + rng.normal(0, 0.5, (1, 4)) + rng.normal(0, 1, (12, 4))
    df = wide(matrix)
    ours = icc(df)
    saved = dict(pingouin.options)
    pingouin.options.update({"round": None, "round.column.CI95": None})  # unrounded CIs
    try:
        theirs = pingouin.intraclass_corr(df, targets="unit", raters="rater", ratings="value")
    finally:
        pingouin.options.clear()
        pingouin.options.update(saved)
    for (name, est), (_, row) in zip(ours.items(), theirs.iterrows(), strict=True):
        assert est.value == pytest.approx(row["ICC"], abs=1e-12), name
        assert est.p_value == pytest.approx(row["pval"], abs=1e-12), name
        assert [est.ci_low, est.ci_high] == pytest.approx(list(row["CI95"]), abs=1e-12), name


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000))
def test_reml_iccs_stay_in_range_on_random_incomplete_designs(seed):
    rng = np.random.default_rng(seed)
    n_units, n_raters = int(rng.integers(4, 20)), int(rng.integers(2, 7))
    rows = [(u, r, float(rng.integers(1, 6))) for u in range(n_units)
            for r in rng.choice(n_raters, size=int(rng.integers(1, n_raters + 1)), replace=False)]
    df = pd.DataFrame(rows, columns=["unit", "rater", "value"])
    try:
        result = icc(df, method="reml", n_boot=20, seed=seed)
    except ValueError:
        return  # refused: fewer than 2 units with 2 ratings, or a single rater
    for name, est in result.items():
        assert np.isnan(est.value) or 0 <= est.value <= 1, name
        if est.ci_low is not None:
            assert est.ci_low <= est.ci_high, name


# --------------------------------------------------------------------------------------------
# Krippendorff's alpha: oracle and invariances
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_alpha_equals_krippendorff_package_oracle(level):
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(11)
    matrix = rng.integers(1, 6, size=(7, 40)).astype(float)
    matrix += (np.arange(40) % 5 == 0)[None, :] * rng.integers(0, 2, size=(7, 40))
    matrix[rng.random(matrix.shape) < 0.3] = np.nan
    ours = krippendorff_alpha(from_matrix(matrix), level).value
    theirs = krippendorff.alpha(reliability_data=matrix, level_of_measurement=level)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_alpha_with_many_distinct_values_equals_oracle_and_has_a_ci():
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(2)
    truth = rng.gamma(2.0, 1.0, 300)
    # One decimal: ~100 distinct values, beyond the 64 of the coincidence-matrix bootstrap
    # (the package oracle builds a values x values matrix, slow for many more).
    matrix = np.round(np.abs(truth[None, :] + rng.normal(0, 0.5, (4, 300))), 1)
    matrix[rng.random(matrix.shape) < 0.2] = np.nan
    df = from_matrix(matrix)
    assert np.unique(matrix[~np.isnan(matrix)]).size > 64
    for level in ("interval", "ratio", "ordinal"):
        theirs = krippendorff.alpha(reliability_data=matrix, level_of_measurement=level)
        assert krippendorff_alpha(df, level).value == pytest.approx(theirs, abs=1e-10), level
    interval = krippendorff_alpha(df, "interval", n_boot=400, seed=1)
    assert interval.ci_low < interval.value < interval.ci_high  # > 64 values: moments path
    ratio = krippendorff_alpha(df, "ratio", n_boot=400)
    assert ratio.ci_low is None and any("no bootstrap CI" in w for w in ratio.warnings)


def test_vectorised_alpha_bootstrap_agrees_with_the_pandas_bootstrap():
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 3, 60)
    rows = [(f"u{u}", f"r{r}", int(truth[u] if rng.random() < 0.7 else rng.integers(0, 3)),
             f"i{u // 2}") for u in range(60) for r in range(3)]
    df = pd.DataFrame(rows, columns=["unit", "rater", "value", "item"])
    fast = krippendorff_alpha(df, "nominal", n_boot=2000, seed=0, cluster="item")
    slow = bootstrap_ci(df, lambda d: krippendorff_alpha(d, "nominal"), n_boot=600, seed=0,
                        cluster="item")
    assert fast.value == pytest.approx(slow.value)
    assert fast.ci_low == pytest.approx(slow.ci_low, abs=0.04)
    assert fast.ci_high == pytest.approx(slow.ci_high, abs=0.04)
    assert fast.n_boot == 2000 and fast.cluster == "item"


@settings(max_examples=40, deadline=None)
@given(
    cells=st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 3), st.integers(1, 3)),
        min_size=4, max_size=40, unique_by=lambda c: (c[0], c[1])),
    level=st.sampled_from(["nominal", "ordinal"]),
)
def test_alpha_ignores_unused_categories_of_the_declared_scale(cells, level):
    df = pd.DataFrame(cells, columns=["unit", "rater", "value"])
    observed = krippendorff_alpha(df, level, labels=[1, 2, 3]).value
    declared = krippendorff_alpha(df, level, labels=[0, 1, 2, 3, 4, 5]).value
    assert (np.isnan(observed) and np.isnan(declared)) or observed == pytest.approx(declared)


@settings(max_examples=40, deadline=None)
@given(units=st.lists(st.lists(st.integers(0, 2), min_size=4, max_size=4), min_size=2,
                      max_size=15))
def test_gwet_fleiss_equals_fleiss_on_balanced_data(units):
    # 4 ratings on every unit: the missing-data formulation must reduce to Fleiss (1971).
    df = from_distribution(np.array([np.bincount(u, minlength=3) for u in units]))
    assert fleiss_kappa(df, unbalanced="gwet", labels=[0, 1, 2]).value == pytest.approx(
        fleiss_kappa(df, labels=[0, 1, 2]).value, nan_ok=True)


# --------------------------------------------------------------------------------------------
# Human ceiling: the vectorised rewrite and its bootstrap
# --------------------------------------------------------------------------------------------


def test_ceiling_bootstrap_agrees_with_the_pandas_bootstrap():
    rng = np.random.default_rng(8)
    truth = rng.integers(0, 2, 40)
    rows = [(f"u{u}", h, int(truth[u] if rng.random() < 0.8 else 1 - truth[u]), f"i{u // 2}")
            for u in range(40) for h in ("h1", "h2", "h3", "h4")]
    rows += [(f"u{u}", "llm", int(truth[u] if rng.random() < 0.7 else 1 - truth[u]), f"i{u // 2}")
             for u in range(40)]
    df = pd.DataFrame(rows, columns=["unit", "rater", "value", "item"])
    fast = human_ceiling(df, proxies=["llm"], n_boot=2000, seed=0, cluster="item")
    slow = bootstrap_ci(df, lambda d: human_ceiling(d, proxies=["llm"]).mean_kappa,
                        n_boot=300, seed=0, cluster="item")
    assert fast.mean_kappa == pytest.approx(slow.value)
    assert fast.kappa_ci == pytest.approx((slow.ci_low, slow.ci_high), abs=0.06)
    assert fast.n_units == 40 and fast.n_humans == 4 and fast.n_proxies == 1
