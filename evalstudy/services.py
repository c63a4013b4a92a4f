"""Services that change studies and their designs. Keyword-only arguments, one transaction each.

Concurrency: `assignment_claim` is the only place seats change hands. It locks the rater row
(so one rater's parallel requests get one seat) and picks a seat with
`SELECT ... FOR UPDATE SKIP LOCKED` (so two raters never get the same seat and never wait on
each other). On SQLite, which has no row locks, the database-wide write lock serialises claims.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import IO, Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from kit.audit import instance_changes, model_snapshot
from kit.bulk import rows_insert

from . import criteria as rules
from .audit import SYSTEM, audit_export, audit_record
from .design import (
    DesignError,
    crossed,
    latin_square,
    order_seat,
    pairwise,
    seat_seed,
    split_list,
    tuples,
)
from .models import (
    Assignment,
    AssignmentSlot,
    AttentionCheck,
    AuditEvent,
    CalibrationItem,
    Criterion,
    Enrollment,
    Item,
    ItemMedia,
    Output,
    Rater,
    Study,
    StudyCollaborator,
    System,
)
from .selectors import design_write_csv
from .spec.limits import SETTING_BOUNDS, SpecLimits, study_setting_problems
from .spec.study import show_if_problems

SLOT_BATCH_SIZE = 5000
Row = TypeVar("Row", System, Criterion)
BUILDERS = {
    Study.Design.LATIN_SQUARE: latin_square,
    Study.Design.CROSSED: crossed,
    Study.Design.PAIRWISE: pairwise,
    # Adaptive seats are built as raters arrive (evalstudy.adaptive); the preview of one shows
    # the pairwise design's cells, which look the same to a rater.
    Study.Design.ADAPTIVE: pairwise,
}
TUPLE_DESIGNS = (Study.Design.RANKING, Study.Design.BEST_WORST)
# The kind of criterion each tuple design is for, and the other way round.
TUPLE_KIND_OF = {Study.Design.RANKING: rules.RANKING, Study.Design.BEST_WORST: rules.BEST_WORST}
BEST_WORST_DEFAULT_SIZE = 4
_MAX_LISTED = 10
LEASE_SLACK = dt.timedelta(minutes=1)


class StudyNotOpen(Exception):
    """The study does not accept raters (draft or closed)."""


class StudyFull(Exception):
    """Every seat is taken: the redundancy target is met."""


class AssignmentExpired(Exception):
    """The rater's lease ran out and their unjudged slots went to another rater."""


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def tuple_size_of(design: str, tuple_size: int | None, n_systems: int) -> int:
    """How many outputs a slot of a ranking or best-worst design shows: the study's
    `tuple_size`, else every system (ranking) or 4 (best-worst scaling)."""
    if tuple_size:
        return tuple_size
    return n_systems if design == Study.Design.RANKING else BEST_WORST_DEFAULT_SIZE


def design_slot_count(
    *, design: str, n_items: int, n_systems: int, ratings_per_output: int,
    items_per_rater: int | None, n_calibration: int, attention_every: int, n_attention: int,
    tuple_size: int | None = None,
) -> int:
    """How many slots `study_build_assignments` would write, counted without building them
    (the builders' arithmetic: see evalstudy.design). Every list holds each item once (crossed:
    with every system), is split into parts of at most `items_per_rater` items, and each part
    gets `ratings_per_output` seats of its targets, the calibration items and an attention
    check per `attention_every` targets."""
    if n_items == 0 or n_systems == 0:
        return 0
    if design == Study.Design.PAIRWISE:
        lists, cells_per_item = n_systems * (n_systems - 1), 1  # ordered pairs
    elif design in TUPLE_DESIGNS:
        size = tuple_size_of(design, tuple_size, n_systems)
        if size > n_systems:
            return 0
        lists, cells_per_item = math.comb(n_systems, size) * size, 1  # oriented tuples
    elif design == Study.Design.CROSSED:
        lists, cells_per_item = 1, n_systems
    else:
        lists, cells_per_item = n_systems, 1
    parts = 1 if not items_per_rater or items_per_rater >= n_items else math.ceil(
        n_items / items_per_rater)
    base, extra = divmod(n_items, parts)  # `extra` parts hold one item more (split_list)
    per_list = 0
    for size, count in ((base + 1, extra), (base, parts - extra)):
        targets = size * cells_per_item
        checks = targets // attention_every if attention_every and n_attention else 0
        per_list += count * (targets + checks + n_calibration)
    return lists * ratings_per_output * per_list


