"""Preview as a rater: a researcher walks the study's first seat (practice items with their
feedback, attention checks, conditional questions) before it opens, and nothing is stored.

How nothing is stored, by construction rather than by rollback: the seat is planned in memory
with the design code the real build uses (`evalstudy.design`: the same list builder, the same
seat seed and `order_seat`), and each slot is shown as an unsaved slot object with the rater
pages' own pieces (`annotation.selectors`: texts, choices, panes; `_questions.html`); answers
are checked with the real validation (`annotation.answer_checks.answers_checked`: conditional
questions counted only when shown, the criteria's own rules), and the walk lives in the Django
session only. No Rater, Enrollment, Assignment, AssignmentSlot, Judgment, listening log or
audit event is written; media are served to the researcher by `preview_media` (their listening
is not logged, so "hear it to the end first" is not enforced here).

What the session holds, bounded whatever the study's size and however far the walk went: ONE
walk (starting a walk of another study replaces it) with the position, the attention checks
failed so far (counted as each is answered), whether a rater would have been stopped, the last
practice answer (for its feedback page), and the seat's planned order as output and control
ids, with a fingerprint of what the plan was made from (seed, design settings, counts and
highest ids of items, systems and outputs, the control items in order). A request rebuilds
only its own slot from those ids; when the fingerprint no longer matches (a draft changes
between requests) the order is planned again, and the walk starts over when its seat changed
(another seed, another length), as a rater's seat would not change under them.

Who: staff with any role on the study (viewers included: nothing changes); a study of another
owner is a 404. Works for drafts (the point), and for open and closed studies alike.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.db.models import Count, Max, OuterRef, Q, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from evalstudy import criteria as rules
from evalstudy.design import DesignError, order_seat, seat_seed, split_list, tuples
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    Criterion,
    Item,
    ItemMedia,
    Output,
    Study,
    System,
)
from evalstudy.permissions import VIEWER, study_for
from evalstudy.services import BUILDERS, TUPLE_DESIGNS, study_validate, tuple_size_of

from .alignment import alignment_for
from .answer_checks import SubmissionRefused, answer_posted, answers_checked
from .media_views import media_response
from .selectors import (
    Feedback,
    FeedbackLine,
    SlotView,
    answer_label,
    marked_sides,
    question_of,
    render_markdown,
    slot_texts,
    study_sides,
    tuple_panes,
)
from .services import shown_text

SESSION_KEY = "evalstudy.preview"
# A planned slot, as the session keeps it: ["c", calibration item id], ["a", attention check
# id] or ["t", output id, output B id or None, *shown output ids (ranking, best-worst)].
Planned = list[Any]
KINDS = {"c": AssignmentSlot.Kind.CALIBRATION, "a": AssignmentSlot.Kind.ATTENTION,
         "t": AssignmentSlot.Kind.TARGET}


# --- the first seat, planned in memory ----------------------------------------------------------
@dataclass
class PreviewSeat:
    slots: list[AssignmentSlot]  # unsaved: no primary keys, never written
    seed: int
    problems: list[str]  # what would stop the study from opening (study_validate)


@dataclass
class Plan:
    """What the first seat is made from (`key`, a fingerprint of it) and its order."""

    key: list[Any]
    order: list[Planned]
    error: str | None  # why the design cannot be built (None: it can, or nothing to build)


def _count_max(model: type[Item] | type[System] | type[Output], link: str
               ) -> tuple[Subquery, Subquery]:
    rows = (model.objects.filter(**{link: OuterRef("pk")}).order_by().values(link)
            .annotate(n=Count("pk"), m=Max("pk")))
    return Subquery(rows.values("n")), Subquery(rows.values("m"))


def plan_key(study: Study) -> tuple[list[Any], list[int], list[int]]:
    """A fingerprint of everything the first seat's order depends on, in three small queries
    whatever the study's size: its seed and design settings, the number and highest id of its
    items, systems and outputs (ids only grow, so any row added or removed changes them), and
    its calibration items and attention checks in order. Also returns those control ids."""
    counts: dict[str, Subquery] = {}
    for name, model, link in (("items", Item, "study"), ("systems", System, "study"),
                              ("outputs", Output, "item__study")):
        counts[f"{name}_n"], counts[f"{name}_m"] = _count_max(model, link)
    found = Study.objects.filter(pk=study.pk).annotate(**counts).values_list(*counts).first()
    calibration = list(study.calibration_items.values_list("id", flat=True))
    attention = list(study.attention_checks.values_list("id", flat=True))
    key = [study.seed, study.design, study.tuple_size, study.items_per_rater,
           study.randomise_order, study.attention_check_every, *(found or ()),
           calibration, attention]
    return key, calibration, attention


def preview_plan(study: Study) -> Plan:
    """The study's first seat (seat 0: the first list's first part, replica 0) as the real
    build (`evalstudy.services._assignments_build`) orders it, as ids: the lists are built to
    take the first one, and only the outputs of that seat's cells are looked up (ids only)."""
    key, calibration_ids, attention_ids = plan_key(study)
    items = [str(pk) for pk in study.items.order_by("id").values_list("id", flat=True)]
    systems = [str(pk) for pk in study.systems.order_by("id").values_list("id", flat=True)]
    if not items or not systems:
        return Plan(key, [], None)
    calibration = [str(pk) for pk in calibration_ids]
    attention = [str(pk) for pk in attention_ids]
    try:
        if study.design in TUPLE_DESIGNS:
            lists = tuples(items, systems, tuple_size_of(study.design, study.tuple_size,
                                                         len(systems)))
        else:
            lists = BUILDERS[study.design](items, systems)
        part = split_list(lists[0], study.items_per_rater)[0] if lists else []
        order = order_seat(part, calibration=calibration, attention_checks=attention,
                           attention_every=study.attention_check_every,
                           seed=seat_seed(study.seed, 0), randomise=study.randomise_order)
    except (DesignError, ValidationError, IndexError) as error:
        return Plan(key, [], f"The design cannot be built: {error}")
    # The outputs of the seat's cells only: per system, the items it is shown with.
    wanted: dict[str, set[str]] = defaultdict(set)
    for cell in part:
        for system in {s for s in (cell.system, cell.system_b, *cell.shown) if s is not None}:
            wanted[system].add(cell.item)
    where = Q(pk__in=[])
    for system, its in wanted.items():
        where |= Q(system_id=int(system), item_id__in=sorted(int(item) for item in its))
    output_id = {(str(item_id), str(system_id)): pk for pk, item_id, system_id
                 in Output.objects.filter(where).values_list("id", "item_id", "system_id")}
    planned: list[Planned] = []
    try:
        for slot in order:
            if slot.cell is None:
                assert slot.control is not None, "a slot without a cell names its control item"
                planned.append(["c" if slot.kind == AssignmentSlot.Kind.CALIBRATION else "a",
                                int(slot.control)])
                continue
            cell = slot.cell
            planned.append(["t", output_id[(cell.item, cell.system)],
                            output_id[(cell.item, cell.system_b)] if cell.system_b else None,
                            *(output_id[(cell.item, system)] for system in cell.shown)])
    except KeyError:
        return Plan(key, [], "Some items lack an output of every system.")
    return Plan(key, planned, None)


