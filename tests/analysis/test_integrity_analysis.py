"""Integrity signals in the analysis: the sensitivity table with and without the flagged
raters (means known from the design), the rater-level flag entering the fitted mixed model as
a covariate, and the judgments split at each rater's recalibration round."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from django.utils import timezone

from analysis.extras import integrity as extra
from analysis.models import AnalysisRun
from analysis.services import analysis_run_execute, analysis_run_start
from analysis.stats import rbridge
from analysis.stats.covariates import covariate_formula
from annotation.behaviour import slot_behaviour_record
from annotation.services import judgment_submit
from evalstudy.models import Study
from evalstudy.services import assignment_next
from tests.factories import invite, make_study

CALM = {"pastes": 0, "focus_losses": 0, "seconds_away": 0, "keystrokes": 30, "inputs": 40}
PASTED = {**CALM, "pastes": 1}


def _honest(item: int, system: str) -> str:
    # sys-0: yes on 6 of 8 items; sys-1: yes on 2 of 8
    if system == "sys-0":
        return "no" if item % 4 == 0 else "yes"
    return "yes" if item % 4 == 0 else "no"


def _paster(item: int, system: str) -> str:
    return "no" if item % 3 == 0 else "yes"  # 5 of 8 items, whatever the system


def _rate(crossed: Study, rater, answer, behaviour, start: dt.datetime) -> None:
    now = start
    while (slot := assignment_next(study=crossed, rater=rater, now=now)) is not None:
        now += dt.timedelta(seconds=20)
        if slot.kind == "target":
            item = int(slot.output.item.external_id.split("-")[1])
            usable = answer(item, slot.output.system.name)
            answers = {"usable": usable, "severity": "0" if usable == "yes" else "1"}
        else:
            answers = {"severity": "0", "usable": "yes"}
        judgment_submit(rater=rater, slot_id=slot.pk, answers=answers, now=now)
        if slot.kind == "target":
            slot_behaviour_record(slot_id=slot.pk, raw=behaviour, now=now)
        now += dt.timedelta(seconds=1)


@pytest.fixture
def crossed(db):
    """Crossed: 4 honest raters and 2 who paste into every answer, 8 items x 2 systems."""
    crossed = make_study(n_items=8, n_systems=2, status=Study.Status.OPEN, design="crossed",
                       ratings_per_output=6)
    start = timezone.now() - dt.timedelta(hours=5)
    for k in range(4):
        _rate(crossed, invite(crossed, external_id=f"honest{k}"), _honest, CALM, start)
    for k in range(2):
        _rate(crossed, invite(crossed, external_id=f"paster{k}"), _paster, PASTED, start)
    return crossed


def _run(crossed: Study, options: dict) -> AnalysisRun:
    run = analysis_run_start(study=crossed, options={"pdf": False, **options}, enqueue=False)
    run = analysis_run_execute(run)
    assert run.status == AnalysisRun.Status.DONE, run.error
    return run


def test_sensitivity_table_with_and_without_the_flagged_raters(crossed):
    run = _run(crossed, {"engine": "statsmodels"})
    data = run.result["extras"]["integrity"]
    assert sorted(r["rater"] for r in data["flagged_raters"]) == ["paster0", "paster1"]
    usable = next(c for c in data["sensitivity"] if c["criterion"] == "usable")
    means = {e["system"]: e["mean"] for e in usable["all"]}
    # all raters: sys-0 (4 x 6 + 2 x 5) / 48, sys-1 (4 x 2 + 2 x 5) / 48
    assert means == pytest.approx({"sys-0": 34 / 48, "sys-1": 18 / 48})
    without = {e["system"]: e for e in usable["without_flagged"]}
    assert without["sys-0"]["mean"] == pytest.approx(0.75)
    assert without["sys-1"]["mean"] == pytest.approx(0.25)
    assert without["sys-1"]["difference"] == pytest.approx(-0.5)
    # every honest rater gave the same answers: resampling raters cannot move the difference
    assert without["sys-1"]["ci"] == pytest.approx([-0.5, -0.5])
    low, high = next(e for e in usable["all"] if e["system"] == "sys-1")["ci"]
    assert low < -16 / 48 < high and low < high
    assert (usable["raters_dropped"], usable["raters"]) == (2, 6)
    assert (usable["judgments_dropped"], usable["judgments"]) == (32, 96)
    assert "Integrity signals" in run.report_html
    assert "paster0 (pasted into free text: 16 of 16)" in run.report_html
    assert "Without flagged" in run.report_html
    # the main results keep everyone
    assert run.result["design"]["human_judgments"] == 6 * 16 * 2


def test_options_are_checked():
    with pytest.raises(ValueError, match="true or false"):
        extra.OPTIONS["integrity_covariates"]("yes")
    extra.OPTIONS["split_at_recalibration"](True)


def test_covariate_formula_keeps_the_random_terms_and_the_one_system_case():
    flagged = ["rater.flagged"]
    assert covariate_formula("y ~ system + (1|rater) + (1|item)", flagged, one_system=False
                             ) == "y ~ system + rater.flagged + (1|rater) + (1|item)"
    assert covariate_formula("rating ~ system + (1|rater) + (1|item)", flagged, one_system=True
                             ) == "rating ~ 1 + rater.flagged + (1|rater) + (1|item)"


@pytest.mark.parametrize("engine", [
    "statsmodels",
    pytest.param("R", marks=pytest.mark.skipif(not rbridge.r_available(),
                                               reason="R unavailable")),
])
def test_the_flag_enters_the_fitted_model_as_a_covariate(crossed, engine):
    run = _run(crossed, {"engine": engine, "integrity_covariates": True})
    glmm = next(c for c in run.result["criteria"] if c["key"] == "usable")["glmm"]
    assert "error" not in glmm, glmm
    assert glmm["formula"] == "y ~ system + rater.flagged + (1|rater) + (1|item)"
    terms = {c["term"]: c["estimate"] for c in glmm["coefficients"]}
    assert "rater.flagged" in terms, terms
    # the flagged raters said "yes" more often than the honest ones (5/8 vs 1/2 on average)
    assert terms["rater.flagged"] > 0
    covariates = run.result["extras"]["integrity"]["covariates"]
    # (severity 0 and 1 both read as "meaning preserved" here: its response is constant, so
    # whether its model fits depends on the engine)
    assert ("usable", "rater.flagged") in [(t["criterion"], t["term"]) for t in covariates]
    assert "rater.flagged = " in run.report_html
    # without the option the default model is unchanged
    plain = _run(crossed, {"engine": engine})
    glmm = next(c for c in plain.result["criteria"] if c["key"] == "usable")["glmm"]
    assert glmm["formula"] == "y ~ system + (1|rater) + (1|item)"


def test_a_users_formula_is_kept_as_written(crossed):
    run = _run(crossed, {"engine": "statsmodels", "integrity_covariates": True,
                       "formulas": {"usable": "y ~ system + (1|rater)"}})
    usable = next(c for c in run.result["criteria"] if c["key"] == "usable")["glmm"]
    assert usable["formula"] == "y ~ system + (1|rater)"
    severity = next(c for c in run.result["criteria"] if c["key"] == "severity")["glmm"]
    assert "rater.flagged" in severity["formula"]


def test_a_users_formula_may_name_the_flag_only_with_the_option(crossed):
    from django.core.exceptions import ValidationError

    formulas = {"usable": "y ~ system + rater.flagged + (1|rater)"}
    with pytest.raises(ValidationError, match=r"rater.flagged"):
        analysis_run_start(study=crossed, options={"formulas": formulas}, enqueue=False)
    run = _run(crossed, {"engine": "statsmodels", "integrity_covariates": True,
                       "formulas": formulas})
    usable = next(c for c in run.result["criteria"] if c["key"] == "usable")["glmm"]
    assert usable["formula"] == formulas["usable"]
    assert "rater.flagged" in {c["term"] for c in usable["coefficients"]}


# --- recalibration split ------------------------------------------------------------------------
def test_rounds_mark_judgments_from_their_start():
    t0 = pd.Timestamp("2026-01-01T10:00:00Z")
    frame = pd.DataFrame({"rater_id": [1, 1, 1, 2], "submitted_at": [
        t0, t0 + pd.Timedelta(minutes=5), t0 + pd.Timedelta(minutes=10), t0]})
    rounds = {1: [t0 + pd.Timedelta(minutes=5), t0 + pd.Timedelta(minutes=8)]}
    assert extra.recalibration_rounds(frame, rounds).tolist() == [0, 1, 2, 0]


def test_split_at_recalibration_reports_means_before_and_after():
    humans = pd.DataFrame({
        "rater_id": [1] * 6 + [2] * 2, "criterion": ["usable"] * 8, "kind": ["binary"] * 8,
        "system": ["A", "A", "B", "A", "B", "B", "A", "B"],
        "value": ["yes", "no", "no", "yes", "yes", "yes", "no", "no"],
        "recalibration_round": [0, 0, 0, 1, 1, 1, 0, 0]})
    split = extra.recalibration_split(humans)
    assert split[0]["raters"] == 1  # rater 2 had no round
    systems = {s["system"]: s for s in split[0]["systems"]}
    assert (systems["A"]["before"], systems["A"]["after"]) == (0.5, 1.0)
    assert (systems["B"]["before"], systems["B"]["after"]) == (0.0, 1.0)
    assert (systems["B"]["n_before"], systems["B"]["n_after"]) == (1, 2)


def test_split_option_through_a_run(crossed):
    from annotation.models import Judgment, RecalibrationRound
    from evalstudy.models import Rater

    rater = Rater.objects.get(study=crossed, external_id="honest0")
    # a round that started at their 9th target answer (as the data stands)
    times = sorted(Judgment.objects.filter(rater=rater, slot__kind="target")
                   .values_list("submitted_at", flat=True).distinct())
    RecalibrationRound.objects.create(study=crossed, rater=rater, number=1, started_at=times[8])
    run = _run(crossed, {"engine": "statsmodels", "split_at_recalibration": True})
    split = run.result["extras"]["integrity"]["recalibration_split"]
    usable = next(c for c in split if c["criterion"] == "usable")
    assert usable["raters"] == 1
    assert sum(s["n_before"] for s in usable["systems"]) == 8
    assert sum(s["n_after"] for s in usable["systems"]) == 8
    assert "Before and after recalibration" in run.report_html
