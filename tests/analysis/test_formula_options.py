"""User formulas that stay inside the grammar still work end to end (service, page, API,
command), with system and item metadata, the criterion's key as the response and interactions;
the ones outside it are refused at start time with located messages. The study is ordinal's
wine data (tests/analysis/conftest.py), so the fits are pinned to published values."""

from __future__ import annotations

import html
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from analysis.models import AnalysisRun
from analysis.services import analysis_run_execute, analysis_run_start
from analysis.stats import rbridge

needs_r = pytest.mark.skipif(not rbridge.r_available(), reason="R unavailable")
WINE_COLUMNS = ("columns are system, item, rater, severity, speaker, contact, temp, "
                "item.severity, item.speaker, system.contact, system.temp")


def _criterion(result: dict, key: str) -> dict:
    return next(c for c in result["criteria"] if c["key"] == key)


def _estimates(fit: dict) -> dict[str, float]:
    return {c["term"]: c["estimate"] for c in fit["coefficients"]}


def _run(study, options: dict) -> dict:
    run = analysis_run_start(study=study, options={"pdf": False, **options}, enqueue=False)
    run = analysis_run_execute(run)
    assert run.status == AnalysisRun.Status.DONE
    return run.result


@needs_r
def test_system_metadata_formula_with_the_criterion_key_matches_published_clmm(wine_study):
    result = _run(wine_study, {"engine": "R", "formulas": {
        "bitterness": "bitterness ~ temp + contact + (1|rater)"}})
    clmm = _criterion(result, "bitterness")["clmm"]
    assert "error" not in clmm, clmm
    assert clmm["formula"] == "rating ~ temp + contact + (1|rater)"
    assert clmm["engine"].startswith("R ordinal::clmm")
    estimates = _estimates(clmm)
    # ordinal's documentation: clmm(rating ~ temp + contact + (1|judge), data = wine)
    assert round(estimates["tempwarm"], 3) == 3.063
    assert round(estimates["contactyes"], 3) == 1.835
    assert round(clmm["random_effects"]["rater"], 3) == 1.279
    # the other criterion keeps its default model
    assert _criterion(result, "drinkable")["glmm"]["formula"] == (
        "y ~ system + (1|rater) + (1|item)")


def test_command_global_formula_with_the_statsmodels_engine(wine_study, tmp_path):
    out = tmp_path / "result.json"
    call_command("analyze", "--study", wine_study.slug, "--engine", "statsmodels", "--json",
                 str(out), "--formula", "rating ~ temp + contact + (1|rater)")
    clmm = _criterion(json.loads(out.read_text()), "bitterness")["clmm"]
    assert clmm["formula"] == "rating ~ temp + contact + (1|rater)"
    assert "fixed effects only" in clmm["engine"]
    # the fallback drops (1|rater): ordinal's clm(rating ~ temp + contact) values
    assert round(_estimates(clmm)["tempwarm"], 3) == 2.503
    assert round(_estimates(clmm)["contactyes"], 3) == 1.528


def test_api_interaction_formula(wine_study, wine_editor):
    response = wine_editor.post(
        reverse("api-study-analysis-runs", args=[wine_study.slug]),
        {"options": {"engine": "statsmodels", "pdf": False,
                     "formula": "rating ~ temp * contact + (1|rater)"}},
        content_type="application/json")
    assert response.status_code == 202, response.json()
    run = analysis_run_execute(AnalysisRun.objects.get())
    clmm = _criterion(run.result, "bitterness")["clmm"]
    assert clmm["formula"] == "rating ~ temp + contact + temp:contact + (1|rater)"
    assert list(_estimates(clmm)) == ["tempwarm", "contactyes", "tempwarm:contactyes"]


def test_page_formula_with_item_metadata_and_criterion_key(wine_study, wine_editor):
    response = wine_editor.post(reverse("analysis:start", args=[wine_study.slug]),
                                {"formula": "drinkable ~ temp + item.speaker + (1|rater)",
                                 "engine": "statsmodels"})
    assert response.status_code == 302
    run = analysis_run_execute(AnalysisRun.objects.get())
    glmm = _criterion(run.result, "drinkable")["glmm"]
    assert glmm["formula"] == "y ~ temp + item.speaker + (1|rater)"
    assert list(_estimates(glmm)) == ["(Intercept)", "tempwarm", "item.speakers2"]
    # a `drinkable ~` formula is the binary criterion's only: the Likert one keeps its default
    assert _criterion(run.result, "bitterness")["clmm"]["formula"] == (
        "rating ~ system + (1|rater) + (1|item)")


@needs_r
def test_plain_metadata_name_through_glmer(wine_study):
    result = _run(wine_study, {"engine": "R", "formula": "y ~ contact + speaker + (1|rater)"})
    glmm = _criterion(result, "drinkable")["glmm"]
    assert "error" not in glmm, glmm
    assert glmm["formula"] == "y ~ contact + speaker + (1|rater)"
    assert list(_estimates(glmm)) == ["(Intercept)", "contactyes", "speakers2"]