def study_validate(*, study: Study, limits: SpecLimits | None = None) -> list[str]:
    """Everything that stops `study` from being opened, as sentences a researcher can act on.

    Includes the bounds of `limits` (default: the settings): counts, settings and the number
    of slots the design would have, so an oversized design is refused before anything is built,
    whichever way its rows were written (spec, admin, API, a script).
    """
    from .importers import spec_limits

    limits = limits or spec_limits()
    problems: list[str] = []
    systems = list(study.systems.all())
    # In the order raters answer them: a condition may name an earlier criterion only.
    criteria = list(study.criteria.select_related("show_if_criterion").order_by("order", "id"))
    n_items = study.items.count()
    for what, count, limit, setting in (
        ("items", n_items, limits.max_items, "EVALSTUDY_MAX_ITEMS"),
        ("systems", len(systems), limits.max_systems, "EVALSTUDY_MAX_SYSTEMS"),
        ("criteria", len(criteria), limits.max_criteria, "EVALSTUDY_MAX_CRITERIA"),
    ):
        if count > limit:
            problems.append(f"The study has {count:,} {what}; at most {limit:,} are allowed "
                            f"({setting}).")
    values = {name: getattr(study, name) for name in SETTING_BOUNDS}
    for name, problem in study_setting_problems(values, limits).items():
        problems.append(f"{name} {problem}.")
    if not criteria:
        problems.append("The study has no criteria: add at least one question for raters.")
    if not systems:
        problems.append("The study has no systems.")
    if n_items == 0:
        problems.append("The study has no items.")
    if study.design in (Study.Design.PAIRWISE, Study.Design.ADAPTIVE):
        if study.design == Study.Design.ADAPTIVE:
            from .adaptive import plan_problems

            problems += plan_problems(study)
        if len(systems) < 2:
            problems.append("A pairwise design needs at least 2 systems.")
        if criteria and not any(c.kind == rules.PAIRWISE for c in criteria):
            problems.append("A pairwise design needs a pairwise (A/B) criterion.")
        if any(c.kind == rules.SPAN for c in criteria):
            problems.append("Span criteria mark errors in one output: they need a design "
                            "that shows one output at a time, not pairwise.")
    elif any(c.kind == rules.PAIRWISE for c in criteria):
        problems.append(
            f"Pairwise criteria need the pairwise design; this study is {study.design}."
        )
    problems += _tuple_design_problems(study, criteria, len(systems))
    if study.crowd_platform != "none" and not study.crowd_no_codes and not (
            study.completion_code and study.screen_out_code):
        missing = " and ".join(name for name in ("completion_code", "screen_out_code")
                               if not getattr(study, name))
        problems.append(
            f"A crowd study ({study.crowd_platform}) needs its {missing}: without them a "
            "participant finishes (or is screened out) with no code to give the platform. "
            "Set them, or crowd_no_codes if the platform pays without codes, or crowd_platform "
            "none for personal links only.")
    if sum(c.kind == rules.SPAN for c in criteria) > 1:
        problems.append("A study takes one span criterion: raters mark each error once, with "
                        "its category and severity.")
    missing = (
        Item.objects.filter(study=study)
        .annotate(n_outputs=Count("outputs", filter=Q(outputs__system__study=study)))
        .filter(n_outputs__lt=len(systems))
    )
    if systems and missing.exists():
        have = {
            (item_id, system_id)
            for item_id, system_id in Output.objects.filter(item__in=missing).values_list(
                "item_id", "system_id"
            )
        }
        pairs = [
            f"{item.external_id}/{system.name}"
            for item in missing.order_by("id")[:_MAX_LISTED + 1]
            for system in systems
            if (item.pk, system.pk) not in have
        ]
        problems.append(
            f"{missing.count()} item(s) lack an output for some system (item/system): "
            f"{_listing(pairs)}."
        )
    chain = show_if_problems([
        (c.key, c.show_if_criterion.key if c.show_if_criterion_id is not None
         and c.show_if_criterion.study_id == study.pk else None)
        for c in criteria
    ])
    for position, criterion in enumerate(criteria):
        for problem in rules.criterion_problems(
                {name: getattr(criterion, name) for name in rules.RULE_FIELDS}):
            problems.append(f"Criterion {criterion.key!r}: {problem}.")
        parent = criterion.show_if_criterion
        if parent is not None:
            if parent.study_id != study.pk or parent.pk == criterion.pk:
                problems.append(f"Criterion {criterion.key!r}: show_if names an invalid criterion.")
            elif position in chain:
                problems.append(f"Criterion {criterion.key!r}: show_if {chain[position]}.")
            elif not criterion.show_if_values:
                problems.append(f"Criterion {criterion.key!r}: show_if lists no values.")
            else:
                for value in criterion.show_if_values:
                    try:
                        parent.rule.normalise(value)
                    except ValueError as error:
                        problems.append(
                            f"Criterion {criterion.key!r}: show_if value for "
                            f"{parent.key!r}: {error}."
                        )
    by_key = {c.key: c for c in criteria}
    controls: list[CalibrationItem | AttentionCheck] = [
        *study.calibration_items.all(), *study.attention_checks.all()
    ]
    for control in controls:
        label = "Calibration item" if isinstance(control, CalibrationItem) else "Attention check"
        for key, value in (control.expected or {}).items():
            if key not in by_key:
                problems.append(f"{label} {control.key!r}: expected answer for unknown "
                                f"criterion {key!r}.")
                continue
            if by_key[key].kind == rules.SPAN:
                problems.append(f"{label} {control.key!r}: expected {key}: span criteria "
                                "take no expected answer (there is no single right marking).")
                continue
            try:
                by_key[key].rule.normalise_expected(value)
            except ValueError as error:
                problems.append(f"{label} {control.key!r}: expected {key}: {error}.")
        if study.design in (Study.Design.PAIRWISE, Study.Design.ADAPTIVE) and \
                not control.text_b:
            problems.append(f"{label} {control.key!r}: a pairwise study needs output B too.")
    if study.attention_check_every and not study.attention_checks.exists():
        problems.append("attention_check_every is set but the study has no attention checks.")
    if not problems:  # the count is meaningful (and its inputs bounded) for a valid study only
        slots = design_slot_count(
            design=study.design, n_items=n_items, n_systems=len(systems),
            ratings_per_output=study.ratings_per_output, items_per_rater=study.items_per_rater,
            n_calibration=study.calibration_items.count(),
            attention_every=study.attention_check_every,
            n_attention=study.attention_checks.count(), tuple_size=study.tuple_size,
        )
        if slots > limits.max_design_slots:
            cells = ("ordered pairs of systems" if study.design == Study.Design.PAIRWISE
                     else "systems")
            problems.append(
                f"The design would have {slots:,} rater slots (items x {cells} x "
                "ratings_per_output, with the calibration items and attention checks of every "
                f"seat), over the limit of {limits.max_design_slots:,} "
                "(EVALSTUDY_MAX_DESIGN_SLOTS): lower ratings_per_output or split the study."
            )
    return problems


