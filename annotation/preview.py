"""Preview as a rater: a researcher walks the study's first seat (practice items with their
feedback, attention checks, conditional questions) before it opens, and nothing is stored.

How nothing is stored, by construction rather than by rollback: the seat is built in memory
with the design code the real build uses (`evalstudy.design`: the same list builder, the same
seat seed and `order_seat`), as unsaved slot objects; each slot is shown with the rater pages'
own pieces (`annotation.selectors`: texts, choices, panes; `_questions.html`), answers are
checked with the real validation (`annotation.services.clean_answers`: conditional questions
counted only when shown, the criteria's own rules), and the walk's position and answers live in
the Django session only. No Rater, Enrollment, Assignment, AssignmentSlot, Judgment, listening
log or audit event is written; media are served to the researcher by `preview_media` (their
listening is not logged, so "hear it to the end first" is not enforced here).

Who: staff with any role on the study (viewers included: nothing changes); a study of another
owner is a 404. Works for drafts (the point), and for open and closed studies alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import translation
from django.views.decorators.http import require_POST

from evalstudy import criteria as rules
from evalstudy.design import DesignError, order_seat, seat_seed, split_list, tuples
from evalstudy.models import Assignment, AssignmentSlot, Criterion, ItemMedia, Output, Study
from evalstudy.permissions import VIEWER, study_for
from evalstudy.services import BUILDERS, TUPLE_DESIGNS, study_validate, tuple_size_of

from .alignment import alignment_for
from .media_views import _ranged
from .selectors import (
    Feedback,
    FeedbackLine,
    Question,
    SlotView,
    _choices,
    _label,
    marked_sides,
    render_markdown,
    slot_texts,
    study_sides,
    tuple_panes,
)
from .services import SubmissionRefused, clean_answers, collected_answer, shown_text

SESSION_KEY = "evalstudy.preview"


# --- the first seat, in memory ------------------------------------------------------------------
@dataclass
class PreviewSeat:
    slots: list[AssignmentSlot]  # unsaved: no primary keys, never written
    seed: int
    problems: list[str]  # what would stop the study from opening (study_validate)


def preview_seat(study: Study) -> PreviewSeat:
    """The study's first seat (seat 0: the first list's first part, replica 0) as the real
    build (`evalstudy.services._assignments_build`) would order it, built in memory: unsaved
    AssignmentSlot objects pointing at the study's saved outputs and control items. Reads
    only. `problems` lists what study_validate finds; the seat is built whenever the design
    can be (an empty list when it cannot)."""
    problems = study_validate(study=study)
    seed = seat_seed(study.seed, 0)
    items = [str(pk) for pk in study.items.order_by("id").values_list("id", flat=True)]
    systems = [str(pk) for pk in study.systems.order_by("id").values_list("id", flat=True)]
    if not items or not systems:
        return PreviewSeat([], seed, problems)
    outputs = {(str(o.item_id), str(o.system_id)): o
               for o in Output.objects.filter(item__study=study).select_related("item")}
    calibration = {str(c.pk): c for c in study.calibration_items.all()}
    attention = {str(c.pk): c for c in study.attention_checks.all()}
    try:
        if study.design in TUPLE_DESIGNS:
            lists = tuples(items, systems, tuple_size_of(study.design, study.tuple_size,
                                                         len(systems)))
        else:
            lists = BUILDERS[study.design](items, systems)
        part = split_list(lists[0], study.items_per_rater)[0] if lists else []
        order = order_seat(part, calibration=list(calibration), attention_checks=list(attention),
                           attention_every=study.attention_check_every, seed=seed,
                           randomise=study.randomise_order)
    except (DesignError, ValidationError, IndexError) as error:
        return PreviewSeat([], seed, [*problems, f"The design cannot be built: {error}"])
    seat = Assignment(study=study, seat_index=0, list_index=0, part_index=0, replica=0,
                      seed=seed)
    slots = []
    try:
        for position, planned in enumerate(order):
            slot = AssignmentSlot(assignment=seat, position=position, kind=planned.kind)
            if planned.cell is not None:
                cell = planned.cell
                slot.output = outputs[(cell.item, cell.system)]
                if cell.system_b is not None:
                    slot.output_b = outputs[(cell.item, cell.system_b)]
                slot.shown_outputs = [outputs[(cell.item, s)].pk for s in cell.shown]
            elif planned.kind == AssignmentSlot.Kind.CALIBRATION:
                slot.calibration_item = calibration[planned.control]
            else:
                slot.attention_check = attention[planned.control]
            slots.append(slot)
    except KeyError:
        return PreviewSeat([], seed, [*problems, "Some items lack an output of every system."])
    return PreviewSeat(slots, seed, problems)


def _criteria(study: Study) -> list[Criterion]:
    return list(study.criteria.select_related("show_if_criterion").order_by("order", "id"))


def preview_slot_view(study: Study, slot: AssignmentSlot, *, total: int,
                      criteria: list[Criterion], answers: dict[str, str]) -> SlotView:
    """What `annotation.selectors.slot_view` shows for a slot, for an unsaved slot: the same
    texts, panes, choices (in the active language) and questions, with `answers` filled in.
    Media are left to the preview page (`preview_media_of`)."""
    reference, context, text, text_b = slot_texts(slot)
    shown_reference = reference if study.reference_shown else ""
    panes = tuple_panes(slot, study)
    letters = "".join(pane.letter for pane in panes)
    sides = study_sides(study)
    return SlotView(
        panes=panes, media=[], marked=marked_sides(criteria),
        alignment=None if text_b else alignment_for(study, shown_reference, text),
        slot=slot, kind=slot.kind, reference=shown_reference, context=context, text=text,
        text_b=text_b, position=slot.position + 1, total=total,
        questions=[Question(criterion, _choices(criterion, sides), answers.get(criterion.key, ""),
                            letters if criterion.kind in rules.TUPLE_KINDS else "")
                   for criterion in criteria],
    )


def preview_media_of(study: Study, slot: AssignmentSlot) -> list[dict[str, str]]:
    """The slot's media (the item's, then output A's and B's) with researcher URLs."""
    if slot.kind != AssignmentSlot.Kind.TARGET or slot.output is None:
        return []
    found = []
    for media in ItemMedia.objects.filter(item_id=slot.output.item_id).order_by("output_id"):
        if media.output_id is None:
            which = "item"
        elif media.output_id == slot.output_id:
            which = "a"
        elif slot.output_b is not None and media.output_id == slot.output_b.pk:
            which = "b"
        else:
            continue
        found.append({"which": which, "kind": media.kind,
                      "url": reverse("annotation:preview_media", args=[study.slug, media.pk])})
    return sorted(found, key=lambda m: ("item", "a", "b").index(m["which"]))


def preview_feedback(study: Study, slot: AssignmentSlot, given: dict[str, str],
                     criteria: list[Criterion]) -> Feedback:
    """`annotation.selectors.calibration_feedback` for answers held in the session."""
    control = slot.calibration_item
    by_key = {c.key: c for c in criteria}
    sides = study_sides(study)
    lines = [FeedbackLine(by_key[key].prompt, _label(by_key[key], given.get(key, ""), sides),
                          _label(by_key[key], str(value), sides),
                          rules.expected_met(given.get(key), value))
             for key, value in control.expected.items() if key in by_key]
    return Feedback(lines, control.feedback)


def attention_failures(slots: list[AssignmentSlot], answers: dict[str, dict[str, str]]) -> int:
    """Attention checks answered in the walk whose answers miss an expected one (as
    `annotation.flow.control_slot_passed` counts them from stored judgments)."""
    failed = 0
    for position, given in answers.items():
        slot = slots[int(position)]
        if slot.kind == AssignmentSlot.Kind.ATTENTION and not all(
                rules.expected_met(given.get(key), value)
                for key, value in slot.attention_check.expected.items()):
            failed += 1
    return failed


# --- the walk's state, in the session -----------------------------------------------------------
def _state(request: HttpRequest, study: Study, seat: PreviewSeat) -> dict[str, Any] | None:
    """This study's walk in the session; None before it starts, or when the seat it walked
    has changed since (a new seed, items added)."""
    state = request.session.get(SESSION_KEY, {}).get(str(study.pk))
    if state and (state.get("seed") != seat.seed or state.get("total") != len(seat.slots)):
        return None
    return state


def _save(request: HttpRequest, study: Study, state: dict[str, Any] | None) -> None:
    walks = dict(request.session.get(SESSION_KEY, {}))
    if state is None:
        walks.pop(str(study.pk), None)
    else:
        walks[str(study.pk)] = state
    request.session[SESSION_KEY] = walks


def _study(request: HttpRequest, slug: str) -> Study:
    return study_for(request.user, slug, VIEWER)


def _speak(study: Study) -> None:
    translation.activate(study.language)  # as the rater pages do; the banner stays English


# --- views ----------------------------------------------------------------------------------------
@staff_member_required
def preview_page(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: where the walk stands (its start, the current item, the stopped or end page).
    POST: answers to the current item, checked as a rater's are; kept in the session."""
    study = _study(request, slug)
    seat = preview_seat(study)
    state = _state(request, study, seat)
    if state is None:
        if request.method == "POST":
            return redirect("annotation:preview", slug=study.slug)
        return _render_start(request, study, seat)
    position = state["position"]
    if request.method == "POST" and (state.get("stopped") or position >= len(seat.slots)):
        return redirect("annotation:preview", slug=study.slug)  # a repeat of the last post
    _speak(study)
    if state.get("stopped"):
        return render(request, "annotation/preview_stopped.html", {"study": study})
    if position >= len(seat.slots):
        return render(request, "annotation/preview_done.html", {"study": study})
    criteria = _criteria(study)
    slot = seat.slots[position]
    if request.method != "POST":
        return _render_item(request, study, seat, slot, criteria, {})
    if request.POST.get("position") != str(position):
        # A repeated post (a double click, the browser's back button): the walk has moved on.
        return redirect("annotation:preview", slug=study.slug)
    raw = {key: request.POST.get(key) for key in request.POST
           if key not in ("csrfmiddlewaretoken", "position")}
    try:
        cleaned, errors = clean_answers(criteria, raw, shown_text(slot, study))
    except SubmissionRefused as refused:
        return render(request, "annotation/preview_problem.html",
                      {"study": study, "message": str(refused)}, status=refused.status)
    if errors:
        return _render_item(request, study, seat, slot, criteria, raw, errors=errors,
                            status=400)
    state["answers"][str(position)] = cleaned
    state["position"] = position + 1
    if slot.kind == AssignmentSlot.Kind.ATTENTION and study.attention_fail_limit and (
            attention_failures(seat.slots, state["answers"]) >= study.attention_fail_limit):
        state["stopped"] = True
    _save(request, study, state)
    if slot.kind == AssignmentSlot.Kind.CALIBRATION:
        return redirect("annotation:preview_feedback", slug=study.slug)
    return redirect("annotation:preview", slug=study.slug)


