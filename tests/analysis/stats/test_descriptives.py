"""Descriptives: Likert summaries, Wilson intervals, precision/recall/F1."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.stats import descriptives as D


def test_wilson_pinned_value():
    lo, hi = D.wilson_ci(7, 10)
    assert round(lo, 4) == 0.3968 and round(hi, 4) == 0.8922
    # closed form for x = 7, n = 10, z = 1.959964
    z, p, n = 1.959963985, 0.7, 10
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (lo, hi) == pytest.approx((centre - half, centre + half), abs=1e-9)
    lo0, hi0 = D.wilson_ci(0, 10)
    assert lo0 == pytest.approx(0.0, abs=1e-12) and round(hi0, 4) == 0.2775
    assert D.wilson_ci(0, 0) is None


def test_likert_summary():
    df = pd.DataFrame({
        "system": pd.Categorical(["B"] * 3 + ["A"] * 5, categories=["B", "A"]),
        "rating": [2, 2, 5, 1, 2, 3, 4, 5],
    })
    rows = D.likert_summary(df)
    assert [r.group for r in rows] == ["B", "A"]
    a = rows[1]
    assert (a.n, a.mean, a.median, a.minimum, a.maximum) == (5, 3.0, 3.0, 1.0, 5.0)
    assert a.sd == pytest.approx(math.sqrt(2.5))
    assert a.sem == pytest.approx(math.sqrt(2.5) / math.sqrt(5))
    b = rows[0]
    assert b.mean == pytest.approx(3.0) and b.median == 2.0 and b.counts == {"2": 2, "5": 1}
    one = D.likert_summary(pd.DataFrame({"system": ["x"], "rating": [4]}))[0]
    assert one.sd is None and one.sem is None and one.mean == 4.0
    frame = D.to_frame(rows)
    assert list(frame["group"]) == ["B", "A"] and "sem" in frame


def test_proportion_summary():
    df = pd.DataFrame({"system": ["a"] * 10 + ["b"] * 4,
                       "y": [1] * 7 + [0] * 3 + [True, False, False, False]})
    rows = {r.group: r for r in D.proportion_summary(df)}
    assert rows["a"].successes == 7 and rows["a"].proportion == pytest.approx(0.7)
    assert round(rows["a"].ci_low, 4) == 0.3968 and round(rows["a"].ci_high, 4) == 0.8922
    assert rows["b"].n == 4 and rows["b"].proportion == 0.25
    with pytest.raises(ValueError):
        D.proportion_summary(pd.DataFrame({"system": ["a"], "y": [2]}))


def test_confusion_metrics_definitions():
    m = D.confusion_metrics(tp=8, fp=2, fn=4, tn=6)
    assert m.precision == pytest.approx(8 / 10)
    assert m.recall == pytest.approx(8 / 12)
    assert m.f1 == pytest.approx(2 * 0.8 * (2 / 3) / (0.8 + 2 / 3))
    assert m.f1 == pytest.approx(16 / 22)
    assert m.accuracy == pytest.approx(14 / 20) and m.n == 20
    assert m.precision_ci == pytest.approx(D.wilson_ci(8, 10))
    empty = D.confusion_metrics(tp=0, fp=0, fn=3)
    assert empty.precision is None and empty.recall == 0.0 and empty.f1 == 0.0
    assert empty.tn is None and empty.accuracy is None
    with pytest.raises(ValueError):
        D.confusion_metrics(-1, 0, 0)


def test_classification_summary_from_labels():
    df = pd.DataFrame({
        "system": ["s1"] * 6 + ["s2"] * 4,
        "label": ["TP", "TP", "tp", "FP", "FN", "TN", "TP", "FN", "FN", "fp"],
    })
    rows = {r.group: r for r in D.classification_summary(df)}
    s1 = rows["s1"]
    assert (s1.tp, s1.fp, s1.fn, s1.tn) == (3, 1, 1, 1)
    assert s1.precision == 0.75 and s1.recall == 0.75 and s1.f1 == 0.75
    s2 = rows["s2"]
    assert (s2.tp, s2.fp, s2.fn, s2.tn) == (1, 1, 2, 0)
    assert s2.recall == pytest.approx(1 / 3) and s2.precision == 0.5
    no_tn = D.classification_summary(df[df.label != "TN"])
    assert all(r.tn is None and r.accuracy is None for r in no_tn)
    with pytest.raises(ValueError):
        D.classification_summary(pd.DataFrame({"system": ["a"], "label": ["XX"]}))
    overall = D.classification_summary(df, by=None)[0]
    assert overall.group == "all" and overall.tp == 4


def _scores(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"system": system, "output": f"{system}-{index}", "rater": f"r{index % 2}",
             "score": value} for system, scores in values.items()
            for index, value in enumerate(scores)]
    return pd.DataFrame(rows)


def test_scores_per_system_come_best_first_in_either_direction():
    frame = _scores({"few": [0.0, 1.0, 1.0, 0.0], "many": [4.0, 5.0, 3.0, 6.0]})
    higher = D.slider_summary(frame)
    assert [r["system"] for r in higher["systems"]] == ["many", "few"]
    assert higher["better"] == "higher"
    # A penalty (a count of errors): the fewest first, so the top row is the best system.
    lower = D.slider_summary(frame, lower_is_better=True)
    assert [r["system"] for r in lower["systems"]] == ["few", "many"]
    assert lower["better"] == "lower"