def attention_slots_per_seat(*, design: str, n_items: int, n_systems: int,
                             items_per_rater: int | None, attention_every: int) -> int:
    """The most attention-check slots one seat gets: one per `attention_every` targets of its
    part of the list (the arithmetic of `design_slot_count`)."""
    if not attention_every or n_items == 0 or n_systems == 0:
        return 0
    cells = n_systems if design == Study.Design.CROSSED else 1
    parts = 1 if not items_per_rater or items_per_rater >= n_items else math.ceil(
        n_items / items_per_rater)
    return math.ceil(n_items / parts) * cells // attention_every


def study_warnings(*, study: Study) -> list[str]:
    """What is allowed but probably not meant, shown when the study is saved or opened (it
    does not stop the study from opening): an attention check a seat would show twice,
    outputs that may reveal their system (the blindness audit)."""
    n_attention = study.attention_checks.count()
    per_seat = attention_slots_per_seat(
        design=study.design, n_items=study.items.count(), n_systems=study.systems.count(),
        items_per_rater=study.items_per_rater, attention_every=study.attention_check_every)
    warning = rules.attention_repeats(checks_per_seat=per_seat, n_attention=n_attention)
    return ([warning] if warning else []) + _blindness_warnings(study)


def _blindness_warnings(study: Study) -> list[str]:
    """Outputs whose text may tell raters which system wrote them (evalstudy.blindness): a
    warning, not a refusal; the researcher reads the hits on the audit page and decides."""
    from .selectors import study_blindness_audit

    flagged = len(study_blindness_audit(study).flagged_outputs)
    if not flagged:
        return []
    return [f"{flagged} output{'s' if flagged != 1 else ''} may reveal "
            f"{'their' if flagged != 1 else 'its'} system (see the blindness audit, "
            f"/studies/{study.slug}/blindness/)."]


def _tuple_design_problems(study: Study, criteria: list[Criterion], n_systems: int
                           ) -> list[str]:
    """What a ranking or best-worst design needs, and where their criteria may be used."""
    problems = []
    wanted = TUPLE_KIND_OF.get(study.design)
    for kind in (rules.RANKING, rules.BEST_WORST):
        if kind != wanted and any(c.kind == kind for c in criteria):
            design = "ranking" if kind == rules.RANKING else "best_worst"
            problems.append(f"{kind.replace('_', '-').capitalize()} criteria need the {design} "
                            f"design; this study is {study.design}.")
    if wanted is None:
        if study.tuple_size is not None:
            problems.append("tuple_size applies to the ranking and best_worst designs only.")
        return problems
    if criteria and not any(c.kind == wanted for c in criteria):
        problems.append(f"A {study.design} design needs a {wanted} criterion.")
    # Every other question would be about one output while the rater sees several (and be
    # stored as output A's): only the design's own question, and free-text comments.
    per_output = sorted({c.key for c in criteria if c.kind not in (wanted, rules.TEXT)})
    if per_output:
        problems.append(f"A {study.design} design shows several outputs at once: its questions "
                        f"are a {wanted} one and free-text comments; "
                        f"{', '.join(repr(k) for k in per_output)} would judge one output.")
    if ItemMedia.objects.filter(item__study=study, output__isnull=False).exists():
        problems.append(f"The {study.design} design plays an item's media, not each output's: "
                        "remove the outputs' media (or use another design).")
    size = tuple_size_of(study.design, study.tuple_size, n_systems)
    if n_systems < size or size < 2:
        problems.append(f"The {study.design} design shows {size} outputs at once and needs at "
                        f"least that many systems (it has {n_systems}).")
    if study.calibration_items.exists() or study.attention_checks.exists():
        problems.append(f"Practice items and attention checks show one or two outputs: the "
                        f"{study.design} design does not take them yet.")
    return problems


