"""Form fields that edit the JSON fields of studies without typing JSON: scale labels, options,
expected answers, metadata.

Each is a text box with one entry a line, so it works without JavaScript
(static/js/rows_editor.js shows it as rows of inputs with add and remove buttons, writing
the lines back into the box):

- key/value fields (metadata, expected answers, severity weights): `key = value`, the key
  JSON-quoted when it holds "=", starts with a quote or has spaces at either end
  (`"a=b" = value`), so that every key comes back as it was stored;
- lists (options, show_if values): one value a line;
- scale labels: `point = label` for anchors of named points (Likert, slider), or one label a
  line for a list (severity: levels 0, 1, 2 in order).

The whole box may also hold the field's JSON (an object or a list), as before.
A value is read as JSON when it is a JSON number, true/false/null, a quoted string, a list or
an object, and as text otherwise; a stored value is written back the same way (text that would
read as something else is quoted), so what is stored comes back exactly. Errors name the row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from django import forms

#: The model fields edited with these fields, by model field name (see `structured_field`).
KEY_VALUE, LINES, LABELS = "key_value", "lines", "labels"
STRUCTURED = {
    "metadata": KEY_VALUE, "expected": KEY_VALUE, "severity_weights": KEY_VALUE,
    "options": LINES, "show_if_values": LINES, "labels": LABELS,
}


# --- one value as text, and back ------------------------------------------------------------
def _edged(text: str) -> bool:
    """Whether `text` has, at either end, a character that Python's strip() or JavaScript's
    trim() removes (rows_editor.js trims what it reads: the two must agree on what is kept)."""
    return any(c.isspace() or c == "\ufeff" for c in (text[:1], text[-1:]) if c)


def _breaks_line(text: str) -> bool:
    return "\n" in text or "\r" in text


def value_text(value: Any) -> str:
    """A JSON value as it is written in a box: text as itself unless it would read back as
    something else (then JSON-quoted); anything else as compact JSON."""
    if isinstance(value, str):
        if value == "" or _edged(value) or _breaks_line(value):
            return json.dumps(value, ensure_ascii=False)
        try:
            json.loads(value)
        except ValueError:
            return value
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def text_value(text: str) -> Any:
    """The value a box's text stands for (the inverse of `value_text`)."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _rows(text: str) -> list[tuple[int, str]]:
    """(row number from 1, line) for each line that is not blank. Lines end at line feeds
    only (as the browser's rows editor splits them), not at the other characters that
    str.splitlines() breaks at (U+2028, U+0085, ...): those stay inside a key or value."""
    lines = (text or "").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def _split_key(line: str) -> tuple[str, bool, str, bool]:
    """(key, found "=", the value's text, key was quoted) of a `key = value` line: the key
    before the first "=", trimmed, or a JSON-quoted key taken exactly as written."""
    stripped = line.lstrip()
    if stripped.startswith('"'):
        try:
            key, end = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            pass
        else:
            rest = stripped[end:].lstrip()
            if isinstance(key, str) and rest.startswith("="):
                return key, True, rest[1:], True
    key, sep, raw = line.partition("=")
    return key.strip(), bool(sep), raw, False


def _key_text(key: str) -> str:
    """A key as written before " = ": quoted when it would not read back as itself."""
    if not key or "=" in key or _edged(key) or key.startswith('"') or _breaks_line(key):
        return json.dumps(key, ensure_ascii=False)
    return key


def key_value_parse(text: str, *, what: str = "key") -> dict[str, Any]:
    """`key = value` lines as a dict; ValidationError listing every bad row."""
    result: dict[str, Any] = {}
    first: dict[str, int] = {}
    errors = []
    for number, line in _rows(text):
        key, sep, raw, quoted = _split_key(line)
        if not sep:
            errors.append(f"row {number}: write {what} = value (no '=' in {line.strip()!r})")
            continue
        if not key and not quoted:
            errors.append(f"row {number}: the {what} before '=' is empty")
            continue
        if key in first:
            errors.append(f"row {number}: {what} {key!r} appears twice (first on row "
                          f"{first[key]})")
            continue
        first[key] = number
        result[key] = text_value(raw)
    if errors:
        raise forms.ValidationError(errors)
    return result


def key_value_text(value: Mapping[str, Any] | None) -> str:
    return "\n".join(f"{_key_text(key)} = {value_text(item)}"
                     for key, item in (value or {}).items())


def lines_parse(text: str) -> list[Any]:
    return [text_value(line) for _, line in _rows(text)]


def lines_text(value: list[Any] | None) -> str:
    return "\n".join(value_text(item) for item in value or [])


_POINT = re.compile(r"\s*-?\d+\s*=")


