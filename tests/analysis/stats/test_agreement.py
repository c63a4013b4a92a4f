"""Agreement coefficients pinned against published values, hand computations and invariants.

Sources of the pinned numbers (each test names its own):
- Wikipedia, "Cohen's kappa", worked example (50 grant proposals): kappa = 0.4.
- R irrCAC (Gwet) README/vignette: cont3x3abstractors (2 raters, 100 women), cac.raw4raters
  (Gwet 2014 Handbook p. 120; the same data as Krippendorff's 4-coder example) and
  distrib.6raters (15 patients, 6 psychiatrists).
- R vcd `Kappa` output for a 4x4 anxiety table (Equal-Spacing / Fleiss-Cohen weights).
- Fleiss (1971) psychiatric diagnoses, 30 patients x 6 raters: kappa = 0.430 (R irr
  kappam.fleiss 0.4302445, quoted in statsmodels' tests); Wikipedia "Fleiss' kappa" worked
  example (10 subjects, 14 raters, 5 categories): kappa = 0.210.
- Krippendorff (2011), "Computing Krippendorff's alpha-reliability", the 4 observers x 12
  units example with missing values: nominal .743, ordinal .815, interval .849, ratio .797.
- Shrout & Fleiss (1979), Table 2 data (6 targets x 4 judges) and Table 4 ICCs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats.agreement import (
    bootstrap_ci,
    category_order,
    cohen_kappa,
    fleiss_kappa,
    gwet_ac1,
    human_ceiling,
    icc,
    krippendorff_alpha,
    paired_ratings,
    percent_agreement,
    ratings_frame,
)
from kit.estimate import Estimate

# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def tidy_from_table(table: np.ndarray, categories: list | None = None) -> pd.DataFrame:
    """Two raters' ratings from a contingency table (rows: rater A, columns: rater B)."""
    categories = categories or list(range(table.shape[0]))
    rows, unit = [], 0
    for i, a in enumerate(categories):
        for j, b in enumerate(categories):
            for _ in range(int(table[i, j])):
                rows += [(unit, "A", a), (unit, "B", b)]
                unit += 1
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


def tidy_from_matrix(matrix: list[list[float]]) -> pd.DataFrame:
    """Tidy ratings from a raters x units matrix with NaN for 'not rated'."""
    rows = [
        (unit, rater, value)
        for rater, line in enumerate(matrix)
        for unit, value in enumerate(line)
        if not np.isnan(value)
    ]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


def tidy_from_distribution(distribution: np.ndarray) -> pd.DataFrame:
    """Tidy ratings from a units x categories count table (rater ids arbitrary, no missing)."""
    rows = []
    for unit, counts in enumerate(distribution):
        values = np.repeat(np.arange(len(counts)), counts)
        rows += [(unit, rater, int(v)) for rater, v in enumerate(values)]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


N = np.nan
# Krippendorff (2011) example = irrCAC cac.raw4raters: 4 observers (rows) x 12 units.
KRIPPENDORFF_4X12 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
]

# irrCAC cont3x3abstractors: Ectopic / AIU / NIU, abstractor 1 (rows) x abstractor 2.
ABSTRACTORS = np.array([[13, 0, 0], [0, 20, 7], [0, 4, 56]])

# irrCAC distrib.6raters: 15 patients x 5 diagnoses, counts of the 6 psychiatrists.
DISTRIB_6RATERS = np.array(
    [
        [0, 0, 0, 6, 0],
        [0, 3, 0, 0, 3],
        [0, 1, 4, 0, 1],
        [0, 0, 0, 0, 6],
        [0, 3, 0, 3, 0],
        [2, 0, 4, 0, 0],
        [0, 0, 4, 0, 2],
        [2, 0, 3, 1, 0],
        [2, 0, 0, 4, 0],
        [0, 0, 0, 0, 6],
        [1, 0, 0, 5, 0],
        [1, 1, 0, 4, 0],
        [0, 3, 3, 0, 0],
        [1, 0, 0, 5, 0],
        [0, 2, 0, 3, 1],
    ]
)

