"""A model formula is data, never code: formulas that run code in patsy (Python) or R, tried on
every entry point a formula has.

Each payload writes a canary file when its code runs; every test asserts that the canary does
not exist afterwards and that the entry point refused the formula (no run row for the
service, the page, the API and the command). Before formulas were parsed, every payload here
ran: patsy evaluates each term as Python and R evaluates the formula as R. Where an entry point
accepts a payload (as the old code did), the test does what the worker would do with the run,
so that a regression shows up as the canary, not only as a missing error.

This module imports nothing from analysis.stats.formula on purpose: it must also run (and fail)
against code without the parser.
"""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest
from django.contrib.messages import get_messages
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from analysis.models import AnalysisRun
from analysis.selectors import criteria_specs, judgments_tidy
from analysis.services import analysis_run_execute, analysis_run_start
from analysis.stats import models, pipeline
from tests.analysis.conftest import wine_rows

# {r}: the response; {c}: the canary's path. Shell commands have no spaces (`:>file` creates
# the file) because pymer4 strips every space from a formula before R sees it.
PYTHON_PAYLOADS = {  # evaluated by patsy: the statsmodels engine
    "import": "{r} ~ system + I(__import__('os').system(':>{c}'))",
    "nested-calls": "{r} ~ system + I(len(str(__import__('os').system(':>{c}'))))",
    "eval": "{r} ~ system + I(eval(\"__import__('os').system(':>{c}')\"))",
    "exec": "{r} ~ system + I(exec(\"import os; os.system(':>{c}')\"))",
    "compile": "{r} ~ system + I(eval(compile(\"__import__('os').system(':>{c}')\", 'f', "
               "'eval')))",
    "getattr": "{r} ~ system + I(getattr(__import__('os'), 'system')(':>{c}'))",
    "open": "{r} ~ system + I(open('{c}', 'w').close())",
    "attribute-access": "{r} ~ system + I(system.__class__.__init__.__globals__"
                        "['__builtins__']['__import__']('os').system(':>{c}'))",
    "newline": "{r} ~ system + I(\n__import__('os').system(':>{c}'))",
    "at-operator": "{r} ~ system + I(__import__('os').system(':>{c}') @ 1)",
    # Mathematical bold letters: Python folds identifiers with NFKC, so this *is* os.system.
    "unicode-nfkc": "{r} ~ system + I(__import__('os')."
                    "\U0001d42c\U0001d432\U0001d42c\U0001d42d\U0001d41e\U0001d426(':>{c}'))",
    "unicode-cyrillic": "{r} ~ system + I(__import__('os').system(':>{c}') or s\u0443stem)",
}
R_PAYLOADS = {  # evaluated by R: the R engine (ordinal::clmm, lme4::glmer) and pymer4
    "system": "{r} ~ system + I(nchar(system(':>{c}', intern=TRUE)))",
    "double-quotes": '{r} ~ system + I(system(":>{c}"))',
    "file": "{r} ~ system + I(close(file('{c}', 'w')))",
    "source": "{r} ~ system + I(source(textConnection('system(\":>{c}\")')))",
    "Sys.setenv": "{r} ~ system + I(Sys.setenv(EVALSTUDY_CANARY=system(':>{c}', intern=TRUE)))",
    "eval-parse": "{r} ~ system + I(eval(parse(text='system(\":>{c}\")')))",
    "backticks": "{r} ~ system + I(`system`(':>{c}'))",
    "namespace": "{r} ~ system + I(base::system(':>{c}'))",
    "dollar": "{r} ~ system + I(baseenv()$system(':>{c}'))",
    "double-bracket": "{r} ~ system + I(baseenv()[['system']](':>{c}'))",
    "semicolon": "{r} ~ system + I(eval(parse(text='0;system(\":>{c}\")')))",
    "at-slot": "{r} ~ system + I(nchar(system(':>{c}',intern=TRUE))@.Data)",
    "newline": "{r} ~ system + I(\nsystem(':>{c}'))",
    "do.call": "{r} ~ system + I(do.call('system',list(':>{c}')))",
    "pipe": "{r} ~ system + I(readLines(pipe(':>{c}')))",
    "unicode-cyrillic": "{r} ~ system + I(c(system(':>{c}'), s\u0443stem))",
}
PAYLOADS = [pytest.param(text, "statsmodels", id=f"python-{name}")
            for name, text in PYTHON_PAYLOADS.items()]
PAYLOADS += [pytest.param(text, "R", id=f"R-{name}") for name, text in R_PAYLOADS.items()]


def _formula(template: str, engine: str, canary) -> str:
    # Likert (clmm) for the Python payloads, binary (glmer) for the R ones: between them the
    # entry points reach patsy, R's ordinal and lme4.
    return template.format(r="rating" if engine == "statsmodels" else "y", c=canary)


def _work_off_accepted_runs() -> None:
    """What the worker would do with every run an entry point let through."""
    for run in AnalysisRun.objects.all():
        with contextlib.suppress(Exception):  # only the canary matters here
            analysis_run_execute(run)