def labels_parse(text: str) -> list[Any] | dict[str, Any]:
    """Anchors `point = label` (a dict, points whole numbers) or one label a line (a list),
    not both."""
    rows = _rows(text)
    named = [number for number, line in rows if _POINT.match(line)]
    if not named:
        return [text_value(line) for _, line in rows]
    plain = [number for number, line in rows if not _POINT.match(line)]
    if plain:
        raise forms.ValidationError(
            [f"row {number}: write point = label like the other rows, the point a whole number "
             "(or no point on any row for a list of labels)" for number in plain])
    return key_value_parse(text, what="point")


def labels_text(value: list[Any] | Mapping[str, Any] | None) -> str:
    if isinstance(value, Mapping):
        return key_value_text(value)
    return lines_text(list(value or []))


# --- the form fields ------------------------------------------------------------------------
class RowsTextarea(forms.Textarea):
    """A text box of one entry a line, marked for static/js/rows_editor.js to show as rows."""

    class Media:
        js = ("js/rows_editor.js",)
        css = {"all": ("css/admin.css",)}

    def __init__(self, kind: str, attrs: dict[str, Any] | None = None):
        super().__init__(attrs={"rows": 3, "cols": 40, "class": "vLargeTextField rows-editor",
                                "data-rows": kind, "spellcheck": "false", **(attrs or {})})


# Each kind's own reader and writer (their value types differ, hence the wide annotations).
_PARSE: dict[str, Callable[[str], Any]] = {
    KEY_VALUE: key_value_parse, LINES: lines_parse, LABELS: labels_parse}
_TEXT: dict[str, Callable[[Any], str]] = {
    KEY_VALUE: key_value_text, LINES: lines_text, LABELS: labels_text}
_EMPTY: dict[str, Any] = {KEY_VALUE: dict, LINES: list, LABELS: list}
_HELP = {
    KEY_VALUE: "One per line: key = value.",
    LINES: "One per line.",
    LABELS: "One per line: point = label (e.g. 1 = poor, 5 = excellent), or the labels alone "
            "in order (severity: three lines, levels 0, 1, 2).",
}
# In place of the model's help, which shows the JSON these fields hold.
_FIELD_HELP = {
    "expected": "criterion key = expected answer (a slider may take a range, e.g. 0..30).",
    "severity_weights": "Span: severity = weight (blank: minor 1, major 5, critical 25).",
    "options": "Categorical options; span criteria: the error categories.",
    "show_if_values": "The answers of the show-if criterion that show this one.",
    "metadata": "E.g. speaker = S01.",
}


def _whole_json(text: str, kinds: type | tuple[type, ...]) -> Any:
    """The box's text as one JSON object or list of the field's type, as the JSON text box
    took it before (scripts and old bookmarks post that), else None."""
    text = text.strip()
    if text[:1] not in ("{", "[") or ("\n" in text and not text.endswith(("}", "]"))):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, kinds) else None


class StructuredField(forms.Field):
    """A JSON model field edited as lines (see the module's docstring)."""

    def __init__(self, kind: str, *, help_text: str = "", **kwargs: Any):
        self.kind = kind
        kwargs.setdefault("widget", RowsTextarea(kind))
        kwargs.setdefault("required", False)
        help_text = f"{_HELP[kind]} {help_text}".strip()
        super().__init__(help_text=help_text, **kwargs)

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, str):  # the posted text, shown again with its errors
            return value
        return _TEXT[self.kind](value)

    def to_python(self, value: Any) -> Any:
        if value is None or not isinstance(value, str):
            return value if value is not None else _EMPTY[self.kind]()
        if not value.strip():
            return _EMPTY[self.kind]()
        whole = _whole_json(value, dict if self.kind == KEY_VALUE else
                            list if self.kind == LINES else (dict, list))
        return whole if whole is not None else _PARSE[self.kind](value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != (initial if initial is not None
                                            else _EMPTY[self.kind]())
        except forms.ValidationError:
            return True


def structured_field(db_field: Any, **kwargs: Any) -> StructuredField | None:
    """The structured field for a model JSON field named in `STRUCTURED`, else None (for a
    ModelAdmin's formfield_for_dbfield)."""
    kind = STRUCTURED.get(db_field.name)
    if kind is None or db_field.get_internal_type() != "JSONField":
        return None
    return StructuredField(kind, label=kwargs.get("label") or db_field.verbose_name.capitalize(),
                           help_text=_FIELD_HELP.get(db_field.name, ""))


class StructuredFieldsMixin:
    """For ModelAdmins and inlines: the JSON fields of `STRUCTURED` edited as lines."""

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = structured_field(db_field)
        if field is not None:
            return field
        return super().formfield_for_dbfield(db_field, request, **kwargs)
