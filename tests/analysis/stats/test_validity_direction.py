"""Proxy validity in the report: direction-aligned Williams tests, Holm corrections, slice
tables, and the deployment table with proxies' own thresholds and held-out outputs.

Pinned values:
- Steiger (1980) example as used in R psych::r.test: n = 103, r12 = .4, r13 = .5, r23 = .1
  gives Williams' t = -0.891 (df 100). Here metric 2 is a lower-is-better score whose raw
  correlations are -.4 (with the humans) and -.1 (with metric 3): aligned, it is the example.
- R 4.2.2, pROC 1.18.0, stats::wilcox.test and p.adjust on pROC's aSAH data (s100b against
  outcome "Poor", in three slices by row number modulo 3):
      slice  n  n_pos  AUC           DeLong 95% CI               wilcox p
      s0     38 12     0.7628205128  0.5739931169 0.9516479088  0.0104051123148
      s1     38 16     0.7017045455  0.5180993879 0.8853097030  0.0368567330188
      s2     37 13     0.7387820513  0.5665780129 0.9109860897  0.0183860804422
  p.adjust(p, "holm") = 0.0312153369445 0.0368567330188 0.0367721608845;
  p.adjust(c(.01, .04, .03), "holm") = 0.03 0.06 0.06.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.stats import validity
from analysis.stats.pipeline import proxy_validity, williams_tests
from kit.jsonable import to_jsonable
from tests.analysis.stats.test_validity import ASAH_POOR, ASAH_S100B

# --------------------------------------------------------------------------------------------
# Helpers: a tidy judgment table and metric values as the Django side builds them
# --------------------------------------------------------------------------------------------


def judgments_frame(labels: dict[int, list[str]], *, speakers: dict[int, str] | None = None,
                    systems: dict[int, str] | None = None,
                    proxies: dict[str, dict[int, tuple[str, float | None]]] | None = None,
                    ) -> pd.DataFrame:
    """Human answers per output (one rater each), plus proxy raters' (value, P(yes))."""
    rows = []
    for output, answers in labels.items():
        for index, value in enumerate(answers):
            rows.append({"rater": f"human{index}", "rater_kind": "expert", "is_human": True,
                         "value": value, "numeric": None, "output": output})
    for name, answers in (proxies or {}).items():
        for output, (value, score) in answers.items():
            rows.append({"rater": name, "rater_kind": "llm", "is_human": False,
                         "value": value, "numeric": score, "output": output})
    frame = pd.DataFrame(rows)
    frame["criterion"] = "usable"
    frame["criterion_kind"] = "binary"
    frame["item"] = frame["output"].map(lambda o: f"item-{o}")
    frame["system"] = frame["output"].map(lambda o: (systems or {}).get(o, "sys"))
    frame["item.speaker"] = frame["output"].map(lambda o: (speakers or {}).get(o))
    return frame


USABLE = {"key": "usable", "kind": "binary"}


