"""The study admin's "Edit items in a grid" page: a study's items with their outputs, one row an
item and one column a system's output, editable cell by cell, by pasting a table from a
spreadsheet (tab-separated, with a header row) or by uploading the CSV/JSONL item file.

Whatever the way in, the rows go through the item-file reader (`parse_items_file`, as JSON
lines numbered like the grid's rows) and `importers.items_grid_save`: every problem is listed
with its row and column and nothing is written unless all rows are valid. Only a draft study
without raters changes (the importer's rule): judgments refer to the items and outputs raters
saw. Works without JavaScript (the cells are a form); static/js/admin_widgets.js adds paste
across cells and new rows, and posts the cells as one JSON field (`cells`).

The grid is shown a page of rows at a time (`page_size`): without JavaScript every cell is a
form field, and Django refuses a post of more than DATA_UPLOAD_MAX_NUMBER_FIELDS fields, so a
page holds as many rows as fit in that limit. Saving a page writes its rows only (the items of
other pages stay as they are). A post of more rows than MAX_ROWS is refused, never cut.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext, ngettext

from ..audit import ADMIN
from ..forms import ItemsUploadForm
from ..importers import items_grid_save
from ..models import Output, Study
from ..selectors import study_started
from ..services import spec_limits
from ..spec.errors import SpecError, SpecInvalid
from ..spec.files import parse_items_file
from ..spec.load import decode
from .widgets import text_value, value_text

ITEM, REFERENCE, CONTEXT = "item", "reference", "context"
OUTPUT, META = "output:", "meta:"
BLANK_ROWS = 3
MAX_ROWS = 5000  # rows saved in one post; a grid this long is better imported as a file
MAX_PAGE_ROWS = 100  # rows drawn on one page, whatever the field limit allows


@dataclass
class Grid:
    """Columns (keys: item, reference, context, output:<system>, meta:<key>) and rows (cell
    texts by column key; `original`: the external id the row was loaded with)."""

    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    originals: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    first: int = 1  # the number of the first row (a page's rows are numbered in the study's)


def page_size(n_columns: int) -> int:
    """Rows on one page such that a post of the page without JavaScript (per row: a field per
    column, the original id and the remove box; the blank rows; the column names and a few
    more) stays within DATA_UPLOAD_MAX_NUMBER_FIELDS."""
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    if limit is None:
        return MAX_PAGE_ROWS
    budget = limit - 10 - n_columns * (1 + BLANK_ROWS)
    return max(1, min(MAX_PAGE_ROWS, budget // (n_columns + 2)))


def heading(column: str) -> str:
    if column.startswith(OUTPUT):
        return f"Output: {column.removeprefix(OUTPUT)}"
    if column.startswith(META):
        return f"meta.{column.removeprefix(META)}"
    return {ITEM: "Item id", REFERENCE: "Reference", CONTEXT: "Context"}[column]


def grid_columns(study: Study) -> list[str]:
    """The study's columns, the same on every page (so every page has the same size): a
    `meta:` column for each metadata key any item has."""
    systems = study.systems.order_by("id").values_list("name", flat=True)
    meta_keys: dict[str, None] = {}
    for metadata in study.items.order_by("id").values_list("metadata", flat=True):
        meta_keys.update(dict.fromkeys(metadata or {}))
    return [ITEM, REFERENCE, CONTEXT, *(OUTPUT + name for name in systems),
            *(META + key for key in meta_keys)]


def grid_of_study(study: Study, page: int = 1) -> tuple[Grid, int]:
    """Page `page` (from 1) of the study's items as a grid, and the number of pages. Reads
    the page's items and their outputs only (and every item's metadata keys)."""
    n_items = study.items.count()
    columns = grid_columns(study)
    size = page_size(len(columns))
    n_pages = max(1, -(-n_items // size))
    page = min(max(page, 1), n_pages)
    offset = (page - 1) * size
    items = list(study.items.order_by("id")[offset:offset + size])
    systems = list(study.systems.order_by("id").values_list("id", "name"))
    texts: dict[tuple[int, int], str] = {
        (item_id, system_id): text for item_id, system_id, text in
        Output.objects.filter(item__in=[item.pk for item in items]).values_list(
            "item_id", "system_id", "text")}
    grid = Grid(columns, first=offset + 1)
    for item in items:
        row = {ITEM: item.external_id, REFERENCE: item.reference, CONTEXT: item.context}
        for system_id, name in systems:
            row[OUTPUT + name] = texts.get((item.pk, system_id), "")
        for key, value in (item.metadata or {}).items():
            row[META + key] = value_text(value)
        grid.rows.append(row)
        grid.originals.append(item.external_id)
    return grid, n_pages


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")  # browsers post CRLF line ends


def _int(text: str | None, default: int) -> int:
    try:
        return int(text or default)
    except ValueError:
        return default


def posted_cells(post) -> dict[str, str] | None:
    """The `cells` field static/js/admin_widgets.js posts in place of one field per cell: a
    JSON object of the cells' field names and texts. None when absent; SpecInvalid when it is
    not such an object."""
    raw = post.get("cells")
    if raw is None:
        return None
    try:
        cells = json.loads(raw)
    except ValueError:
        cells = None
    if not isinstance(cells, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in cells.items()):
        raise SpecInvalid([SpecError("items grid", None, "cells",
                                     "not a JSON object of cell names and texts")])
    return cells


def grid_of_post(post, cells: dict[str, str] | None = None, *, n_items: int) -> Grid:
    """The grid as posted: `col` (the column keys, in order), `first` (the first row's
    number, at most one past the study's `n_items`), `rows` (how many), and per row R
    `c-R-J` cells, `orig-R` and `remove-R`, as fields or in `cells`. More than MAX_ROWS rows
    are refused, not cut."""
    columns = [c for c in post.getlist("col") if c in (ITEM, REFERENCE, CONTEXT)
               or c.startswith((OUTPUT, META))]
    get = cells.get if cells is not None else post.get
    first, n_rows = max(_int(post.get("first"), 1), 1), max(_int(post.get("rows"), 0), 0)
    if first > n_items + 1:
        raise SpecInvalid([SpecError("items grid", None, "first", (
            f"the first row is {first}, but the study has {n_items} items: reload the page"))])
    if n_rows > MAX_ROWS:
        raise SpecInvalid([SpecError("items grid", None, "rows", (
            f"{n_rows} rows were posted; at most {MAX_ROWS} are saved at once: import the "
            "items as a file (Import items) or save in parts"))])
    grid = Grid(columns, first=first)
    for r in range(first, first + n_rows):
        row = {column: _clean(get(f"c-{r}-{j}", "")) for j, column in enumerate(columns)}
        original = get(f"orig-{r}", "")
        if get(f"remove-{r}") and original:
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
    if len(records) - 1 > MAX_ROWS:
        raise SpecInvalid([SpecError("pasted table", None, "rows", (
            f"the table has {len(records) - 1} rows; at most {MAX_ROWS} are saved at once: "
            "import the items as a file (Import items)"))])
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


def grid_problems(grid: Grid, source: str, elsewhere: set[str] | frozenset[str] = frozenset()
                  ) -> list[SpecError]:
    """What the grid itself gets wrong before the item reader sees it: a column twice, an
    existing item's id changed, and a new row with the id of an item of the study that this
    grid does not hold (`elsewhere`: on another page), which would overwrite that item."""
    problems = []
    seen = set()
    for column in grid.columns:
        if column in seen:
            problems.append(SpecError(source, None, heading(column), "the column appears twice"))
        seen.add(column)
    if ITEM not in grid.columns:
        problems.append(SpecError(source, None, "header", "no item id column (item)"))
    for number, (row, original) in enumerate(zip(grid.rows, grid.originals, strict=True),
                                             grid.first):
        if original and original not in grid.remove and row.get(ITEM, "").strip() != original:
            problems.append(SpecError(source, number, "item", f"an existing item's id cannot "
                                      f"change here (it was {original!r}): remove the row and "
                                      "add a new one"))
        elif not original and row.get(ITEM, "").strip() in elsewhere:
            problems.append(SpecError(source, number, "item", (
                f"item {row[ITEM].strip()!r} already exists on another page of the grid: "
                "edit it there")))
    return problems


def grid_as_jsonl(grid: Grid) -> str:
    """One JSON line per grid row (a blank line for an empty row), so that the item reader's
    line numbers are the grid's row numbers. Empty output and metadata cells are left out (an
    empty output then reads "no output for system ...").

    A page's rows start at row `grid.first`: as many blank lines go first, so that the
    reader's line numbers are still the rows' numbers."""
    lines = [""] * (grid.first - 1)
    for row in grid.rows:
        if not any(value.strip() for value in row.values()):
            lines.append("")
            continue
        metadata: dict[str, Any] = {}
        outputs: dict[str, str] = {}
        for column, value in row.items():
            if column.startswith(OUTPUT) and value.strip():
                outputs[column.removeprefix(OUTPUT)] = value
            elif column.startswith(META) and value.strip():
                metadata[column.removeprefix(META)] = text_value(value)
        record = {"id": row.get(ITEM, "").strip(), "reference": row.get(REFERENCE, ""),
                  "context": row.get(CONTEXT, ""), "metadata": metadata, "outputs": outputs}
        lines.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(lines)


def problem_text(error: SpecError, what: str) -> str:
    """"row 3, outputs: no output for system 'B'": the row (or file line) and the column."""
    where = f"{what} {error.line}" if error.line else what.capitalize() + "s"
    column = error.path.rsplit(".", 1)[-1] if error.path.startswith("item ") else error.path
    column = {"id": "item"}.get(column, column)
    return f"{where}, {column}: {error.message}" if column else f"{where}: {error.message}"


def _upload_items(request, limits) -> list:
    """The uploaded item file, refused by name and size (ItemsUploadForm, as Import items
    does) before it is read."""
    form = ItemsUploadForm(files=request.FILES)
    if not form.is_valid() and form.has_error("file"):
        # An ErrorList yields each error's message (the stubs say ValidationError | str).
        raise SpecInvalid([SpecError(request.FILES["file"].name, None, "", str(message))
                           for message in form.errors["file"]])
    upload = request.FILES["file"]
    fmt = "jsonl" if upload.name.lower().endswith(".jsonl") else "csv"
    return parse_items_file(decode(upload.read(), upload.name), upload.name, fmt, limits)


def items_grid_view(study_admin, request, pk):
    study = study_admin.study_or_404(request, pk, change=True)
    systems = list(study.systems.order_by("id").values_list("name", flat=True))
    locked = study_started(study)
    problems: list[str] = []
    error_rows: set[int] = set()
    page = _int(request.GET.get("page"), 1)
    grid, n_pages = grid_of_study(study, page)
    if request.method == "POST" and not locked:
        limits = spec_limits()
        what = "row"
        try:
            if "file" in request.FILES:
                what = "line"
                items = _upload_items(request, limits)
                remove: list[str] = []
            else:
                pasted = request.POST.get("paste", "")
                if pasted.strip():
                    grid, source = grid_of_table(pasted, systems), "pasted table"
                    elsewhere: set[str] = set()  # a pasted table updates items on purpose
                else:
                    n_items = study.items.count()
                    grid = grid_of_post(request.POST, posted_cells(request.POST),
                                        n_items=n_items)
                    source = "items grid"
                    elsewhere = set(study.items.exclude(external_id__in=grid.originals)
                                    .values_list("external_id", flat=True))
                found = grid_problems(grid, source, elsewhere)
                if found:
                    raise SpecInvalid(found)
                items = parse_items_file(grid_as_jsonl(grid), source, "jsonl", limits)
                remove = grid.remove
            n_items, n_outputs, removed = items_grid_save(
                study=study, items=items, remove=remove,
                file_name=request.FILES["file"].name if "file" in request.FILES else source,
                limits=limits, actor=request.user, source=ADMIN)
        except SpecInvalid as error:
            problems = [problem_text(e, what) for e in error.errors]
            error_rows = {e.line for e in error.errors if e.line}
        else:
            messages.success(request, gettext("Saved: %(items)s and %(outputs)s written, "
                                              "%(removed)s removed.") % {
                "items": ngettext("%d item", "%d items", n_items) % n_items,
                "outputs": ngettext("%d output", "%d outputs", n_outputs) % n_outputs,
                "removed": ngettext("%d item", "%d items", removed) % removed})
            url = reverse("admin:evalstudy_study_items_grid", args=[study.pk])
            return HttpResponseRedirect(f"{url}?page={page}" if page > 1 else url)
    while (grid.rows and not grid.originals[-1]
           and not any(value.strip() for value in grid.rows[-1].values())):
        # A posted grid shown again: its blank rows go, BLANK_ROWS come back (adding them to
        # the posted ones would grow the page past the field limit, post after post).
        grid.rows.pop()
        grid.originals.pop()
    n_loaded = len(grid.rows)
    rows = [*zip(grid.rows, grid.originals, strict=True)]
    rows += [(dict.fromkeys(grid.columns, ""), "")] * (0 if locked else BLANK_ROWS)
    page = min(max(page, 1), n_pages)
    context = {
        **study_admin.admin_site.each_context(request), "opts": Study._meta, "study": study,
        "title": f"Items of {study.slug}", "locked": locked, "problems": problems,
        "columns": [(column, heading(column)) for column in grid.columns],
        "rows": [{"number": number, "original": original, "error": number in error_rows,
                  "cells": [(j, heading(column), row.get(column, "")) for j, column in
                            enumerate(grid.columns)]}
                 for number, (row, original) in enumerate(rows, start=grid.first)],
        "first": grid.first, "n_rows": len(rows), "n_loaded": n_loaded, "systems": systems,
        "page": page, "n_pages": n_pages, "n_items": study.items.count(),
        "last_loaded": grid.first + n_loaded - 1,
        "header_example": "\t".join(["item", "reference", *systems, "speaker"]),
    }
    return render(request, "admin/evalstudy/study/items_grid.html", context)