# Wikipedia "Fleiss' kappa" worked example: 10 subjects x 5 categories, 14 raters each.
WIKIPEDIA_FLEISS = np.array(
    [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
)

# Fleiss (1971): 30 patients x 6 raters, diagnoses 1-5 (R irr `diagnoses`).
FLEISS_1971 = np.array(
    [
        [4, 4, 4, 4, 4, 4],
        [2, 2, 2, 5, 5, 5],
        [2, 3, 3, 3, 3, 5],
        [5, 5, 5, 5, 5, 5],
        [2, 2, 2, 4, 4, 4],
        [1, 1, 3, 3, 3, 3],
        [3, 3, 3, 3, 5, 5],
        [1, 1, 3, 3, 3, 4],
        [1, 1, 4, 4, 4, 4],
        [5, 5, 5, 5, 5, 5],
        [1, 4, 4, 4, 4, 4],
        [1, 2, 4, 4, 4, 4],
        [2, 2, 2, 3, 3, 3],
        [1, 4, 4, 4, 4, 4],
        [2, 2, 4, 4, 4, 5],
        [3, 3, 3, 3, 3, 5],
        [1, 1, 1, 4, 5, 5],
        [1, 1, 1, 1, 1, 2],
        [2, 2, 4, 4, 4, 4],
        [1, 3, 3, 5, 5, 5],
        [5, 5, 5, 5, 5, 5],
        [2, 4, 4, 4, 4, 4],
        [2, 2, 4, 5, 5, 5],
        [1, 1, 4, 4, 4, 4],
        [1, 4, 4, 4, 4, 5],
        [2, 2, 2, 2, 2, 4],
        [1, 1, 1, 1, 5, 5],
        [2, 2, 4, 4, 4, 4],
        [1, 3, 3, 3, 3, 3],
        [5, 5, 5, 5, 5, 5],
    ]
)

# Shrout & Fleiss (1979) Table 2: 6 targets (rows) x 4 judges.
SHROUT_FLEISS = np.array(
    [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]
)


def shrout_fleiss_frame() -> pd.DataFrame:
    rows = [
        (f"t{t}", f"judge{j}", float(SHROUT_FLEISS[t, j]))
        for t in range(SHROUT_FLEISS.shape[0])
        for j in range(SHROUT_FLEISS.shape[1])
    ]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def test_ratings_frame_drops_missing_and_refuses_duplicates():
    df = pd.DataFrame({"unit": [1, 1, 2], "rater": ["a", "b", "a"], "value": [1, None, 2]})
    assert len(ratings_frame(df)) == 2
    dup = pd.DataFrame({"unit": [1, 1], "rater": ["a", "a"], "value": [1, 2]})
    with pytest.raises(ValueError, match="more than once"):
        ratings_frame(dup)
    with pytest.raises(ValueError, match="lacks column"):
        ratings_frame(pd.DataFrame({"unit": [1], "value": [1]}))


def test_category_order_uses_labels_and_checks_them():
    assert category_order(["b", "a", "b"]) == ["a", "b"]
    assert category_order([3, 1, 2]) == [1, 2, 3]
    assert category_order(["lo", "hi"], labels=["lo", "mid", "hi"]) == ["lo", "mid", "hi"]
    with pytest.raises(ValueError, match="not among labels"):
        category_order(["x"], labels=["lo", "hi"])


# --------------------------------------------------------------------------------------------
# Percent agreement and Cohen's kappa
# --------------------------------------------------------------------------------------------


def test_percent_agreement_gwet_handbook():
    # irrCAC pa.coeff.raw(cac.raw4raters): 0.8181818 (= 9/11 units' pairwise agreement).
    est = percent_agreement(tidy_from_matrix(KRIPPENDORFF_4X12))
    assert est.value == pytest.approx(9 / 11)
    assert est.value == pytest.approx(0.8181818, abs=1e-7)
    assert est.n == 11  # unit 12 has a single rating


def test_percent_agreement_two_raters_is_share_of_matching_units():
    # irrCAC pa2.table(cont3x3abstractors): 0.89.
    assert percent_agreement(tidy_from_table(ABSTRACTORS)).value == pytest.approx(0.89)


def test_cohen_kappa_wikipedia_two_by_two():
    # Wikipedia, Cohen's kappa: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no;
    # p_o = 0.7, p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5, kappa = 0.4.
    df = tidy_from_table(np.array([[20, 5], [10, 15]]), ["yes", "no"])
    pairs = paired_ratings(df, "A", "B")
    est = cohen_kappa(pairs["a"], pairs["b"])
    assert est.value == pytest.approx(0.4)
    assert est.n == 50


def test_cohen_kappa_irrcac_abstractors():
    # irrCAC kappa2.table(cont3x3abstractors): Cohen's kappa 0.7964094.
    pairs = paired_ratings(tidy_from_table(ABSTRACTORS), "A", "B")
    assert cohen_kappa(pairs["a"], pairs["b"]).value == pytest.approx(0.7964094, abs=1e-7)


ANXIETY = np.array([[11, 3, 1, 0], [1, 9, 0, 1], [0, 1, 10, 0], [1, 2, 0, 10]])
ANXIETY_LEVELS = ["Normal", "Moderate", "High", "Very high"]


def hand_weighted_kappa(table: np.ndarray, power: int) -> float:
    """1 - sum w O / sum w E with disagreement weights |i - j|^power, written out."""
    total = table.sum()
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    observed = expected = 0.0
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            w = abs(i - j) ** power
            observed += w * table[i, j] / total
            expected += w * rows[i] * cols[j] / total**2
    return 1 - observed / expected


def test_weighted_kappa_matches_vcd_output_and_hand_computation():
    # vcd::Kappa on this anxiety table: unweighted 0.7335, Equal-Spacing (linear) 0.7475,
    # Fleiss-Cohen (quadratic) 0.7664.
    pairs = paired_ratings(tidy_from_table(ANXIETY, ANXIETY_LEVELS), "A", "B")
    a, b = pairs["a"], pairs["b"]
    unweighted = cohen_kappa(a, b, labels=ANXIETY_LEVELS).value
    linear = cohen_kappa(a, b, weights="linear", labels=ANXIETY_LEVELS).value
    quadratic = cohen_kappa(a, b, weights="quadratic", labels=ANXIETY_LEVELS).value
    assert unweighted == pytest.approx(0.7335, abs=5e-5)
    assert linear == pytest.approx(0.7475, abs=5e-5)
    assert quadratic == pytest.approx(0.7664, abs=5e-5)
    # Hand computation: linear 1 - 0.2 / 0.792 = 74/99; checked by the loop too.
    assert linear == pytest.approx(74 / 99)
    assert linear == pytest.approx(hand_weighted_kappa(ANXIETY, 1))
    assert quadratic == pytest.approx(hand_weighted_kappa(ANXIETY, 2))


def test_weighted_kappa_refuses_unordered_strings_and_respects_label_order():
    pairs = paired_ratings(tidy_from_table(ANXIETY, ANXIETY_LEVELS), "A", "B")
    with pytest.raises(ValueError, match="pass labels"):
        cohen_kappa(pairs["a"], pairs["b"], weights="linear")
    alphabetical = sorted(ANXIETY_LEVELS)  # High, Moderate, Normal, Very high: a wrong order
    wrong = cohen_kappa(pairs["a"], pairs["b"], weights="linear", labels=alphabetical).value
    assert wrong != pytest.approx(74 / 99)


def test_weighted_kappa_numeric_values_use_numeric_order():
    pairs = paired_ratings(tidy_from_table(ANXIETY, [0, 1, 2, 3]), "A", "B")
    assert cohen_kappa(pairs["a"], pairs["b"], weights="linear").value == pytest.approx(74 / 99)
    # Numbers held in an object column (as values from a JSON field arrive) still count.
    a, b = pairs["a"].astype(object), pairs["b"].astype(object)
    assert cohen_kappa(a, b, weights="linear").value == pytest.approx(74 / 99)


def test_cohen_kappa_drops_missing_pairs_and_is_nan_when_undefined():
    est = cohen_kappa([1, 0, None, 1], [1, 0, 1, np.nan])
    assert est.n == 2 and est.value == pytest.approx(1.0)
    assert np.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]).value)
    with pytest.raises(ValueError, match="weights"):
        cohen_kappa([1], [1], weights="cubic")


