"""Rater-facing pages. Thin: resolve the rater, call one service or selector, render."""

from __future__ import annotations

from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evalstudy.models import AssignmentSlot, Rater, Study
from evalstudy.services import AssignmentExpired, StudyFull, StudyNotOpen, assignment_next

from .rater import SESSION_KEY, current_rater
from .selectors import rater_study_cards, render_markdown, slot_view
from .services import SubmissionInvalid, SubmissionRefused, judgment_submit


def enter(request: HttpRequest, token: str) -> HttpResponse:
    """A rater's personal link: logs their account in (or binds this session to them)."""
    rater = get_object_or_404(Rater, access_token=token)
    if rater.user is not None:
        login(request, rater.user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[SESSION_KEY] = rater.pk
    return redirect("annotation:dashboard")


def dashboard(request: HttpRequest) -> HttpResponse:
    rater = current_rater(request)
    if rater is None:
        if request.user.is_authenticated and request.user.is_staff:
            return redirect("admin:index")
        if not request.user.is_authenticated:
            return redirect("login")
    return render(request, "annotation/dashboard.html",
                  {"rater": rater, "cards": rater_study_cards(rater)})


def _rater_or_404(request: HttpRequest) -> Rater:
    rater = current_rater(request)
    if rater is None:
        raise Http404("No rater is signed in.")
    return rater


def rate(request: HttpRequest, slug: str) -> HttpResponse:
    """The rater's current item (claiming a seat on the first visit)."""
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    try:
        slot = assignment_next(study=study, rater=rater)
    except (StudyFull, StudyNotOpen, AssignmentExpired) as error:
        return render(request, "annotation/message.html",
                      {"study": study, "message": str(error)}, status=409)
    if slot is None:
        return render(request, "annotation/done.html", {"study": study})
    return _render_slot(request, study, slot)


def _render_slot(request, study, slot, errors=None, posted=None, status=200):
    view = slot_view(slot)
    if posted is not None:
        for question in view.questions:
            question.answer = str(posted.get(question.criterion.key) or "")
    return render(request, "annotation/rate.html", {
        "study": study, "view": view, "errors": errors or {},
        "instructions": render_markdown(study.instructions),
    }, status=status)


@require_POST
def submit(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    answers = {key: request.POST.get(key) for key in request.POST if key != "csrfmiddlewaretoken"}
    try:
        judgment_submit(rater=rater, slot_id=slot_id, answers=answers)
    except SubmissionRefused as error:
        return render(request, "annotation/message.html",
                      {"study": study, "message": str(error)}, status=error.status)
    except SubmissionInvalid as error:
        slot = get_object_or_404(AssignmentSlot, pk=slot_id, assignment__rater=rater)
        return _render_slot(request, study, slot, errors=error.errors, posted=answers,
                            status=400)
    return redirect("annotation:rate", slug=study.slug)
