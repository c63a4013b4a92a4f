"""Rater-facing pages. Thin: resolve the rater, call one service or selector, render.

Every page that takes a slot id looks it up among the current rater's own slots only, so
another rater's slot is a 404 whatever the id.
"""

from __future__ import annotations

from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from evalstudy.models import AssignmentSlot, Rater, Study
from evalstudy.services import AssignmentExpired, StudyFull, StudyNotOpen, assignment_next

from . import flow
from .rater import bind_rater, current_rater
from .selectors import (
    calibration_feedback,
    previous_revisable_slot,
    rater_study_cards,
    render_markdown,
    slot_view,
)
from .services import SubmissionInvalid, SubmissionRefused, judgment_submit


def enter(request: HttpRequest, token: str) -> HttpResponse:
    """A rater's personal link: logs their account in (or binds this session to them)."""
    rater = get_object_or_404(Rater, access_token=token)
    if rater.user is not None:
        login(request, rater.user, backend="django.contrib.auth.backends.ModelBackend")
    bind_rater(request, rater)
    return redirect("annotation:dashboard")


def crowd_entry(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's crowd URL, e.g. /c/SLUG/?PROLIFIC_PID=...&STUDY_ID=...&SESSION_ID=..."""
    study = get_object_or_404(Study, slug=slug)
    try:
        enrollment = flow.crowd_enter(
            study=study, participant_id=request.GET.get("PROLIFIC_PID", ""),
            platform_study_id=request.GET.get("STUDY_ID", ""),
            session_id=request.GET.get("SESSION_ID", ""),
        )
    except flow.EntryRefused as error:
        return _message(request, study, str(error), status=400)
    if request.session.get("evalstudy_rater_id") != enrollment.rater_id:
        bind_rater(request, enrollment.rater)
    return redirect("annotation:rate", slug=study.slug)


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


def _message(request, study, message, status=409):
    return render(request, "annotation/message.html", {"study": study, "message": message},
                  status=status)


def rate(request: HttpRequest, slug: str) -> HttpResponse:
    """The rater's current page: consent, instructions, the current item, or the end."""
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    step = flow.next_step(study=study, rater=rater)
    if step.name == "stopped":
        return render(request, "annotation/stopped.html",
                      {"study": study, "enrollment": step.enrollment})
    if step.name in ("consent", "instructions"):
        return redirect(f"annotation:{step.name}", slug=study.slug)
    try:
        slot = assignment_next(study=study, rater=rater)
    except (StudyFull, StudyNotOpen, AssignmentExpired) as error:
        return _message(request, study, str(error))
    if slot is None:
        return render(request, "annotation/done.html", {"study": study, "rater": rater})
    return _render_slot(request, study, slot)


def _render_slot(request, study, slot, errors=None, posted=None, status=200):
    view = slot_view(slot)
    if posted is not None:
        for question in view.questions:
            question.answer = str(posted.get(question.criterion.key) or "")
    previous = previous_revisable_slot(slot)
    return render(request, "annotation/rate.html", {
        "study": study, "view": view, "errors": errors or {},
        "instructions": render_markdown(study.instructions),
        "previous_url": reverse("annotation:slot", args=[study.slug, previous.pk])
        if previous else "",
        "revising": slot.completed_at is not None,
    }, status=status)


def _own_slot(rater: Rater, study: Study, slot_id: int) -> AssignmentSlot:
    return get_object_or_404(
        AssignmentSlot.objects.select_related("assignment__study"),
        pk=slot_id, assignment__rater=rater, assignment__study=study,
    )


def slot(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    """Go back to an earlier item to revise it (when the study allows revisions)."""
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    own = _own_slot(rater, study, slot_id)
    if own.completed_at is None or not study.allow_revision or own.kind != "target":
        return redirect("annotation:rate", slug=study.slug)
    return _render_slot(request, study, own)


@require_POST
def submit(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    answers = {key: request.POST.get(key) for key in request.POST if key != "csrfmiddlewaretoken"}
    try:
        outcome = judgment_submit(rater=rater, slot_id=slot_id, answers=answers)
    except SubmissionRefused as error:
        return _message(request, study, str(error), status=error.status)
    except SubmissionInvalid as error:
        return _render_slot(request, study, _own_slot(rater, study, slot_id),
                            errors=error.errors, posted=answers, status=400)
    if outcome.slot_kind == AssignmentSlot.Kind.CALIBRATION:
        return redirect("annotation:feedback", slug=study.slug, slot_id=slot_id)
    return redirect("annotation:rate", slug=study.slug)


def feedback(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    """After a practice item: the expected answers beside the rater's, and why."""
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    own = _own_slot(rater, study, slot_id)
    if own.kind != AssignmentSlot.Kind.CALIBRATION or own.completed_at is None:
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/feedback.html",
                  {"study": study, "feedback": calibration_feedback(own)})


@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest, slug: str) -> HttpResponse:
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    enrollment = flow.enrollment_get(study=study, rater=rater)
    if request.method == "POST":
        flow.consent_record(enrollment=enrollment, accepted=request.POST.get("consent") == "yes")
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/consent.html",
                  {"study": study, "consent": render_markdown(study.consent_text)})


@require_http_methods(["GET", "POST"])
def instructions(request: HttpRequest, slug: str) -> HttpResponse:
    rater = _rater_or_404(request)
    study = get_object_or_404(Study, slug=slug)
    if request.method == "POST":
        flow.instructions_seen(enrollment=flow.enrollment_get(study=study, rater=rater))
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/instructions.html",
                  {"study": study, "instructions": render_markdown(study.instructions)})
