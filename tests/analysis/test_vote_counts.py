"""Aggregated judgments (people per answer, as published data sets ship them) imported as
such and analysed apart from named raters; pairwise validity of the metrics against the human
majority. Run end to end on a slice of HATS (French ASR pairs, 7-8 listeners each) through the
platform's commands."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analysis.selectors import criteria_specs, judgments_tidy, metric_scores, vote_counts
from analysis.stats.pairwise_validity import pairwise_validity
from analysis.stats.pipeline import analyse
from annotation.models import VoteCount
from evalstudy.models import AuditEvent, Rater, Study
from tests.hats import hats_rows
from tests.hats import hats_study as hats_slice

pytestmark = pytest.mark.django_db


@pytest.fixture
def hats_study(tmp_path):
    return hats_slice(tmp_path, 60)


def test_counts_import_as_counts_not_raters_and_reimport_changes_nothing(hats_study):
    study, votes = hats_study
    call_command("import_vote_counts", str(votes), "--study", study.slug,
                 "--position", "unknown")
    assert VoteCount.objects.filter(study=study).count() == 120
    assert not Rater.objects.filter(study=study).exists()  # no invented raters
    assert not VoteCount.objects.filter(position_known=True).exists()
    first = sorted(VoteCount.objects.values_list("output_id", "value", "count"))
    call_command("import_vote_counts", str(votes), "--study", study.slug,
                 "--position", "unknown")
    assert sorted(VoteCount.objects.values_list("output_id", "value", "count")) == first
    event = AuditEvent.objects.filter(study=study, action="import").latest("at")
    assert event.changes["what"] == "vote counts" and event.changes["replaced"] == 60


def test_a_bad_counts_file_names_line_and_column_and_stores_nothing(hats_study, tmp_path):
    study, _ = hats_study
    bad = tmp_path / "bad.csv"
    bad.write_text("item,system,system_b,criterion,value,count\n"
                   "t0000,hypA,hypB,preference,A,3\n"
                   "t0000,hypA,hypB,preference,A,4\n"
                   "t0001,hypA,,preference,B,2\n"
                   "t0002,hypA,hypB,preference,C,2\n"
                   "t0003,hypA,hypB,preference,B,-1\n", encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("import_vote_counts", str(bad), "--study", study.slug)
    message = str(refused.value)
    assert "bad.csv:6: count: must be a whole number" in message  # the file is parsed first
    bad.write_text(bad.read_text().replace("B,-1", "B,1"), encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("import_vote_counts", str(bad), "--study", study.slug)
    message = str(refused.value)
    for expected in ("bad.csv:3: value: 'A' is counted twice for this unit (first on line 2)",
                     "bad.csv:4: system_b: a pairwise criterion needs system_b",
                     "bad.csv:5: value: criterion 'preference'"):
        assert expected in message, (expected, message)
    assert not VoteCount.objects.exists()


def test_pairwise_validity_from_counts_reproduces_the_published_rule(hats_study):
    """WER and CER on raw text, against the listeners' majority, counted as the HATS paper
    counts (ties wrong), equal the figures computed by hand from the file; the confounded
    design (hypA always A, position unknown) is explained, not a singular-matrix crash."""
    study, votes = hats_study
    call_command("import_vote_counts", str(votes), "--study", study.slug,
                 "--position", "unknown")
    raw = json.dumps({"wer": {"normaliser": {"lowercase": False, "strip_punctuation": False,
                                             "numbers": "keep", "unicode_form": "none"}},
                      "cer": {"normaliser": {"lowercase": False, "strip_punctuation": False,
                                             "numbers": "keep", "unicode_form": "none"}}})
    call_command("compute_metrics", "--study", study.slug, "--sync", "--metrics", "wer",
                 "cer", "--params", raw)
    result = analyse(judgments_tidy(study), criteria_specs(study), metric_scores(study),
                     {"engine": "statsmodels"}, votes=vote_counts(study))
    assert result["design"]["systems"] == ["hypA", "hypB"]
    assert result["design"]["vote_counts"]["votes"] == sum(
        int(r["nbrA"]) + int(r["nbrB"]) for r in hats_rows(60))
    criterion = result["criteria"][0]
    assert criterion["votes"]["position_known"] is False
    preference = criterion["votes"]["preference"]
    assert "not_estimable" not in preference["extra"]  # no position term: estimable
    counted_agreement = criterion["votes"]["agreement"]
    assert {"fleiss_kappa", "krippendorff_alpha"} <= set(counted_agreement)
    assert "cohen_pairs" not in counted_agreement  # raters' statistics need raters
    entry = result["validity"][0]
    assert entry["kind"] == "pairwise" and entry["n_units"] == 60
    rows = {row["proxy"]: row for row in entry["tables"]["ties_wrong"]}
    import jiwer

    expected = []
    for row in hats_rows(60):
        a, b = int(row["nbrA"]), int(row["nbrB"])
        wer_a, wer_b = (jiwer.wer(row["reference"], row[h]) for h in ("hypA", "hypB"))
        pick = 1 if wer_a < wer_b else -1 if wer_a > wer_b else 0
        majority = 1 if a > b else -1 if b > a else 0
        expected.append(pick == majority and majority != 0)
    assert rows["wer"]["all"]["accuracy"] == pytest.approx(np.mean(expected))
    assert rows["wer"]["all"]["n"] == 60
    loo = {row["proxy"]: row for row in entry["tables"]["ties_wrong_loo"]}
    ceiling = loo["one person (leave one vote out)"]
    assert 0.5 < ceiling["all"]["accuracy"] < 1.0
    assert "one person (leave one vote out)" not in rows
    from analysis.report import render_html

    html = render_html(study=study, result=result, options={}, filters=[])
    for text in ("Agreement with the majority: majority of everyone, ties count as wrong",
                 "Human ceiling: one person (leave one vote out)",
                 "Aggregated counts (people per answer, no named raters)",
                 "no position term", "wer (lower = better)",
                 "Counted votes (aggregated, no named raters)"):
        assert text in html, text
    for bad in (r"\bnan\b", r"\bNone\b", "Traceback", "Singular matrix"):
        assert not re.search(bad, html), bad


def test_named_raters_and_counts_are_one_majority():
    """A pair judged by 2 named raters (both A) and counted votes (3 B, in the other order)
    has a majority of A (5 to 0 after turning the counts round) ... the ceiling is the same
    units' leave-one-out agreement."""
    from annotation.preferences import merge_units, units_from_choices

    named = units_from_choices(pd.DataFrame({"output": [1, 2], "output_b": [2, 1],
                                             "value": ["A", "B"], "item": ["x", "x"]}))
    assert named[["a", "b"]].values.tolist() == [[2, 0]]
    counted = pd.DataFrame({"output": [2], "output_b": [1], "item": ["x"], "a": [0], "b": [3],
                            "tie": [0]})
    units = merge_units(named, counted)
    assert units[["output", "output_b", "a", "b"]].values.tolist() == [[1, 2, 5, 0]]
    scores = pd.DataFrame({"wer": [0.1, 0.3]}, index=pd.Index([1, 2], name="output"))
    result = pairwise_validity(units, scores, {"wer": False}, n_boot=50)
    assert result.rows[0].cells["ties_wrong"]["all"].accuracy == 1.0


