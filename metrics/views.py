"""The researcher's metrics page: start runs, watch their progress, read results per output."""

from __future__ import annotations

import io

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, VIEWER, study_for

from .forms import MetricRunForm
from .models import MetricRun
from .selectors import (
    latest_configs,
    metric_direction,
    output_results_page,
    system_summaries,
)
from .services import metric_run_start, metrics_export


def _study(request: HttpRequest, slug: str, minimum: str = VIEWER):
    """404 for a study the user has no role on, 403 for a role below `minimum`."""
    return study_for(request.user, slug, minimum)


@staff_member_required
def metrics_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    page, results, shown = output_results_page(study, page=int(request.GET.get("page", 1)))
    rows = [(output, results.get(output.pk, {})) for output in page]
    return render(request, "metrics/metrics.html", {
        **_runs_context(study),
        "page": page, "rows": rows, "run_form": MetricRunForm(),
        "shown": [(name, metric_direction(name)) for name in shown],
        "summaries": system_summaries(study, latest_configs(study), shown),
    })


def _runs_context(study) -> dict:
    """The latest metric and proxy runs (the fragment the page refreshes).

    Proxy runs are read through the study's reverse relation (`proxies.ProxyRun.study`), so
    this app, below `proxies`, imports nothing from it. `active_run`: the newest metric run
    still queued or running, whose state the Start button shows (disabled) until it ends."""
    runs = list(MetricRun.objects.filter(study=study)[:10])
    return {"study": study, "runs": runs,
            "active_run": next((run for run in runs if run.active), None),
            "proxy_runs": study.proxy_runs.select_related("rater")[:10]}


@staff_member_required
def runs_fragment(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    # oob: the fragment also carries the form's Start button, disabled while a run is under way
    return render(request, "metrics/_runs.html", {**_runs_context(study), "oob": True})


@staff_member_required
@require_POST
def start_run(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug, EDITOR)
    form = MetricRunForm(request.POST)
    try:
        if not form.is_valid():  # a parameter out of its bounds, a metric not offered
            raise ValidationError([f"{name.replace('__', ' ')}: {' '.join(map(str, errors))}"
                                   for name, errors in form.errors.items()])
        run = metric_run_start(
            study=study, metrics=form.cleaned_data["metrics"] or None, params=form.run_params(),
            model_path=form.cleaned_data["model_path"].strip(), actor=request.user,
            source=WEB,
        )
    except ValidationError as error:
        messages.error(request, "; ".join(error.messages))
    else:
        messages.success(request, f"Metric run {run.pk} started.")
    return redirect("metrics:page", slug=study.slug)


@staff_member_required
def results_csv(request: HttpRequest, slug: str) -> HttpResponse:
    study = _study(request, slug)
    buffer = io.StringIO()
    metrics_export(study=study, stream=buffer, actor=request.user, source=WEB)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-metrics.csv"'
    return response