def _raise_if_invalid(study: Study) -> None:
    problems = study_validate(study=study)
    if problems:
        raise ValidationError(problems)


@transaction.atomic
def study_build_assignments(*, study: Study, actor: Any = None, source: str = SYSTEM) -> int:
    """(Re)build every seat and slot of `study` from its design; returns the number of seats.

    Refused once any seat has a rater: rebuilding would reshuffle what people already rated.
    Audited as "build" (`actor`, `source`: see evalstudy.audit).
    """
    study = Study.objects.select_for_update().get(pk=study.pk)
    seats = _assignments_build(study)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.BUILD, target=study,
                 changes={"seats": seats})
    return seats


def _assignments_build(study: Study) -> int:
    """`study_build_assignments` without its event; the caller holds the study's row lock."""
    if study.assignments.filter(rater__isnull=False, source=Assignment.Source.DESIGN).exists():
        raise ValidationError(
            "Seats of this study already have raters; its design can no longer be rebuilt."
        )
    _raise_if_invalid(study)
    study.assignments.filter(source=Assignment.Source.DESIGN).delete()
    if study.design == Study.Design.ADAPTIVE:
        return 0  # seats are built as raters arrive (evalstudy.adaptive)

    items = list(study.items.order_by("id").values_list("id", "external_id"))
    systems = list(study.systems.order_by("id").values_list("id", "name"))
    item_key = {pk: str(pk) for pk, _ in items}
    system_key = {pk: str(pk) for pk, _ in systems}
    output_id = {
        (str(item_id), str(system_id)): pk
        for pk, item_id, system_id in Output.objects.filter(item__study=study).values_list(
            "id", "item_id", "system_id"
        )
    }
    calibration = {str(pk): pk for pk in study.calibration_items.values_list("id", flat=True)}
    attention = {str(pk): pk for pk in study.attention_checks.values_list("id", flat=True)}
    try:
        if study.design in TUPLE_DESIGNS:
            lists = tuples(list(item_key.values()), list(system_key.values()),
                           tuple_size_of(study.design, study.tuple_size, len(systems)))
        else:
            lists = BUILDERS[study.design](list(item_key.values()), list(system_key.values()))
    except DesignError as error:
        raise ValidationError(str(error)) from error

    seats: list[Assignment] = []
    parts = []
    for list_index, cells in enumerate(lists):
        for part_index, part in enumerate(split_list(cells, study.items_per_rater)):
            for replica in range(study.ratings_per_output):
                seat_index = len(seats)
                seats.append(Assignment(
                    study=study, seat_index=seat_index, list_index=list_index,
                    part_index=part_index, replica=replica,
                    seed=seat_seed(study.seed, seat_index),
                ))
                parts.append(part)
    Assignment.objects.bulk_create(seats, batch_size=SLOT_BATCH_SIZE)

    def slot_rows() -> Iterable[tuple[Any, ...]]:
        # Each seat is ordered as its rows are streamed, so ordering the next seat overlaps
        # with the database writing the last one's.
        for seat, part in zip(seats, parts, strict=True):
            seat_id = seat.pk
            order = order_seat(
                part, calibration=list(calibration), attention_checks=list(attention),
                attention_every=study.attention_check_every, seed=seat.seed,
                randomise=study.randomise_order,
            )
            for position, slot in enumerate(order):
                output = output_b = calibration_item = attention_check = None
                shown: list[int] = []
                if slot.cell is not None:
                    output = output_id[(slot.cell.item, slot.cell.system)]
                    if slot.cell.system_b is not None:
                        output_b = output_id[(slot.cell.item, slot.cell.system_b)]
                    shown = [output_id[(slot.cell.item, system)] for system in slot.cell.shown]
                elif slot.kind == AssignmentSlot.Kind.CALIBRATION:
                    calibration_item = calibration[slot.control]
                else:
                    attention_check = attention[slot.control]
                yield (seat_id, position, slot.kind, output, output_b, calibration_item,
                       attention_check, shown)

    # Plain tuples, not instances: COPY on PostgreSQL (kit.bulk), in this transaction.
    rows_insert(model=AssignmentSlot, rows=slot_rows(), batch_size=SLOT_BATCH_SIZE, fields=(
        "assignment_id", "position", "kind", "output_id", "output_b_id", "calibration_item_id",
        "attention_check_id", "shown_outputs",
    ))
    return len(seats)


def _status_change(study: Study, status: str, actor: Any, source: str, action: str) -> None:
    """Set the locked `study`'s status and record the change (nothing when it had it)."""
    before = study.status
    if before == status:
        return
    study.status = status
    study.save(update_fields=["status", "updated_at"])
    audit_record(actor=actor, source=source, action=action, target=study,
                 changes={"status": [before, status]})


