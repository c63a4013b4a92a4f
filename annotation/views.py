"""Rater-facing pages. Thin: resolve the rater, call one service or selector, render.

Every page that takes a slot id looks it up among the current rater's own slots only, so
another rater's slot is a 404 whatever the id.
"""

from __future__ import annotations

import functools

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.views.decorators.http import require_http_methods, require_POST

from evalstudy.models import AssignmentSlot, Rater, Study
from evalstudy.services import (
    AssignmentExpired,
    NotEnrolled,
    StudyFull,
    StudyNotOpen,
    assignment_next,
    enrollment_of,
    invitation_answer,
)

from . import flow, loop
from .answer_checks import answer_posted
from .behaviour import BEHAVIOUR_FIELD, slot_behaviour_record
from .rater import PLATFORM_SESSION_KEY, SESSION_KEY, bind_rater, current_rater
from .selectors import (
    calibration_feedback,
    previous_revisable_slot,
    rater_invitations,
    rater_study_cards,
    render_markdown,
    slot_view,
)
from .services import SessionRater, SubmissionInvalid, SubmissionRefused, judgment_submit


def enter(request: HttpRequest, token: str) -> HttpResponse:
    """A rater's personal link: binds this browser session to that rater (of one study).

    It never signs anyone in to an account: account holders sign in with their password, so
    whoever can read a link (a study owner, a log, a forwarded email) cannot become them."""
    rater = Rater.objects.filter(access_token=token).first()
    if rater is None or not rater.is_human:
        raise Http404("No such entry link.")
    if rater.user_id is not None:
        return redirect_to_login(reverse("annotation:dashboard"))
    if not rater.has_entry_link:
        raise Http404("No such entry link.")
    bind_rater(request, rater)
    if rater.study is not None and rater.study.status == Study.Status.OPEN:
        return redirect("annotation:rate", slug=rater.study.slug)
    return redirect("annotation:dashboard")


