"""Study specifications and item files: parsing and validation, without Django.

A spec (YAML or JSON) describes a whole study; items and outputs may also come from CSV or
JSONL. Every problem is collected, not just the first, and each names the file, the line, the
field path and the reason, e.g. `demo.yaml:42: items[3].outputs: no output for system 'b'`.
Nothing here touches the database: `evalstudy.importers` writes a valid spec atomically.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import criteria as rules

DESIGNS = ("latin_square", "crossed", "pairwise")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_FIELD_CHARS = 1_000_000
# The csv module refuses fields over 131,072 characters by default; allow what the spec allows
# (a long context passage is legitimate) and name the limit ourselves when it is exceeded.
csv.field_size_limit(MAX_FIELD_CHARS)
# Byte-order marks of the encodings spreadsheets save as "Unicode text".
_OTHER_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32",
               b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


# --- errors -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecError:
    source: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source + (f":{self.line}" if self.line else "")
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecInvalid(Exception):
    """Raised with every problem found; nothing was imported."""

    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        super().__init__("\n".join(str(error) for error in errors))


# --- parsed shapes --------------------------------------------------------------------------
@dataclass
class SystemSpec:
    name: str
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class CriterionSpec:
    key: str
    kind: str
    prompt: str
    description: str = ""
    scale_points: int | None = None
    labels: list[str] | dict[str, str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    allow_tie: bool = False
    required: bool = True
    show_if_criterion: str | None = None
    show_if_values: list[str] = field(default_factory=list)


@dataclass
class ItemSpec:
    external_id: str
    reference: str = ""
    context: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    line: int | None = field(default=None, compare=False)


@dataclass
class ControlSpec:
    key: str
    reference: str = ""
    context: str = ""
    text: str = ""
    text_b: str = ""
    expected: dict[str, str] = field(default_factory=dict)
    feedback: str = ""


@dataclass
class StudySpec:
    settings: dict[str, Any]
    systems: list[SystemSpec]
    criteria: list[CriterionSpec]
    items: list[ItemSpec]
    calibration: list[ControlSpec] = field(default_factory=list)
    attention_checks: list[ControlSpec] = field(default_factory=list)


def _kind(value: Any) -> str:
    """What a value is, in the words of the file (not the loader's class names)."""
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# The study settings a spec may give: name -> (check, default). A check returns the cleaned
# value or raises ValueError with the reason.
def _str(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected text, got {_kind(value)}")
    text = str(value)
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"longer than {MAX_FIELD_CHARS} characters")
    return text


def _int(minimum: int, nullable: bool = False) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _slug(value: Any) -> str:
    text = _str(value)
    if not SLUG_RE.match(text) or len(text) > 80:
        raise ValueError(f"{text!r} is not a slug (lowercase letters, digits, - and _)")
    return text


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(options)}")
        return str(value)

    return check


def _url(value: Any) -> str:
    text = _str(value)
    if text and not re.match(r"^https?://[^\s]+$", text):
        raise ValueError(f"{text!r} is not an http(s) URL")
    if len(text) > 500:  # Study.completion_url's max_length
        raise ValueError("longer than 500 characters")
    return text


def _short(limit: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = _str(value)
        if len(text) > limit:
            raise ValueError(f"longer than {limit} characters")
        return text

    return check


_REQUIRED = object()
STUDY_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "slug": (_slug, _REQUIRED),
    "title": (_short(200), _REQUIRED),
    "instructions": (_str, ""),
    "consent_text": (_str, ""),
    "design": (_choice(DESIGNS), "latin_square"),
    "ratings_per_output": (_int(1), 1),
    "items_per_rater": (_int(1, nullable=True), None),
    "randomise_order": (_bool, True),
    "reference_shown": (_bool, True),
    "completion_url": (_url, ""),
    "completion_code": (_short(64), ""),
    "screen_out_url": (_url, ""),
    "screen_out_code": (_short(64), ""),
    "lease_minutes": (_int(1), 60),
    "attention_check_every": (_int(0), 0),
    "attention_fail_limit": (_int(1, nullable=True), None),
    "allow_revision": (_bool, True),
    "encoder_path": (_short(500), ""),
}


# --- YAML with line numbers -------------------------------------------------------------------
class _Map(dict):  # type: ignore[type-arg]
    line: int = 0
    key_lines: dict[Any, int]