@transaction.atomic
def study_open(*, study: Study, actor: Any = None, source: str = SYSTEM) -> Study:
    """Validate, build the design if it has no seats yet, and let raters in. Audited as "open"
    with the status change; opening an open study changes and records nothing."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    if study.status == Study.Status.OPEN:
        return study
    _raise_if_invalid(study)
    if study.design == Study.Design.ADAPTIVE:
        from .adaptive import plan_register

        plan_register(study=study, actor=actor, source=source)
    elif not study.assignments.filter(source=Assignment.Source.DESIGN).exists():
        _assignments_build(study)
    _status_change(study, Study.Status.OPEN, actor, source, AuditEvent.Action.OPEN)
    return study


@transaction.atomic
def study_close(*, study: Study, actor: Any = None, source: str = SYSTEM) -> Study:
    """Stop handing out seats; raters with a seat can no longer be served new slots. Audited
    as "close" with the status change."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    _status_change(study, Study.Status.CLOSED, actor, source, AuditEvent.Action.CLOSE)
    return study


def design_export(*, study: Study, stream: IO[str], file: str = "", actor: Any = None,
                  source: str = SYSTEM) -> int:
    """Write every seat's slots as CSV to `stream` (`design_write_csv`); returns the rows.
    Audited as "export" with the row count and `file` (blank: a download or stdout)."""
    rows = design_write_csv(study, stream)
    audit_export(actor=actor, source=source, what="design", fmt="csv", target=study, file=file,
                 rows=rows)
    return rows


# --- study configuration ----------------------------------------------------------------------
class StudyNotDraft(ValidationError):
    """The study has left the draft state: its settings, systems and criteria are fixed."""


def _locked_draft(study: Study) -> Study:
    locked = Study.objects.select_for_update().get(pk=study.pk)
    if locked.status != Study.Status.DRAFT:
        raise StudyNotDraft(f"Study {locked.slug!r} is {locked.status}; only a draft study "
                            "can change.")
    return locked


@transaction.atomic
def study_create(*, owner: Any, fields: dict[str, Any], actor: Any = None,
                 source: str = SYSTEM) -> Study:
    """A new draft study owned by `owner`, from already validated `fields`. Audited as
    "create"."""
    study = Study.objects.create(owner=owner, **fields)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, target=study)
    return study


@transaction.atomic
def study_update(*, study: Study, fields: dict[str, Any], actor: Any = None,
                 source: str = SYSTEM) -> Study:
    """Change a draft study's settings (already validated `fields`); raises StudyNotDraft once
    it is open or closed. Audited as "update" with each changed field (nothing when none did).
    """
    study = _locked_draft(study)
    before = model_snapshot(study)
    for name, value in fields.items():
        setattr(study, name, value)
    study.save()
    changes = instance_changes(before, study)
    if changes:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, target=study,
                     changes=changes)
    return study


def _draft_row_create(model: type[Row], study: Study, fields: dict[str, Any], actor: Any,
                      source: str) -> Row:
    study = _locked_draft(study)
    row = model.objects.create(study=study, **fields)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                 target=row, changes=instance_changes(None, row))
    return row


@transaction.atomic
def system_create(*, study: Study, fields: dict[str, Any], actor: Any = None,
                  source: str = SYSTEM) -> System:
    """Add a system to a draft study (StudyNotDraft otherwise). Audited as "create"."""
    return _draft_row_create(System, study, fields, actor, source)


@transaction.atomic
def criterion_create(*, study: Study, fields: dict[str, Any], actor: Any = None,
                     source: str = SYSTEM) -> Criterion:
    """Add a criterion (already checked against the study's rules) to a draft study
    (StudyNotDraft otherwise). Audited as "create"."""
    return _draft_row_create(Criterion, study, fields, actor, source)


@transaction.atomic
def collaborator_set(*, study: Study, user: Any, role: str, actor: Any = None,
                     source: str = SYSTEM) -> StudyCollaborator:
    """Give `user` the `role` (editor or viewer) on `study`, or change it. The owner is no
    collaborator (ValidationError). Audited as "update" with the role before and after."""
    if user.pk == study.owner_id:
        raise ValidationError({"username": ["this user owns the study"]})
    row = StudyCollaborator.objects.select_for_update().filter(study=study, user=user).first()
    before = row.role if row is not None else None
    if row is None:
        row = StudyCollaborator.objects.create(study=study, user=user, role=role)
    elif row.role != role:
        row.role = role
        row.save(update_fields=["role"])
    if before != role:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                     target=row, changes={"collaborator": [
                         None if before is None else f"{user.get_username()}:{before}",
                         f"{user.get_username()}:{role}"]})
    return row


@transaction.atomic
def collaborator_remove(*, study: Study, username: str, actor: Any = None,
                        source: str = SYSTEM) -> bool:
    """Take `username`'s role on `study` away; returns whether they had one. Audited as
    "delete"."""
    deleted, _ = StudyCollaborator.objects.filter(study=study,
                                                  user__username=username).delete()
    if deleted:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE, study=study,
                     changes={"collaborator": [username, None]})
    return bool(deleted)