@pytest.mark.parametrize(("options", "message"), [
    ({"formula": "rating ~ temp + colour"},
     f"formula: position 17: unknown column 'colour'; {WINE_COLUMNS}"),
    ({"formula": "rating ~ temp + log(contact)"},
     f"formula: position 17: function calls are not allowed (log(...)); {WINE_COLUMNS}"),
    ({"formula": "nonsense"}, "formula: formula must look like 'rating ~ system + (1|rater)"),
    ({"formulas": {"colour": "y ~ system"}},
     "formulas[colour]: the study has no criterion 'colour'; criteria with a model are "
     "bitterness, drinkable"),
    ({"formulas": {"note": "y ~ system"}},
     "formulas[note]: criterion 'note' is text: formulas apply to likert, binary and severity "
     "criteria"),
    ({"formulas": {"bitterness": "drinkable ~ system"}},
     "formulas[bitterness]: position 1: unknown response 'drinkable'; the response is one of "
     "rating, bitterness"),
    ({"formulas": {"drinkable": "y ~ system + (1|rater:sуstem)"}},
     "formulas[drinkable]: position 24: non-ASCII character 'у' (U+0443 CYRILLIC SMALL LETTER "
     "U) is not allowed"),
])
def test_service_refuses_with_located_messages(wine_study, options, message):
    with pytest.raises(ValidationError) as caught:
        analysis_run_start(study=wine_study, options=options, enqueue=False)
    assert "; ".join(caught.value.messages).startswith(message)
    assert not AnalysisRun.objects.exists()


def test_refusals_reach_the_page_the_api_and_the_command(wine_study, wine_editor):
    expected = f"formula: position 17: unknown column 'colour'; {WINE_COLUMNS}"
    page = wine_editor.post(reverse("analysis:start", args=[wine_study.slug]),
                            {"formula": "rating ~ temp + colour"}, follow=True)
    assert html.escape(expected) in page.content.decode()
    api = wine_editor.post(reverse("api-study-analysis-runs", args=[wine_study.slug]),
                           {"options": {"formula": "rating ~ temp + colour"}},
                           content_type="application/json")
    assert api.status_code == 400
    assert api.json() == {"code": "invalid", "message": expected, "field_errors": {}}
    with pytest.raises(CommandError) as caught:
        call_command("analyze", "--study", wine_study.slug, "--formula", "rating ~ temp + colour")
    assert str(caught.value) == expected
    assert not AnalysisRun.objects.exists()


def test_service_and_pipeline_allow_the_same_columns(wine_study):
    """The service knows the columns from the database before any run; the pipeline reads them
    off the judgments: the one rule (pipeline.formula_columns) gives the same names."""
    from analysis.selectors import judgments_tidy
    from analysis.services import _judgment_columns
    from analysis.stats.pipeline import formula_columns

    tidy = judgments_tidy(wine_study)
    assert set(_judgment_columns(wine_study)) == set(tidy.columns)
    assert formula_columns(_judgment_columns(wine_study)) == formula_columns(tidy.columns) == [
        "system", "item", "rater", "severity", "speaker", "contact", "temp", "item.severity",
        "item.speaker", "system.contact", "system.temp"]


def test_page_passes_separation_and_deployment_group_and_refuses_an_unknown_field(
        wine_study, wine_editor):
    url = reverse("analysis:start", args=[wine_study.slug])
    page = wine_editor.post(url, {"separation": "off", "deployment_group": "colour"},
                            follow=True)
    assert "deployment_group &#x27;colour&#x27; is not a field of the items or systems" in (
        page.content.decode())
    assert not AnalysisRun.objects.exists()
    wine_editor.post(url, {"separation": "penalised", "deployment_group": "speaker"})
    assert AnalysisRun.objects.get().options == {
        "filters": {"exclude_attention_failed": False, "exclude_incomplete": False,
                    "exclude_unheard": False, "include_excluded": False, "raters": "all"},
        "engine": "auto", "separation": "penalised", "deployment_group": "speaker"}
    form = wine_editor.get(reverse("analysis:page", args=[wine_study.slug])).content.decode()
    assert 'name="separation"' in form and 'name="deployment_group"' in form


def test_the_group_by_choices_are_the_study_s_own_fields(wine_editor, wine_study, db):
    """The deployment table's "group by" lists the fields the study has (the wine items have
    a speaker and a severity, the systems a temp and a contact) and defaults to the automatic
    choice, not to a speaker that only ASR studies have."""
    import re

    page = wine_editor.get(reverse("analysis:page", args=[wine_study.slug])).content.decode()
    select = re.search(r'<select id="deployment_group" name="deployment_group">(.*?)</select>',
                       page, re.S)
    assert select, "the group-by field is a list to choose from"
    values = re.findall(r'<option value="([^"]*)"', select.group(1))
    assert values == ["", "system", "item.severity", "item.speaker", "system.contact",
                      "system.temp"]
    assert "selected" not in select.group(1)
    wine_editor.post(reverse("analysis:start", args=[wine_study.slug]),
                     {"deployment_group": "system.temp"})
    assert AnalysisRun.objects.get().options["deployment_group"] == "system.temp"