class _Seq(list):  # type: ignore[type-arg]
    line: int = 0
    item_lines: list[int]


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key and sequence entry."""

    duplicate_keys: list[tuple[int, Any]]


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    mapping = _Map()
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool):
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be plain values", key_node.start_mark
            )
        if key in mapping:
            loader.duplicate_keys.append((key_node.start_mark.line + 1, key))
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = key_node.start_mark.line + 1
    return mapping


_SURROGATE = re.compile("[\ud800-\udfff]")


def _construct_str(loader: _LineLoader, node: yaml.ScalarNode) -> str:
    """A string; JSON's UTF-16 escapes of characters beyond U+FFFF (\\ud83d\\ude00) joined."""
    value = loader.construct_scalar(node)
    if _SURROGATE.search(value):
        try:
            value = value.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a \\u escape is half of a UTF-16 surrogate pair", node.start_mark
            ) from None
    return value


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _Seq:
    sequence = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    sequence.line = node.start_mark.line + 1
    sequence.item_lines = [child.start_mark.line + 1 for child in node.value]
    return sequence


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG, _construct_str)


def load_document(text: str, source: str) -> Any:
    """Parse YAML (or JSON, which YAML reads too) keeping line numbers; SpecInvalid if broken."""
    loader = _LineLoader(text)
    loader.duplicate_keys = []
    try:
        document = loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        problem = f"not valid YAML/JSON: {error.problem}"
        raise SpecInvalid([SpecError(source, line, "", problem)]) from None
    except yaml.YAMLError as error:
        raise SpecInvalid([SpecError(source, None, "", f"not valid YAML/JSON: {error}")]) from None
    finally:
        loader.dispose()
    if loader.duplicate_keys:
        raise SpecInvalid([
            SpecError(source, line, "", f"key {key!r} appears twice in the same mapping")
            for line, key in loader.duplicate_keys
        ])
    return document


def decode(data: bytes, source: str) -> str:
    """Bytes of an uploaded or read file as text: UTF-8 (a BOM is allowed), else SpecInvalid
    saying why (another encoding, or not text at all)."""
    for bom, name in _OTHER_BOMS.items():
        if data.startswith(bom):
            raise SpecInvalid([SpecError(
                source, 1, "", f"the file is {name} (it starts with a {name} byte-order mark); "
                "save it as UTF-8 (in a spreadsheet: CSV UTF-8) and try again",
            )])
    offset = data.find(b"\x00")  # never in UTF-8 text; in every binary format
    if offset >= 0:
        raise SpecInvalid([SpecError(
            source, data[:offset].count(b"\n") + 1, "",
            f"this is not a text file (a NUL byte at offset {offset}); expected UTF-8 text: "
            "CSV, JSONL, YAML or JSON",
        )])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SpecInvalid([SpecError(
            source, data[: error.start].count(b"\n") + 1, "",
            f"the file is not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "save it as UTF-8 and try again",
        )]) from None


# --- a small reader that records errors with their place -------------------------------------
class _Reader:
    def __init__(self, source: str):
        self.source = source
        self.errors: list[SpecError] = []

    def error(self, line: int | None, path: str, message: str) -> None:
        self.errors.append(SpecError(self.source, line, path, message))

    @staticmethod
    def line_of(container: Any, key: Any = None) -> int | None:
        if isinstance(container, _Map):
            return container.key_lines.get(key, container.line) if key is not None else (
                container.line
            )
        if isinstance(container, _Seq) and isinstance(key, int):
            return container.item_lines[key]
        return getattr(container, "line", None)

    def mapping(self, value: Any, path: str, line: int | None) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.error(line, path, f"expected a mapping, got {_kind(value)}")
            return None
        return value

    def sequence(self, value: Any, path: str, line: int | None) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(line, path, f"expected a list, got {_kind(value)}")
            return []
        return value

    def fields(
        self, mapping: dict[str, Any], path: str, known: dict[str, tuple[Callable[[Any], Any], Any]]
    ) -> dict[str, Any]:
        """Check `mapping` against `known` (name -> (check, default)); unknown keys are errors."""
        cleaned: dict[str, Any] = {}
        for key in mapping:
            if key not in known:
                self.error(self.line_of(mapping, key), f"{path}.{key}",
                           f"unknown field; expected one of {', '.join(known)}")
        for name, (check, default) in known.items():
            if name not in mapping or (mapping[name] is None and default is not _REQUIRED):
                if default is _REQUIRED:
                    self.error(self.line_of(mapping), path, f"missing required field {name!r}")
                else:
                    cleaned[name] = default() if callable(default) else default
                continue
            try:
                cleaned[name] = check(mapping[name])
            except ValueError as error:
                self.error(self.line_of(mapping, name), f"{path}.{name}", str(error))
        return cleaned

    def entries(self, document: dict[str, Any], key: str) -> Iterator[tuple[int, Any, str, int]]:
        """(index, entry, path, line) for each entry of the list at document[key]."""
        seq = self.sequence(document.get(key), key, self.line_of(document, key))
        for index, entry in enumerate(seq):
            yield index, entry, f"{key}[{index}]", self.line_of(seq, index) or 0


