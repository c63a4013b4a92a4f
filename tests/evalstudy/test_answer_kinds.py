"""The slider and span kinds' rules (evalstudy.criteria, no Django): what a valid answer is,
its canonical spelling, its number, and what configuration is refused."""

from __future__ import annotations

import json

import pytest

from evalstudy import criteria as rules

TEXT = "the cat sat on the mat"
SHOWN = rules.ShownText(TEXT, "the cat sat on a mat")
SPAN = rules.CriterionRule(kind="span", options=("Accuracy", "Fluency"))


def _answer(*spans, text=TEXT):
    return {"spans": list(spans), "text_sha256": rules.text_sha256(text)}


def test_a_slider_takes_whole_numbers_in_its_range_only():
    rule = rules.CriterionRule(kind="slider")
    assert rule.normalise("73") == "73" and rule.normalise(73.0) == "73"
    assert rule.normalise(" 0 ") == "0" and rule.normalise("100") == "100"
    assert rule.numeric("73") == 73.0
    for bad in ("101", "-1", "7.5", "nan", "inf", "seventy", ""):
        with pytest.raises(ValueError):
            rule.normalise(bad)
    own = rules.CriterionRule(kind="slider", scale_min=-3, scale_max=3)
    assert own.normalise("-3") == "-3"
    with pytest.raises(ValueError, match="from -3 to 3"):
        own.normalise("4")


def test_a_slider_configuration_is_checked():
    check = rules.check_rule
    assert check("slider", scale_points=None, labels={"0": "nonsense", "100": "perfect"},
                 options=[]) == []
    assert "both scale_min and scale_max" in check("slider", scale_points=None, labels=[],
                                                   options=[], scale_min=0)[0]
    assert "below its scale_max" in check("slider", scale_points=None, labels=[],
                                          options=[], scale_min=5, scale_max=5)[0]
    assert "outside 0..100" in check("slider", scale_points=None, labels={"101": "x"},
                                     options=[])[0]
    assert "only apply to slider" in check("likert", scale_points=5, labels=[], options=[],
                                           scale_min=0, scale_max=10)[0]


def test_spans_are_stored_canonically_with_the_digest_of_the_text_marked():
    value = SPAN.normalise(json.dumps(_answer(
        {"start": 15, "end": 22, "category": "fluency", "severity": "minor"},
        {"start": 4, "end": 7, "category": "Accuracy", "severity": "major"})), SHOWN)
    stored = json.loads(value)
    assert stored["text_sha256"] == rules.text_sha256(TEXT)
    assert [(s["start"], s["end"], s["category"], s["side"]) for s in stored["spans"]] == [
        (4, 7, "Accuracy", "output"), (15, 22, "Fluency", "output")]
    assert TEXT[4:7] == "cat"
    # MQM: a major error costs 5, a minor one 1.
    assert SPAN.numeric(value) == 6.0
    assert SPAN.normalise(json.dumps(_answer()), SHOWN) == (
        '{"spans":[],"text_sha256":"' + rules.text_sha256(TEXT) + '"}')
    assert SPAN.numeric(SPAN.normalise(_answer(), SHOWN)) == 0.0


@pytest.mark.parametrize(("spans", "reason"), [
    ([{"start": 4, "end": 11, "category": "Accuracy", "severity": "minor"},
      {"start": 8, "end": 14, "category": "Fluency", "severity": "minor"}], "overlap"),
    ([{"start": 4, "end": 99, "category": "Accuracy", "severity": "minor"}], "offsets"),
    ([{"start": 7, "end": 4, "category": "Accuracy", "severity": "minor"}], "offsets"),
    ([{"start": "4", "end": 7, "category": "Accuracy", "severity": "minor"}], "offsets"),
    ([{"start": True, "end": 7, "category": "Accuracy", "severity": "minor"}], "offsets"),
    ([{"start": 3, "end": 4, "category": "Accuracy", "severity": "minor"}], "white space"),
    ([{"start": 4, "end": 7, "category": "Style", "severity": "minor"}], "category"),
    ([{"start": 4, "end": 7, "category": "Accuracy", "severity": "fatal"}], "severity"),
    ([{"start": 4, "end": 7, "category": "Accuracy", "severity": "minor",
       "side": "reference"}], "side"),
    (["4-7"], "not an object"),
])
def test_a_bad_span_is_refused_with_its_reason(spans, reason):
    with pytest.raises(ValueError, match=reason):
        SPAN.normalise(_answer(*spans), SHOWN)


def test_spans_marked_on_another_text_are_refused():
    with pytest.raises(ValueError, match="another text"):
        SPAN.normalise(_answer(text="the cat sat on the hat"), SHOWN)
    with pytest.raises(ValueError, match="another text"):
        SPAN.normalise({"spans": []}, SHOWN)
    with pytest.raises(ValueError, match="not known here"):
        SPAN.normalise(_answer())
    with pytest.raises(ValueError, match="not valid JSON"):
        SPAN.normalise("{spans", SHOWN)


def test_reference_spans_need_the_criterion_to_allow_them_and_may_touch_output_spans():
    rule = rules.CriterionRule(kind="span", options=("Omission",), span_reference=True,
                               severity_weights={"minor": 1, "major": 10})
    value = rule.normalise(_answer(
        {"start": 12, "end": 14, "side": "reference", "category": "omission",
         "severity": "major"},
        {"start": 12, "end": 14, "category": "Omission", "severity": "minor"}), SHOWN)
    assert [s["side"] for s in json.loads(value)["spans"]] == ["output", "reference"]
    assert rule.numeric(value) == 11.0  # the criterion's own weights


def test_a_span_configuration_is_checked():
    check = rules.check_rule
    assert check("span", scale_points=None, labels=[], options=["Accuracy"]) == []
    assert "at least 1 error category" in check("span", scale_points=None, labels=[],
                                                options=[])[0]
    assert "distinct" in check("span", scale_points=None, labels=[],
                               options=["A", "a"])[0]
    assert "weight must be a number" in check("span", scale_points=None, labels=[],
                                              options=["A"],
                                              severity_weights={"minor": "one"})[0]
    assert "only apply to span" in check("binary", scale_points=None, labels=[],
                                         options=[], severity_weights={"minor": 1})[0]
    assert "span_reference only applies" in check("binary", scale_points=None, labels=[],
                                                  options=[], span_reference=True)[0]