def test_tie_rules_and_the_ceiling_by_hand():
    units = pd.DataFrame({"output": [1, 3, 5], "output_b": [2, 4, 6], "item": ["p", "q", "r"],
                          "a": [4, 4, 7], "b": [3, 4, 0], "tie": [0, 0, 0]})
    # metric: unit 1 prefers A (right), unit 2 a metric tie, unit 3 prefers B (wrong)
    scores = pd.DataFrame({"m": [0.9, 0.1, 0.5, 0.5, 0.2, 0.8]},
                          index=pd.Index([1, 2, 3, 4, 5, 6], name="output"))
    result = pairwise_validity(units, scores, {"m": True}, n_boot=50)
    metric, ceiling = result.rows[0], result.rows[-1]
    assert metric.cells["ties_wrong"]["all"].accuracy == pytest.approx(1 / 3)
    # unit 2 is a human tie (left out); units 1 (right) and 3 (wrong)
    assert metric.cells["ties_excluded"]["all"].accuracy == pytest.approx(1 / 2)
    assert metric.cells["ties_wrong"]["unanimous"].n == 1
    # unit 1 (4-3): an A voter's others are 3-3 (a tie: wrong), a B voter's others 4-2 A
    # (wrong); unit 2 (4-4): others 3-4 for an A voter (wrong); unit 3: all right.
    assert ceiling.cells["ties_wrong_loo"]["all"].accuracy == pytest.approx((0 + 0 + 1) / 3)
    # ties_excluded: unit 2 left out; unit 1: A voters' others tie (half), B voters wrong
    assert ceiling.cells["ties_excluded_loo"]["all"].accuracy == pytest.approx(
        ((4 * 0.5 + 3 * 0) / 7 + 1) / 2)
    # The metric in the ceiling's units: unit 1 (picks A): the 4 A voters' others tie (wrong),
    # the 3 B voters' others are 4-2 A (right): 3/7; unit 2 (metric tie): wrong; unit 3
    # (picks B against 6-0 A): wrong. Against everyone unit 1 was simply right.
    assert metric.cells["ties_wrong_loo"]["all"].accuracy == pytest.approx((3 / 7) / 3)
    assert "ties_wrong" not in ceiling.cells  # the ceiling is only in its own units