def _key(value: Any, limit: int = 200) -> str:
    text = _str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    if len(text) > limit:
        raise ValueError(f"longer than {limit} characters")
    return text


def _key_of(limit: int) -> Callable[[Any], str]:
    """A key at most `limit` characters long (the database column's max_length)."""
    return lambda value: _key(value, limit)


def _metadata(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping, got {_kind(value)}")
    return {str(key): _plain(val) for key, val in value.items()}


def _plain(value: Any) -> Any:
    """Loader containers back to plain dict/list (for JSON fields and comparisons).

    YAML reads an unquoted 2024-01-31 as a date, which a JSON field cannot store: it is kept
    as the ISO text it was written as.
    """
    if isinstance(value, dict):
        return {str(key): _plain(val) for key, val in value.items()}
    if isinstance(value, list):
        return [_plain(val) for val in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list, got {_kind(value)}")
    return [_str(v) for v in value]


def _labels(value: Any) -> list[str] | dict[str, str]:
    if isinstance(value, dict):
        return {str(key): _str(val) for key, val in value.items()}
    return _str_list(value)


def _show_if(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "criterion" not in value or (
        ("in" in value) == ("equals" in value)
    ):
        raise ValueError("expected {criterion: KEY, in: [VALUES]} or {criterion: KEY, equals: V}")
    values = value["in"] if "in" in value else [value["equals"]]
    if not isinstance(values, list) or not values:
        raise ValueError("'in' must be a non-empty list of values")
    return {"criterion": _str(value["criterion"]), "values": list(values)}


CRITERION_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "key": (_key_of(60), _REQUIRED),
    "kind": (_choice(rules.KINDS), _REQUIRED),
    "prompt": (_str, _REQUIRED),
    "description": (_str, ""),
    "scale_points": (_int(1, nullable=True), None),
    "labels": (_labels, list),
    "options": (_str_list, list),
    "allow_tie": (_bool, False),
    "required": (_bool, True),
    "show_if": (_show_if, None),
}
SYSTEM_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "name": (_key_of(100), _REQUIRED),
    "description": (_str, ""),
    "metadata": (_metadata, dict),
}
ITEM_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "id": (_key, _REQUIRED),
    "reference": (_str, ""),
    "context": (_str, ""),
    "metadata": (_metadata, dict),
    "outputs": (lambda v: {str(k): _str(t) for k, t in _metadata(v).items()}, dict),
}
CONTROL_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "id": (_key_of(100), _REQUIRED),
    "reference": (_str, ""),
    "context": (_str, ""),
    "output": (_str, None),
    "output_a": (_str, None),
    "output_b": (_str, None),
    "expected": (_metadata, dict),
    "feedback": (_str, ""),
}


def _unique(reader: _Reader, keys: list[tuple[str, str, int]], what: str) -> None:
    seen: dict[str, int] = {}
    for key, path, line in keys:
        if key in seen:
            reader.error(line, path, f"duplicate {what} {key!r} (first at line {seen[key]})")
        else:
            seen[key] = line


