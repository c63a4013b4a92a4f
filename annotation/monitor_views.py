"""The researcher's study monitor: a page, its live fragment (htmx polling) and a CSV."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, has_role, study_for

from . import rater_actions, recalibration
from .monitor_selectors import study_monitor
from .plan_monitor import plan_monitor
from .services import progress_export

if TYPE_CHECKING:
    from evalstudy.models import Study

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
                   "sections": _sections(request, study), "plan": plan_monitor(study),
                   "can_act": has_role(request.user, study, EDITOR)})


@staff_member_required
def monitor_fragment(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    return render(request, "annotation/_monitor_live.html",
                  {"monitor": study_monitor(study), "poll_seconds": POLL_SECONDS,
                   "can_act": has_role(request.user, study, EDITOR)})


@staff_member_required
def monitor_csv(request: HttpRequest, slug: str) -> HttpResponse:
    study = _visible_study(request, slug)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-progress.csv"'
    progress_export(study=study, stream=response, actor=request.user, source=WEB)
    return response


RATER_ACTIONS = ("exclude", "include", "reopen", "recalibrate")


class _RaterActionArguments(TypedDict):
    # What every rater action takes, whichever button was pressed.
    study: Study
    rater_id: int
    actor: Any
    source: str


@staff_member_required
@require_POST
def rater_action(request: HttpRequest, slug: str, rater_id: int, action: str) -> HttpResponse:
    """The monitor's buttons on a rater (exclude, include, reopen the seat, start a
    recalibration round). With htmx the answer is empty and tells the live table to refresh;
    without JavaScript the form lands back on the monitor with a message. Editors of the
    study only (others: 403 or 404)."""
    study = study_for(request.user, slug, EDITOR)
    if action not in RATER_ACTIONS:
        raise Http404(f"No rater action {action!r}: one of {', '.join(RATER_ACTIONS)}.")
    common: _RaterActionArguments = {"study": study, "rater_id": rater_id,
                                     "actor": request.user, "source": WEB}
    try:
        if action == "exclude":
            # htmx asks for the reason in a prompt and sends it as HX-Prompt.
            reason = request.POST.get("reason") or request.headers.get("HX-Prompt", "")
            rater_actions.rater_exclude(**common, reason=reason[:rater_actions.REASON_MAX])
            done = "excluded from the analysis (judgments kept; Include undoes it)"
        elif action == "include":
            rater_actions.rater_include(**common)
            done = "included in the analysis again"
        elif action == "recalibrate":
            reason = request.POST.get("reason") or request.headers.get("HX-Prompt", "")
            round_ = recalibration.recalibration_start(
                **common, reason=reason[:rater_actions.REASON_MAX])
            n_slots = round_.slots.count()
            done = ngettext("recalibration round %(round)d started (%(count)d calibration "
                            "item served next)",
                            "recalibration round %(round)d started (%(count)d calibration "
                            "items served next)", n_slots) % {
                "round": round_.number, "count": n_slots}
        else:
            all_items = request.POST.get("all_items", "").lower() in ("1", "true", "on", "yes")
            replacement = rater_actions.seat_reopen(**common, all_items=all_items)
            n_slots = replacement.slots.count()
            done = ngettext("seat handed on (%(count)d item in a new open seat)",
                            "seat handed on (%(count)d items in a new open seat)",
                            n_slots) % {"count": n_slots}
    except rater_actions.RaterNotInStudy:
        raise Http404("No such rater in this study.") from None
    except (rater_actions.SeatNotReopenable, recalibration.RecalibrationNotPossible) as error:
        level, text = messages.ERROR, f"Rater {rater_id}: nothing changed. {error}"
    else:
        level, text = messages.SUCCESS, f"Rater {rater_id}: {done}."
    if request.headers.get("HX-Request"):
        # The text goes into the page's status line (the form targets it); the live table
        # refreshes at once to show the change.
        answer = render(request, "annotation/_rater_action_result.html",
                        {"text": text, "failed": level == messages.ERROR})
        answer["HX-Trigger"] = "monitor-refresh"
        return answer
    messages.add_message(request, level, text)
    return HttpResponseRedirect(reverse("annotation:monitor", args=[study.slug]) + "#raters")
