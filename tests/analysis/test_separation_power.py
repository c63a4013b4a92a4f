"""The analysis report's models say what they are: separation travels from the GLMM to its
contrasts and a penalised fit is added; power simulations refit the analysis model with
progress (the analysis run's step, plan_power's bar). End to end through the services."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from analysis.models import AnalysisRun
from analysis.services import analysis_run_execute, analysis_run_start
from analysis.stats import rbridge

needs_r = pytest.mark.skipif(not rbridge.r_available(),
                             reason=f"R unavailable: {rbridge.r_unavailable_reason()}")


def _blme() -> bool:
    return bool(rbridge.r_call("function() requireNamespace('blme', quietly = TRUE)")[0])


@pytest.fixture
def separated_study(db):
    """Three systems judged yes/no by 12 raters on 20 items (each rater sees each item in one
    system); every judgment of system C is "yes" (the data of test_models.make_separated).
    A Likert criterion `quality` (1-5) on the same slots, for a Likert pilot."""
    from annotation.services import judgments_import
    from evalstudy.models import Output
    from evalstudy.spec.files import JudgmentRow
    from tests.factories import CriterionFactory, ItemFactory, StudyFactory, SystemFactory

    study = StudyFactory(slug="separated")
    systems = {name: SystemFactory(study=study, name=name) for name in "ABC"}
    items = {i: ItemFactory(study=study, external_id=f"i{i}") for i in range(1, 21)}
    Output.objects.bulk_create(Output(item=item, system=system, text=f"{item} {system}")
                               for item in items.values() for system in systems.values())
    CriterionFactory(study=study, key="ok", kind="binary", order=0)
    CriterionFactory(study=study, key="quality", kind="likert", scale_points=5,
                     order=1)
    rows, line = [], 1
    for s_index, system in enumerate("ABC"):
        for rater in range(1, 13):
            for item in range(1, 21):
                if (item + rater) % 3 != s_index:
                    continue
                base = 4 if system == "A" else 7
                yes = system == "C" or ((7 * item + 5 * rater) % 11
                                        < base + 2 * (item % 4) - 3 + 2 * (rater % 3) - 2)
                line += 1
                rows.append(JudgmentRow(line, f"rater{rater}", f"i{item}", system, "ok",
                                        "yes" if yes else "no"))
                quality = min(5, max(1, 1 + s_index + (7 * item + 5 * rater) % 4 - item % 2))
                line += 1
                rows.append(JudgmentRow(line, f"rater{rater}", f"i{item}", system, "quality",
                                        str(quality)))
    judgments_import(study=study, rows=rows, file_name="separated")
    return study


def _criterion(run: AnalysisRun, key: str) -> dict:
    return next(c for c in run.result["criteria"] if c["key"] == key)


@needs_r
def test_report_json_carries_separation_and_the_penalised_fit(separated_study):
    if not _blme():
        pytest.skip("R package blme not installed (Debian: r-cran-blme)")
    run = analysis_run_execute(analysis_run_start(study=separated_study,
                                                  options={"pdf": False}, enqueue=False))
    ok = _criterion(run, "ok")
    sep = ok["separation"]
    assert sep["detected"] and sep["option"] == "auto" and sep["penalised_fit"] == "fitted"
    assert sep["levels"][0]["level"] == "C" and sep["read"] == "glmm_penalised"
    assert set(sep["fits"]) == {"glmm", "glmm_penalised"}
    assert sep["fits"]["glmm"]["estimation"] == "maximum likelihood"
    assert sep["fits"]["glmm_penalised"]["estimation"] == "penalised maximum likelihood"
    assert "blme::bglmer" in ok["glmm_penalised"]["engine"]
    assert abs(ok["glmm_penalised"]["coefficients"][2]["estimate"] - 5.19) < 0.01
    contrasts = {c["level_a"] + c["level_b"]: c for c in ok["contrasts"]["contrasts"]}
    assert contrasts["AC"]["p_adjusted"] > 0.9  # glmer's number, now flagged
    assert contrasts["AC"]["reliable"] is False and "not estimable" in contrasts["AC"]["flags"][0]
    assert any(w.startswith("from the fit: separation: system 'C'")
               for w in ok["contrasts"]["warnings"])
    penalised = {c["level_a"] + c["level_b"]: c for c in ok["contrasts_penalised"]["contrasts"]}
    assert penalised["AC"]["reliable"] and penalised["AC"]["p_adjusted"] < 0.001
    assert ok["contrasts_penalised"]["estimation"] == "penalised maximum likelihood"
    assert any(w.startswith("ok: separation: system 'C'") for w in run.result["warnings"])


@needs_r
def test_separation_off_only_diagnoses(separated_study):
    run = analysis_run_execute(analysis_run_start(
        study=separated_study, options={"pdf": False, "separation": "off"}, enqueue=False))
    ok = _criterion(run, "ok")
    assert "glmm_penalised" not in ok and "contrasts_penalised" not in ok
    assert ok["separation"]["detected"] and ok["separation"]["penalised_fit"] == "not requested"
    assert ok["separation"]["read"] == "glmm"
    assert all(not c["reliable"] for c in ok["contrasts"]["contrasts"])


def test_new_options_are_validated(separated_study):
    run = analysis_run_start(study=separated_study, enqueue=False,
                             options={"separation": "penalised",
                                      "power": {"pilot": "ok", "effect": 1.0, "n_sim": 10}})
    assert run.options["separation"] == "penalised"
    for options, message in (
            ({"separation": "sometimes"}, "separation must be one of auto, penalised, off"),
            ({"power": {"effect": 1.0, "test": "anova"}}, "power test must be one of"),
            ({"power": {"effect": 1.0, "pilot": "nope"}}, "power pilot must name"),
            ({"power": {"effect": 1.0, "n_sim": 10**6}}, "at most"),
            ({"power": {"n_sim": 10}}, "needs 'effect'")):
        with pytest.raises(ValidationError, match=re.escape(message)):
            analysis_run_start(study=separated_study, options=options, enqueue=False)


@needs_r
def test_power_option_refits_the_glmm_with_progress(separated_study, monkeypatch):
    from django.db.models.query import QuerySet

    steps = []
    update = QuerySet.update

    def spy(self, **kwargs):
        if self.model is AnalysisRun and "step" in kwargs:
            steps.append((kwargs["step"], kwargs["done"]))
        return update(self, **kwargs)

    monkeypatch.setattr(QuerySet, "update", spy)
    power = {"pilot": "ok", "effect": 1.0, "n_raters": 12, "n_items": 10,
             "ratings_per_output": 2, "n_sim": 6, "chunk_size": 3, "seed": 1}
    run = analysis_run_execute(analysis_run_start(
        study=separated_study, options={"pdf": False, "separation": "off", "power": power},
        enqueue=False))
    result = run.result["power"]
    assert result["test"] == "glmm" and result["n_sim"] == 6 and result["seed"] == 1
    assert "lme4::glmer" in result["model"] and result["chunk_size"] == 3
    assert result["pilot"]["criterion"] == "ok"
    # the pilot's separation warning travels with the power derived from it
    assert any("separation: system 'C'" in w for w in result["pilot"]["warnings"])
    power_steps = [s for s in steps if s[0].startswith("power analysis")]
    assert [s[0] for s in power_steps] == ["power analysis", "power analysis: 3/6 simulations",
                                           "power analysis: 6/6 simulations"]
    assert len({done for _, done in power_steps}) == 1  # within one step of the run
    run.refresh_from_db()
    assert run.done == run.total and run.step == "done"


@needs_r
def test_plan_power_prints_n_sim_seed_model_and_time(capsys):
    call_command("plan_power", "--raters", "12", "--items", "10", "--ratings-per-output", "2",
                 "--effect", "1.0", "--rater-sd", "0.5", "--item-sd", "0.5", "--n-sim", "6",
                 "--chunk-size", "3", "--seed", "4")
    captured = capsys.readouterr()
    assert re.search(r"power [01]\.\d{3} \(95% CI [01]\.\d{3}-[01]\.\d{3}\) with 12 raters, "
                     r"10 items, 2 ratings per output.*\(6 simulations, seed 4; test: glmm\)",
                     captured.out)
    assert "model: simulated: binomial GLMM" in captured.out
    assert "refitted: lme4::glmer(y ~ system + (1|rater) + (1|item)" in captured.out
    assert re.search(r"engine: R lme4::glmer 1\S+ via Rscript \(R [\d.]+\); [\d.]+ s "
                     r"\([\d.]+ s per simulation\)", captured.out)
    assert "failed refits: " in captured.out and "counted as not significant" in captured.out
    assert "power" in captured.err and "6/6" in captured.err  # the progress bar
    call_command("plan_power", "--raters", "12", "--items", "10", "--effect", "1.0",
                 "--n-sim", "50", "--test", "paired_t", "--no-progress")
    captured = capsys.readouterr()
    assert "test: paired_t" in captured.out and "NOT the analysis's model" in captured.out
    assert captured.err == ""


@needs_r
def test_plan_power_from_a_likert_pilot(separated_study, capsys):
    call_command("plan_power", "--raters", "9", "--items", "6", "--effect", "1.0",
                 "--pilot", "separated", "--criterion", "quality", "--n-sim", "2",
                 "--no-progress")
    out = capsys.readouterr().out
    assert re.search(r"pilot separated: R ordinal::clmm .*thresholds -?\d", out)
    assert "test: clmm" in out and "ordinal::clmm(rating ~ system" in out