def parse_study_spec(text: str, source: str) -> StudySpec:
    """Parse and validate a whole study spec; raises SpecInvalid listing every problem."""
    document = load_document(text, source)
    reader = _Reader(source)
    top = reader.mapping(document, "", 1)
    if top is None:
        raise SpecInvalid(reader.errors)
    allowed = {"study", "systems", "criteria", "items", "calibration", "attention_checks"}
    for key in top:
        if key not in allowed:
            reader.error(reader.line_of(top, key), str(key),
                         f"unknown section; expected one of {', '.join(sorted(allowed))}")
    settings_map = reader.mapping(top.get("study"), "study", reader.line_of(top, "study"))
    settings = reader.fields(settings_map, "study", STUDY_FIELDS) if settings_map else {}

    systems = []
    for _, entry, path, line in reader.entries(top, "systems"):
        if (mapping := reader.mapping(entry, path, line)) is not None:
            values = reader.fields(mapping, path, SYSTEM_FIELDS)
            if "name" in values:
                systems.append((SystemSpec(**values), path, line))
    _unique(reader, [(s.name, p, line) for s, p, line in systems], "system name")
    system_names = {s.name for s, _, _ in systems}

    criteria = []
    for _, entry, path, line in reader.entries(top, "criteria"):
        if (mapping := reader.mapping(entry, path, line)) is None:
            continue
        values = reader.fields(mapping, path, CRITERION_FIELDS)
        if not {"key", "kind", "prompt"} <= values.keys():
            continue
        show_if = values.pop("show_if", None)  # absent when it was invalid (reported)
        criterion = CriterionSpec(**values)
        if show_if:
            criterion.show_if_criterion = show_if["criterion"]
            criterion.show_if_values = show_if["values"]
        for problem in rules.check_rule(
            criterion.kind, scale_points=criterion.scale_points, labels=criterion.labels,
            options=criterion.options,
        ):
            reader.error(line, path, problem)
        if not KEY_RE.match(criterion.key):
            reader.error(line, f"{path}.key", "use letters, digits, - and _ only")
        criteria.append((criterion, path, line))
    _unique(reader, [(c.key, p, line) for c, p, line in criteria], "criterion key")
    by_key = {c.key: c for c, _, _ in criteria}
    for criterion, path, line in criteria:
        if criterion.show_if_criterion is None:
            continue
        parent = by_key.get(criterion.show_if_criterion)
        if parent is None or parent is criterion:
            reader.error(line, f"{path}.show_if",
                         f"names {criterion.show_if_criterion!r}, which is not another criterion")
            continue
        cleaned = []
        for value in criterion.show_if_values:
            try:
                cleaned.append(_rule(parent).normalise(value))
            except ValueError as error:
                reader.error(line, f"{path}.show_if", f"value for {parent.key!r}: {error}")
        criterion.show_if_values = cleaned

    items = []
    for _, entry, path, line in reader.entries(top, "items"):
        if (mapping := reader.mapping(entry, path, line)) is None:
            continue
        item = _item_from_mapping(reader, mapping, path, line)
        if item is not None:
            items.append((item, path, line))
    _unique(reader, [(i.external_id, p, line) for i, p, line in items], "item id")
    for item, path, line in items:
        _check_outputs(reader, item, system_names, path, line)

    controls: dict[str, list[ControlSpec]] = {}
    design = settings.get("design", "latin_square")
    for section in ("calibration", "attention_checks"):
        parsed = []
        for _, entry, path, line in reader.entries(top, section):
            if (mapping := reader.mapping(entry, path, line)) is None:
                continue
            control = _control_from_mapping(reader, mapping, path, line, design, by_key)
            if control is not None:
                parsed.append((control, path, line))
        _unique(reader, [(c.key, p, line) for c, p, line in parsed], f"{section} id")
        controls[section] = [c for c, _, _ in parsed]

    if not settings_map:
        pass
    elif design == "pairwise" and len(systems) < 2:
        reader.error(reader.line_of(top, "systems"), "systems", "pairwise needs 2 or more systems")
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return StudySpec(
        settings=settings, systems=[s for s, _, _ in systems],
        criteria=[c for c, _, _ in criteria], items=[i for i, _, _ in items],
        calibration=controls["calibration"], attention_checks=controls["attention_checks"],
    )


def _rule(criterion: CriterionSpec) -> rules.CriterionRule:
    return rules.CriterionRule(
        kind=criterion.kind, scale_points=criterion.scale_points,
        options=tuple(criterion.options), allow_tie=criterion.allow_tie,
    )


def _item_from_mapping(
    reader: _Reader, mapping: dict[str, Any], path: str, line: int
) -> ItemSpec | None:
    values = reader.fields(mapping, path, ITEM_FIELDS)
    if values.keys() != ITEM_FIELDS.keys():  # a field is missing or invalid (reported)
        return None
    return ItemSpec(
        external_id=values["id"], reference=values["reference"], context=values["context"],
        metadata=values["metadata"], outputs=values["outputs"], line=line,
    )


