"""Read-only queries over studies and designs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from kit.csvsafe import SafeDictWriter

from .blindness import (
    ALIAS,
    Audit,
    OutputText,
    Skipped,
    SystemNames,
    aliases_of,
    blindness_audit,
    study_terms,
)
from .models import AssignmentSlot, Output, Study


def study_started(study: Study) -> bool:
    """Whether `study` has started: it left the draft state, or a rater holds a seat. A started
    study's items, media and design are fixed (the importers, the items grid, media uploads)."""
    return study.status != Study.Status.DRAFT or study.assignments.filter(
        rater__isnull=False
    ).exists()


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


def study_blindness_audit(study: Study) -> Audit:
    """The blindness audit (evalstudy.blindness) of the study's outputs: its systems' names
    and aliases (`metadata["aliases"]`), its identity terms, the built-in list, and each
    system's boilerplate. Two queries; read again on every call (outputs may change while
    the study is a draft)."""
    systems, skipped = [], []
    for name, metadata in study.systems.order_by("name").values_list("name", "metadata"):
        aliases, problem = aliases_of(metadata)
        if problem:
            skipped.append(Skipped("aliases", ALIAS, name, problem))
        systems.append(SystemNames(name, tuple(aliases)))
    outputs = (
        OutputText(pk, system, text or "", item)
        for pk, system, item, text in Output.objects.filter(item__study=study)
        .order_by("item_id", "system__name")
        .values_list("id", "system__name", "item__external_id", "text")
        .iterator(chunk_size=2000)
    )
    audit = blindness_audit(outputs, systems, study_terms(study.identity_terms))
    audit.skipped[:0] = skipped
    return audit
