"""Form fields that edit a JSON value as a table of rows of real inputs, so that nobody types
JSON: a study's rater labels and identity terms (evalstudy/admin/row_fields.py), a judge's
settings, DRPE's static roles (kit.param_fields).

It works without JavaScript: the table always ends with a few empty rows, each input is named
`<field>-<row>-<column>` and `<field>-rows` says how many rows were rendered, so the server
reads the rows back itself; a researcher who needs more rows than the empty ones saves and gets
new empty rows. static/js/rows_table.js only adds a row on "Add a row" (a copy of the last,
emptied, the count raised).

Each field turns rows into the value stored (`to_value`, raising ValidationError naming the
row) and a stored value back into rows (`to_rows`); blank rows are left out, and the rows that
remain are numbered as the errors name them ("row 2: ..."). A script may still post the whole
value under the field's own name (`legacy` reads it: JSON, or the one-entry-a-line text of
the text boxes these replaced).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

TEXT, CHOICE, CHECK = "text", "choice", "check"
#: Empty rows a table ends with, for new entries without JavaScript.
BLANK_ROWS = 3
#: The most rows read back from a post (a bound on what one request makes the server read).
MAX_ROWS = 500


@dataclass(frozen=True)
class Column:
    """One input of every row: text, a menu of `choices` ((value, label) pairs) or a box."""

    name: str
    label: str
    kind: str = TEXT
    choices: tuple[tuple[str, str], ...] = ()
    width: str = ""  # the input's size in characters, for a text column


class PostedRows(list):
    """The rows of a post (dicts of the columns' texts and booleans), told apart from a
    stored value, which may be a list too."""


def _blank(row: dict[str, Any], columns: Sequence[Column]) -> bool:
    return not any((row.get(c.name) if c.kind == CHECK else str(row.get(c.name) or "").strip())
                   for c in columns)


class RowsTable(forms.Widget):
    """The rows as a table of inputs, with empty rows at the end and an "Add a row" button."""

    class Media:
        js = ("js/rows_table.js",)
        css = {"all": ("css/admin.css",)}

    def __init__(self, columns: Sequence[Column], attrs: dict[str, Any] | None = None):
        super().__init__(attrs)
        self.columns = tuple(columns)
        self.caption = ""  # the field's label, in each input's accessible name (RowsField)

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        if name in data:  # the whole value under the field's name (a script, an old form)
            return data.get(name)
        try:
            count = min(int(data.get(f"{name}-rows") or 0), MAX_ROWS)
        except ValueError:
            count = 0
        rows = PostedRows()
        for index in range(count):
            prefix = f"{name}-{index}-"
            rows.append({c.name: (prefix + c.name in data) if c.kind == CHECK
                         else data.get(prefix + c.name, "") for c in self.columns})
        return rows

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data and f"{name}-rows" not in data

    def _input(self, name: str, index: int, column: Column, value: Any) -> str:
        field = f"{name}-{index}-{column.name}"
        aria = f"{self.caption or 'Rows'}, row {index + 1}: {column.label}"
        if column.kind == CHECK:
            # On a phone the column headings are hidden: the box says what it is beside it.
            return format_html('<input type="checkbox" name="{}" id="id_{}" aria-label="{}"{}>'
                               ' <label class="rows-table-narrow" for="id_{}">{}</label>',
                               field, field, aria, " checked" if value else "", field,
                               column.label)
        if column.kind == CHOICE:
            options = format_html_join(
                "", '<option value="{}"{}>{}</option>',
                ((choice, " selected" if str(value or "") == choice else "", text)
                 for choice, text in (("", "---------"), *column.choices)))
            return format_html('<select name="{}" id="id_{}" aria-label="{}">{}</select>',
                               field, field, aria, options)
        return format_html('<input type="text" name="{}" id="id_{}" value="{}" aria-label="{}"'
                           ' size="{}">', field, field, value or "", aria, column.width or 30)

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None,
               renderer: Any = None) -> SafeString:
        rows = [dict(row) for row in (value or [])]
        rows += [{}] * BLANK_ROWS
        head = format_html_join("", '<th scope="col">{}</th>',
                                ((c.label,) for c in self.columns))
        body = format_html_join("", '<tr class="rows-table-row">{}</tr>', (
            (format_html_join("", "<td>{}</td>", (
                (self._input(name, index, column, row.get(column.name)),)
                for column in self.columns)),)
            for index, row in enumerate(rows)))
        element = (attrs or {}).get("id") or f"id_{name}"
        return format_html(
            '<div class="rows-table" id="{}" data-rows-table="{}">'
            '<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>'
            '<input type="hidden" name="{}-rows" value="{}">'
            '<p class="rows-table-more"><button type="button" class="button" data-rows-add '
            'aria-label="Add a row to {}" hidden>Add a row</button><span class="help" '
            "data-rows-nojs>More rows: save, and {} empty rows come back.</span></p></div>",
            element, name, head, body, name, len(rows), self.caption or "the table", BLANK_ROWS)


class RowsField(forms.Field):
    """A JSON value edited as rows: `to_value(rows)` makes the stored value of the non-blank
    rows (raising ValidationError naming the row), `to_rows(value)` the rows of a stored value,
    `legacy(text)` reads the whole value posted under the field's name."""

    def __init__(self, columns: Sequence[Column], *, to_value: Callable[[list[dict]], Any],
                 to_rows: Callable[[Any], list[dict]], legacy: Callable[[str], Any],
                 empty: Callable[[], Any], **kwargs: Any):
        self.columns = tuple(columns)
        self.to_value, self.to_rows, self.legacy, self.empty = to_value, to_rows, legacy, empty
        kwargs.setdefault("widget", RowsTable(self.columns))
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        if isinstance(self.widget, RowsTable):
            self.widget.caption = str(self.label or "")

    def _kept(self, rows: list[dict]) -> list[dict]:
        return [row for row in rows if not _blank(row, self.columns)]

    def prepare_value(self, value: Any) -> list[dict]:
        if isinstance(value, PostedRows):  # shown again with its errors, blank rows dropped
            return self._kept(value)
        if isinstance(value, str):
            try:
                value = self.to_python(value)
            except forms.ValidationError:
                return []
        return self.to_rows(value if value is not None else self.empty())

    def to_python(self, value: Any) -> Any:
        if value is None:
            return self.empty()
        if isinstance(value, PostedRows):
            return self.to_value(self._kept(value))
        if isinstance(value, str):
            return self.legacy(value) if value.strip() else self.empty()
        return value

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != (initial if initial is not None else self.empty())
        except forms.ValidationError:
            return True


def records_field(columns: Sequence[tuple[str, str]], *, what: str = "row",
                  **kwargs: Any) -> RowsField:
    """A list of records of text columns ((name, label) pairs), e.g. DRPE's static roles
    [{"type": ..., "description": ...}]: each kept row needs every column."""
    table = tuple(Column(name, label, width="30") for name, label in columns)

    def to_value(rows: list[dict]) -> list[dict[str, str]]:
        errors = [f"{what} {number}: fill in {label.lower()}"
                  for number, row in enumerate(rows, start=1)
                  for name, label in columns if not str(row.get(name) or "").strip()]
        if errors:
            raise forms.ValidationError(errors)
        return [{name: str(row.get(name)).strip() for name, _ in columns} for row in rows]

    def legacy(text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError(f"write each {what} in a row of its own") from None

    return RowsField(table, to_value=to_value, legacy=legacy, empty=list,
                     to_rows=lambda value: [dict(r) for r in value or [] if isinstance(r, dict)],
                     **kwargs)
