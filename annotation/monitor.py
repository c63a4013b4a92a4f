"""The researcher's study monitor: a page, its live fragment (htmx polling) and a CSV."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from evalstudy.audit import WEB
from evalstudy.permissions import study_for

from .monitoring import study_monitor
from .services import progress_export

POLL_SECONDS = 5

# Sections other apps add to the monitor page (e.g. prolific: the study's Prolific link and
# submissions): each is called with (request, study) and returns (template name, context) or
# None. Registered from the app's AppConfig.ready, so this app imports none of them.
_SECTIONS: list[Callable[[HttpRequest, Any], tuple[str, dict[str, Any]] | None]] = []


def monitor_section_register(
        section: Callable[[HttpRequest, Any], tuple[str, dict[str, Any]] | None]) -> None:
    if section not in _SECTIONS:  # ready() may run twice in tests
        _SECTIONS.append(section)


def _sections(request: HttpRequest, study) -> list[dict[str, Any]]:
    found = []
    for section in _SECTIONS:
        answer = section(request, study)
        if answer is not None:
            found.append({"template": answer[0], **answer[1]})
    return found


def _visible_study(request: HttpRequest, slug: str):
    return study_for(request.user, slug)


@staff_member_required
def monitor_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    return render(request, "annotation/monitor.html",
                  {"monitor": study_monitor(study), "poll_seconds": POLL_SECONDS,
                   "sections": _sections(request, study)})


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
    progress_export(study=study, stream=response, actor=request.user, source=WEB)
    return response
