"""The agreement defects of the issue, one test (or a few) each; every one failed on the code
before the fix (listwise ICC, Fleiss on complete units only, observed categories, no CIs, no
n/exclusions/warnings beside the numbers).

Reference numbers: irrCAC's README (Gwet) for cac.raw4raters (= Krippendorff 2011's data);
lme4 for the variance components (R code next to each).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.stats import pipeline
from analysis.stats.agreement import fleiss_kappa, icc
from kit.jsonable import to_jsonable

N = np.nan
# Krippendorff (2011) = irrCAC cac.raw4raters: 4 observers (rows) x 12 units, NaN = not rated.
KRIPPENDORFF_4X12 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
]

# 45 outputs, 6 raters: outputs 0 and 1 rated by all six, every other output by two raters
# (u mod 6 and u + 2 mod 6), ratings 1-5 in row order. Listwise deletion keeps 2 outputs.
D45_RATINGS = ("34343443344324225344224444333442233323444333123233435543121133334343551135444"
               "333322223332132332234")


def d45() -> pd.DataFrame:
    cells = [(u, r) for u in range(45) for r in (range(6) if u < 2 else (u % 6, (u + 2) % 6))]
    return pd.DataFrame({"unit": [f"out{u:02d}" for u, _ in cells],
                         "rater": [f"rater{r}" for _, r in cells],
                         "value": [float(v) for v in D45_RATINGS]})


# A Latin-square-like design: 15 outputs x 6 raters, each output rated by raters u, u+1, u+3
# (mod 6): connected, and no output has every rater (listwise deletion leaves nothing).
LATIN_RATINGS = "242444334332333232344423323112545323434333231"


def latin() -> pd.DataFrame:
    cells = [(u, r) for u in range(15) for r in (u % 6, (u + 1) % 6, (u + 3) % 6)]
    return pd.DataFrame({"unit": [f"o{u:02d}" for u, _ in cells],
                         "rater": [f"r{r}" for _, r in cells],
                         "value": [float(v) for v in LATIN_RATINGS]})


def pipeline_rows(df: pd.DataFrame, *, item_of=None) -> pd.DataFrame:
    """A tidy table as `analyse_criterion` hands it to `_agreement` (values as stored text)."""
    return pd.DataFrame({
        "unit": df["unit"].astype(str), "rater": df["rater"].astype(str),
        "value": [str(int(v)) for v in df["value"]], "is_human": True,
        "item": df["unit"].astype(str) if item_of is None else df["unit"].map(item_of),
    })


def krippendorff_rows() -> pd.DataFrame:
    rows = [(f"u{u}", f"obs{r}", v) for r, line in enumerate(KRIPPENDORFF_4X12)
            for u, v in enumerate(line) if not np.isnan(v)]
    return pipeline_rows(pd.DataFrame(rows, columns=["unit", "rater", "value"]))


# --------------------------------------------------------------------------------------------
# 1. ICC on incomplete designs
# --------------------------------------------------------------------------------------------


def assert_sane(results: dict) -> None:
    for name, est in results.items():
        if est.value is not None and math.isfinite(est.value):
            assert -1 <= est.value <= 1, name
        if est.ci_low is not None and est.ci_high is not None:
            assert est.ci_low <= est.ci_high, name
            assert est.ci_low >= -1 and est.ci_high <= 1, name


def test_icc_latin_square_uses_every_rating():
    # Before: "ICC needs >= 2 units rated by all of >= 2 raters; have 0 complete units".
    result = icc(latin())
    # R 4.2.2, lme4 1.1.31:
    #   m <- lmer(value ~ 1 + (1|unit) + (1|rater), data = d, REML = TRUE)
    #   VarCorr: unit 0.527469261882, rater 0.004114159608, Residual 0.419852157644
    #   m1 <- lmer(value ~ 1 + (1|unit), data = d): unit 0.5333333586, Residual 0.4222222155
    unit, rater, resid = 0.527469261882, 0.004114159608, 0.419852157644
    unit1, within1 = 0.5333333586, 0.4222222155
    k = 3.0  # every output has 3 ratings: the harmonic mean is 3
    expected = {
        "ICC1": unit1 / (unit1 + within1), "ICC2": unit / (unit + rater + resid),
        "ICC3": unit / (unit + resid), "ICC1k": unit1 / (unit1 + within1 / k),
        "ICC2k": unit / (unit + (rater + resid) / k), "ICC3k": unit / (unit + resid / k),
    }
    for name, value in expected.items():
        assert result[name].value == pytest.approx(value, abs=2e-5), name
        assert result[name].n_units == 15 and result[name].n_raters == 6
        assert result[name].n_ratings == 45
        assert result[name].ci_low < result[name].value < result[name].ci_high
        assert result[name].n_boot and result[name].seed == 0
        assert "REML" in result[name].method
    assert_sane(result)


def test_icc_45_outputs_two_complete_is_not_listwise():
    # Before: listwise deletion kept 2 of 45 outputs; ICC2k = 4.0 (CI 4.0 to 4.0),
    # ICC1k = ICC3k = -inf, no warning.
    result = icc(d45())
    assert_sane(result)
    for est in result.values():
        assert est.n == 45 and est.n_units == 45 and est.n_raters == 6 and est.n_ratings == 98
        assert "units_dropped_incomplete" not in est.excluded
    # R: lmer(value ~ 1 + (1|unit) + (1|rater), REML = TRUE) on these 98 ratings:
    #   unit 0.6594678367, rater 0.0775652620, Residual 0.2901739667 (REMLcrit 243.961496)
    details = result["ICC2"].details
    assert details["var_unit"] == pytest.approx(0.6594678367, rel=2e-4)
    assert details["var_rater"] == pytest.approx(0.0775652620, rel=2e-4)
    assert details["var_residual"] == pytest.approx(0.2901739667, rel=2e-4)
    assert details["reml_criterion"] == pytest.approx(243.961496, abs=1e-5)
    # lmer(value ~ 1 + (1|unit)): unit 0.6706467454, Residual 0.3694548574
    assert details["var_unit_oneway"] == pytest.approx(0.6706467454, rel=2e-4)
    assert details["var_within_oneway"] == pytest.approx(0.3694548574, rel=2e-4)


def test_icc_guard_withholds_impossible_anova_values_with_a_warning():
    # Two complete units: before, ICC2k = 9.0 with CI [6.33, -0.80] and ICC1k = -15 printed.
    df = pd.DataFrame({"unit": ["a"] * 3 + ["b"] * 3, "rater": ["r1", "r2", "r3"] * 2,
                       "value": [4.0, 5.0, 1.0, 4.0, 2.0, 3.0]})
    result = icc(df)
    assert_sane(result)
    for name in ("ICC1k", "ICC2k", "ICC3k"):
        assert math.isnan(result[name].value), name
        assert result[name].ci_low is None and result[name].ci_high is None
        assert any("outside [-1, 1]: withheld" in w for w in result[name].warnings), name
    assert any("only 2 units" in w for w in result["ICC1"].warnings)


def test_pipeline_icc_on_latin_square_likert():
    out = to_jsonable(pipeline.rater_agreement(pipeline_rows(latin()), "likert",
                                                   [1, 2, 3, 4, 5]))
    assert "note" not in out["icc"]
    assert out["icc"]["ICC2"]["n_units"] == 15
    assert out["icc"]["ICC2"]["value"] == pytest.approx(0.5543931, abs=2e-5)


# --------------------------------------------------------------------------------------------
# 2. Fleiss' kappa keeps incomplete units (Gwet's missing-data formulation)
# --------------------------------------------------------------------------------------------


def test_pipeline_fleiss_kappa_uses_gwet_missing_data_formulation():
    # Before: 0.6415 on the 8 of 12 units that carry 4 ratings. irrCAC fleiss.kappa.raw(
    # cac.raw4raters): 0.76117, se 0.15302, CI (0.424, 1).
    out = to_jsonable(pipeline.rater_agreement(krippendorff_rows(), "categorical",
                                                   ["1", "2", "3", "4", "5"]))
    fleiss = out["fleiss_kappa"]
    assert fleiss["value"] == pytest.approx(0.76117, abs=5e-6)
    assert fleiss["se"] == pytest.approx(0.15302, abs=5e-6)
    assert fleiss["ci_low"] == pytest.approx(0.424, abs=5e-4) and fleiss["ci_high"] == 1.0
    assert fleiss["n_units"] == 12 and fleiss["n"] == 11
    assert fleiss["excluded"] == {"units_with_one_rating": 1}
    assert "units_dropped_unbalanced" not in fleiss["excluded"]


def test_fleiss_kappa_drop_says_what_was_dropped():
    rows = [(u, r, v) for r, line in enumerate(KRIPPENDORFF_4X12)
            for u, v in enumerate(line) if not np.isnan(v)]
    est = fleiss_kappa(pd.DataFrame(rows, columns=["unit", "rater", "value"]),
                       unbalanced="drop")
    assert est.value == pytest.approx(0.6415, abs=1e-4)
    assert est.excluded["units_dropped_unbalanced"] == 4
    assert any("4 of 12 units dropped" in w for w in est.warnings)


# --------------------------------------------------------------------------------------------
# 3. The declared scale, not the observed values, is the category set
# --------------------------------------------------------------------------------------------


def scale_rows(third_uses_two: bool) -> pd.DataFrame:
    """Raters A and B use 1, 3 and 4 on 8 outputs; rater C rates the same outputs and, in one
    version, once uses 2, a category nobody else used."""
    a = [1, 3, 4, 4, 3, 1, 4, 3]
    b = [1, 4, 4, 3, 3, 1, 4, 1]
    c = [1, 3, 4, 4, 3, 1, 4, 2 if third_uses_two else 3]
    rows = [(f"o{u}", rater, v) for rater, values in (("A", a), ("B", b), ("C", c))
            for u, v in enumerate(values)]
    return pipeline_rows(pd.DataFrame(rows, columns=["unit", "rater", "value"]))


def pair(out: dict, a: str, b: str) -> dict:
    return next(p for p in out["cohen_pairs"]["pairs"] if {p["rater_a"], p["rater_b"]} == {a, b})


def test_a_pairs_kappa_does_not_move_when_another_rater_uses_a_new_category():
    scale = [1, 2, 3, 4, 5]  # what declared_categories gives a 5-point Likert criterion
    before = to_jsonable(pipeline.rater_agreement(scale_rows(False), "likert", scale))
    after = to_jsonable(pipeline.rater_agreement(scale_rows(True), "likert", scale))
    for weights in ("unweighted", "linear", "quadratic"):
        assert pair(before, "A", "B")[weights] == pytest.approx(pair(after, "A", "B")[weights])
    assert before["categories"] == [1, 2, 3, 4, 5]
    assert before["categories_from"] == "declared scale"
    for key in ("percent_agreement", "gwet_ac1", "fleiss_kappa", "krippendorff_alpha"):
        assert before[key]["categories"] == [1, 2, 3, 4, 5], key
        assert before[key]["categories_from"] == "declared scale", key
    assert before["gwet_ac1"]["details"]["q"] == 5  # AC1's chance term counts all 5 points


def test_declared_categories_per_kind():
    declared = pipeline.declared_categories
    assert declared({"kind": "likert", "scale_points": 5}) == [1, 2, 3, 4, 5]
    assert declared({"kind": "severity"}) == [0, 1, 2]
    assert declared({"kind": "binary"}) == ["yes", "no"]
    assert declared({"kind": "pairwise"}) == ["A", "B"]
    assert declared({"kind": "pairwise", "allow_tie": True}) == ["A", "B", "tie"]
    assert declared({"kind": "categorical", "options": ["TP", "FP"]}) == ["TP", "FP"]
    assert declared({"kind": "likert", "scale_points": None}) is None


def test_ceiling_uses_the_declared_scale():
    scale = [1, 2, 3, 4, 5]
    ceiling = to_jsonable(pipeline.human_ceiling(scale_rows(False), "likert", scale))
    assert ceiling["categories"] == scale and ceiling["categories_from"] == "declared scale"


def test_values_outside_the_declared_scale_are_excluded_and_said():
    rows = scale_rows(False)
    rows.loc[0, "value"] = "7"
    out = to_jsonable(pipeline.rater_agreement(rows, "likert", [1, 2, 3, 4, 5]))
    assert out["excluded"] == {"values_outside_scale": 1}
    assert any("outside the declared scale" in w for w in out["warnings"])
    assert out["n_ratings"] == 23


# --------------------------------------------------------------------------------------------
# 4 and 5. Every coefficient has a CI, n, exclusions and warnings
# --------------------------------------------------------------------------------------------

AGREEMENT_KEYS = {"value", "ci_low", "ci_high", "n", "method", "se", "ci_method", "n_units",
                  "n_raters", "n_ratings", "excluded", "warnings", "level", "weights",
                  "categories", "categories_from", "n_boot", "seed", "cluster", "details",
                  "p_value"}


def test_every_statistic_has_a_ci_n_exclusions_and_warnings():
    out = to_jsonable(pipeline.rater_agreement(krippendorff_rows(), "categorical",
                                                   ["1", "2", "3", "4", "5"]))
    # irrCAC README, cac.raw4raters: pa 0.8181818 (0.542, 1); AC1 0.77544 (0.461, 1).
    assert out["percent_agreement"]["ci_low"] == pytest.approx(0.542, abs=5e-4)
    assert out["gwet_ac1"]["ci_low"] == pytest.approx(0.461, abs=5e-4)
    for key in ("percent_agreement", "gwet_ac1", "fleiss_kappa", "krippendorff_alpha"):
        est = out[key]
        assert set(est) == AGREEMENT_KEYS, key
        assert est["ci_low"] is not None and est["ci_low"] <= est["value"] <= est["ci_high"]
        assert est["n_raters"] == 4 and est["excluded"] == {"units_with_one_rating": 1}, key
        assert any("single rating" in w for w in est["warnings"]), key
    # The Gwet family keeps the single-rating unit in the prevalences; alpha cannot pair it.
    assert out["gwet_ac1"]["n_units"] == 12 and out["krippendorff_alpha"]["n_units"] == 11
    alpha = out["krippendorff_alpha"]
    assert alpha["level"] == "nominal"
    assert (alpha["n_boot"], alpha["seed"], alpha["cluster"]) == (2000, pipeline.AGREEMENT_SEED,
                                                                  "item")
    assert out["bootstrap"] == {"n_boot": 2000, "seed": pipeline.AGREEMENT_SEED,
                                "cluster": "item"}
    cohen = out["cohen_pairs"]
    assert cohen["n_computed"] == 6  # the 4 observers share >= 5 units pairwise
    for row in cohen["pairs"]:
        low, high = row["ci"]["unweighted"]
        assert low <= row["unweighted"] <= high
    mean = cohen["mean_estimates"]["unweighted"]
    assert mean["ci_low"] <= cohen["mean"]["unweighted"] <= mean["ci_high"]
    assert mean["n_boot"] == 2000 and mean["n"] == 6


def test_ceiling_kappa_and_proxy_gap_have_bootstrap_cis():
    rows = krippendorff_rows()
    llm = rows[rows["rater"] == "obs1"].assign(rater="llm", is_human=False)
    ceiling = to_jsonable(pipeline.human_ceiling(pd.concat([rows, llm]), "categorical",
                                                     ["1", "2", "3", "4", "5"]))
    low, high = ceiling["kappa_ci"]
    assert low <= ceiling["mean_kappa"] <= high
    assert ceiling["n_boot"] == 2000 and ceiling["seed"] == pipeline.AGREEMENT_SEED
    assert ceiling["n_humans"] == 4 and ceiling["n_units"] == 11
    (proxy,) = ceiling["proxies"]
    assert proxy["kappa_ci"][0] <= proxy["kappa"] <= proxy["kappa_ci"][1]
    assert proxy["kappa_minus_ceiling"] == pytest.approx(proxy["kappa"] - ceiling["mean_kappa"])
    assert proxy["kappa_minus_ceiling_ci"][0] <= proxy["kappa_minus_ceiling"]


def test_icc_results_carry_counts_and_method_in_json():
    out = to_jsonable(pipeline.rater_agreement(pipeline_rows(d45()), "likert",
                                                   [1, 2, 3, 4, 5]))
    for name, est in out["icc"].items():
        assert set(est) == AGREEMENT_KEYS, name
        assert est["n_units"] == 45 and est["n_raters"] == 6, name
