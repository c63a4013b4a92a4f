"""The researcher's study monitor: a page, its live fragment (htmx polling) and a CSV."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from evalstudy.csvsafe import SafeDictWriter
from evalstudy.selectors import studies_visible_to

from .monitoring import PROGRESS_COLUMNS, progress_rows, study_monitor

POLL_SECONDS = 5


def _visible_study(request: HttpRequest, slug: str):
    return get_object_or_404(studies_visible_to(request.user), slug=slug)


@staff_member_required
def monitor_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    return render(request, "annotation/monitor.html",
                  {"monitor": study_monitor(study), "poll_seconds": POLL_SECONDS})


@staff_member_required
def monitor_fragment(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    return render(request, "annotation/_monitor_live.html",
                  {"monitor": study_monitor(study), "poll_seconds": POLL_SECONDS})


@staff_member_required
def monitor_csv(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-progress.csv"'
    writer = SafeDictWriter(response, fieldnames=PROGRESS_COLUMNS)
    writer.writeheader()
    for row in progress_rows(study_monitor(study)):
        writer.writerow(row)
    return response