def test_a_judge_that_always_picks_the_first_position_earns_nothing():
    """It answered each pair in both orders, A each time: before, the last answer read
    counted, so it scored as if it had an opinion."""
    from analysis.stats.pairwise_validity import picks_of_answers

    units = pd.DataFrame({"output": [1, 3], "output_b": [2, 4], "item": ["p", "q"],
                          "a": [5, 0], "b": [0, 5], "tie": [0, 0]})
    answers = pd.DataFrame({"output": [1, 2, 3, 4], "output_b": [2, 1, 4, 3],
                            "value": ["A", "A", "A", "A"]})
    assert picks_of_answers(units, answers).tolist() == [0.0, 0.0]
    consistent = answers.assign(value=["A", "B", "B", "A"])
    assert picks_of_answers(units, consistent).tolist() == [1.0, -1.0]


def test_a_pair_judged_by_one_or_two_people_is_in_no_agreement_stratum():
    units = pd.DataFrame({"output": [1, 3, 5], "output_b": [2, 4, 6], "item": ["p", "q", "r"],
                          "a": [1, 2, 3], "b": [0, 0, 0], "tie": [0, 0, 0]})
    result = pairwise_validity(units, pd.DataFrame(index=pd.Index([], name="output")), {},
                               n_boot=20)
    assert result.strata == {"unanimous": 1, "agreement >= 70%": 1, "all": 3}


def test_a_confounded_pairwise_design_is_explained_not_a_singular_matrix():
    """Every pair shows hypA as A: position and system are one variable. Before, the model
    died with `LinAlgError: Singular matrix`."""
    from analysis.stats.models import preference_model

    frame = pd.DataFrame({"left_system": ["hypA"] * 40, "right_system": ["hypB"] * 40,
                          "choice": ["A"] * 25 + ["B"] * 15, "rater": [f"r{i % 8}"
                                                                     for i in range(40)]})
    result = preference_model(frame, cluster="rater")
    assert result.ties_excluded is None and result.ties_half is None
    assert "position and system cannot be told apart" in result.extra["not_estimable"]
    assert {s.system: s.wins for s in result.shares} == {"hypA": 25, "hypB": 15}
    unknown = preference_model(frame, cluster="rater", position_known=False)
    assert unknown.ties_excluded is not None and "not_estimable" not in unknown.extra
    assert unknown.position_ties_excluded is None
    disconnected = pd.DataFrame({"left_system": ["a", "b", "c", "d"] * 5,
                                 "right_system": ["b", "a", "d", "c"] * 5,
                                 "choice": ["A", "B"] * 10})
    assert "not all connected" in preference_model(disconnected).extra["not_estimable"]