def _check_outputs(
    reader: _Reader, item: ItemSpec, system_names: set[str], path: str, line: int | None
) -> None:
    for name in item.outputs:
        if name not in system_names:
            reader.error(line, f"{path}.outputs",
                         f"output for {name!r}, which is not a system of the study")
    for name in sorted(system_names - item.outputs.keys()):
        reader.error(line, f"{path}.outputs", f"no output for system {name!r}")


def _control_from_mapping(
    reader: _Reader, mapping: dict[str, Any], path: str, line: int, design: str,
    criteria: dict[str, CriterionSpec],
) -> ControlSpec | None:
    values = reader.fields(mapping, path, CONTROL_FIELDS)
    if values.keys() != CONTROL_FIELDS.keys():  # a field is missing or invalid (reported)
        return None
    if design == "pairwise":
        if values["output_a"] is None or values["output_b"] is None:
            reader.error(line, path, "a pairwise study needs output_a and output_b")
        text, text_b = values["output_a"] or "", values["output_b"] or ""
    else:
        if values["output"] is None:
            reader.error(line, path, "missing required field 'output'")
        text, text_b = values["output"] or "", ""
    expected: dict[str, str] = {}
    for key, raw in values["expected"].items():
        criterion = criteria.get(key)
        if criterion is None:
            reader.error(line, f"{path}.expected.{key}", "not a criterion of the study")
            continue
        try:
            expected[key] = _rule(criterion).normalise(raw)
        except ValueError as error:
            reader.error(line, f"{path}.expected.{key}", str(error))
    return ControlSpec(
        key=values["id"], reference=values["reference"], context=values["context"], text=text,
        text_b=text_b, expected=expected, feedback=values["feedback"],
    )


# --- items from CSV / JSONL ---------------------------------------------------------------------
ITEM_CSV_REQUIRED = ("item", "system", "output")
ITEM_CSV_OPTIONAL = ("reference", "context")


def parse_items_file(text: str, source: str, fmt: str) -> list[ItemSpec]:
    """Items with outputs from CSV (one row per item x system) or JSONL (one item per line).

    CSV columns: item, system, output, optional reference and context; any other column is
    item metadata (a `meta.` prefix is stripped). Rows of one item must agree on reference,
    context and metadata. JSONL lines use the spec's item shape: {"id", "reference", "context",
    "metadata", "outputs": {system: text}}.
    """
    if fmt == "jsonl":
        return _parse_items_jsonl(text, source)
    if fmt == "csv":
        return _parse_items_csv(text, source)
    raise SpecInvalid([SpecError(source, None, "", f"unknown format {fmt!r}; use csv or jsonl")])


def _csv_rows(text: str, source: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
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


def _parse_items_csv(text: str, source: str) -> list[ItemSpec]:
    reader = _Reader(source)
    items: dict[str, ItemSpec] = {}
    first_line: dict[tuple[str, str], int] = {}
    for line, row in _csv_rows(text, source, ITEM_CSV_REQUIRED):
        item_id, system = row["item"].strip(), row["system"].strip()
        if not item_id or not system:
            reader.error(line, "item" if not item_id else "system", "must not be empty")
            continue
        meta = {
            name.removeprefix("meta."): value for name, value in row.items()
            if name not in ITEM_CSV_REQUIRED + ITEM_CSV_OPTIONAL and value != ""
        }
        fields = {
            "reference": row.get("reference") or "", "context": row.get("context") or "",
            "metadata": meta,
        }
        item = items.get(item_id)
        if item is None:
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
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return list(items.values())


def _parse_items_jsonl(text: str, source: str) -> list[ItemSpec]:
    reader = _Reader(source)
    items: list[ItemSpec] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            reader.error(number, "", f"not valid JSON: {error.msg} (column {error.colno})")
            continue
        if (mapping := reader.mapping(record, f"line {number}", number)) is None:
            continue
        # A JSON object has no line marks: every key of it is on this line.
        located = _Map(mapping)
        located.line, located.key_lines = number, dict.fromkeys(mapping, number)
        item = _item_from_mapping(reader, located, "item", number)
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
    reader = _Reader(source)
    for item in items:
        _check_outputs(reader, item, system_names, f"item {item.external_id!r}", item.line)
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
    reader = _Reader(source)
    rows = []
    for line, row in _csv_rows(text, source, JUDGMENT_CSV_REQUIRED):
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


def plain(value: Any) -> Any:
    """Public alias used by the exporter: loader containers to plain Python."""
    return _plain(value)
