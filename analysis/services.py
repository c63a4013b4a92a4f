"""Running analyses: from a study's stored data to the JSON result and the HTML/PDF report."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from evalstudy.audit import SYSTEM, actor_user, audit_record
from evalstudy.criteria import kind_of
from evalstudy.models import AuditEvent, Study

from .models import AnalysisRun
from .selectors import (
    JUDGMENT_COLUMNS,
    JudgmentFilter,
    criteria_specs,
    exclusions_describe,
    judgments_tidy,
    metric_scores,
    proxy_raters,
    vote_counts,
)

OPTION_KEYS = {"formula", "formulas", "engine", "filters", "power", "deployment_group", "pdf",
               "separation"}
ENGINES = ("auto", "R", "pymer4", "statsmodels")


def _judgment_columns(study: Study, options: dict[str, Any] | None = None) -> list[str]:
    """The columns `judgments_tidy` gives this study's table (metadata fields from every item
    and system, as it reads them), known before any judgment is read; with the option
    `integrity_covariates`, also the rater-level flag columns `analysis.extras.integrity`
    adds, so that a formula may name them."""
    item_fields = {key for meta in study.items.values_list("metadata", flat=True)
                   for key in (meta or {})}
    system_fields = {key for meta in study.systems.values_list("metadata", flat=True)
                     for key in (meta or {})}
    rater_fields: list[str] = []
    if (options or {}).get("integrity_covariates"):
        from annotation.integrity import SIGNALS

        rater_fields = ["rater.flagged", *(f"rater.{s}_share" for s in SIGNALS)]
    return [*JUDGMENT_COLUMNS, *(f"item.{f}" for f in sorted(item_fields)),
            *(f"system.{f}" for f in sorted(system_fields)), *rater_fields]


def _check_formulas(study: Study, options: dict[str, Any]) -> None:
    """Parse `formula` and every entry of `formulas` with the pipeline's own rule, so that a
    formula outside the grammar is refused before a run row exists (the worker parses again:
    patsy and R never see text that did not pass)."""
    if "formula" not in options and "formulas" not in options:
        return
    from .stats.formula import FormulaError
    from .stats.formulas import check_formulas

    try:
        check_formulas(options, criteria_specs(study), _judgment_columns(study, options))
    except FormulaError as error:
        raise ValidationError(str(error)) from None


def _clean_options(options: dict[str, Any], study: Study) -> dict[str, Any]:
    from .extras import extra_options

    extra_checks = extra_options()
    known = OPTION_KEYS | set(extra_checks)
    unknown = set(options) - known
    if unknown:
        raise ValidationError(f"unknown analysis options: {sorted(unknown)}; "
                              f"known: {sorted(known)}")
    for key, check in extra_checks.items():
        if key in options:
            try:
                check(options[key])
            except ValueError as error:
                raise ValidationError(f"{key}: {error}") from None
    if options.get("engine", "auto") not in ENGINES:
        raise ValidationError(f"engine must be one of {', '.join(ENGINES)}")
    from .stats.options import SEPARATION_OPTIONS
    from .stats.power import check_option

    if options.get("separation", "auto") not in SEPARATION_OPTIONS:
        raise ValidationError(f"separation must be one of {', '.join(SEPARATION_OPTIONS)}")
    if options.get("power"):
        try:
            check_option(options["power"], criteria_specs(study))
        except ValueError as error:
            raise ValidationError(str(error)) from None
    _check_formulas(study, options)
    if options.get("deployment_group") is not None:
        from .stats.options import deployment_group_column

        group = options["deployment_group"]
        if not isinstance(group, str):
            raise ValidationError("deployment_group must be the name of an item or system field")
        try:
            deployment_group_column(group, _judgment_columns(study))
        except ValueError as error:
            raise ValidationError(str(error)) from None
    try:
        JudgmentFilter(**(options.get("filters") or {}))
    except TypeError as error:
        raise ValidationError(f"invalid filters: {error}") from None
    return options


def analysis_run_start(*, study: Study, options: dict[str, Any] | None = None,
                       enqueue: bool = True, actor: Any = None,
                       source: str = SYSTEM) -> AnalysisRun:
    """Validate `options` (formulas parsed against the study's columns and criteria) and
    create the run; the worker is enqueued on commit. Audited as "start" with the options."""
    options = _clean_options(dict(options or {}), study)
    with transaction.atomic():
        run = AnalysisRun.objects.create(study=study, options=options,
                                         created_by=actor_user(actor))
        audit_record(actor=actor, source=source, action=AuditEvent.Action.START, target=run,
                     changes={"options": options})
        if enqueue:
            from .tasks import analysis_run_task

            transaction.on_commit(lambda: analysis_run_task.delay(run.pk))
    return run


def analysis_run_execute(run: AnalysisRun) -> AnalysisRun:
    """Compute everything and render the reports; progress is written as it goes. Safe to run
    twice (it recomputes and overwrites the run's outputs)."""
    from .extras import extras_compute, extras_prepare
    from .report import render_html, render_pdf
    from .stats.pipeline import analyse, families_of

    study = run.study
    criteria = criteria_specs(study)
    steps = 3 + len(criteria) + sum(
        len(families_of(kind_of(c["kind"]), "validity")) for c in criteria)
    AnalysisRun.objects.filter(pk=run.pk).update(
        status=AnalysisRun.Status.RUNNING, started_at=timezone.now(), total=steps, done=0,
        error="", heartbeat_at=timezone.now())

    def progress(step: str, *, advance: bool = True) -> None:
        # advance=False: news within a step (the power analysis's simulations), which moves
        # the step text and the heartbeat, not the count of steps.
        if advance:
            run.done = min(run.done + 1, steps)
        AnalysisRun.objects.filter(pk=run.pk).update(step=step[:200], done=run.done,
                                                     heartbeat_at=timezone.now())

    run.done = 0
    filters = JudgmentFilter(**(run.options.get("filters") or {}))
    progress("reading judgments and metric results")
    judgments = extras_prepare(study, judgments_tidy(study, filters), run.options)
    metrics = metric_scores(study)
    # Thresholds and the outputs each proxy may be evaluated on (training, dev splits): not
    # a user option (`_clean_options` refuses the key), read from the runs every time.
    options = {**run.options, "proxy_raters": proxy_raters(study)}
    result = analyse(judgments, criteria, metrics, options, progress=progress,
                     votes=vote_counts(study))
    extras = extras_compute(study, judgments, result, run.options)
    if extras:
        from kit.jsonable import to_jsonable

        result["extras"] = to_jsonable(extras)
    progress("rendering the report")
    html = render_html(study=study, result=result, options=run.options,
                       filters=exclusions_describe(study, filters))
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
