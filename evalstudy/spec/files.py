"""Items and outputs from CSV or JSONL, and judgments from CSV; the checks of JSON values that
a JSON field must be able to store."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, SpecInvalid
from .fields import Reader, as_media_ref
from .limits import DEFAULT_LIMITS, MAX_FIELD_CHARS, SpecLimits, control_problem
from .load import LineMap
from .study import ItemSpec, check_outputs, item_from_mapping

ITEM_CSV_REQUIRED = ("item", "system", "output")
# media: the item's media file (the same on every row of the item); output_media: the media
# of the row's output. A path in the media archive or directory, or an https URL.
ITEM_CSV_OPTIONAL = ("reference", "context", "media", "output_media")


def parse_items_file(
    text: str, source: str, fmt: str, limits: SpecLimits = DEFAULT_LIMITS
) -> list[ItemSpec]:
    """Items with outputs from CSV (one row per item x system) or JSONL (one item per line).

    CSV columns: item, system, output, optional reference and context; any other column is
    item metadata (a `meta.` prefix is stripped). Rows of one item must agree on reference,
    context and metadata. JSONL lines use the spec's item shape: {"id", "reference", "context",
    "metadata", "outputs": {system: text}}.

    At most `limits.max_items` items; a JSONL line may nest `limits.max_depth` levels and may
    not hold NaN, infinities or control characters (none of which a JSON field can store).
    """
    if fmt == "jsonl":
        return _parse_items_jsonl(text, source, limits)
    if fmt == "csv":
        return _parse_items_csv(text, source, limits)
    raise SpecInvalid([SpecError(source, None, "", f"unknown format {fmt!r}; use csv or jsonl")])


def csv_rows(text: str, source: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as error:
        raise SpecInvalid([SpecError(source, 1, "", f"not valid CSV: {error}")]) from None
    missing = [name for name in required if name not in header]
    if missing:
        raise SpecInvalid([SpecError(
            source, 1, "header", f"missing column(s) {', '.join(missing)}; found "
            f"{', '.join(header) or 'no header'}",
        )])
    if len(set(header)) != len(header):
        raise SpecInvalid([SpecError(source, 1, "header", "a column name appears twice")])
    # Where the record being read starts: a broken record is named by its first line (its
    # quote may run on to the end of the file).
    record_start = reader.line_num + 1
    try:
        for row in reader:
            line = reader.line_num
            if None in row or any(value is None for value in row.values()):
                found = len(header) + len(row.get(None) or []) - sum(
                    value is None for value in row.values()
                )
                raise SpecInvalid([SpecError(
                    source, line, "", f"expected {len(header)} columns like the header, got {found}"
                )])
            yield line, row
            record_start = reader.line_num + 1
    except csv.Error as error:
        reason = str(error)
        if "field larger than field limit" in reason:
            reason = (f"a field is longer than {MAX_FIELD_CHARS:,} characters (an unclosed "
                      'quote " makes the rest of the file one field)')
        elif "unexpected end of data" in reason:
            reason = 'the file ends inside a quoted field: a quote " is not closed (truncated?)'
        raise SpecInvalid([
            SpecError(source, record_start, "", f"not valid CSV: {reason}")
        ]) from None


def _too_many_items(source: str, line: int, limits: SpecLimits) -> SpecInvalid:
    return SpecInvalid([SpecError(
        source, line, "item", f"more than {limits.max_items:,} items (EVALSTUDY_MAX_ITEMS); "
        "a study may not have more",
    )])


def _parse_items_csv(text: str, source: str, limits: SpecLimits) -> list[ItemSpec]:
    reader = Reader(source)
    items: dict[str, ItemSpec] = {}
    first_line: dict[tuple[str, str], int] = {}
    for line, row in csv_rows(text, source, ITEM_CSV_REQUIRED):
        item_id, system = row["item"].strip(), row["system"].strip()
        if not item_id or not system:
            reader.error(line, "item" if not item_id else "system", "must not be empty")
            continue
        meta = {
            name.removeprefix("meta."): value for name, value in row.items()
            if name not in ITEM_CSV_REQUIRED + ITEM_CSV_OPTIONAL and value != ""
        }
        fields: dict[str, Any] = {
            "reference": row.get("reference") or "", "context": row.get("context") or "",
            "metadata": meta,
        }
        media: dict[str, str] = {}
        for name in ("media", "output_media"):
            try:
                media[name] = as_media_ref(row.get(name) or "")
            except ValueError as error:
                reader.error(line, name, str(error))
                media[name] = ""
        fields["media"] = media["media"]
        item = items.get(item_id)
        if item is None:
            if len(items) == limits.max_items:
                raise _too_many_items(source, line, limits)
            items[item_id] = item = ItemSpec(external_id=item_id, line=line, **fields)
        else:
            for name, value in fields.items():
                if getattr(item, name) != value:
                    reader.error(line, name, f"differs from item {item_id!r} at line {item.line}")
        if (item_id, system) in first_line:
            reader.error(line, "system", f"second output for {item_id!r}/{system!r} "
                                         f"(first at line {first_line[item_id, system]})")
            continue
        first_line[item_id, system] = line
        item.outputs[system] = row["output"]
        if media["output_media"]:
            item.output_media[system] = media["output_media"]
            item.media_lines[system] = line
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return list(items.values())


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (nor can a JSON field hold it)")


def json_value_problem(value: Any, limits: SpecLimits = DEFAULT_LIMITS) -> str | None:
    """Why a value parsed from JSON cannot be stored: nested deeper than `limits.max_depth`
    (the value itself being level 1), a control character in a string or key, or a number
    that is not finite; None when it can. Iterative: it must not recurse on what it checks."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limits.max_depth:
                return (f"nested deeper than {limits.max_depth} levels of lists and objects "
                        "(EVALSTUDY_SPEC_MAX_DEPTH)")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
            if isinstance(node, dict):
                stack.extend((key, depth) for key in node)
        elif isinstance(node, str):
            if (problem := control_problem(node)) is not None:
                return problem
        elif isinstance(node, float) and not math.isfinite(node):
            return f"{node} is not a finite number; a JSON field cannot hold it"
    return None