# --------------------------------------------------------------------------------------------
# Fleiss' kappa
# --------------------------------------------------------------------------------------------


def test_fleiss_kappa_wikipedia_example():
    est = fleiss_kappa(tidy_from_distribution(WIKIPEDIA_FLEISS))
    assert est.value == pytest.approx(0.210, abs=5e-4)
    assert est.n == 10 and est.details["ratings_per_unit"] == 14


def test_fleiss_kappa_fleiss_1971():
    rows = [
        (patient, rater, int(FLEISS_1971[patient, rater]))
        for patient in range(30)
        for rater in range(6)
    ]
    df = pd.DataFrame(rows, columns=["unit", "rater", "value"])
    assert fleiss_kappa(df).value == pytest.approx(0.4302445, abs=1e-7)  # Fleiss: .430


def test_fleiss_kappa_irrcac_distribution_and_scott_pi():
    # irrCAC fleiss.kappa.dist(distrib.6raters): 0.4139265.
    assert fleiss_kappa(tidy_from_distribution(DISTRIB_6RATERS)).value == pytest.approx(
        0.4139265, abs=1e-7
    )
    # With two raters Fleiss' kappa is Scott's pi: irrCAC scott2.table 0.7962397.
    assert fleiss_kappa(tidy_from_table(ABSTRACTORS)).value == pytest.approx(0.7962397, abs=1e-7)


