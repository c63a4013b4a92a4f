"""Form fields that edit a JSON value as a table of rows of real inputs: a study's rater labels
(a label chosen from a menu and its text), its identity terms (a term and a "phrase" box), a
judge backend's settings (name and value). Nobody types JSON.

It works without JavaScript: the table always ends with a few empty rows, each input is named
`<field>-<row>-<column>` and `<field>-rows` says how many rows were rendered, so the server
reads the rows back itself; a researcher who needs more rows than the empty ones saves and gets
new empty rows. static/js/rows_table.js only adds a row on "Add a row" (a copy of the last,
emptied, the count raised).

Each field turns rows into the value stored in the database (the same JSON shape the study
spec and the API store) and the stored value back into rows; blank rows are left out, and the
rows that remain are numbered as the errors name them ("row 2: ..."). A script may still post
the whole value under the field's own name (JSON, or the one-entry-a-line text of the text
box this replaced): it is read as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join

from ..spec.fields import RATER_LABEL_DEFAULTS
from .widgets import key_value_parse, lines_parse, text_value, value_text

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
        aria = f"{column.label}, row {index + 1}"
        if column.kind == CHECK:
            return format_html('<input type="checkbox" name="{}" id="id_{}" aria-label="{}"{}>',
                               field, field, aria, " checked" if value else "")
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
               renderer: Any = None) -> str:
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
            'hidden>Add a row</button><span class="help" data-rows-nojs>More rows: save, and {} '
            "empty rows come back.</span></p></div>",
            element, name, head, body, name, len(rows), BLANK_ROWS)


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


def _text(row: dict, column: str) -> str:
    return str(row.get(column) or "").strip()


# --- a study's rater labels: {label key: text} ------------------------------------------------
def _labels_value(rows: list[dict]) -> dict[str, str]:
    labels: dict[str, str] = {}
    first: dict[str, int] = {}
    errors = []
    for number, row in enumerate(rows, start=1):
        key, text = _text(row, "key"), _text(row, "text")
        if not key:
            errors.append(f"row {number}: choose which label {text!r} replaces")
        elif not text:
            errors.append(f"row {number}: write the text raters see for {key!r} (or empty the "
                          "row to keep its default)")
        elif key in first:
            errors.append(f"row {number}: {key!r} is given twice (first on row {first[key]})")
        else:
            first[key] = number
            labels[key] = text
    if errors:
        raise forms.ValidationError(errors)
    return labels


def _labels_legacy(text: str) -> Any:
    try:
        return json.loads(text)  # the JSON box this replaced ("null" and lists are refused later)
    except ValueError:
        return key_value_parse(text, what="label")


def rater_labels_field(**kwargs: Any) -> RowsField:
    columns = (
        Column("key", "Label", CHOICE, tuple(
            (key, f"{key} (default: {default})") for key, default in RATER_LABEL_DEFAULTS.items())),
        Column("text", "What raters see instead", width="40"),
    )
    return RowsField(
        columns, to_value=_labels_value, empty=dict, legacy=_labels_legacy,
        to_rows=lambda value: [{"key": key, "text": text} for key, text in
                               (value.items() if isinstance(value, dict) else ())],
        label="Rater labels",
        help_text="What raters see the panes, buttons and end page called, one label a row "
                  "(e.g. reference: What was said; output: Transcript). Labels not listed "
                  "keep their defaults.", **kwargs)


# --- a study's identity terms: ["word", {"term": "a phrase", "phrase": true}] -------------------
def _terms_value(rows: list[dict]) -> list[Any]:
    terms: list[Any] = []
    errors = []
    for number, row in enumerate(rows, start=1):
        term = str(row.get("term") or "")
        if not term.strip():
            errors.append(f"row {number}: write the word or phrase (or untick phrase)")
            continue
        terms.append({"term": term, "phrase": True} if row.get("phrase") else term)
    if errors:
        raise forms.ValidationError(errors)
    return terms


def _terms_rows(value: Any) -> list[dict]:
    rows = []
    for entry in value if isinstance(value, list) else ():
        if isinstance(entry, dict):
            rows.append({"term": entry.get("term", ""), "phrase": bool(entry.get("phrase"))})
        else:
            rows.append({"term": entry, "phrase": False})
    return rows


def identity_terms_field(**kwargs: Any) -> RowsField:
    columns = (Column("term", "Word or phrase", width="40"),
               Column("phrase", "Phrase (matched word by word across punctuation)", CHECK))
    return RowsField(
        columns, to_value=_terms_value, to_rows=_terms_rows, empty=list,
        legacy=lines_parse, label="Identity terms",
        help_text="Words or names that would reveal a system (matched as whole words, any "
                  "case), e.g. a product name; tick phrase for words matched in a row across "
                  "punctuation (e.g. generated by Acme). The systems' names and aliases (system "
                  "metadata aliases) and a built-in list of model and vendor names are searched "
                  "for too: see the blindness audit.", **kwargs)


# --- free settings: {name: value}, each value read as a number, true/false or text -------------
def _settings_value(rows: list[dict]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    first: dict[str, int] = {}
    errors = []
    for number, row in enumerate(rows, start=1):
        name = _text(row, "name")
        if not name:
            errors.append(f"row {number}: name the setting")
        elif name in first:
            errors.append(f"row {number}: {name!r} is given twice (first on row {first[name]})")
        else:
            first[name] = number
            found[name] = text_value(str(row.get("value") or ""))
    if errors:
        raise forms.ValidationError(errors)
    return found


def _settings_legacy(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return key_value_parse(text, what="setting")
    if not isinstance(value, dict):
        raise forms.ValidationError("expected settings as name and value rows")
    return value


def settings_field(*, label: str, help_text: str, names: Sequence[str] = (),
                   **kwargs: Any) -> RowsField:
    """Named settings of free values (a judge backend's, a learned proxy's parameters): a name
    (`names` are offered as suggestions in the help) and a value, read as a number, true, false
    or text (a list as it is written in JSON)."""
    columns = (Column("name", "Setting", width="24"), Column("value", "Value", width="40"))
    if names:
        help_text = f"{help_text} Settings: {', '.join(names)}."
    return RowsField(
        columns, to_value=_settings_value, empty=dict, legacy=_settings_legacy,
        to_rows=lambda value: [{"name": name, "value": value_text(item)} for name, item in
                               (value.items() if isinstance(value, dict) else ())],
        label=label, help_text=help_text, **kwargs)