def _lease_end(study: Study, now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(minutes=study.lease_minutes)


def _has_open_slots() -> Exists:
    """Whether a seat still has slots to judge: a finished seat is never handed on."""
    return Exists(
        AssignmentSlot.objects.filter(assignment=OuterRef("pk"), completed_at__isnull=True)
    )


def hand_on_seat(seat: Assignment, *, every_slot: bool = False) -> Assignment:
    """Expire `seat` and open a replacement, the same seat of the design, holding fresh copies
    of its slots in the same order: the unjudged ones and the calibration items (an abandoned
    seat: the rater keeps what they judged, and their judgments count towards the outputs'
    redundancy), or with `every_slot` all of them (a seat reopened to someone else after its
    rater was excluded). Precondition: `seat` is locked by the caller."""
    seat.state = Assignment.State.EXPIRED
    seat.save(update_fields=["state"])
    replacement = Assignment.objects.create(
        study_id=seat.study_id, source=seat.source, seat_index=seat.seat_index,
        list_index=seat.list_index, part_index=seat.part_index, replica=seat.replica,
        seed=seat.seed, replaces=seat,
    )
    carried = seat.slots.all() if every_slot else seat.slots.filter(
        Q(completed_at__isnull=True) | Q(kind=AssignmentSlot.Kind.CALIBRATION))
    AssignmentSlot.objects.bulk_create(
        AssignmentSlot(
            assignment=replacement, position=position, kind=slot.kind, output_id=slot.output_id,
            output_b_id=slot.output_b_id, calibration_item_id=slot.calibration_item_id,
            attention_check_id=slot.attention_check_id, shown_outputs=slot.shown_outputs,
        )
        for position, slot in enumerate(carried.order_by("position"))
    )
    return replacement


def _hand_on(seat: Assignment, now: dt.datetime) -> Assignment:
    """Expire an abandoned seat and open a replacement holding its unjudged slots (and the
    calibration items, repeated). Precondition: `seat` is locked by the caller."""
    return hand_on_seat(seat)


def _existing_seat(study: Study, rater: Rater) -> Assignment | None:
    existing = Assignment.objects.filter(study=study, rater=rater).first()
    if existing is not None and existing.state == Assignment.State.EXPIRED:
        raise AssignmentExpired(
            "Your time on this study ran out and your remaining items went to another "
            "rater. What you submitted is kept."
        )
    return existing


def lease_renew(seat: Assignment, study: Study, now: dt.datetime) -> bool:
    """Push the seat's lease to `now + lease_minutes`, unless it was renewed within the last
    minute (a write per page view buys nothing). Returns whether the field changed."""
    target = _lease_end(study, now)
    slack = min(LEASE_SLACK, dt.timedelta(minutes=study.lease_minutes) / 10)
    if seat.lease_expires_at is not None and seat.lease_expires_at > target - slack:
        return False
    seat.lease_expires_at = target
    return True


def assignment_claim(*, study: Study, rater: Rater, now: dt.datetime | None = None) -> Assignment:
    """The rater's seat in `study`, claiming the next free one if they have none.

    Free seats are handed out in (list, part, replica) order, which completes the outputs of one
    list before starting the next. A seat whose lease expired counts as free. Idempotent: the
    same rater always gets the same seat. Raises StudyNotOpen, StudyFull, AssignmentExpired.
    """
    now = now or timezone.now()
    # The common case (the rater already has a seat) needs no lock.
    existing = _existing_seat(study, rater)
    if existing is not None:
        return existing
    with transaction.atomic():
        # Serialise one rater's parallel first requests, then look again under the lock.
        Rater.objects.select_for_update().filter(pk=rater.pk).first()
        existing = _existing_seat(study, rater)
        if existing is not None:
            return existing
        study = Study.objects.get(pk=study.pk)
        if study.status != Study.Status.OPEN:
            raise StudyNotOpen(f"Study {study.slug} is not open.")
        seat = (
            Assignment.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(study=study, source=Assignment.Source.DESIGN)
            .annotate(has_open_slots=_has_open_slots())
            .filter(
                Q(state=Assignment.State.OPEN)
                | Q(state=Assignment.State.ACTIVE, lease_expires_at__lt=now, has_open_slots=True)
            )
            .order_by("list_index", "part_index", "replica", "id")
            .first()
        )
        if seat is None and study.design == Study.Design.ADAPTIVE:
            from .adaptive import adaptive_seat_create

            seat = adaptive_seat_create(study=study, now=now)
        if seat is None:
            raise StudyFull(f"Study {study.slug} has no free seat.")
        if seat.state == Assignment.State.ACTIVE:
            seat = _hand_on(seat, now)
        seat.rater = rater
        seat.state = Assignment.State.ACTIVE
        seat.claimed_at = now
        seat.lease_expires_at = _lease_end(study, now)
        seat.save(update_fields=["rater", "state", "claimed_at", "lease_expires_at"])
        return seat


def assignment_next(
    *, study: Study, rater: Rater, now: dt.datetime | None = None
) -> AssignmentSlot | None:
    """The rater's next slot to judge (claiming a seat if needed); None when their list is done.

    Marks the slot served (time on task starts at the first serve) and renews the lease.
    Raises NotEnrolled unless the study admitted the rater, StudyNotOpen, StudyFull,
    AssignmentExpired.
    """
    now = now or timezone.now()
    enrollment_of(study=study, rater=rater)
    seat = assignment_claim(study=study, rater=rater, now=now)
    with transaction.atomic():
        seat = (Assignment.objects.select_for_update(of=("self",)).select_related("study")
                .get(pk=seat.pk))
        if seat.state == Assignment.State.EXPIRED:
            raise AssignmentExpired("Your time on this study ran out.")
        slot = seat.slots.filter(completed_at__isnull=True).order_by("position").first()
        if slot is None:
            if seat.state != Assignment.State.DONE:
                seat.state = Assignment.State.DONE
                seat.completed_at = now
                seat.save(update_fields=["state", "completed_at"])
            return None
        if seat.study.status != Study.Status.OPEN:
            raise StudyNotOpen(f"Study {seat.study.slug} is not open.")
        if slot.served_at is None:
            slot.served_at = now
            slot.save(update_fields=["served_at"])
        if lease_renew(seat, seat.study, now):
            seat.save(update_fields=["lease_expires_at"])
        return slot


def assignments_expire_leases(*, now: dt.datetime | None = None) -> int:
    """Hand on every active seat whose lease ran out; returns how many. Safe to run twice."""
    now = now or timezone.now()
    handed_on = 0
    with transaction.atomic():
        stale = (
            Assignment.objects.select_for_update(skip_locked=True)
            .filter(state=Assignment.State.ACTIVE, lease_expires_at__lt=now)
            .annotate(has_open_slots=_has_open_slots())
            .filter(has_open_slots=True)
        )
        for seat in stale:
            _hand_on(seat, now)
            handed_on += 1
    return handed_on


# --- who may take part -----------------------------------------------------------------------
class NotEnrolled(Exception):
    """The rater was not admitted to the study: for them it does not exist (404)."""


def enrollment_of(*, study: Study, rater: Rater) -> Enrollment:
    """The rater's enrollment in `study`; NotEnrolled unless the study admitted them.

    The one gate every rater page and rater API call goes through: a rater reaches a study
    they were invited to (personal link, API, admin) or admitted to through that study's crowd
    entry URL, and nothing else. A rater scoped to another study never passes, whatever rows
    exist (defence in depth against a row pointing the wrong way)."""
    if rater.study_id is not None and rater.study_id != study.pk:
        raise NotEnrolled(f"Rater {rater.pk} does not belong to study {study.slug}.")
    enrollment = Enrollment.objects.filter(study=study, rater=rater).first()
    if enrollment is None or enrollment.invitation_pending:
        raise NotEnrolled(f"Rater {rater.pk} is not enrolled in study {study.slug}.")
    return enrollment


def _fails_screening(study: Study, rater: Rater) -> bool:
    """Screening rule: a crowd participant who took part in an excluded study may not take this
    one. Raters are per study, so the participant is recognised by their crowd id."""
    if rater.kind != Rater.Kind.CROWD or not rater.external_id:
        return False
    # Only studies of the same owner count: screening against another owner's study would
    # tell this study's owner who took part there.
    excluded = study.excluded_studies.filter(owner_id=study.owner_id).values("pk")
    same_person = Rater.objects.filter(kind=Rater.Kind.CROWD, external_id=rater.external_id)
    return (
        Enrollment.objects.filter(study__in=excluded, rater__in=same_person).exists()
        or Assignment.objects.filter(study__in=excluded, rater__in=same_person).exists()
    )


def enrollment_stop(*, enrollment: Enrollment, reason: str,
                    now: dt.datetime | None = None) -> None:
    """Stop a participant (screening, consent declined, attention checks): their unjudged
    slots go to the next rater at once and what they submitted stays. Idempotent."""
    if enrollment.stopped_at is not None:
        return
    enrollment.stopped_at = now or timezone.now()
    enrollment.stop_reason = reason
    enrollment.save(update_fields=["stopped_at", "stop_reason"])
    assignment_withdraw(study=enrollment.study, rater=enrollment.rater, now=now)


@transaction.atomic
def enrollment_admit(*, study: Study, rater: Rater) -> tuple[Enrollment, bool]:
    """Admit `rater` to `study` (an invitation or a crowd entry); returns (enrollment, created).
    Idempotent. A new participant is screened at once (see `_fails_screening`).

    Precondition: the rater belongs to `study`, or is an account holder (whose enrollment
    waits for them to accept the invitation: `invitation_answer`)."""
    if rater.study_id is None and rater.user_id is None:
        raise ValidationError(f"Rater {rater.pk} belongs to no study and has no account.")
    if rater.study_id is not None and rater.study_id != study.pk:
        raise ValidationError(f"Rater {rater.pk} belongs to another study.")
    if not rater.is_human:
        raise ValidationError("Proxies (LLM and metric raters) are not enrolled.")
    enrollment, created = Enrollment.objects.get_or_create(
        study=study, rater=rater, defaults={"invitation_pending": rater.user_id is not None})
    if created and _fails_screening(study, rater):
        enrollment_stop(enrollment=enrollment, reason=Enrollment.StopReason.SCREENING)
    return enrollment, created


@transaction.atomic
def rater_invite(
    *, study: Study, kind: str, display_name: str = "", external_id: str = "",
    metadata: dict | None = None, user: Any = None, username: str = "", actor: Any = None,
    source: str = SYSTEM,
) -> Rater | None:
    """Invite a person to `study`.

    Without `user`: a new rater of this study with a personal entry link that works in this
    study only; returned. Raises ValidationError (a duplicate external id in the study, a
    proxy kind).

    With `user` (an account holder, the active account `username` names, or None when none
    does, so that the answer is the same): an invitation they accept or decline on their page; until
    they accept, the study does not exist for them and they are not among its raters. Returns
    None whether or not such an active account exists (no way to test usernames, nothing of
    the account shown to the inviter). The account's rater is created on its first invitation
    as an SLP (an account's kind is the installation's business, not one inviter's).

    Audited as "create": the new rater, or for an account the invitation (without the
    username, and the same event whether or not the account exists).
    """
    if kind not in Rater.HUMAN_KINDS:
        raise ValidationError(f"Invitations are for people: {', '.join(Rater.HUMAN_KINDS)}.")
    if user is not None or username:
        # Not the name typed: an account's username is personal data that every collaborator
        # reads in the trail and that erasing the account could not reach there.
        audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                     changes={"invitation": [None, "an account, by its username"]})
        if user is None or not getattr(user, "is_active", False):
            return None
        rater, _ = Rater.objects.get_or_create(
            user=user, defaults={"kind": Rater.Kind.SLP, "origin": Rater.Origin.ACCOUNT,
                                 "display_name": user.get_username()})
        if rater.is_human:
            enrollment_admit(study=study, rater=rater)
        return None
    if external_id and Rater.objects.filter(study=study, kind=kind,
                                            external_id=external_id).exists():
        raise ValidationError(f"A {kind} rater {external_id!r} is already in study {study.slug}.")
    rater = Rater.objects.create(study=study, kind=kind, external_id=external_id,
                                 display_name=display_name, metadata=metadata or {},
                                 origin=Rater.Origin.INVITED)
    enrollment_admit(study=study, rater=rater)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                 target=rater, changes={"invited": [None, study.slug]})
    return rater