def test_fleiss_kappa_unbalanced_units():
    df = tidy_from_matrix(KRIPPENDORFF_4X12)
    with pytest.raises(ValueError, match="same number of ratings"):
        fleiss_kappa(df)
    est = fleiss_kappa(df, unbalanced="drop")
    assert est.details["ratings_per_unit"] == 4
    assert est.n == 8 and est.details["units_dropped"] == 4  # units 2-9 have 4 ratings
    balanced = df[df["unit"].isin(range(1, 9))]
    assert est.value == pytest.approx(fleiss_kappa(balanced).value)


# --------------------------------------------------------------------------------------------
# Krippendorff's alpha
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "published"),
    [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)],
)
def test_krippendorff_alpha_krippendorff_2011(level, published):
    est = krippendorff_alpha(tidy_from_matrix(KRIPPENDORFF_4X12), level)
    assert est.value == pytest.approx(published, abs=5e-4)
    assert est.n == 11  # unit 12 is not pairable
    assert level in est.method


def test_krippendorff_alpha_nominal_matches_irrcac():
    # irrCAC krippen.alpha.raw(cac.raw4raters) 0.74342; krippen2.table(abstractors) 0.7972585;
    # krippen.alpha.dist(distrib.6raters) 0.4204384.
    df = tidy_from_matrix(KRIPPENDORFF_4X12)
    assert krippendorff_alpha(df, "nominal").value == pytest.approx(0.74342, abs=1e-5)
    abstractors = tidy_from_table(ABSTRACTORS, ["Ectopic", "AIU", "NIU"])
    assert krippendorff_alpha(abstractors, "nominal").value == pytest.approx(0.7972585, abs=1e-7)
    six = tidy_from_distribution(DISTRIB_6RATERS)
    assert krippendorff_alpha(six, "nominal").value == pytest.approx(0.4204384, abs=1e-7)


def test_krippendorff_alpha_level_is_required_and_checked():
    df = tidy_from_matrix(KRIPPENDORFF_4X12)
    with pytest.raises(TypeError):
        krippendorff_alpha(df)  # type: ignore[call-arg]  # no silent interval default
    with pytest.raises(ValueError, match="level"):
        krippendorff_alpha(df, "categorical")  # type: ignore[arg-type]


def test_krippendorff_alpha_ordinal_on_labels_equals_numeric_codes():
    df = tidy_from_matrix(KRIPPENDORFF_4X12)
    names = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    named = df.assign(value=df["value"].map(names))
    order = ["one", "two", "three", "four", "five"]
    assert krippendorff_alpha(named, "ordinal", labels=order).value == pytest.approx(
        krippendorff_alpha(df, "ordinal").value
    )
    with pytest.raises(ValueError, match="labels"):
        krippendorff_alpha(named, "ordinal")
    with pytest.raises(ValueError):
        krippendorff_alpha(named, "interval")


def test_krippendorff_alpha_nan_when_single_value():
    df = pd.DataFrame({"unit": [1, 1, 2, 2], "rater": ["a", "b"] * 2, "value": [3] * 4})
    assert np.isnan(krippendorff_alpha(df, "nominal").value)


# --------------------------------------------------------------------------------------------
# Gwet's AC1
# --------------------------------------------------------------------------------------------


