"""The researcher's analysis pages: start an analysis, follow it, read and download reports."""

from __future__ import annotations

from typing import Any

from csp.decorators import csp_update
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, VIEWER, studies_visible_to, study_for

from .exports import NotExported, report_export
from .models import AnalysisRun
from .selectors import metadata_fields
from .services import analysis_run_start


def _study(request, slug, minimum: str = VIEWER):
    """404 for a study the user has no role on, 403 for a role below `minimum`."""
    return study_for(request.user, slug, minimum)


def _run(request, pk) -> AnalysisRun:
    return get_object_or_404(
        AnalysisRun.objects.filter(study__in=studies_visible_to(request.user)), pk=pk)


def _download(request, run: AnalysisRun, fmt: str) -> bytes:
    """The report as `fmt`, recorded as an export (404 when there is none)."""
    try:
        return report_export(run=run, fmt=fmt, actor=request.user, source=WEB)
    except NotExported as error:
        raise Http404(str(error)) from None


def _runs_context(study) -> dict:
    """The latest analyses and `active_run`, the newest one still queued or running, whose
    state the Start button shows (disabled) until it ends."""
    runs = list(AnalysisRun.objects.filter(study=study).defer(
        "result", "report_html", "report_pdf")[:10])
    return {"study": study, "runs": runs,
            "active_run": next((run for run in runs if run.active), None)}


@staff_member_required
def analysis_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    # The deployment table's choices: the study's own fields (only ASR studies have a
    # speaker); blank lets the analysis choose (the speaker where there is one).
    return render(request, "analysis/analysis.html", {
        **_runs_context(study), "group_fields": metadata_fields(study)})


@staff_member_required
def runs_fragment(request: HttpRequest, slug: str) -> HttpResponse:
    # oob: the fragment also carries the form's Start button, disabled while a run is under way
    return render(request, "analysis/_runs.html",
                  {**_runs_context(_study(request, slug)), "oob": True})


@staff_member_required
@require_POST
def start(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug, EDITOR)
    options: dict[str, Any] = {
        "filters": {
            "exclude_attention_failed": bool(request.POST.get("exclude_attention_failed")),
            "exclude_incomplete": bool(request.POST.get("exclude_incomplete")),
            "exclude_unheard": bool(request.POST.get("exclude_unheard")),
            "include_excluded": bool(request.POST.get("include_excluded")),
            "raters": request.POST.get("raters", "all"),
        },
        "engine": request.POST.get("engine", "auto"),
        "separation": request.POST.get("separation", "auto"),
    }
    if request.POST.get("min_competence", "").strip():
        try:
            options["filters"]["min_competence"] = float(request.POST["min_competence"])
        except ValueError:
            options["filters"]["min_competence"] = request.POST["min_competence"]  # refused
    if request.POST.get("deployment_group", "").strip():
        options["deployment_group"] = request.POST["deployment_group"].strip()
    if request.POST.get("labels", "raters") != "raters":
        options["labels"] = request.POST["labels"]  # checked by analysis.extras.adjudication
    if request.POST.get("exclude_identity_leaks"):
        options["exclude_identity_leaks"] = True  # analysis.extras.blindness
    if request.POST.get("formula", "").strip():
        options["formula"] = request.POST["formula"].strip()
    try:
        run = analysis_run_start(study=study, options=options, actor=request.user, source=WEB)
    except ValidationError as error:
        messages.error(request, "; ".join(error.messages))
    else:
        messages.success(request, f"Analysis {run.pk} started.")
    return redirect("analysis:page", slug=study.slug)


@staff_member_required
# The stored report is a standalone document with its own <style> block (it is also rendered
# to PDF); it has no script, so only inline styles are allowed, and only here. (django-csp
# types its decorator for views taking the request alone, not a view with URL arguments.)
@csp_update({"style-src": ["'unsafe-inline'"]})  # type: ignore[arg-type]
def report(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(_download(request, _run(request, pk), "html"))


@staff_member_required
def report_pdf(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(request, pk)
    response = HttpResponse(_download(request, run, "pdf"), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{run.study.slug}-analysis.pdf"'
    return response


@staff_member_required
def report_json(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(request, pk)
    response = HttpResponse(_download(request, run, "json"), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{run.study.slug}-analysis.json"'
    return response