@pytest.mark.parametrize("engine", ["statsmodels", "auto"])
def test_a_single_system_study_keeps_its_default_glmm_as_an_intercept_model(engine):
    """Before: "factor 'system' has fewer than two observed levels" and no model at all."""
    from analysis.stats.pipeline import analyse_criterion

    rng = np.random.default_rng(5)
    rows = pd.DataFrame({
        "rater": [f"r{i % 6}" for i in range(120)], "is_human": True,
        "output": [i % 20 for i in range(120)], "item": [f"i{i % 20}" for i in range(120)],
        "system": "only", "system_b": None,
        "value": np.where(rng.random(120) < 0.7, "yes", "no"), "seconds": 3.0})
    rows["numeric"] = None
    warnings: list[str] = []
    result = analyse_criterion(rows, {"key": "usable", "kind": "binary"}, {"engine": engine},
                               warnings)
    glmm = result["glmm"]
    assert not glmm.get("error"), glmm
    assert glmm["formula"].startswith("y ~ 1")
    assert [c["term"] for c in glmm["coefficients"]] == ["(Intercept)"]
    assert any("one system only" in w for w in warnings)


def test_likert_validity_correlates_metrics_with_the_mean_human_score():
    """A Likert criterion gets its metrics' correlations with the mean human score, the
    ordinal model with the metric as predictor, and the one-rater ceiling (before: validity
    ran only for binary and severity criteria)."""
    from analysis.report import render_html

    rng = np.random.default_rng(11)
    quality = rng.normal(size=40)
    rows = []
    for output in range(40):
        for rater in range(4):
            rating = int(np.clip(np.round(3 + quality[output] + rng.normal(0, 0.6)), 1, 5))
            rows.append({"rater": f"r{rater}", "rater_kind": "expert", "is_human": True,
                         "output": output, "item": f"i{output // 2}",
                         "system": f"s{output % 2}", "system_b": None, "criterion": "fluency",
                         "value": str(rating), "numeric": float(rating), "seconds": 4.0})
    judgments = pd.DataFrame(rows)
    metrics = pd.DataFrame({"output": range(40), "item": [f"i{o // 2}" for o in range(40)],
                            "system": [f"s{o % 2}" for o in range(40)],
                            "wer": 0.5 - 0.2 * quality + rng.normal(0, 0.05, 40),
                            "bertscore_f": rng.random(40)})
    criterion = {"key": "fluency", "kind": "likert", "scale_points": 5}
    result = analyse(judgments, [criterion], metrics, {"engine": "statsmodels"})
    entry = result["validity"][0]
    by_name = {p["proxy"]: p for p in entry["proxies"]}
    assert by_name["wer"]["correlations"]["spearman"]["value"] < -0.8
    assert abs(by_name["bertscore_f"]["correlations"]["spearman"]["value"]) < 0.4
    assert by_name["wer"]["ordinal"]["estimate"] < 0 and by_name["wer"]["ordinal"]["ci"][1] < 0
    assert entry["ceiling"]["raters"] == 4 and entry["ceiling"]["spearman"] > 0.5
    study = Study(slug="likert-validity", title="Likert validity")
    html = render_html(study=study, result=result, options={}, filters=[])
    for text in ("Association with the human score", "wer (lower = better)",
                 "Human ceiling: one rater vs the others (4 raters)"):
        assert text in html, text