def test_gwet_ac1_gwet_handbook_missing_ratings():
    # irrCAC gwet.ac1.raw(cac.raw4raters): pa 0.8181818, pe 0.1903212, AC1 0.77544.
    est = gwet_ac1(tidy_from_matrix(KRIPPENDORFF_4X12))
    assert est.details["pa"] == pytest.approx(0.8181818, abs=1e-7)
    assert est.details["pe"] == pytest.approx(0.1903212, abs=1e-7)
    assert est.value == pytest.approx(0.77544, abs=1e-5)


def test_gwet_ac1_irrcac_distribution():
    # irrCAC gwet.ac1.dist(distrib.6raters): AC1 0.4448007, pa 0.5511111, pe 0.1914815.
    est = gwet_ac1(tidy_from_distribution(DISTRIB_6RATERS))
    assert est.value == pytest.approx(0.4448007, abs=1e-7)
    assert est.details["pa"] == pytest.approx(0.5511111, abs=1e-7)
    assert est.details["pe"] == pytest.approx(0.1914815, abs=1e-7)


def test_gwet_ac1_two_raters_published_and_by_hand():
    # irrCAC gwet.ac1.table(cont3x3abstractors): 0.8493305. By hand: pa = 89/100;
    # pi_k = (row_k + col_k) / 200 = (26, 51, 123) / 200; pe = sum pi (1 - pi) / (3 - 1).
    pi = np.array([26, 51, 123]) / 200
    pe = float(np.sum(pi * (1 - pi)) / 2)
    by_hand = (0.89 - pe) / (1 - pe)
    est = gwet_ac1(tidy_from_table(ABSTRACTORS))
    assert est.value == pytest.approx(by_hand)
    assert est.value == pytest.approx(0.8493305, abs=1e-7)


def test_gwet_ac1_unobserved_labels_change_chance_term():
    df = tidy_from_table(ABSTRACTORS)
    assert gwet_ac1(df, labels=[0, 1, 2, 3]).details["q"] == 4
    assert gwet_ac1(df, labels=[0, 1, 2, 3]).value != pytest.approx(gwet_ac1(df).value)


# --------------------------------------------------------------------------------------------
# ICC
# --------------------------------------------------------------------------------------------


SHROUT_FLEISS_TABLE4 = {
    "ICC1": 0.17,
    "ICC2": 0.29,
    "ICC3": 0.71,
    "ICC1k": 0.44,
    "ICC2k": 0.62,
    "ICC3k": 0.91,
}


def test_icc_shrout_fleiss_1979():
    result = icc(shrout_fleiss_frame())
    assert set(result) == set(SHROUT_FLEISS_TABLE4)
    for name, published in SHROUT_FLEISS_TABLE4.items():
        assert result[name].value == pytest.approx(published, abs=0.005), name
        assert result[name].n == 6
        assert result[name].ci_low < result[name].value < result[name].ci_high
    # Exact ANOVA values: BMS = 11.24, WMS = 6.26, JMS = 32.49, EMS = 1.02.
    assert result["ICC3"].value == pytest.approx((11.2417 - 1.0194) / (11.2417 + 3 * 1.0194), 1e-3)
    assert result["ICC3"].details["F"] == pytest.approx(11.027, abs=1e-3)


def test_icc_confidence_intervals_are_not_rounded():
    result = icc(shrout_fleiss_frame())
    low = result["ICC3"].ci_low
    assert low == pytest.approx(0.3425, abs=1e-4)
    assert low != round(low, 2)


def test_icc_listwise_on_request_drops_incomplete_units_and_says_so():
    # Listwise deletion is no longer the default (an incomplete design goes to REML, see
    # test_agreement_design.py); asked for explicitly, it reports and warns what it dropped.
    df = shrout_fleiss_frame()
    extra = pd.DataFrame(
        {"unit": ["t6", "t6", "t6"], "rater": ["judge0", "judge1", "judge2"], "value": [5, 5, 5]}
    )
    result = icc(pd.concat([df, extra], ignore_index=True), method="listwise")
    assert result["ICC2"].value == pytest.approx(0.2898, abs=1e-4)
    assert result["ICC2"].details["units_dropped"] == 1
    assert result["ICC2"].excluded == {"units_dropped_incomplete": 1}
    assert any("listwise deletion: 1 of 7 units" in w for w in result["ICC2"].warnings)
    # Restricting raters keeps t6 (rated by judges 0-2) and makes the design complete again.
    three = icc(pd.concat([df, extra], ignore_index=True), raters=["judge0", "judge1", "judge2"])
    assert three["ICC1"].n == 7 and three["ICC1"].details["raters"] == 3
    with pytest.raises(ValueError, match="complete units"):
        icc(df[df["unit"] == "t0"])