@transaction.atomic
def invitation_answer(*, study: Study, rater: Rater, accept: bool) -> bool:
    """The account holder's answer to an invitation to `study`: accepting makes the study
    theirs to rate, declining removes the invitation (nothing of them stays with the study).
    Returns whether there was a pending invitation."""
    enrollment = (Enrollment.objects.select_for_update()
                  .filter(study=study, rater=rater, invitation_pending=True).first())
    if enrollment is None:
        return False
    if accept:
        enrollment.invitation_pending = False
        enrollment.save(update_fields=["invitation_pending"])
    else:
        enrollment.delete()
    return True


def assignment_withdraw(*, study: Study, rater: Rater, now: dt.datetime | None = None) -> bool:
    """Take a stopped rater's seat back now: their unjudged slots go to the next rater (as when
    a lease expires) and what they submitted stays. Returns whether a seat was handed on."""
    now = now or timezone.now()
    with transaction.atomic():
        seat = (
            Assignment.objects.select_for_update()
            .filter(study=study, rater=rater, state=Assignment.State.ACTIVE)
            .annotate(has_open_slots=_has_open_slots())
            .filter(has_open_slots=True)
            .first()
        )
        if seat is None:
            return False
        _hand_on(seat, now)
        return True


def runs_fail_stale(*, minutes: int | None = None, now: dt.datetime | None = None) -> int:
    """Mark failed every running background run (metric, analysis, proxy: any concrete
    `BackgroundRun`) whose last heartbeat is older than `minutes` (default
    EVALSTUDY_STALE_RUN_MINUTES). Returns how many were failed.

    Its worker died or its messages were lost, so nothing would ever finish it and its page
    would poll forever. One conditional UPDATE per model: a run whose heartbeat moves on
    between the read and the write is left alone. Safe to run twice.
    """
    from django.apps import apps
    from django.conf import settings
    from django.db.models.functions import Coalesce

    from kit.runs import BackgroundRun

    minutes = settings.EVALSTUDY_STALE_RUN_MINUTES if minutes is None else minutes
    now = now or timezone.now()
    cutoff = now - dt.timedelta(minutes=minutes)
    failed = 0
    for model in apps.get_models():
        if not issubclass(model, BackgroundRun):
            continue
        stale = model.objects.annotate(
            last_sign=Coalesce("heartbeat_at", "started_at", "created_at"),
        ).filter(status=BackgroundRun.Status.RUNNING, last_sign__lt=cutoff)
        for pk, last in stale.values_list("pk", "last_sign"):
            failed += model.objects.filter(
                Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff),
                pk=pk, status=BackgroundRun.Status.RUNNING,
            ).update(
                status=BackgroundRun.Status.FAILED, finished_at=now,
                error=(f"No progress for {minutes} minutes (last sign of life "
                       f"{last:%Y-%m-%d %H:%M} UTC): the worker running it stopped or lost "
                       "the task. Start the run again; finished parts are kept."),
            )
    return failed