def load_json_line(raw: str, limits: SpecLimits = DEFAULT_LIMITS) -> Any:
    """One JSON value (a JSONL line, a request body's element); ValueError saying why it
    cannot be read or stored (see `json_value_problem`)."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {error.msg} (column {error.colno})") from None
    except RecursionError:  # deeper than Python's recursion limit, let alone ours
        raise ValueError(f"nested deeper than {limits.max_depth} levels of lists and objects "
                         "(EVALSTUDY_SPEC_MAX_DEPTH)") from None
    except ValueError as error:  # a constant above, or an integer too long to convert
        reason = str(error)
        if "digits" in reason:
            reason = f"a number longer than {sys.get_int_max_str_digits():,} digits"
        raise ValueError(f"not valid JSON: {reason}") from None
    problem = json_value_problem(value, limits)
    if problem is not None:
        raise ValueError(problem)
    return value


def _parse_items_jsonl(text: str, source: str, limits: SpecLimits) -> list[ItemSpec]:
    reader = Reader(source)
    items: list[ItemSpec] = []
    seen: dict[str, int] = {}
    records = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        records += 1
        if records > limits.max_items:
            raise _too_many_items(source, number, limits)
        try:
            record = load_json_line(raw, limits)
        except ValueError as error:
            reader.error(number, "", str(error))
            continue
        if (mapping := reader.mapping(record, f"line {number}", number)) is None:
            continue
        # A JSON object has no line marks: every key of it is on this line.
        located = LineMap(mapping)
        located.line, located.key_lines = number, dict.fromkeys(mapping, number)
        item = item_from_mapping(reader, located, "item", number)
        if item is None:
            continue
        if item.external_id in seen:
            reader.error(number, "id", f"duplicate item {item.external_id!r} "
                                       f"(first at line {seen[item.external_id]})")
            continue
        seen[item.external_id] = number
        items.append(item)
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return items


def check_items_against_systems(
    items: list[ItemSpec], system_names: set[str], source: str
) -> None:
    """Every item must give an output for exactly the study's systems; SpecInvalid otherwise."""
    reader = Reader(source)
    for item in items:
        check_outputs(reader, item, system_names, f"item {item.external_id!r}", item.line)
    if reader.errors:
        raise SpecInvalid(reader.errors)


# --- judgments from CSV ---------------------------------------------------------------------
JUDGMENT_CSV_REQUIRED = ("rater", "item", "system", "criterion", "value")


@dataclass(frozen=True)
class JudgmentRow:
    line: int
    rater: str
    item: str
    system: str
    criterion: str
    value: str
    rater_kind: str = ""
    system_b: str = ""


def parse_judgments_csv(text: str, source: str) -> list[JudgmentRow]:
    """Tidy judgments: rater,item,system,criterion,value (+ optional rater_kind, system_b)."""
    reader = Reader(source)
    rows = []
    for line, row in csv_rows(text, source, JUDGMENT_CSV_REQUIRED):
        for name in ("rater", "item", "system", "criterion"):
            if not row[name].strip():
                reader.error(line, name, "must not be empty")
        rows.append(JudgmentRow(
            line=line, rater=row["rater"].strip(), item=row["item"].strip(),
            system=row["system"].strip(), criterion=row["criterion"].strip(), value=row["value"],
            rater_kind=(row.get("rater_kind") or "").strip(),
            system_b=(row.get("system_b") or "").strip(),
        ))
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return rows


VOTE_CSV_REQUIRED = ("item", "system", "criterion", "value", "count")
MAX_VOTES = 1_000_000  # people per answer of one unit: more is a mistake in the file


@dataclass(frozen=True)
class VoteRow:
    line: int
    item: str
    system: str
    criterion: str
    value: str
    count: int
    system_b: str = ""


def parse_vote_counts_csv(text: str, source: str) -> list[VoteRow]:
    """Aggregated judgments: item,system,criterion,value,count (+ system_b for a pairwise
    criterion): how many people gave `value` for that output (or pair)."""
    reader = Reader(source)
    rows = []
    for line, row in csv_rows(text, source, VOTE_CSV_REQUIRED):
        for name in ("item", "system", "criterion"):
            if not row[name].strip():
                reader.error(line, name, "must not be empty")
        raw = (row["count"] or "").strip()
        if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_VOTES:
            reader.error(line, "count", f"must be a whole number of people, 0 to {MAX_VOTES} "
                                        f"(got {raw!r})")
            continue
        rows.append(VoteRow(
            line=line, item=row["item"].strip(), system=row["system"].strip(),
            criterion=row["criterion"].strip(), value=row["value"].strip(), count=int(raw),
            system_b=(row.get("system_b") or "").strip()))
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return rows
