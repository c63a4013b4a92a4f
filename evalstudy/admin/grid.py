"""The study admin's "Edit items in a grid" page: a study's items with their outputs, one row an
item and one column a system's output, editable cell by cell, by pasting a table from a
spreadsheet (tab-separated, with a header row) or by uploading the CSV/JSONL item file.

Whatever the way in, the rows go through the item-file reader (`parse_items_file`, as JSON
lines numbered like the grid's rows) and `importers.items_grid_save`: every problem is listed
with its row and column and nothing is written unless all rows are valid. Only a draft study
without raters changes (the importer's rule): judgments refer to the items and outputs raters
saw. Works without JavaScript (the cells are a form); static/js/admin_widgets.js adds paste
across cells and new rows.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from ..audit import ADMIN
from ..importers import _started, items_grid_save, spec_limits
from ..models import Output, Study
from ..spec.errors import SpecError, SpecInvalid
from ..spec.files import parse_items_file
from ..spec.load import decode
from .widgets import text_value, value_text

ITEM, REFERENCE, CONTEXT = "item", "reference", "context"
OUTPUT, META = "output:", "meta:"
BLANK_ROWS = 3
MAX_ROWS = 5000  # a grid this long is better imported as a file


@dataclass
class Grid:
    """Columns (keys: item, reference, context, output:<system>, meta:<key>) and rows (cell
    texts by column key; `original`: the external id the row was loaded with)."""

    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    originals: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)


def heading(column: str) -> str:
    if column.startswith(OUTPUT):
        return f"Output: {column.removeprefix(OUTPUT)}"
    if column.startswith(META):
        return f"meta.{column.removeprefix(META)}"
    return {ITEM: "Item id", REFERENCE: "Reference", CONTEXT: "Context"}[column]


def grid_of_study(study: Study) -> Grid:
    systems = list(study.systems.order_by("id").values_list("id", "name"))
    items = list(study.items.order_by("id"))
    meta_keys: list[str] = []
    for item in items:
        meta_keys += [key for key in item.metadata or {} if key not in meta_keys]
    columns = [ITEM, REFERENCE, CONTEXT, *(OUTPUT + name for _, name in systems),
               *(META + key for key in meta_keys)]
    texts: dict[tuple[int, int], str] = {
        (item_id, system_id): text for item_id, system_id, text in
        Output.objects.filter(item__study=study).values_list("item_id", "system_id", "text")}
    grid = Grid(columns)
    for item in items:
        row = {ITEM: item.external_id, REFERENCE: item.reference, CONTEXT: item.context}
        for system_id, name in systems:
            row[OUTPUT + name] = texts.get((item.pk, system_id), "")
        for key, value in (item.metadata or {}).items():
            row[META + key] = value_text(value)
        grid.rows.append(row)
        grid.originals.append(item.external_id)
    return grid


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")  # browsers post CRLF line ends


def grid_of_post(post) -> Grid:
    """The grid as posted: `col` (the column keys, in order), `rows`, and per row `c-R-J`
    cells, `orig-R` and `remove-R`."""
    columns = [c for c in post.getlist("col") if c in (ITEM, REFERENCE, CONTEXT)
               or c.startswith((OUTPUT, META))]
    try:
        n_rows = min(int(post.get("rows", "0")), MAX_ROWS)
    except ValueError:
        n_rows = 0
    grid = Grid(columns)
    for r in range(1, n_rows + 1):
        row = {column: _clean(post.get(f"c-{r}-{j}", "")) for j, column in enumerate(columns)}
        original = post.get(f"orig-{r}", "")
        if post.get(f"remove-{r}") and original:
            grid.remove.append(original)
            row = dict.fromkeys(columns, "")
        grid.rows.append(row)
        grid.originals.append(original)
    return grid


def grid_of_table(text: str, systems: list[str]) -> Grid:
    """A table pasted from a spreadsheet: tab-separated, a header row naming the columns (item
    or id, reference, context, a system's name for its output, anything else metadata)."""
    records = list(csv.reader(io.StringIO(_clean(text).strip("\n")), delimiter="\t"))
    if not records:
        return Grid([ITEM])
    columns = []
    for name in (cell.strip() for cell in records[0]):
        lowered = name.lower()
        if lowered in ("item", "id", "item id"):
            columns.append(ITEM)
        elif lowered in (REFERENCE, CONTEXT):
            columns.append(lowered)
        elif name in systems or name.removeprefix("Output: ") in systems:
            columns.append(OUTPUT + name.removeprefix("Output: "))
        else:
            columns.append(META + name.removeprefix("meta."))
    grid = Grid(columns)
    for record in records[1:]:
        grid.rows.append(dict(zip(columns, record, strict=False)))
        grid.originals.append("")
    return grid


def grid_problems(grid: Grid, source: str) -> list[SpecError]:
    """What the grid itself gets wrong before the item reader sees it: a column twice, an
    existing item's id changed."""
    problems = []
    seen = set()
    for column in grid.columns:
        if column in seen:
            problems.append(SpecError(source, None, heading(column), "the column appears twice"))
        seen.add(column)
    if ITEM not in grid.columns:
        problems.append(SpecError(source, None, "header", "no item id column (item)"))
    for number, (row, original) in enumerate(zip(grid.rows, grid.originals, strict=True), 1):
        if original and original not in grid.remove and row.get(ITEM, "").strip() != original:
            problems.append(SpecError(source, number, "item", f"an existing item's id cannot "
                                      f"change here (it was {original!r}): remove the row and "
                                      "add a new one"))
    return problems


def grid_as_jsonl(grid: Grid) -> str:
    """One JSON line per grid row (a blank line for an empty row), so that the item reader's
    line numbers are the grid's row numbers. Empty output and metadata cells are left out (an
    empty output then reads "no output for system ...")."""
    lines = []
    for row in grid.rows:
        if not any(value.strip() for value in row.values()):
            lines.append("")
            continue
        record = {"id": row.get(ITEM, "").strip(), "reference": row.get(REFERENCE, ""),
                  "context": row.get(CONTEXT, ""), "metadata": {}, "outputs": {}}
        for column, value in row.items():
            if column.startswith(OUTPUT) and value.strip():
                record["outputs"][column.removeprefix(OUTPUT)] = value
            elif column.startswith(META) and value.strip():
                record["metadata"][column.removeprefix(META)] = text_value(value)
        lines.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(lines)


def problem_text(error: SpecError, what: str) -> str:
    """"row 3, outputs: no output for system 'B'": the row (or file line) and the column."""
    where = f"{what} {error.line}" if error.line else what.capitalize() + "s"
    column = error.path.rsplit(".", 1)[-1] if error.path.startswith("item ") else error.path
    column = {"id": "item"}.get(column, column)
    return f"{where}, {column}: {error.message}" if column else f"{where}: {error.message}"


def items_grid_view(study_admin, request, pk):
    study = study_admin.study_or_404(request, pk, change=True)
    systems = list(study.systems.order_by("id").values_list("name", flat=True))
    locked = _started(study)
    problems: list[str] = []
    error_rows: set[int] = set()
    grid = grid_of_study(study)
    if request.method == "POST" and not locked:
        upload = request.FILES.get("file")
        limits = spec_limits()
        try:
            if upload is not None:
                source, what = upload.name, "line"
                fmt = "jsonl" if upload.name.lower().endswith(".jsonl") else "csv"
                items = parse_items_file(decode(upload.read(), upload.name), upload.name, fmt,
                                         limits)
                remove: list[str] = []
            else:
                pasted = request.POST.get("paste", "")
                if pasted.strip():
                    grid, source, what = grid_of_table(pasted, systems), "pasted table", "row"
                else:
                    grid, source, what = grid_of_post(request.POST), "items grid", "row"
                found = grid_problems(grid, source)
                if found:
                    raise SpecInvalid(found)
                items = parse_items_file(grid_as_jsonl(grid), source, "jsonl", limits)
                remove = grid.remove
            n_items, n_outputs, removed = items_grid_save(
                study=study, items=items, remove=remove, file_name=source, limits=limits,
                actor=request.user, source=ADMIN)
        except SpecInvalid as error:
            problems = [problem_text(e, what) for e in error.errors]
            error_rows = {e.line for e in error.errors if e.line}
            if upload is not None:
                grid = grid_of_study(study)
        else:
            messages.success(request, f"Saved: {n_items} item(s) and {n_outputs} output(s) "
                                      f"written, {removed} item(s) removed.")
            return HttpResponseRedirect(reverse("admin:evalstudy_study_items_grid",
                                                args=[study.pk]))
    n_loaded = len(grid.rows)
    rows = [*zip(grid.rows, grid.originals, strict=True)]
    rows += [(dict.fromkeys(grid.columns, ""), "")] * (0 if locked else BLANK_ROWS)
    context = {
        **study_admin.admin_site.each_context(request), "opts": Study._meta, "study": study,
        "title": f"Items of {study.slug}", "locked": locked, "problems": problems,
        "columns": [(column, heading(column)) for column in grid.columns],
        "rows": [{"number": number, "original": original, "error": number in error_rows,
                  "cells": [(j, heading(column), row.get(column, "")) for j, column in
                            enumerate(grid.columns)]}
                 for number, (row, original) in enumerate(rows, start=1)],
        "n_rows": len(rows), "n_loaded": n_loaded, "systems": systems,
        "header_example": "\t".join(["item", "reference", *systems, "speaker"]),
    }
    return render(request, "admin/evalstudy/study/items_grid.html", context)
