"""The Prolific section of the study monitor (registered with annotation.monitor) and its one
action: sync now (editors), back to the monitor with a message."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, has_role, study_for

from . import services
from .client import ProlificError
from .models import ProlificLink, ProlificSubmission


def monitor_section(request: HttpRequest, study) -> tuple[str, dict[str, Any]]:
    link = ProlificLink.objects.filter(study=study).select_related("study").first()
    statuses = []
    if link is not None:
        statuses = list(ProlificSubmission.objects.filter(link=link).values_list("status")
                        .annotate(n=Count("id")).order_by("status"))
    return "prolific/_monitor_section.html", {
        "link": link, "token_set": bool(link and services.token_for(link)),
        "statuses": statuses, "can_act": has_role(request.user, study, EDITOR)}


@staff_member_required
@require_POST
def sync_now(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request.user, slug, EDITOR)
    try:
        counts = services.prolific_sync(study=study, actor=request.user, source=WEB)
    except (services.NotLinked, ProlificError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Prolific: {counts['submissions']} submissions, "
                                  f"{counts['matched']} matched, {counts['seats_freed']} "
                                  "seats freed.")
    return HttpResponseRedirect(reverse("annotation:monitor", args=[study.slug]))