def _assert_refused(canary, message: str | None) -> None:
    assert not canary.exists(), "the formula ran code"
    assert message, "the formula was accepted"
    assert "position " in message and "not allowed" in message, message


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_service_refuses(wine_study, tmp_path, template, engine):
    canary = tmp_path / "canary"
    message = None
    try:
        analysis_run_start(study=wine_study, enqueue=False, options={
            "formula": _formula(template, engine, canary), "engine": engine, "pdf": False})
    except ValidationError as error:
        message = "; ".join(error.messages)
    _work_off_accepted_runs()
    _assert_refused(canary, message)
    assert message.startswith("formula: position ")
    assert not AnalysisRun.objects.exists()


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_service_refuses_per_criterion_formulas(wine_study, tmp_path, template, engine):
    """The same payloads per criterion, in `formulas`."""
    canary = tmp_path / "canary"
    key = "bitterness" if engine == "statsmodels" else "drinkable"
    message = None
    try:
        analysis_run_start(study=wine_study, enqueue=False, options={
            "formulas": {key: _formula(template, engine, canary)}, "engine": engine,
            "pdf": False})
    except ValidationError as error:
        message = "; ".join(error.messages)
    _work_off_accepted_runs()
    _assert_refused(canary, message)
    assert message.startswith(f"formulas[{key}]: position ")
    assert not AnalysisRun.objects.exists()


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_analysis_page_refuses(wine_study, wine_editor, tmp_path, template, engine):
    canary = tmp_path / "canary"
    response = wine_editor.post(reverse("analysis:start", args=[wine_study.slug]),
                                {"formula": _formula(template, engine, canary),
                                 "engine": engine})
    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "error"]
    _work_off_accepted_runs()
    _assert_refused(canary, "; ".join(shown))
    assert shown[0].startswith("formula: position ")
    assert not AnalysisRun.objects.exists()


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_api_refuses(wine_study, wine_editor, tmp_path, template, engine):
    canary = tmp_path / "canary"
    response = wine_editor.post(
        reverse("api-study-analysis-runs", args=[wine_study.slug]),
        {"options": {"formula": _formula(template, engine, canary), "engine": engine,
                     "pdf": False}},
        content_type="application/json")
    _work_off_accepted_runs()
    body = response.json()
    _assert_refused(canary, body.get("message") if response.status_code == 400 else None)
    assert body["code"] == "invalid" and body["message"].startswith("formula: position ")
    assert not AnalysisRun.objects.exists()


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_analyze_command_refuses(wine_study, tmp_path, template, engine):
    canary = tmp_path / "canary"
    message = None
    try:
        call_command("analyze", "--study", wine_study.slug, "--engine", engine,
                     "--formula", _formula(template, engine, canary))
    except CommandError as error:
        message = str(error)
    _assert_refused(canary, message)
    assert message.startswith("formula: position ")
    assert not AnalysisRun.objects.exists()


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_pipeline_refuses(wine_study, tmp_path, template, engine):
    """`analyse()` checks formulas itself: the worker never trusts stored options."""
    canary = tmp_path / "canary"
    judgments = judgments_tidy(wine_study)
    message = None
    try:
        pipeline.analyse(judgments, criteria_specs(wine_study), None,
                         {"formula": _formula(template, engine, canary), "engine": engine})
    except ValueError as error:
        message = str(error)
    _assert_refused(canary, message)
    assert message.startswith("formula: position ")


def _wine_frame() -> pd.DataFrame:
    frame = pd.DataFrame(wine_rows(), columns=["rater", "item", "system", "rating"])
    frame["y"] = (frame["rating"] >= 3).astype(int)
    return frame


CORE = [
    pytest.param(text, engine, fit, id=f"{lang}-{name}-{fit}-{engine}")
    for lang, payloads, engines in (("python", PYTHON_PAYLOADS, ["statsmodels"]),
                                    ("R", R_PAYLOADS, ["R", "pymer4"]))
    for name, text in payloads.items()
    for engine in engines
    for fit in ("fit_clmm", "fit_binomial_glmm")
    if not (engine == "pymer4" and fit == "fit_clmm")
]


@pytest.mark.parametrize(("template", "engine", "fit"), CORE)
def test_models_refuse(tmp_path, template, engine, fit):
    """Defence in depth: a direct call of the statistics core parses the formula too."""
    canary = tmp_path / "canary"
    response = "rating" if fit == "fit_clmm" else "y"
    message = None
    try:
        getattr(models, fit)(_wine_frame(), template.format(r=response, c=canary),
                             engine=engine)
    except ValueError as error:  # the parser's error is a ValueError
        message = str(error)
    except Exception as error:  # noqa: BLE001 - an engine error means the engine saw the text
        message = None
        assert not canary.exists(), f"the formula ran code ({type(error).__name__})"
    _assert_refused(canary, message)
    assert message.startswith("formula: position ")


@pytest.mark.parametrize(("template", "engine"), PAYLOADS)
def test_worker_refuses_stored_options(wine_study, tmp_path, template, engine):
    """A run whose options never went through the service (stored before formulas were
    checked, or written by hand) fails in the worker instead of running its formula."""
    from analysis.tasks import analysis_run_task

    canary = tmp_path / "canary"
    run = AnalysisRun.objects.create(study=wine_study, options={
        "formula": _formula(template, engine, canary), "engine": engine, "pdf": False})
    with contextlib.suppress(Exception):  # the task re-raises after recording the failure
        analysis_run_task(run.pk)
    run.refresh_from_db()
    assert not canary.exists(), "the formula ran code"
    assert run.status == AnalysisRun.Status.FAILED
    assert run.error.startswith("FormulaError: formula: position "), run.error
