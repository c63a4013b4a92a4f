"""Validity of proxies: AUC, correlations, Williams, Bland-Altman, thresholds, LATTE table.

Sources of the pinned numbers (each test names its own):
- R pROC documentation example, `roc(aSAH$outcome, aSAH$s100b)`: AUC 0.7314, 95% CI
  0.6301-0.8326 (DeLong); the variance and `roc.test(s100b, ndka)` (Z = 1.39077,
  p = 0.1642952) are R 4.2.2 / pROC 1.18.0 output on the same data. aSAH: Turck et al. (2010),
  113 patients with aneurysmal subarachnoid haemorrhage, outcome Poor (41) vs Good (72).
- cocor's test of Williams' t (from Silver, Hittner & May 2006, the depcor program):
  r_jk = .3, r_jh = .4, r_kh = .5, n = 100 gives t = -1.0767, p = 0.2843.
- Bland & Altman (1986, Lancet) peak expiratory flow data (Wright vs mini Wright meter,
  17 subjects): mean difference -2.1 l/min, SD 38.8, limits -79.7 to 75.5 (bias +/- 2 SD),
  95% CI of the bias -22.0 to 17.8, correlation r = 0.94.
- LATTE (Tomanek et al.) Table 5: per-speaker WordAcc, human meaning preservation and
  LATTEScore, and the accept decisions shown in bold.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.stats.validity import (
    auc_by_slice,
    bland_altman,
    correlations,
    delong_test,
    deployment_table,
    williams_test,
)
from proxies.quality import auc_with_ci, delong_variance, latte_score, threshold_for_precision

# --------------------------------------------------------------------------------------------
# AUC
# --------------------------------------------------------------------------------------------

# pROC aSAH, in the dataset's row order.
ASAH_S100B = [
    0.13, 0.14, 0.1, 0.04, 0.13, 0.1, 0.47, 0.16, 0.18, 0.1, 0.12, 0.1, 0.44, 0.71, 0.04, 0.08,
    0.49, 0.04, 0.07, 0.33, 0.09, 0.09, 0.07, 0.11, 0.07, 0.17, 0.07, 0.11, 0.13, 0.19, 0.05,
    0.16, 0.41, 0.14, 0.34, 0.35, 0.48, 0.09, 0.96, 0.25, 0.5, 0.46, 0.16, 0.07, 0.43, 0.45,
    0.11, 0.08, 0.09, 0.86, 0.52, 0.08, 0.06, 0.13, 2.07, 0.1, 0.14, 0.15, 0.07, 0.06, 0.77,
    0.05, 0.09, 0.3, 0.03, 0.09, 0.04, 0.23, 0.7, 0.09, 0.27, 0.71, 0.08, 0.26, 0.08, 0.16,
    0.09, 0.13, 0.1, 0.08, 0.11, 0.33, 0.11, 0.28, 0.07, 0.1, 0.32, 0.22, 0.07, 0.05, 0.24,
    0.38, 0.1, 0.15, 0.08, 0.14, 0.1, 0.07, 0.04, 0.19, 0.56, 0.14, 0.58, 0.32, 0.82, 0.74,
    0.15, 0.47, 0.17, 0.44, 0.15, 0.5, 0.48,
]  # fmt: skip
ASAH_NDKA = [
    3.01, 8.54, 8.09, 10.42, 17.4, 12.75, 6, 13.2, 15.54, 6.01, 15.96, 17.86, 5.18, 8.9, 13.41,
    20.75, 11.6, 16.11, 32.37, 54.82, 32.41, 49.94, 40.34, 9.47, 6.29, 12.53, 6.54, 6.3, 80.3,
    12.8, 9.8, 9.81, 9.85, 18.21, 5.03, 14.04, 21.93, 8.02, 7.42, 8.38, 6.59, 9.63, 13.12, 7.96,
    14.34, 41.43, 7.63, 7.06, 12.59, 13.56, 3.87, 9.44, 7.66, 12.98, 419.19, 27.19, 22.27, 9.95,
    21.22, 11.73, 10.4, 58.83, 6.39, 11.09, 12.22, 13.67, 17.21, 22.63, 12.9, 9.7, 21.57, 8.23,
    72.57, 15.54, 10.51, 10.6, 14.57, 5.19, 9.63, 4.61, 21.48, 17.3, 12.71, 9.44, 11.07, 19.46,
    10.83, 5.37, 11.97, 7.75, 9.83, 10.55, 28.49, 8.53, 12.57, 12.9, 46.83, 11.68, 12.67, 9.01,
    9.57, 34.06, 11.72, 14.26, 47.61, 11.67, 24.58, 10.33, 13.87, 15.89, 22.43, 6.79, 13.45,
]  # fmt: skip
ASAH_POOR = [
    0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0,
    0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0,
]  # fmt: skip


def test_asah_data_shape():
    assert len(ASAH_S100B) == len(ASAH_NDKA) == len(ASAH_POOR) == 113
    assert sum(ASAH_POOR) == 41


def test_auc_delong_matches_proc():
    result = auc_with_ci(ASAH_S100B, ASAH_POOR)
    assert result.auc.value == pytest.approx(0.7314, abs=5e-5)
    assert result.auc.ci_low == pytest.approx(0.6301182, abs=1e-7)
    assert result.auc.ci_high == pytest.approx(0.8326189, abs=1e-7)
    assert result.auc.details["variance"] == pytest.approx(0.00266868245717, rel=1e-9)
    assert (result.n_pos, result.n_neg, result.auc.n) == (41, 72, 113)
    assert result.fpr[0] == 0 and result.tpr[-1] == 1
    assert result.thresholds[0] == np.inf


def brute_force_delong(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """DeLong (1988) written with explicit pairwise comparisons (O(m n))."""
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    auc = psi.mean()
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return float(auc), float(v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size)


def test_delong_variance_equals_pairwise_definition():
    s, y = np.array(ASAH_NDKA), np.array(ASAH_POOR, dtype=bool)
    assert delong_variance(s, y) == pytest.approx(brute_force_delong(s[y], s[~y]))


def test_delong_close_to_bootstrap_on_a_large_sample():
    rng = np.random.default_rng(42)
    y = rng.random(1500) < 0.4
    s = rng.normal(size=1500) + 1.0 * y
    delong = auc_with_ci(s, y)
    boot = auc_with_ci(s, y, method="bootstrap", n_boot=600, seed=1)
    assert boot.auc.value == delong.auc.value
    assert boot.auc.ci_low == pytest.approx(delong.auc.ci_low, abs=0.006)
    assert boot.auc.ci_high == pytest.approx(delong.auc.ci_high, abs=0.006)
    again = auc_with_ci(s, y, method="bootstrap", n_boot=600, seed=1)
    assert again.auc.ci_low == boot.auc.ci_low


def test_auc_orientation_for_lower_is_better_scores():
    wer_like = [-x for x in ASAH_S100B]
    flipped = auc_with_ci(wer_like, ASAH_POOR, higher_is_positive=False)
    assert flipped.auc.value == pytest.approx(0.7313685637)
    assert flipped.thresholds[0] == -np.inf
    assert flipped.thresholds[1] == pytest.approx(-2.07)  # back in the caller's units
    naive = auc_with_ci(wer_like, ASAH_POOR)
    assert naive.auc.value == pytest.approx(1 - 0.7313685637)


def test_auc_input_validation():
    with pytest.raises(ValueError, match="both classes"):
        auc_with_ci([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="0/1"):
        auc_with_ci([0.1, 0.2], [1, 2])
    with pytest.raises(ValueError, match="method"):
        auc_with_ci([0.1, 0.2], [0, 1], method="hanley")  # type: ignore[arg-type]
    result = auc_with_ci([0.1, None, 0.3, 0.2], [0, 1, 1, None])
    assert result.auc.n == 2 and result.auc.details["dropped"] == 2
    assert result.auc.value == 1.0 and result.auc.ci_low is None  # 1 case per class


def test_delong_test_matches_proc_roc_test():
    result = delong_test(ASAH_S100B, ASAH_NDKA, ASAH_POOR)
    assert result.statistic == pytest.approx(1.39077, abs=1e-5)
    assert result.p_value == pytest.approx(0.1642952, abs=1e-7)
    assert result.details["auc_a"] == pytest.approx(0.7313685637)
    assert result.details["auc_b"] == pytest.approx(0.6119579946)
    assert result.details["ci_low"] == pytest.approx(-0.04887060642, abs=1e-9)
    assert result.details["ci_high"] == pytest.approx(0.28769174463, abs=1e-9)


def test_auc_by_slice_known_answers():
    df = pd.DataFrame(
        {
            "score": [0.9, 0.8, 0.2, 0.1, 0.3, 0.7, 0.6, 0.4, 0.5, 0.5],
            "preserved": [1, 1, 0, 0, 1, 0, 1, 0, 1, 1],
            "severity": ["mild"] * 4 + ["severe"] * 4 + ["moderate"] * 2,
        }
    )
    rows = auc_by_slice(df, "score", "preserved", "severity")
    assert [r.slice for r in rows] == [None, "mild", "moderate", "severe"]
    overall, mild, moderate, severe = rows
    assert overall.is_overall and overall.n == 10 and overall.n_pos == 6
    assert mild.auc == 1.0 and mild.n == 4 and mild.n_pos == 2
    # severe: positives 0.3, 0.6; negatives 0.7, 0.4 -> pairs won: (0.6 > 0.4) = 1 of 4.
    assert severe.auc == pytest.approx(0.25)
    assert severe.ci_low is not None and severe.ci_low <= 0.25 <= severe.ci_high
    assert moderate.auc is None and moderate.n_pos == 2  # one class only
    without = auc_by_slice(df, "score", "preserved", "severity", include_overall=False)
    assert len(without) == 3


# --------------------------------------------------------------------------------------------
# Correlations and Williams' test
# --------------------------------------------------------------------------------------------


def test_correlations_known_answers():
    x = np.arange(1.0, 21.0)
    linear = correlations(x, 2 * x + 1, n_boot=200)
    for name in ("pearson", "spearman", "kendall"):
        assert linear[name].value == pytest.approx(1.0)
        assert linear[name].ci_low == pytest.approx(1.0)
    cubic = correlations(x - 10, (x - 10) ** 3, n_boot=200)
    assert cubic["spearman"].value == pytest.approx(1.0)
    assert cubic["kendall"].value == pytest.approx(1.0)
    assert cubic["pearson"].value < 0.95


def test_correlations_p_values_and_ci_on_bland_altman_data():
    result = correlations(WRIGHT, MINI_WRIGHT, n_boot=500, seed=3)
    assert result["pearson"].value == pytest.approx(0.94, abs=0.005)  # Bland & Altman 1986
    assert result["pearson"].p_value == pytest.approx(stats.pearsonr(WRIGHT, MINI_WRIGHT).pvalue)
    tau = stats.kendalltau(WRIGHT, MINI_WRIGHT)
    assert result["kendall"].value == pytest.approx(tau.statistic)
    assert result["kendall"].p_value == pytest.approx(tau.pvalue)
    for est in result.values():
        assert est.ci_low <= est.value <= est.ci_high and est.n == 17
    repeat = correlations(WRIGHT, MINI_WRIGHT, n_boot=500, seed=3)
    assert repeat["spearman"].ci_low == result["spearman"].ci_low


def test_williams_test_depcor_example():
    result = williams_test(0.3, 0.4, 0.5, 100)
    assert result.statistic == pytest.approx(-1.0767, abs=5e-5)
    assert result.p_value == pytest.approx(0.2843, abs=5e-5)
    assert result.df == 97


def test_williams_test_steiger_example_by_hand():
    # Steiger (1980) example as used in R psych::r.test: n = 103, r12 = .4, r13 = .5,
    # r23 = .1. K = 1 - .16 - .25 - .01 + .04 = .62;
    # t = -.1 * sqrt(102 * 1.1 / (2 * .62 * 102 / 100 + .45^2 * .9^3)) = -0.8913.
    t = -0.1 * np.sqrt(102 * 1.1 / (2 * 0.62 * 102 / 100 + 0.45**2 * 0.9**3))
    result = williams_test(0.4, 0.5, 0.1, 103)
    assert result.statistic == pytest.approx(t)
    assert result.statistic == pytest.approx(-0.891, abs=5e-4)
    assert result.p_value == pytest.approx(2 * stats.t.sf(abs(t), 100))


def test_williams_test_one_sided_and_validation():
    two = williams_test(0.6, 0.4, 0.5, 50)
    greater = williams_test(0.6, 0.4, 0.5, 50, alternative="greater")
    less = williams_test(0.6, 0.4, 0.5, 50, alternative="less")
    assert greater.p_value == pytest.approx(two.p_value / 2)
    assert less.p_value == pytest.approx(1 - two.p_value / 2)
    with pytest.raises(ValueError, match="correlation matrix"):
        williams_test(0.9, -0.9, 0.9, 50)
    with pytest.raises(ValueError):
        williams_test(0.5, 0.4, 0.3, 3)


# --------------------------------------------------------------------------------------------
# Bland-Altman
# --------------------------------------------------------------------------------------------

# Bland & Altman (1986) Table 1, first reading with each meter (l/min).
WRIGHT = [494, 395, 516, 434, 476, 557, 413, 442, 650, 433, 417, 656, 267, 478, 178, 423, 427]
MINI_WRIGHT = [512, 430, 520, 428, 500, 600, 364, 380, 658, 445, 432, 626, 260, 477, 259, 350, 451]


def test_bland_altman_1986_peak_flow():
    result = bland_altman(WRIGHT, MINI_WRIGHT, k=2.0)
    assert result.bias.value == pytest.approx(-2.1, abs=0.05)
    assert result.sd == pytest.approx(38.8, abs=0.05)
    assert result.lower.value == pytest.approx(-79.7, abs=0.1)
    assert result.upper.value == pytest.approx(75.5, abs=0.1)
    assert result.bias.ci_low == pytest.approx(-22.0, abs=0.1)
    assert result.bias.ci_high == pytest.approx(17.8, abs=0.1)
    assert result.n == 17 and len(result.means) == len(result.differences) == 17
    assert result.differences[0] == -18 and result.means[0] == 503


def test_bland_altman_limit_ci_by_hand():
    result = bland_altman(WRIGHT, MINI_WRIGHT)  # k = 1.96
    d = np.array(WRIGHT) - np.array(MINI_WRIGHT)
    s, n = d.std(ddof=1), d.size
    t = stats.t.ppf(0.975, n - 1)
    se = s * np.sqrt(1 / n + 1.96**2 / (2 * (n - 1)))  # Bland & Altman 1999
    assert result.lower.value == pytest.approx(d.mean() - 1.96 * s)
    assert result.lower.ci_low == pytest.approx(d.mean() - 1.96 * s - t * se)
    assert result.upper.ci_high == pytest.approx(d.mean() + 1.96 * s + t * se)
    # The 1986 shortcut SE ~ sqrt(3 s^2 / n) is within 5% of the exact one here.
    assert se == pytest.approx(np.sqrt(3 * s**2 / n), rel=0.05)


def test_bland_altman_drops_incomplete_pairs():
    result = bland_altman([1, 2, 3, None, 5], [1, 1, 2, 4, np.nan])
    assert result.n == 3


# --------------------------------------------------------------------------------------------
# Threshold, LATTEScore
# --------------------------------------------------------------------------------------------


def test_threshold_for_precision_known_answer():
    scores = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    labels = [1, 1, 1, 0, 1, 1, 0, 1, 0, 0]
    # Precision at cut >= s: 1, 1, 1, 3/4, 4/5, 5/6, 5/7, 6/8, 6/9, 6/10.
    choice = threshold_for_precision(scores, labels, 0.8)
    assert choice.threshold == 0.6
    assert choice.precision == pytest.approx(5 / 6)
    assert choice.recall == pytest.approx(5 / 6)
    assert choice.n_predicted_positive == 6 and choice.achieved
    strict = threshold_for_precision(scores, labels, 0.9)
    assert strict.threshold == 0.85 and strict.recall == pytest.approx(3 / 6)


def test_threshold_for_precision_lower_is_positive_mirrors():
    scores = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    labels = [1, 1, 1, 0, 1, 1, 0, 1, 0, 0]
    mirrored = threshold_for_precision([-s for s in scores], labels, 0.8, higher_is_positive=False)
    assert mirrored.threshold == -0.6 and mirrored.recall == pytest.approx(5 / 6)


def test_threshold_for_precision_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(20):
        scores = np.round(rng.random(60), 1)  # many ties
        labels = rng.random(60) < scores
        choice = threshold_for_precision(scores, labels, 0.75)
        qualifying = [t for t in np.unique(scores) if labels[scores >= t].mean() >= 0.75]
        if not qualifying:
            assert not choice.achieved and choice.threshold is None
        else:
            assert choice.threshold == pytest.approx(min(qualifying))
            predicted = scores >= choice.threshold
            assert choice.recall == pytest.approx(labels[predicted].sum() / labels.sum())


def test_threshold_unreachable():
    choice = threshold_for_precision([0.9, 0.8], [0, 1], 0.99)
    assert not choice.achieved and choice.threshold is None and choice.recall is None


def test_latte_score():
    assert latte_score([1, 0, 1, 1]) == 75.0
    assert latte_score([True, False]) == 50.0
    assert latte_score([0.9, 0.86, 0.85, 0.2], threshold=0.85) == 75.0
    assert latte_score([1, None, 0]) == 50.0
    assert np.isnan(latte_score([]))
    with pytest.raises(ValueError, match="threshold"):
        latte_score([0.3, 0.9])


# --------------------------------------------------------------------------------------------
# Deployment table: LATTE Table 5 rebuilt
# --------------------------------------------------------------------------------------------

# speaker: (utterances, WordAcc, true meaning preservation %, LATTEScore %)
LATTE_TABLE_5 = {
    "S1": (72, 59.2, 48.6, 47.2),
    "S2": (94, 60.0, 35.1, 34.0),
    "S3": (152, 60.9, 48.7, 31.6),
    "S4": (61, 66.7, 44.3, 55.7),
    "S5": (262, 71.9, 46.9, 42.7),
    "S6": (50, 72.6, 74.0, 64.0),
    "S7": (179, 80.0, 52.0, 52.0),
    "S8": (76, 80.5, 57.9, 55.3),
    "S9": (41, 86.5, 68.3, 70.7),
    "S10": (44, 90.8, 77.3, 77.3),
}


def latte_outputs() -> pd.DataFrame:
    """One row per utterance whose per-speaker aggregates reproduce Table 5."""
    frames = []
    for speaker, (n, word_acc, mp, latte) in LATTE_TABLE_5.items():
        preserved, predicted = round(mp * n / 100), round(latte * n / 100)
        frames.append(
            pd.DataFrame(
                {
                    "speaker": speaker,
                    "wer": (100 - word_acc) / 100,  # a fraction, as the WER scorer stores it
                    "meaning_preserved": [1] * preserved + [0] * (n - preserved),
                    # P(yes) from the LLM; 0.85 is LATTE's dev-split threshold.
                    "llm62b": [0.97] * predicted + [0.10] * (n - predicted),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_latte_table_5_rebuilt():
    table = deployment_table(
        latte_outputs(), "speaker", proxy_cols=["llm62b"], proxy_thresholds={"llm62b": 0.85}
    )
    rows = {r.group: r for r in table.rows}
    assert sum(r.n for r in table.rows) == 1031
    for speaker, (n, word_acc, mp, latte) in LATTE_TABLE_5.items():
        row = rows[speaker]
        assert row.n == n
        assert row.word_acc == pytest.approx(word_acc)
        assert round(row.human_mp, 1) == mp
        assert round(row.proxies["llm62b"], 1) == latte
    accepted = {
        key: sorted(s for s, r in rows.items() if r.accept[key]) for key in rows["S1"].accept
    }
    # Bold in Table 5: WordAcc >= 80 (S7 at exactly 80.0 included), MP >= 70, LATTE >= 70.
    assert accepted["word_acc"] == ["S10", "S7", "S8", "S9"]
    assert accepted["human"] == ["S10", "S6"]
    assert accepted["llm62b"] == ["S10", "S9"]
    agreement = {a.decider: a for a in table.agreement}
    # LATTEScore disagrees with humans on S6 and S9: accuracy 8/10; kappa with p_o = .8,
    # p_e = .2 * .2 + .8 * .8 = .68 -> .12 / .32 = .375.
    assert agreement["llm62b"].accuracy == pytest.approx(0.8)
    assert agreement["llm62b"].kappa == pytest.approx(0.375)
    assert sorted(agreement["llm62b"].disagreements) == ["S6", "S9"]
    # WordAcc disagrees on S6-S9: accuracy .6; p_e = .4 * .2 + .6 * .8 = .56 -> .04 / .44.
    assert agreement["word_acc"].accuracy == pytest.approx(0.6)
    assert agreement["word_acc"].kappa == pytest.approx(0.04 / 0.44)


def test_deployment_table_word_accuracy_modes():
    df = pd.DataFrame(
        {
            "g": ["a", "a", "b"],
            "wer": [0.1, 1.5, 0.0],  # WER above 1 (insertions) is capped at WordAcc 0
            "errors": [1, 3, 0],
            "ref_words": [10, 2, 5],
            "meaning_preserved": [True, False, True],
            "judge": [1, 0, 1],
        }
    )
    mean_mode = deployment_table(df, "g", proxy_cols=["judge"])
    assert mean_mode.rows[0].word_acc == pytest.approx((90 + 0) / 2)
    percent = deployment_table(df.assign(wer=df["wer"] * 100), "g", wer_unit="percent")
    assert percent.rows[0].word_acc == pytest.approx(45)
    corpus = deployment_table(
        df, "g", word_acc="corpus", errors_col="errors", ref_words_col="ref_words"
    )
    assert corpus.rows[0].word_acc == pytest.approx(100 - 100 * 4 / 12)
    assert corpus.rows[1].word_acc == 100
    assert mean_mode.rows[0].human_mp == 50 and mean_mode.rows[0].proxies["judge"] == 50
    with pytest.raises(ValueError, match="errors_col"):
        deployment_table(df, "g", word_acc="corpus")
    with pytest.raises(ValueError, match="not in the table"):
        deployment_table(df, "g", proxy_cols=["missing"])