def test_a_pair_reimported_in_the_other_order_replaces_its_counts(hats_study, tmp_path):
    """With the position unknown, (hypB, hypA) is the pair (hypA, hypB): before, importing it
    the other way added its votes a second time (7 listeners became 14)."""
    study, _ = hats_study
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("item,system,system_b,criterion,value,count\n"
                     "t0000,hypA,hypB,preference,A,5\nt0000,hypA,hypB,preference,B,2\n",
                     encoding="utf-8")
    second.write_text("item,system,system_b,criterion,value,count\n"
                      "t0000,hypB,hypA,preference,A,2\nt0000,hypB,hypA,preference,B,5\n",
                      encoding="utf-8")
    for path in (first, second):
        call_command("import_vote_counts", str(path), "--study", study.slug, "--position",
                     "unknown")
    assert sum(VoteCount.objects.values_list("count", flat=True)) == 7
    both = tmp_path / "both.csv"
    both.write_text(first.read_text() + second.read_text().split("\n", 1)[1], encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("import_vote_counts", str(both), "--study", study.slug, "--position",
                     "unknown")
    assert "already counted in the other order" in str(refused.value)


def test_likert_counts_give_agreement_on_the_numeric_scale():
    """Counted Likert answers are stored as text: the agreement statistics refused them
    ("values ['1', ...] are not among labels [1, 2, 3, 4, 5]")."""
    from analysis.stats.votes import votes_summary

    rows = []
    for output in range(12):
        for value, count in ((str(1 + output % 5), 5), (str(1 + (output + 1) % 5), 1)):
            rows.append({"criterion": "fluency", "criterion_kind": "likert",
                         "item": f"i{output}", "output": output, "system": "s",
                         "output_b": None, "system_b": None, "value": value, "count": count,
                         "position_known": True})
    warnings: list[str] = []

    def section(target, name, warns, compute):
        target[name] = compute()

    found = votes_summary(pd.DataFrame(rows), {"key": "fluency", "kind": "likert"}, warnings,
                          section, [1, 2, 3, 4, 5])
    assert found["agreement"]["krippendorff_alpha"].value > 0.5
    empty = votes_summary(pd.DataFrame(rows).assign(count=0), {"key": "fluency",
                                                               "kind": "likert"},
                          warnings, section, [1, 2, 3, 4, 5])
    assert empty["n_units"] == 0 and not warnings


def test_binary_counts_reach_the_proxy_validity():
    """Counted "yes"/"no" votes give each output its human majority, which the metrics'
    AUC is computed against (before: "no human judgments", and the report said nothing)."""
    rng = np.random.default_rng(3)
    quality = rng.normal(size=30)
    votes = []
    for output in range(30):
        yes = int(np.clip(np.round(3 + 2 * quality[output]), 0, 6))
        for value, count in (("yes", yes), ("no", 6 - yes)):
            votes.append({"criterion": "usable", "criterion_kind": "binary",
                          "item": f"i{output}", "output": output, "system": f"s{output % 2}",
                          "output_b": None, "system_b": None, "value": value,
                          "count": count, "position_known": True})
    metrics = pd.DataFrame({"output": range(30), "item": [f"i{o}" for o in range(30)],
                            "system": [f"s{o % 2}" for o in range(30)],
                            "wer": 0.4 - 0.15 * quality})
    empty = pd.DataFrame(columns=["rater", "rater_kind", "is_human", "output", "item",
                                  "system", "system_b", "criterion", "value", "numeric",
                                  "seconds"]).astype({"is_human": bool})
    result = analyse(empty, [{"key": "usable", "kind": "binary"}], metrics,
                     {"engine": "statsmodels"}, votes=pd.DataFrame(votes))
    entry = result["validity"][0]
    wer = next(p for p in entry["proxies"] if p["proxy"] == "wer")
    assert wer["auc"]["auc"]["value"] > 0.9
