"""The Prolific section of the study monitor (registered with annotation.monitor_views) and its
actions: create the Prolific study, sync now, and approve, reject, pay a bonus to or message
one participant (editors). Each action calls one service and goes back to the monitor with a
message; Prolific's refusals are shown as it words them."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.db.models import Case, Count, IntegerField, When
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, has_role, study_for

from . import services
from .client import ProlificError
from .models import ProlificLink, ProlificSubmission

# Submissions shown on the monitor, those awaiting review first; the API lists them all.
SHOWN_SUBMISSIONS = 200


def monitor_section(request: HttpRequest, study) -> tuple[str, dict[str, Any]]:
    link = ProlificLink.objects.filter(study=study).select_related("study").first()
    statuses: list[Any] = []
    submissions: list[ProlificSubmission] = []
    if link is not None:
        rows = services.own_submissions(study).filter(link=link)
        statuses = list(rows.values_list("status").annotate(n=Count("id")).order_by("status"))
        submissions = list(
            rows.select_related("enrollment__rater")
            .annotate(first=Case(When(status=ProlificSubmission.Status.AWAITING_REVIEW,
                                      then=0), default=1, output_field=IntegerField()))
            .order_by("first", "-completed_at", "id")[:SHOWN_SUBMISSIONS])
    return "prolific/_monitor_section.html", {
        "link": link, "token_set": bool(link and services.token_for(link)),
        "statuses": statuses, "submissions": submissions,
        "shown_limit": SHOWN_SUBMISSIONS,
        "categories": services.REJECTION_CATEGORIES,
        "message_min": services.REJECTION_MESSAGE_MIN,
        "can_act": has_role(request.user, study, EDITOR),
        "crowd_url": services.crowd_entry_url(study), "study": study}


def _back(study) -> HttpResponse:
    return HttpResponseRedirect(reverse("annotation:monitor", args=[study.slug]) + "#prolific")


def _problems(error: ValidationError) -> str:
    if hasattr(error, "message_dict"):
        return " ".join(f"{field}: {' '.join(texts)}"
                        for field, texts in error.message_dict.items())
    return " ".join(error.messages)


@staff_member_required
@require_POST
def sync_now(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request.user, slug, EDITOR)
    try:
        counts = services.prolific_sync(study=study, actor=request.user, source=WEB)
    except (services.NotLinked, ProlificError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, services.sync_summary(counts))
    return _back(study)


def _whole(value: str | None) -> int | None:
    value = (value or "").strip()
    return int(value) if value.isdigit() else None


@staff_member_required
@require_POST
def create_study(request: HttpRequest, slug: str) -> HttpResponse:
    """Create the Prolific study as a draft from the monitor and link it."""
    study = study_for(request.user, slug, EDITOR)
    reward, minutes = _whole(request.POST.get("reward_minor")), _whole(request.POST.get("minutes"))
    try:
        link = services.prolific_create(
            study=study, description=request.POST.get("description", ""),
            reward_minor=reward if reward is not None else -1,
            minutes=minutes if minutes is not None else -1,
            places=_whole(request.POST.get("places")),
            api_token=request.POST.get("api_token") or None, actor=request.user, source=WEB)
    except ValidationError as exc:
        messages.error(request, f"Nothing was created. {_problems(exc)}")
    except ProlificError as exc:
        messages.error(request, f"Prolific refused: {exc}")
    else:
        messages.success(request, f"Created the draft Prolific study {link.prolific_study_id}: "
                                  "publish it on Prolific when the study is open.")
    return _back(study)


ACTIONS = ("approve", "reject", "bonus", "message")


@staff_member_required
@require_POST
def submission_action(request: HttpRequest, slug: str, submission_id: str) -> HttpResponse:
    study = study_for(request.user, slug, EDITOR)
    action = request.POST.get("action", "")
    common: dict[str, Any] = {"study": study, "submission_id": submission_id, "actor": request.user,
              "source": WEB}
    try:
        if action == "approve":
            services.prolific_approve(**common)
        elif action == "reject":
            services.prolific_reject(**common, message=request.POST.get("message", ""),
                                     category=request.POST.get("rejection_category", ""))
        elif action == "bonus":
            amount = _whole(request.POST.get("amount_minor"))
            services.prolific_bonus(**common, amount_minor=amount if amount is not None else -1)
        elif action == "message":
            services.prolific_message(**common, body=request.POST.get("body", ""))
        else:
            messages.error(request, f"Unknown action {action!r}: one of {', '.join(ACTIONS)}.")
            return _back(study)
    except ValidationError as exc:
        messages.error(request, f"{submission_id}: nothing was sent. {_problems(exc)}")
    except services.UnknownSubmission as exc:
        messages.error(request, str(exc))
    except (services.NotLinked, ProlificError) as exc:
        messages.error(request, f"{submission_id}: Prolific refused: {exc}")
    else:
        done = {"approve": "approved", "reject": "rejected", "bonus": "bonus paid",
                "message": "message sent"}[action]
        messages.success(request, f"{submission_id}: {done}.")
    return _back(study)