def planned_slots(study: Study, planned: list[Planned], start: int = 0,
                  ) -> list[AssignmentSlot] | None:
    """Unsaved AssignmentSlot objects for `planned` (the slots from position `start` on),
    pointing at the study's saved outputs and control items, fetched by id: one query per
    kind of row. None when one of them is gone (the study changed meanwhile)."""
    output_ids = {pk for row in planned if row[0] == "t" for pk in row[1:] if pk is not None}
    outputs = (Output.objects.select_related("item").filter(item__study=study).order_by()
               .in_bulk(output_ids)) if output_ids else {}
    calibration_ids = [row[1] for row in planned if row[0] == "c"]
    calibration = study.calibration_items.in_bulk(calibration_ids) if calibration_ids else {}
    attention_ids = [row[1] for row in planned if row[0] == "a"]
    attention = study.attention_checks.in_bulk(attention_ids) if attention_ids else {}
    seat = Assignment(study=study, seat_index=0, list_index=0, part_index=0, replica=0,
                      seed=seat_seed(study.seed, 0))
    slots = []
    try:
        for position, row in enumerate(planned, start):
            slot = AssignmentSlot(assignment=seat, position=position, kind=KINDS[row[0]])
            if row[0] == "t":
                slot.output = outputs[row[1]]
                if row[2] is not None:
                    slot.output_b = outputs[row[2]]
                slot.shown_outputs = list(row[3:])
            elif row[0] == "c":
                slot.calibration_item = calibration[row[1]]
            else:
                slot.attention_check = attention[row[1]]
            slots.append(slot)
    except KeyError:
        return None
    return slots