def _render_start(request: HttpRequest, study: Study, seat: PreviewSeat) -> HttpResponse:
    kinds = [slot.kind for slot in seat.slots]
    return render(request, "annotation/preview_start.html", {
        "study": study, "seat": seat, "problems": seat.problems,
        "counts": {"calibration": kinds.count("calibration"), "target": kinds.count("target"),
                   "attention": kinds.count("attention")},
        "consent": render_markdown(study.consent_text),
        "instructions": render_markdown(study.instructions),
    })


def _render_item(request, study, seat, slot, criteria, posted, *, errors=None, status=200):
    view = preview_slot_view(study, slot, total=len(seat.slots), criteria=criteria,
                             answers={})
    if posted:
        for question in view.questions:
            question.answer = str(collected_answer(question.criterion, posted) or "")
    return render(request, "annotation/preview.html", {
        "study": study, "view": view, "errors": errors or {},
        "media": preview_media_of(study, slot),
        "instructions": render_markdown(study.instructions),
    }, status=status)


@staff_member_required
@require_POST
def preview_start(request: HttpRequest, slug: str) -> HttpResponse:
    """Start (or restart) the walk at the first slot, forgetting earlier answers."""
    study = _study(request, slug)
    seat = preview_seat(study)
    if not seat.slots:
        _save(request, study, None)
    else:
        _save(request, study, {"seed": seat.seed, "total": len(seat.slots), "position": 0,
                               "answers": {}, "stopped": False})
    return redirect("annotation:preview", slug=study.slug)


@staff_member_required
def preview_feedback_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The feedback a rater gets after the practice item just answered."""
    study = _study(request, slug)
    seat = preview_seat(study)
    state = _state(request, study, seat)
    last = (state or {}).get("position", 0) - 1
    if state is None or last < 0 or seat.slots[last].kind != AssignmentSlot.Kind.CALIBRATION:
        return redirect("annotation:preview", slug=study.slug)
    _speak(study)
    feedback = preview_feedback(study, seat.slots[last], state["answers"][str(last)],
                                _criteria(study))
    return render(request, "annotation/preview_feedback.html",
                  {"study": study, "feedback": feedback})


@staff_member_required
def preview_media(request: HttpRequest, slug: str, media_id: int) -> HttpResponse:
    """A media file of the study, for its researchers (the preview and the judgment browser):
    a file of another study is a 404."""
    study = _study(request, slug)
    media = get_object_or_404(ItemMedia, pk=media_id, item__study=study)
    if not media.file:
        raise Http404("No such media.")
    return _ranged(request, media)