def crowd_entry(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's crowd URL, e.g. /c/SLUG/?PROLIFIC_PID=...&STUDY_ID=...&SESSION_ID=..."""
    # A draft, and a study that takes no crowd participants, have no crowd URL.
    study = get_object_or_404(Study.objects.exclude(status=Study.Status.DRAFT)
                              .exclude(crowd_platform="none"), slug=slug)
    _speak(study)  # a refusal is told in the study's language
    try:
        enrollment = flow.crowd_enter(
            study=study, participant_id=request.GET.get("PROLIFIC_PID", ""),
            platform_study_id=request.GET.get("STUDY_ID", ""),
            session_id=request.GET.get("SESSION_ID", ""),
            session_rater_id=bound.pk if (bound := current_rater(request)) else None,
        )
    except flow.EntryRefused as error:
        return _message(request, study, str(error), status=400)
    if (request.session.get(SESSION_KEY) != enrollment.rater_id
            or request.session.get(PLATFORM_SESSION_KEY, "") != enrollment.platform_session_id):
        bind_rater(request, enrollment.rater, platform_session=enrollment.platform_session_id)
    return redirect("annotation:rate", slug=study.slug)


def dashboard(request: HttpRequest) -> HttpResponse:
    rater = current_rater(request)
    if rater is None:
        if request.user.is_authenticated and request.user.is_staff:
            return redirect("admin:index")
        if not request.user.is_authenticated:
            return redirect("login")
    return render(request, "annotation/dashboard.html",
                  {"rater": rater, "cards": rater_study_cards(rater),
                   "invitations": rater_invitations(rater)})


@require_POST
def invitation(request: HttpRequest, slug: str) -> HttpResponse:
    """An account holder accepts or declines an invitation to a study (signed in only: an
    invitation is for the account, never for a session bound by a link)."""
    rater = current_rater(request)
    if rater is None or rater.user_id is None or rater.user_id != request.user.pk:
        raise Http404("No such invitation.")
    study = get_object_or_404(Study.objects.exclude(status=Study.Status.DRAFT), slug=slug)
    if not invitation_answer(study=study, rater=rater,
                             accept=request.POST.get("answer") == "accept"):
        raise Http404("No such invitation.")
    return redirect("annotation:dashboard")


def _speak(study: Study | None) -> None:
    """Answer in the study's language from here on (the request started in the installation's:
    kit.i18n)."""
    if study is not None:
        translation.activate(study.language)


def _rater_or_404(request: HttpRequest) -> Rater:
    rater = current_rater(request)
    if rater is None:
        raise Http404("No rater is signed in.")
    return rater


def _rater_and_study(request: HttpRequest, slug: str) -> tuple[Rater, Study]:
    """The current rater and the study `slug`, which must have admitted them: any other study
    (of another owner, a draft, one they were never invited to) is a 404 for them."""
    rater = _rater_or_404(request)
    study = get_object_or_404(Study.objects.exclude(status=Study.Status.DRAFT), slug=slug)
    try:
        enrollment_of(study=study, rater=rater)
    except NotEnrolled:
        raise Http404("No such study.") from None
    _speak(study)
    return rater, study


def _message(request, study, message, status=409):
    _speak(study)
    return render(request, "annotation/message.html", {"study": study, "message": message},
                  status=status)


def _seat_refusal(error: Exception) -> str:
    """What a rater is told when no item can be served: in their study's language, and without
    the study's internal name (the services' own messages are for researchers and logs)."""
    if isinstance(error, StudyFull):
        return gettext("Every place in this study is taken. Thank you for your interest.")
    if isinstance(error, AssignmentExpired):
        return gettext("Your time on this study ran out and your remaining items went to "
                       "another rater. What you submitted is kept.")
    return gettext("This study is not open.")


def _htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _go(request: HttpRequest, url: str) -> HttpResponse:
    """Send the browser to `url`: a redirect, or for htmx a whole-page visit (`HX-Redirect`),
    which a page with its own head (the end page's return link) needs."""
    if _htmx(request):
        return HttpResponse(status=200, headers={"HX-Redirect": url})
    return redirect(url)


def _session_identity(request: HttpRequest) -> dict:
    """Who asks, as the loop's locking read checks it (`annotation.loop`): the rater bound to
    this session (entry link or crowd URL) and its crowd session, else the signed-in account
    (loading it checks the session against the account, as Django does on every request)."""
    rater_id = request.session.get(SESSION_KEY)
    user_id = None
    if rater_id is None and request.user.is_authenticated:
        user_id = request.user.pk
    return {"rater_id": rater_id, "user_id": user_id,
            "platform_session": request.session.get(PLATFORM_SESSION_KEY, "")}


def _render_item(request, study, view, *, previous_id=None, errors=None, revising=False,
                 status=200, questions_html=""):
    """The rating page (or, for htmx, its <main> alone). `questions_html`: the questions
    already rendered (a fresh item: annotation.loop.questions_html)."""
    template = "annotation/_item_swap.html" if _htmx(request) else "annotation/rate.html"
    _speak(study)
    return render(request, template, {
        "study": study, "view": view, "errors": errors or {},
        "questions_html": mark_safe(questions_html),  # noqa: S308 - rendered by our template
        "instructions": render_markdown(study.instructions),
        "previous_url": reverse("annotation:slot", args=[study.slug, previous_id])
        if previous_id else "",
        "revising": revising,
    }, status=status)


def _after_loop(request: HttpRequest, slug: str, page: loop.LoopPage) -> HttpResponse:
    if page.view is not None and _htmx(request):
        return _render_item(request, page.study, page.view, previous_id=page.previous_slot_id,
                            questions_html=page.questions_html)
    if page.feedback_slot is not None:
        return _go(request, reverse("annotation:feedback", args=[slug, page.feedback_slot]))
    return _go(request, reverse("annotation:rate", args=[slug]))


def rate(request: HttpRequest, slug: str) -> HttpResponse:
    """The rater's current page: consent, instructions, the current item, or the end."""
    page = loop.serve_current(slug=slug, **_session_identity(request))
    if page is not None:
        return _render_item(request, page.study, page.view, previous_id=page.previous_slot_id,
                            questions_html=page.questions_html)
    rater, study = _rater_and_study(request, slug)
    step = flow.next_step(study=study, rater=rater)
    if step.name == "stopped":
        return render(request, "annotation/stopped.html",
                      {"study": study, "enrollment": step.enrollment})
    if step.name in ("consent", "instructions"):
        return redirect(f"annotation:{step.name}", slug=study.slug)
    try:
        slot = assignment_next(study=study, rater=rater)
    except (StudyFull, StudyNotOpen, AssignmentExpired) as error:
        return _message(request, study, _seat_refusal(error))
    if slot is None:
        return render(request, "annotation/done.html", {"study": study, "rater": rater})
    return _render_slot(request, study, slot)


def _render_slot(request, study, slot, errors=None, posted=None, status=200):
    view = slot_view(slot)
    if posted is not None:
        for question in view.questions:
            question.answer = str(answer_posted(question.criterion, posted) or "")
    previous = previous_revisable_slot(slot)
    return _render_item(request, study, view, previous_id=previous.pk if previous else None,
                        errors=errors, revising=slot.completed_at is not None, status=status)


def _own_slot(rater: Rater, study: Study, slot_id: int) -> AssignmentSlot:
    return get_object_or_404(
        AssignmentSlot.objects.select_related("assignment__study"),
        pk=slot_id, assignment__rater=rater, assignment__study=study,
    )


def slot(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    """Go back to an earlier item to revise it (when the study allows revisions)."""
    rater, study = _rater_and_study(request, slug)
    own = _own_slot(rater, study, slot_id)
    if own.completed_at is None or not study.allow_revision or own.kind != "target":
        return redirect("annotation:rate", slug=study.slug)
    return _render_slot(request, study, own)


@require_POST
def submit(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    """Store the answers to one slot (`judgment_submit`, which chooses how they are stored);
    answer with the next item (htmx, when it was served with the answer) or a redirect to
    it."""
    answers = {key: request.POST.get(key) for key in request.POST
               if key not in ("csrfmiddlewaretoken", BEHAVIOUR_FIELD)}
    # The page's integrity counters (annotation.behaviour): recorded once the answer is
    # stored, never a reason to refuse it.
    behaviour = request.POST.get(BEHAVIOUR_FIELD)
    # The rater and their study, looked up once and only when needed: the loop finds the
    # rater under the seat's lock itself.
    found = functools.cache(lambda: _rater_and_study(request, slug))
    submitter = SessionRater(slug=slug, find=lambda: found()[0], **_session_identity(request))
    try:
        outcome = judgment_submit(rater=submitter, slot_id=slot_id, answers=answers)
    except SubmissionRefused as error:
        return _message(request, found()[1], str(error), status=error.status)
    except SubmissionInvalid as error:
        rater, study = found()
        return _render_slot(request, study, _own_slot(rater, study, slot_id),
                            errors=error.errors, posted=answers, status=400)
    if behaviour is not None and (outcome.created or outcome.revised):
        slot_behaviour_record(slot_id=slot_id, raw=behaviour)
    if outcome.served is not None:
        return _after_loop(request, slug, outcome.served)
    if outcome.slot_kind == AssignmentSlot.Kind.CALIBRATION:
        return _go(request, reverse("annotation:feedback", args=[slug, slot_id]))
    return _go(request, reverse("annotation:rate", args=[slug]))


def feedback(request: HttpRequest, slug: str, slot_id: int) -> HttpResponse:
    """After a practice item: the expected answers beside the rater's, and why."""
    rater, study = _rater_and_study(request, slug)
    own = _own_slot(rater, study, slot_id)
    if own.kind != AssignmentSlot.Kind.CALIBRATION or own.completed_at is None:
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/feedback.html",
                  {"study": study, "feedback": calibration_feedback(own)})


@require_http_methods(["GET", "POST"])
def consent(request: HttpRequest, slug: str) -> HttpResponse:
    rater, study = _rater_and_study(request, slug)
    enrollment = flow.enrollment_get(study=study, rater=rater)
    if request.method == "POST":
        flow.consent_record(enrollment=enrollment, accepted=request.POST.get("consent") == "yes")
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/consent.html",
                  {"study": study, "consent": render_markdown(study.consent_text)})


@require_http_methods(["GET", "POST"])
def instructions(request: HttpRequest, slug: str) -> HttpResponse:
    rater, study = _rater_and_study(request, slug)
    if request.method == "POST":
        flow.instructions_seen(enrollment=flow.enrollment_get(study=study, rater=rater))
        return redirect("annotation:rate", slug=study.slug)
    return render(request, "annotation/instructions.html",
                  {"study": study, "instructions": render_markdown(study.instructions)})