def exact_correlations(target: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n x k data whose sample correlation matrix is exactly `target`."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, target.shape[0]))
    data -= data.mean(axis=0)
    q, _ = np.linalg.qr(data)  # orthonormal, centred columns
    return q @ np.linalg.cholesky(target).T


# --------------------------------------------------------------------------------------------
# Williams' test: direction alignment, degenerate pairs, Holm
# --------------------------------------------------------------------------------------------


def test_williams_aligns_a_lower_is_better_metric_pinned_to_steiger():
    # Columns: human share, WER (lower is better), BLEU (higher is better).
    target = np.array([[1.0, -0.4, 0.5], [-0.4, 1.0, -0.1], [0.5, -0.1, 1.0]])
    data = exact_correlations(target, 103)
    table = pd.DataFrame(data, columns=["share", "wer", "bleu"])
    (row,) = williams_tests(table, {"wer": False, "bleu": True})
    assert row["r_a"] == pytest.approx(0.4) and row["r_b"] == pytest.approx(0.5)
    assert row["r_ab"] == pytest.approx(0.1)
    assert row["sign_a"] == -1 and row["sign_b"] == 1
    assert "lower is better" in row["direction_a"] and row["direction_b"] == "higher is better"
    assert row["test"].statistic == pytest.approx(-0.891, abs=5e-4)  # Steiger / psych
    assert row["test"].df == 100
    assert row["p_adjusted"] == pytest.approx(row["test"].p_value)  # a family of one


def test_stronger_wer_is_not_reported_as_worse_than_bleu():
    """The defect: 'wer (-0.71) vs bleu (0.54): t = -8.83' though WER's is the stronger."""
    rng = np.random.default_rng(3)
    n = 120
    quality = rng.uniform(size=n)
    labels = {o: ["yes" if rng.uniform() < q else "no" for _ in range(3)]
              for o, q in enumerate(quality)}
    frame = judgments_frame(labels)
    share = frame.groupby("output")["value"].apply(lambda v: (v == "yes").mean())
    metrics = pd.DataFrame({
        "output": range(n),
        "wer": 1 - share.to_numpy() + rng.normal(0, 0.15, n),  # close to the humans
        "bleu": share.to_numpy() + rng.normal(0, 0.6, n),  # far noisier
    })
    out = proxy_validity(frame, USABLE, metrics, {}, [])
    (row,) = [r for r in out["williams"] if {r["proxy_a"], r["proxy_b"]} == {"wer", "bleu"}]
    raw_wer = np.corrcoef(share, metrics["wer"])[0, 1]
    raw_bleu = np.corrcoef(share, metrics["bleu"])[0, 1]
    assert raw_wer < -abs(raw_bleu)  # WER's correlation is the stronger one, and negative
    assert row["proxy_a"] == "wer" and row["r_a"] == pytest.approx(-raw_wer)
    assert row["r_b"] == pytest.approx(raw_bleu)
    raw_ab = np.corrcoef(metrics["wer"], metrics["bleu"])[0, 1]
    expected = validity.williams_test(-raw_wer, raw_bleu, -raw_ab, n)
    assert row["test"]["statistic"] == pytest.approx(expected.statistic)
    assert row["test"]["statistic"] > 0  # WER correlates better with the humans


def test_identical_metrics_get_a_note_and_the_rest_is_tested_with_holm():
    rng = np.random.default_rng(5)
    n = 60
    labels = {o: ["yes" if rng.uniform() < 0.5 else "no" for _ in range(3)] for o in range(n)}
    frame = judgments_frame(labels)
    share = frame.groupby("output")["value"].apply(lambda v: (v == "yes").mean()).to_numpy()
    wer = 1 - share + rng.normal(0, 0.3, n)
    metrics = pd.DataFrame({"output": range(n), "wer": wer, "cer": wer,  # identical scores
                            "bleu": share + rng.normal(0, 0.5, n)})
    warnings: list[str] = []
    out = proxy_validity(frame, USABLE, metrics, {}, warnings)
    assert isinstance(out["williams"], list), out["williams"]
    rows = {(r["proxy_a"], r["proxy_b"]): r for r in out["williams"]}
    assert set(rows) == {("wer", "bleu"), ("cer", "bleu")}
    (same,) = out["williams_skipped"]
    assert (same["proxy_a"], same["proxy_b"]) == ("wer", "cer")
    assert same["test"] is None and same["p_adjusted"] is None
    assert "perfectly correlated" in same["note"] and same["r_ab"] == pytest.approx(1.0)
    tested = [rows[("wer", "bleu")], rows[("cer", "bleu")]]
    raw = [r["test"]["p_value"] for r in tested]
    assert [r["p_adjusted"] for r in tested] == pytest.approx(validity.holm_adjust(raw))
    assert all("Holm over the 2" in r["p_adjustment"] for r in tested)
    assert not [w for w in warnings if "williams" in w]


def test_holm_adjust_matches_r_p_adjust():
    assert validity.holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert validity.holm_adjust([]) == []
    assert validity.holm_adjust([0.9, 0.8]) == pytest.approx([1.0, 1.0])


# --------------------------------------------------------------------------------------------
# AUC by slice: a table with n_neg, p and Holm-adjusted p
# --------------------------------------------------------------------------------------------


def test_auc_by_slice_table_pinned_to_proc_wilcox_and_holm():
    df = pd.DataFrame({"s100b": ASAH_S100B, "poor": ASAH_POOR,
                       "slice": [f"s{i % 3}" for i in range(len(ASAH_POOR))]})
    rows = validity.auc_by_slice(df, "s100b", "poor", "slice", include_overall=False)
    expected = {
        "s0": (38, 12, 0.7628205128, 0.5739931169, 0.9516479088, 0.0104051123148,
               0.0312153369445),
        "s1": (38, 16, 0.7017045455, 0.5180993879, 0.8853097030, 0.0368567330188,
               0.0368567330188),
        "s2": (37, 13, 0.7387820513, 0.5665780129, 0.9109860897, 0.0183860804422,
               0.0367721608845),
    }
    assert [r.slice for r in rows] == ["s0", "s1", "s2"]
    for row in rows:
        n, n_pos, auc, low, high, p, p_holm = expected[row.slice]
        assert (row.n, row.n_pos, row.n_neg) == (n, n_pos, n - n_pos)
        assert row.auc == pytest.approx(auc, abs=1e-9)
        assert (row.ci_low, row.ci_high) == pytest.approx((low, high), abs=1e-9)
        assert row.p_value == pytest.approx(p, rel=1e-9)
        assert row.p_adjusted == pytest.approx(p_holm, rel=1e-9)
    keys = set(to_jsonable(rows[0]))
    assert {"slice", "n", "n_pos", "n_neg", "auc", "ci_low", "ci_high", "p_value",
            "p_adjusted"} <= keys


def test_auc_by_slice_overall_row_and_one_class_slices_stay_out_of_the_family():
    df = pd.DataFrame({"score": [0.9, 0.8, 0.2, 0.1, 0.3, 0.7, 0.6, 0.4, 0.5, 0.5],
                       "y": [1, 1, 0, 0, 1, 0, 1, 0, 1, 1],
                       "g": ["a"] * 4 + ["b"] * 4 + ["c"] * 2})
    overall, a, b, c = validity.auc_by_slice(df, "score", "y", "g")
    assert overall.p_value is not None and overall.p_adjusted is None
    assert c.auc is None and c.p_value is None and c.p_adjusted is None and c.n_neg == 0
    assert [a.p_adjusted, b.p_adjusted] == pytest.approx(
        validity.holm_adjust([a.p_value, b.p_value]))


# --------------------------------------------------------------------------------------------
# Deployment table: LLM proxies with their thresholds, per group within system
# --------------------------------------------------------------------------------------------


def two_systems_two_speakers():
    """24 outputs: systems A and B x speakers s1 and s2 x 6 utterances. The LLM's P(yes) is
    0.9 for A, 0.6 for B; it stored its answers at the run's threshold 0.7."""
    labels, speakers, systems, proxy, wer = {}, {}, {}, {}, {}
    for output in range(24):
        system, speaker = "AB"[output // 12], f"s{1 + (output // 6) % 2}"
        systems[output], speakers[output] = system, speaker
        preserved = system == "A" or (speaker == "s1" and output % 6 < 5)
        labels[output] = ["yes" if preserved else "no"]
        p_yes = 0.9 if system == "A" else 0.6
        proxy[output] = ("yes" if p_yes >= 0.7 else "no", p_yes)
        wer[output] = 0.1 if system == "A" else 0.3
    frame = judgments_frame(labels, speakers=speakers, systems=systems,
                            proxies={"latte judge": proxy})
    metrics = pd.DataFrame({"output": list(wer), "wer": list(wer.values()),
                            "bleu": [1 - w for w in wer.values()]})
    return frame, metrics


LATTE_INFO = {"latte judge": {"thresholds": {"usable": {
    "threshold": 0.7, "source": "run parameter",
    "rule": "predicted preserved when P(yes) >= 0.7"}}}}


def test_deployment_table_with_an_llm_proxy_per_speaker_within_system():
    frame, metrics = two_systems_two_speakers()
    warnings: list[str] = []
    out = to_jsonable(proxy_validity(frame, USABLE, metrics, {"proxy_raters": LATTE_INFO},
                                     warnings))
    deployment = out["deployment"]
    assert "error" not in deployment, deployment
    assert deployment["group_by"] == "item.speaker" and deployment["within"] == "system"
    rows = {(r["system"], r["group"]): r for r in deployment["rows"]}
    assert set(rows) == {("A", "s1"), ("A", "s2"), ("B", "s1"), ("B", "s2")}
    name = "rater:latte judge"
    assert rows[("A", "s1")]["proxies"][name] == 100.0
    # At the run's 0.7, P(yes) = 0.6 is "not preserved" (at a default 0.5 it would be 100%).
    assert rows[("B", "s1")]["proxies"][name] == 0.0
    assert rows[("B", "s1")]["human_mp"] == pytest.approx(500 / 6)
    assert rows[("B", "s2")]["human_mp"] == 0.0
    assert rows[("B", "s1")]["word_acc"] == pytest.approx(70.0)
    assert rows[("A", "s2")]["accept"] == {"word_acc": True, "human": True, name: True}
    assert rows[("B", "s1")]["accept"] == {"word_acc": False, "human": True, name: False}
    assert rows[("B", "s1")]["n"] == 6 and rows[("B", "s1")]["proxy_n"][name] == 6
    by_system = {r["group"]: r for r in deployment["by_system"]}
    assert by_system["B"]["human_mp"] == pytest.approx(500 / 12)
    assert by_system["B"]["proxies"][name] == 0.0
    decider = next(d for d in deployment["deciders"] if d["decider"] == name)
    assert decider["threshold"] == 0.7 and decider["threshold_source"] == "run parameter"
    assert {d["decider"] for d in deployment["deciders"]} == {"word_acc", "human", name}
    assert [x["proxy"] for x in deployment["left_out"]] == ["bleu"]
    agreement = {a["decider"]: a for a in deployment["agreement"]}
    assert agreement[name]["disagreements"] == [["B", "s1"]]
    assert deployment["held_out_tables"] == []
    entry = next(p for p in out["proxies"] if p["proxy"] == name)
    assert entry["decisions"]["threshold"] == 0.7


def test_deployment_group_option_names_a_field_without_its_prefix():
    frame, metrics = two_systems_two_speakers()
    out = to_jsonable(proxy_validity(frame, USABLE, metrics,
                                     {"proxy_raters": LATTE_INFO, "deployment_group": "speaker"},
                                     []))
    assert out["deployment"]["group_by"] == "item.speaker"
    by_system = to_jsonable(proxy_validity(frame, USABLE, metrics,
                                           {"proxy_raters": LATTE_INFO,
                                            "deployment_group": "system"}, []))["deployment"]
    assert by_system["within"] is None and [r["group"] for r in by_system["rows"]] == ["A", "B"]
    bad = proxy_validity(frame, USABLE, metrics, {"deployment_group": "dialect"}, [])
    assert "dialect" in bad["deployment"]["error"]


def test_decisions_excluded_on_a_dev_split_get_a_table_of_their_own():
    frame, metrics = two_systems_two_speakers()
    dev = [0, 1, 2, 12, 13, 14]  # three outputs of each system (speaker s1)
    info = {"latte judge": {**LATTE_INFO["latte judge"], "exclude_decisions": dev,
                            "exclude_decisions_because": "its threshold was chosen on them"}}
    out = to_jsonable(proxy_validity(frame, USABLE, metrics, {"proxy_raters": info}, []))
    entry = next(p for p in out["proxies"] if p["proxy"] == "rater:latte judge")
    # The threshold does not enter AUC: scored on everything, decisions on the rest only.
    assert entry["evaluated_on"]["n_outputs"] == 24 and entry["evaluated_on"]["n_excluded"] == 0
    assert entry["decisions"]["n_outputs"] == 18 and entry["decisions"]["n_excluded"] == 6
    deployment = out["deployment"]
    assert deployment["proxies"] == [] and deployment["n_outputs"] == 24
    (held_out,) = deployment["held_out_tables"]
    assert held_out["proxies"] == ["rater:latte judge"]
    assert held_out["n_outputs"] == 18 and held_out["n_excluded"] == 6
    assert "chosen on them" in held_out["excluded_because"]
    rows = {(r["system"], r["group"]): r for r in held_out["rows"]}
    assert rows[("B", "s1")]["n"] == 3
    # Human % recomputed on the same three outputs (3, 4, 5 -> 2 of 3 preserved).
    assert rows[("B", "s1")]["human_mp"] == pytest.approx(200 / 3)


def test_a_trained_proxy_is_scored_only_on_outputs_it_never_saw():
    frame, metrics = two_systems_two_speakers()
    seen = list(range(0, 24, 2))
    info = {"latte judge": {**LATTE_INFO["latte judge"], "exclude_scores": seen,
                            "exclude_scores_because": "its training and dev splits"}}
    out = to_jsonable(proxy_validity(frame, USABLE, metrics, {"proxy_raters": info}, []))
    entry = next(p for p in out["proxies"] if p["proxy"] == "rater:latte judge")
    assert entry["evaluated_on"]["n_outputs"] == 12 and entry["evaluated_on"]["n_excluded"] == 12
    assert "never saw" in entry["evaluated_on"]["outputs"]
    assert entry["auc"]["auc"]["n"] == 12
    assert entry["decisions"]["n_excluded"] == 12
    (held_out,) = out["deployment"]["held_out_tables"]
    assert held_out["n_outputs"] == 12
