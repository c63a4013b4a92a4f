"""Read-only queries over studies and designs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from kit.csvsafe import SafeDictWriter

from .models import AssignmentSlot, Study

DESIGN_COLUMNS = (
    "list", "position", "item", "system", "kind", "system_b", "design_list", "part", "replica",
    "state",
)


def design_rows(study: Study) -> Iterator[dict[str, object]]:
    """Every seat's slots in order: `list` is the seat, `item`/`system` what it shows.

    For pairwise slots `system` is the output shown as A and `system_b` the one shown as B;
    calibration and attention slots name their control item in `item`. Expired seats (whose
    unjudged slots moved to a replacement) are left out.
    """
    slots = (
        AssignmentSlot.objects.filter(assignment__study=study, assignment__seat_index__isnull=False)
        .exclude(assignment__state="expired")
        .order_by("assignment__seat_index", "position")
        .values_list(
            "assignment__seat_index", "position", "kind", "output__item__external_id",
            "output__system__name", "output_b__system__name", "calibration_item__key",
            "attention_check__key", "assignment__list_index", "assignment__part_index",
            "assignment__replica", "assignment__state",
        )
        .iterator(chunk_size=5000)
    )
    for (seat, position, kind, item, system, system_b, calibration, attention, list_index,
         part, replica, state) in slots:
        yield {
            "list": seat, "position": position, "item": item or calibration or attention,
            "system": system or "", "kind": kind, "system_b": system_b or "",
            "design_list": list_index, "part": part, "replica": replica, "state": state,
        }


def design_write_csv(study: Study, stream: IO[str]) -> int:
    """Write `design_rows` as CSV to `stream`; returns the number of rows."""
    writer = SafeDictWriter(stream, fieldnames=DESIGN_COLUMNS)
    writer.writeheader()
    count = 0
    for row in design_rows(study):
        writer.writerow(row)
        count += 1
    return count
