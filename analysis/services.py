"""Running analyses: from a study's stored data to the JSON result and the HTML/PDF report."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from evalstudy.models import Study

from .models import AnalysisRun
from .selectors import JudgmentFilter, judgments_tidy, metric_scores

OPTION_KEYS = {"formula", "formulas", "engine", "filters", "power", "deployment_group", "pdf"}
ENGINES = ("auto", "R", "pymer4", "statsmodels")


def _clean_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValidationError(f"unknown analysis options: {sorted(unknown)}; "
                              f"known: {sorted(OPTION_KEYS)}")
    if options.get("engine", "auto") not in ENGINES:
        raise ValidationError(f"engine must be one of {', '.join(ENGINES)}")
    formula = options.get("formula")
    if formula is not None and (not isinstance(formula, str) or "~" not in formula):
        raise ValidationError("formula must look like 'rating ~ system + (1|rater) + (1|item)'")
    try:
        JudgmentFilter(**(options.get("filters") or {}))
    except TypeError as error:
        raise ValidationError(f"invalid filters: {error}") from None
    return options


def analysis_run_start(*, study: Study, options: dict[str, Any] | None = None, user: Any = None,
                       enqueue: bool = True) -> AnalysisRun:
    options = _clean_options(dict(options or {}))
    with transaction.atomic():
        run = AnalysisRun.objects.create(study=study, options=options,
                                         created_by=user if user and user.pk else None)
        if enqueue:
            from .tasks import analysis_run_task

            transaction.on_commit(lambda: analysis_run_task.delay(run.pk))
    return run


def _criteria(study: Study) -> list[dict[str, Any]]:
    return [
        {"key": c.key, "kind": c.kind, "scale_points": c.scale_points,
         "options": list(c.options or [])}
        for c in study.criteria.order_by("order", "id")
    ]


def analysis_run_execute(run: AnalysisRun) -> AnalysisRun:
    """Compute everything and render the reports; progress is written as it goes. Safe to run
    twice (it recomputes and overwrites the run's outputs)."""
    from .report import render_html, render_pdf
    from .stats.pipeline import analyse

    study = run.study
    criteria = _criteria(study)
    steps = 3 + len(criteria) + sum(c["kind"] in ("binary", "severity") for c in criteria)
    AnalysisRun.objects.filter(pk=run.pk).update(
        status=AnalysisRun.Status.RUNNING, started_at=timezone.now(), total=steps, done=0,
        error="", heartbeat_at=timezone.now())

    def progress(step: str) -> None:
        run.done = min(run.done + 1, steps)
        AnalysisRun.objects.filter(pk=run.pk).update(step=step, done=run.done,
                                                     heartbeat_at=timezone.now())

    run.done = 0
    filters = JudgmentFilter(**(run.options.get("filters") or {}))
    progress("reading judgments and metric results")
    judgments = judgments_tidy(study, filters)
    metrics = metric_scores(study)
    result = analyse(judgments, criteria, metrics, run.options, progress=progress)
    progress("rendering the report")
    html = render_html(study=study, result=result, options=run.options,
                       filters=filters.describe())
    pdf = render_pdf(html) if run.options.get("pdf", True) else None
    run.result, run.report_html, run.report_pdf = result, html, pdf
    run.status, run.finished_at, run.step = AnalysisRun.Status.DONE, timezone.now(), "done"
    run.done = steps
    run.save(update_fields=["result", "report_html", "report_pdf", "status", "finished_at",
                            "step", "done"])
    return run


def analysis_run_fail(*, run_id: int, error: str) -> None:
    AnalysisRun.objects.filter(pk=run_id).update(
        status=AnalysisRun.Status.FAILED, error=error[:5000], finished_at=timezone.now())