# --------------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------------


def test_bootstrap_is_deterministic_and_brackets_the_estimate():
    df = tidy_from_matrix(KRIPPENDORFF_4X12)

    def statistic(d: pd.DataFrame) -> Estimate:
        return krippendorff_alpha(d, "nominal")

    first = bootstrap_ci(df, statistic, n_boot=200, seed=7)
    again = bootstrap_ci(df, statistic, n_boot=200, seed=7)
    other = bootstrap_ci(df, statistic, n_boot=200, seed=8)
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert (first.ci_low, first.ci_high) != (other.ci_low, other.ci_high)
    assert first.value == pytest.approx(0.743, abs=5e-4)
    assert first.ci_low <= first.value <= first.ci_high
    assert first.n == 12


def test_bootstrap_counts_a_unit_drawn_twice_as_two_units():
    df = tidy_from_matrix(KRIPPENDORFF_4X12)
    est = bootstrap_ci(df, lambda d: d["unit"].nunique(), n_boot=50, seed=1)
    assert est.ci_low == est.ci_high == 12


def test_bootstrap_by_item_keeps_units_of_an_item_together():
    rng = np.random.default_rng(0)
    rows = [
        (f"i{i}-u{u}", f"i{i}", f"r{r}", int(rng.integers(0, 2)))
        for i in range(10)
        for u in range(3)
        for r in range(2)
    ]
    df = pd.DataFrame(rows, columns=["unit", "item", "rater", "value"])
    est = bootstrap_ci(df, lambda d: d.groupby("item")["unit"].nunique().min(), cluster="item")
    assert est.ci_low == est.ci_high == 3  # every resampled item still has its 3 units
    assert est.n == 10
    with pytest.raises(ValueError, match="no such column"):
        bootstrap_ci(df.drop(columns="item"), percent_agreement, cluster="item")


def test_bootstrap_percentile_ci_close_to_normal_theory_for_a_mean():
    rng = np.random.default_rng(3)
    values = rng.normal(10, 2, size=400)
    df = pd.DataFrame({"unit": range(400), "rater": "r", "value": values})
    est = bootstrap_ci(df, lambda d: d["value"].mean(), n_boot=1000, seed=0)
    half = 1.96 * values.std(ddof=1) / np.sqrt(400)
    assert est.ci_low == pytest.approx(values.mean() - half, abs=0.04)
    assert est.ci_high == pytest.approx(values.mean() + half, abs=0.04)


def test_bootstrap_skips_undefined_replicates():
    # Two units, one with both raters saying 1, one saying 0: a resample of the same unit
    # twice has a single category, where kappa is undefined.
    df = pd.DataFrame({"unit": [1, 1, 2, 2], "rater": ["a", "b", "a", "b"], "value": [1, 1, 0, 0]})

    def kappa(d: pd.DataFrame) -> float:
        pairs = paired_ratings(d, "a", "b")
        return cohen_kappa(pairs["a"], pairs["b"]).value

    est = bootstrap_ci(df, kappa, n_boot=100, seed=0)
    assert 0 < est.details["n_invalid"] < 100
    assert est.ci_low == est.ci_high == 1.0


# --------------------------------------------------------------------------------------------
# Human ceiling
# --------------------------------------------------------------------------------------------


def test_human_ceiling_by_hand_on_krippendorff_data():
    ceiling = human_ceiling(tidy_from_matrix(KRIPPENDORFF_4X12))
    first = ceiling.humans[0]
    # Observer 0 rated units 1-9; the others' majority matches it on 8 of them; on unit 6 the
    # others say 2, 3, 4 (a three-way tie, split 1/3 each) and observer 0 says 1.
    assert first.rater == 0 and first.n_units == 9
    assert first.percent_agreement == pytest.approx(8 / 9)
    assert ceiling.mean_percent_agreement == pytest.approx(
        np.mean([r.percent_agreement for r in ceiling.humans])
    )