def preview_seat(study: Study) -> PreviewSeat:
    """The study's first seat as the real build would order it, built in memory: unsaved
    AssignmentSlot objects pointing at the study's saved outputs and control items. Reads
    only. `problems` lists what study_validate finds; the seat is built whenever the design
    can be (an empty list when it cannot). The walk itself uses `preview_plan` and
    `planned_slots` for its one slot."""
    problems: list[str] = list(study_validate(study=study))  # Problems are sentences
    seed = seat_seed(study.seed, 0)
    plan = preview_plan(study)
    if plan.error:
        return PreviewSeat([], seed, [*problems, plan.error])
    slots = planned_slots(study, plan.order)
    if slots is None:
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
        questions=[question_of(criterion, sides, answers.get(criterion.key, ""), letters)
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
    assert control is not None, "feedback is asked for a calibration slot"
    by_key = {c.key: c for c in criteria}
    sides = study_sides(study)
    lines = [FeedbackLine(by_key[key].prompt,
                          answer_label(by_key[key], given.get(key, ""), sides),
                          answer_label(by_key[key], str(value), sides),
                          rules.expected_met(given.get(key), value))
             for key, value in control.expected.items() if key in by_key]
    return Feedback(lines, control.feedback)


def attention_failed(slot: AssignmentSlot, given: dict[str, str]) -> bool:
    """Whether answers to an attention check miss an expected one (as
    `annotation.flow.control_slot_passed` judges them from stored judgments); the walk counts
    these as they are answered."""
    if slot.kind != AssignmentSlot.Kind.ATTENTION:
        return False
    assert slot.attention_check is not None, "an attention slot shows its check"
    return not all(rules.expected_met(given.get(key), value)
                   for key, value in slot.attention_check.expected.items())


# --- the walk's state, in the session -----------------------------------------------------------
def _walk(request: HttpRequest, study: Study) -> dict[str, Any] | None:
    """This study's walk in the session; None before it starts, when the session walks
    another study, or when the seat it walked has changed since (a new seed, items added).
    A study changed in a way that leaves the seat's seed and length alone keeps its walk, on
    the order planned again."""
    walk = request.session.get(SESSION_KEY)
    if not isinstance(walk, dict) or walk.get("study") != study.pk:
        return None
    key, _, _ = plan_key(study)
    if walk.get("key") == key:
        return walk
    plan = preview_plan(study)
    if (plan.error or not plan.order or walk.get("seed") != seat_seed(study.seed, 0)
            or len(plan.order) != len(walk.get("order", ()))):
        _drop(request, study)
        return None
    walk.update(key=plan.key, order=plan.order)
    request.session[SESSION_KEY] = walk
    return walk


def _drop(request: HttpRequest, study: Study) -> None:
    """Forget the session's walk when it is `study`'s."""
    walk = request.session.get(SESSION_KEY)
    if walk is not None and (not isinstance(walk, dict) or walk.get("study") == study.pk):
        del request.session[SESSION_KEY]


def _slot(study: Study, walk: dict[str, Any], position: int) -> AssignmentSlot | None:
    found = planned_slots(study, walk["order"][position:position + 1], position)
    return found[0] if found else None


def _study(request: HttpRequest, slug: str) -> Study:
    return study_for(request.user, slug, VIEWER)


def _speak(study: Study) -> None:
    translation.activate(study.language)  # as the rater pages do; the banner stays English


# --- views ----------------------------------------------------------------------------------------
@staff_member_required
def preview_page(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: where the walk stands (its start, the current item, the stopped or end page).
    POST: answers to the current item, checked as a rater's are; the walk moves on."""
    study = _study(request, slug)
    walk = _walk(request, study)
    if walk is None:
        if request.method == "POST":
            return redirect("annotation:preview", slug=study.slug)
        return _render_start(request, study)
    position, total = walk["position"], len(walk["order"])
    if request.method == "POST" and (walk.get("stopped") or position >= total):
        return redirect("annotation:preview", slug=study.slug)  # a repeat of the last post
    _speak(study)
    if walk.get("stopped"):
        return render(request, "annotation/preview_stopped.html", {"study": study})
    if position >= total:
        return render(request, "annotation/preview_done.html", {"study": study})
    slot = _slot(study, walk, position)
    if slot is None:  # an output or control item went away under the walk
        _drop(request, study)
        return redirect("annotation:preview", slug=study.slug)
    criteria = _criteria(study)
    if request.method != "POST":
        return _render_item(request, study, total, slot, criteria, {})
    if request.POST.get("position") != str(position):
        # A repeated post (a double click, the browser's back button): the walk has moved on.
        return redirect("annotation:preview", slug=study.slug)
    raw = {key: request.POST.get(key) for key in request.POST
           if key not in ("csrfmiddlewaretoken", "position")}
    try:
        checked = answers_checked(criteria, raw, shown_text(slot, study), translate=gettext)
        cleaned, errors = checked.answers, checked.errors
    except SubmissionRefused as refused:
        return render(request, "annotation/preview_problem.html",
                      {"study": study, "message": str(refused)}, status=refused.status)
    if errors:
        return _render_item(request, study, total, slot, criteria, raw, errors=errors,
                            status=400)
    walk["position"] = position + 1
    if attention_failed(slot, cleaned):
        walk["failures"] = walk.get("failures", 0) + 1
        if study.attention_fail_limit and walk["failures"] >= study.attention_fail_limit:
            walk["stopped"] = True
    if slot.kind == AssignmentSlot.Kind.CALIBRATION:
        walk["practice"] = {"position": position, "answers": cleaned}
    request.session[SESSION_KEY] = walk
    if slot.kind == AssignmentSlot.Kind.CALIBRATION:
        return redirect("annotation:preview_feedback", slug=study.slug)
    return redirect("annotation:preview", slug=study.slug)


def _render_start(request: HttpRequest, study: Study) -> HttpResponse:
    plan = preview_plan(study)
    problems: list[str] = list(study_validate(study=study))  # Problems are sentences
    if plan.error:
        problems.append(plan.error)
    kinds = [row[0] for row in plan.order]
    return render(request, "annotation/preview_start.html", {
        "study": study, "total": 0 if plan.error else len(plan.order), "problems": problems,
        "counts": {"calibration": kinds.count("c"), "target": kinds.count("t"),
                   "attention": kinds.count("a")},
        "consent": render_markdown(study.consent_text),
        "instructions": render_markdown(study.instructions),
    })


def _render_item(request, study, total, slot, criteria, posted, *, errors=None, status=200):
    view = preview_slot_view(study, slot, total=total, criteria=criteria, answers={})
    if posted:
        for question in view.questions:
            question.answer = str(answer_posted(question.criterion, posted) or "")
    return render(request, "annotation/preview.html", {
        "study": study, "view": view, "errors": errors or {},
        "media": preview_media_of(study, slot),
        "instructions": render_markdown(study.instructions),
    }, status=status)


@staff_member_required
@require_POST
def preview_start(request: HttpRequest, slug: str) -> HttpResponse:
    """Start (or restart) the walk at the first slot, forgetting the earlier walk (of this
    study or another: the session keeps one)."""
    study = _study(request, slug)
    plan = preview_plan(study)
    if plan.error or not plan.order:
        _drop(request, study)
    else:
        request.session[SESSION_KEY] = {
            "study": study.pk, "key": plan.key, "seed": seat_seed(study.seed, 0),
            "order": plan.order, "position": 0, "failures": 0, "stopped": False,
            "practice": None,
        }
    return redirect("annotation:preview", slug=study.slug)


@staff_member_required
def preview_feedback_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The feedback a rater gets after the practice item just answered."""
    study = _study(request, slug)
    walk = _walk(request, study)
    practice = (walk or {}).get("practice") or {}
    last = (walk or {}).get("position", 0) - 1
    if walk is None or last < 0 or practice.get("position") != last:
        return redirect("annotation:preview", slug=study.slug)
    slot = _slot(study, walk, last)
    if slot is None or slot.kind != AssignmentSlot.Kind.CALIBRATION:
        return redirect("annotation:preview", slug=study.slug)
    _speak(study)
    feedback = preview_feedback(study, slot, practice["answers"], _criteria(study))
    return render(request, "annotation/preview_feedback.html",
                  {"study": study, "feedback": feedback})


@staff_member_required
def preview_media(request: HttpRequest, slug: str, media_id: int) -> HttpResponseBase:
    """A media file of the study, for its researchers (the preview and the judgment browser):
    a file of another study is a 404."""
    study = _study(request, slug)
    media = get_object_or_404(ItemMedia, pk=media_id, item__study=study)
    if not media.file:
        raise Http404("No such media.")
    return media_response(request, media)
