"""Building a study's seats and slots from its design, opening it, and exporting the design."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from kit.bulk import rows_insert

from ..audit import SYSTEM, audit_export, audit_record
from ..design import (
    DesignError,
    TargetCell,
    crossed,
    latin_square,
    order_seat,
    pairwise,
    seat_seed,
    split_list,
    tuples,
)
from ..models import (
    Assignment,
    AssignmentSlot,
    AuditEvent,
    Output,
    Study,
)
from ..selectors import design_write_csv
from .checks import (
    TUPLE_DESIGNS,
    study_raise_if_invalid,
    tuple_size_of,
)
from .studies import (
    status_change,
)

SLOT_BATCH_SIZE = 5000


# Keyed by the design's stored value (Study.design reads as a plain str).
BUILDERS: dict[str, Callable[[Sequence[str], Sequence[str]], list[list[TargetCell]]]] = {
    Study.Design.LATIN_SQUARE: latin_square,
    Study.Design.CROSSED: crossed,
    Study.Design.PAIRWISE: pairwise,
    # Adaptive seats are built as raters arrive (evalstudy.services.adaptive); the preview of
    # one shows the pairwise design's cells, which look the same to a rater.
    Study.Design.ADAPTIVE: pairwise,
}


@transaction.atomic
def study_build_assignments(*, study: Study, actor: Any = None, source: str = SYSTEM) -> int:
    """(Re)build every seat and slot of `study` from its design; returns the number of seats.

    Refused once any seat has a rater: rebuilding would reshuffle what people already rated.
    Audited as "build" (`actor`, `source`: see evalstudy.audit).
    """
    study = Study.objects.select_for_update().get(pk=study.pk)
    seats = assignments_build(study)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.BUILD, target=study,
                 changes={"seats": seats})
    return seats


def assignments_build(study: Study) -> int:
    """`study_build_assignments` without its event; the caller holds the study's row lock."""
    if study.assignments.filter(rater__isnull=False, source=Assignment.Source.DESIGN).exists():
        raise ValidationError(
            "Seats of this study already have raters; its design can no longer be rebuilt."
        )
    study_raise_if_invalid(study)
    study.assignments.filter(source=Assignment.Source.DESIGN).delete()
    if study.design == Study.Design.ADAPTIVE:
        return 0  # seats are built as raters arrive (evalstudy.services.adaptive)

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
                elif slot.control is None:  # ordering gives each control slot its control
                    raise ValueError(f"seat {seat_id}: a {slot.kind} slot names no control")
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


@transaction.atomic
def study_open(*, study: Study, actor: Any = None, source: str = SYSTEM) -> Study:
    """Validate, build the design if it has no seats yet, and let raters in. Audited as "open"
    with the status change; opening an open study changes and records nothing."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    if study.status == Study.Status.OPEN:
        return study
    study_raise_if_invalid(study)
    if study.design == Study.Design.ADAPTIVE:
        from .adaptive import plan_register

        plan_register(study=study, actor=actor, source=source)
    elif not study.assignments.filter(source=Assignment.Source.DESIGN).exists():
        assignments_build(study)
    status_change(study, Study.Status.OPEN, actor, source, AuditEvent.Action.OPEN)
    return study


def design_export(*, study: Study, stream: IO[str], file: str = "", actor: Any = None,
                  source: str = SYSTEM) -> int:
    """Write every seat's slots as CSV to `stream` (`design_write_csv`); returns the rows.
    Audited as "export" with the row count and `file` (blank: a download or stdout)."""
    rows = design_write_csv(study, stream)
    audit_export(actor=actor, source=source, what="design", fmt="csv", target=study, file=file,
                 rows=rows)
    return rows