def ceiling_frame() -> pd.DataFrame:
    """Three humans who agree on 6 units, a proxy right on 4 of them, and a tie unit."""
    truth = [1, 0, 1, 1, 0, 0]
    proxy = [1, 0, 0, 1, 1, 0]
    rows = [(u, h, v) for u, v in enumerate(truth) for h in ("h1", "h2", "h3")]
    rows += [(u, "llm", v) for u, v in enumerate(proxy)]
    return pd.DataFrame(rows, columns=["unit", "rater", "value"])


def test_human_ceiling_perfect_humans_and_a_proxy():
    ceiling = human_ceiling(ceiling_frame(), proxies=["llm"])
    assert [r.rater for r in ceiling.humans] == ["h1", "h2", "h3"]
    assert ceiling.mean_kappa == pytest.approx(1.0)
    assert ceiling.mean_percent_agreement == pytest.approx(1.0)
    (llm,) = ceiling.proxies
    assert llm.rater == "llm"
    assert llm.percent_agreement == pytest.approx(4 / 6)
    # 2x2 of proxy vs truth: 2 both 1, 1 proxy 0 / truth 1, 1 proxy 1 / truth 0, 2 both 0:
    # p_o = 4/6, p_e = 1/2, kappa = 1/3.
    assert llm.kappa == pytest.approx(1 / 3)
    assert llm.n_units == 18  # 6 units for each of the 3 held-out humans


@pytest.mark.parametrize(
    ("tie_break", "percent", "units"), [("split", 0.5, 1), ("lowest", 0.0, 1), ("drop", None, 0)]
)
def test_human_ceiling_tie_breaks(tie_break, percent, units):
    # h1 says 1; the two other humans split 1/0, a tie (the lowest category is 0).
    df = pd.DataFrame({"unit": [1, 1, 1], "rater": ["h1", "h2", "h3"], "value": [1, 1, 0]})
    row = human_ceiling(df, tie_break=tie_break).humans[0]
    assert row.n_units == units
    if percent is None:
        assert np.isnan(row.percent_agreement)
    else:
        assert row.percent_agreement == pytest.approx(percent)


def test_human_ceiling_custom_statistic_and_validation():
    def mismatch(mine, reference, weight):
        return float(np.sum(weight * (mine != reference)))

    ceiling = human_ceiling(ceiling_frame(), proxies=["llm"], statistic=mismatch)
    assert ceiling.mean_extra == 0.0
    assert ceiling.proxies[0].extra == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two humans"):
        human_ceiling(ceiling_frame(), humans=["h1"], proxies=["llm"])
    with pytest.raises(ValueError, match="tie_break"):
        human_ceiling(ceiling_frame(), tie_break="coin")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

ratings_lists = st.lists(st.integers(min_value=0, max_value=4), min_size=2, max_size=30)


@settings(max_examples=40, deadline=None)
@given(values=ratings_lists, n_raters=st.integers(min_value=2, max_value=4))
def test_alpha_is_one_for_identical_raters(values, n_raters):
    if len(set(values)) < 2:
        values = [*values, (values[0] + 1) % 5]
    rows = [(u, r, v) for u, v in enumerate(values) for r in range(n_raters)]
    df = pd.DataFrame(rows, columns=["unit", "rater", "value"])
    for level in ("nominal", "ordinal", "interval"):
        assert krippendorff_alpha(df, level).value == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=3)),
        min_size=2,
        max_size=40,
    ),
    weights=st.sampled_from([None, "linear", "quadratic"]),
)
def test_cohen_kappa_is_symmetric(pairs, weights):
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    forward = cohen_kappa(a, b, weights=weights).value
    backward = cohen_kappa(b, a, weights=weights).value
    if np.isnan(forward):
        assert np.isnan(backward)
    else:
        assert forward == pytest.approx(backward)
        assert forward <= 1 + 1e-12


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6),
            st.integers(min_value=0, max_value=3),
            st.sampled_from(["a", "b", "c"]),
        ),
        min_size=1,
        max_size=40,
        unique_by=lambda cell: (cell[0], cell[1]),
    )
)
def test_percent_agreement_lies_in_unit_interval(cells):
    df = pd.DataFrame(cells, columns=["unit", "rater", "value"])
    value = percent_agreement(df).value
    assert np.isnan(value) or 0.0 <= value <= 1.0
