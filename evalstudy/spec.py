"""Study specifications and item files: parsing and validation, without Django.

A spec (YAML or JSON) describes a whole study; items and outputs may also come from CSV or
JSONL. Every problem is collected, not just the first, and each names the file, the line, the
field path and the reason, e.g. `demo.yaml:42: items[3].outputs: no output for system 'b'`.
Nothing here touches the database: `evalstudy.importers` writes a valid spec atomically.

Files come from people and scripts we do not control, so reading one is bounded (`SpecLimits`):
its size is checked before parsing, its nesting and node count while composing (before Python's
recursion limit or the memory is reached), its section lengths and study settings after; and
no character the database or a browser cannot take (control characters, NUL above all) gets
through. Each refusal is an ordinary located error, never a traceback.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
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


# --- limits ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecLimits:
    """Bounds on what a spec, an item file or a study may hold.

    The defaults are those of the settings named in `LIMIT_SETTINGS` (config/settings/base.py);
    Django code passes the configured values (`evalstudy.importers.spec_limits`). Each refusal
    names its setting, so whoever hits a bound knows which one to raise.
    """

    max_bytes: int = 5 * 1024 * 1024  # a spec's size; item sets belong in CSV/JSONL files
    max_depth: int = 32  # lists and mappings inside each other, the top mapping being 1
    max_nodes: int = 400_000  # values, lists and mappings, aliases counted expanded
    max_items: int = 100_000
    max_systems: int = 50
    max_criteria: int = 50
    max_ratings_per_output: int = 100
    max_lease_minutes: int = 7 * 24 * 60
    max_design_slots: int = 500_000  # rows study_open writes in one request


DEFAULT_LIMITS = SpecLimits()
LIMIT_SETTINGS = {
    "max_bytes": "EVALSTUDY_SPEC_MAX_BYTES",
    "max_depth": "EVALSTUDY_SPEC_MAX_DEPTH",
    "max_nodes": "EVALSTUDY_SPEC_MAX_NODES",
    "max_items": "EVALSTUDY_MAX_ITEMS",
    "max_systems": "EVALSTUDY_MAX_SYSTEMS",
    "max_criteria": "EVALSTUDY_MAX_CRITERIA",
    "max_ratings_per_output": "EVALSTUDY_MAX_RATINGS_PER_OUTPUT",
    "max_lease_minutes": "EVALSTUDY_MAX_LEASE_MINUTES",
    "max_design_slots": "EVALSTUDY_MAX_DESIGN_SLOTS",
}
# Above this, composing and constructing nested values would come near Python's recursion
# limit (several frames per level), which is what the depth limit is there to prevent.
MAX_DEPTH_CEILING = 100

# Study settings with bounds: name -> (minimum, SpecLimits attribute of the maximum). The
# minimums are the spec's own; the database holds ratings_per_output and items_per_rater to
# them with check constraints, which would otherwise answer a bad value with an IntegrityError.
SETTING_BOUNDS: dict[str, tuple[int, str]] = {
    "ratings_per_output": (1, "max_ratings_per_output"),
    "items_per_rater": (1, "max_items"),
    "lease_minutes": (1, "max_lease_minutes"),
    "attention_check_every": (0, "max_items"),
    "attention_fail_limit": (1, "max_items"),
}


def study_setting_problems(values: Mapping[str, Any], limits: SpecLimits) -> dict[str, str]:
    """Why each bounded study setting in `values` is out of bounds: name -> reason. Shared by
    the spec reader, the API's serializer, the admin's form and `study_validate`."""
    problems: dict[str, str] = {}
    for name, (minimum, attribute) in SETTING_BOUNDS.items():
        value = values.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            continue  # absent, nullable or of the wrong type: the field's own check says so
        maximum = getattr(limits, attribute)
        if value < minimum:
            problems[name] = f"must be at least {minimum}, got {value}"
        elif value > maximum:
            problems[name] = (f"must be at most {maximum} ({LIMIT_SETTINGS[attribute]}), "
                              f"got {value}")
    return problems


def show_if_problems(criteria: Sequence[tuple[str, str | None]]) -> dict[int, str]:
    """Why conditions are not allowed, for criteria given in the order raters answer them as
    (key, key of the show_if criterion or None): position -> reason.

    A condition is evaluated on the answers given so far, so it may name an earlier criterion
    only: on a later one (a cycle is always on a later one somewhere) it could never be met,
    and a cycle hides every question in it, so an empty form would complete the item.
    """
    keys = {key for key, _ in criteria}
    earlier: set[str] = set()
    problems: dict[int, str] = {}
    for position, (key, parent) in enumerate(criteria):
        if parent is None or parent in earlier:
            pass
        elif parent == key:
            problems[position] = f"names {key!r}, which is not another criterion"
        elif parent in keys:
            problems[position] = (
                f"names {parent!r}, which comes after it; a question can depend only on an "
                f"earlier one (move {parent!r} above {key!r})"
            )
        else:
            problems[position] = f"names {parent!r}, which is not another criterion"
        earlier.add(key)
    return problems


def check_spec_size(size: int, source: str, limits: SpecLimits = DEFAULT_LIMITS) -> None:
    """SpecInvalid when a spec of `size` bytes is over the limit; call it before reading."""
    if size > limits.max_bytes:
        raise SpecInvalid([SpecError(
            source, None, "", f"the spec is {size:,} bytes, over the limit of "
            f"{limits.max_bytes:,} bytes (EVALSTUDY_SPEC_MAX_BYTES); keep the study, systems "
            "and criteria in the spec and import the items from a CSV or JSONL file",
        )])


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


# Characters YAML does not allow in a file (PyYAML's own test): C0 and C1 controls but tab,
# newline, carriage return and NEL, DEL, surrogates and the non-characters U+FFFE/U+FFFF.
_NON_PRINTABLE = re.compile(
    "[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
# Controls that escapes (YAML "\0", "\e", "\x01"; JSON "\u0000") can still write into a
# string: PostgreSQL refuses NUL in text and JSON, and none of them belongs in rated text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_MAX_REPORTED = 20


def _code(character: str) -> str:
    return f"U+{ord(character):04X}"


def control_problem(text: str) -> str | None:
    """Why `text` (one string from a file) cannot be stored, or None."""
    match = _CONTROL.search(text)
    if match is None:
        return None
    return (f"the text holds the control character {_code(match.group())} (written as an "
            "escape such as \\0, \\x01 or \\u0000); only tab, newline and carriage return "
            "are allowed")


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


# libyaml's parser when PyYAML has it (about four times faster than PyYAML's own on a large
# spec), else PyYAML's. Both give the same events and marks; the composer and constructor
# below are PyYAML's Python ones either way, so the limits and line numbers hold for both.
USE_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


class _LimitReached(yaml.composer.ComposerError):
    """A SpecLimits bound was passed while composing: reported as such, not as broken YAML."""


class _CheckedComposer(yaml.composer.Composer):
    """PyYAML's composer, counting as it goes: it refuses a document nested deeper than
    `max_depth` or holding more than `max_nodes` nodes, at the line where the limit is passed
    and before the recursive composer and constructor get anywhere near Python's recursion
    limit or the memory does. An alias counts as every node it repeats and as deep as what it
    names, so an "alias bomb" (a few lines that expand to 10**9 values) is refused as well;
    an alias inside the node it names (a structure containing itself) is refused outright.
    """

    limits: SpecLimits

    def _start_counting(self, limits: SpecLimits) -> None:
        self.limits = limits
        self.nodes = 0
        self.depth = 0  # of the node being composed: lists and mappings around it
        self.deepest = 0  # deepest level reached inside the anchored node being composed
        self.extents: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, height)
        self.open_anchors: set[str] = set()
        self.line_marks: dict[int, yaml.Mark] = {}

    def _count(self, nodes: int, mark: yaml.Mark) -> None:
        self.nodes += nodes
        if self.nodes > self.limits.max_nodes:
            raise _LimitReached(None, None, (
                f"more than {self.limits.max_nodes:,} nodes (values, lists and mappings; an "
                "alias counts as everything it repeats; EVALSTUDY_SPEC_MAX_NODES); import "
                "large item sets from a CSV or JSONL file"), mark)

    def _reach(self, depth: int, mark: yaml.Mark) -> None:
        self.deepest = max(self.deepest, depth)
        if depth > self.limits.max_depth:
            raise _LimitReached(None, None, (
                f"nested deeper than {self.limits.max_depth} levels of lists and mappings "
                "(EVALSTUDY_SPEC_MAX_DEPTH; aliases count as what they repeat)"), mark)

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            if event.anchor in self.open_anchors:
                raise yaml.composer.ComposerError(None, None, (
                    f"the alias *{event.anchor} is inside the node it names (a structure that "
                    "contains itself)"), event.start_mark)
            if event.anchor in self.extents:  # else undefined: PyYAML's composer says so
                nodes, height = self.extents[event.anchor]
                self._count(nodes, event.start_mark)
                self._reach(self.depth + height, event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        self._count(1, event.start_mark)
        anchor = event.anchor if event.anchor not in self.anchors else None  # dup: PyYAML's
        if anchor is not None:
            nodes_before, outer_deepest = self.nodes - 1, self.deepest
            self.deepest = self.depth
            self.open_anchors.add(anchor)
        collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if collection:
            self.depth += 1
            self._reach(self.depth, event.start_mark)
        node = super().compose_node(parent, index)
        # Only the line of a mark is ever read: nodes of one line share one start mark, and
        # the end mark is dropped (a tenth of the memory of a large spec).
        node.start_mark = self.line_marks.setdefault(node.start_mark.line, node.start_mark)
        node.end_mark = None
        if collection:
            self.depth -= 1
        if anchor is not None:
            self.open_anchors.discard(anchor)
            self.extents[anchor] = (self.nodes - nodes_before, self.deepest - self.depth)
            self.deepest = max(outer_deepest, self.deepest)
        return node


class _LineConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor that remembers the line of every mapping key and sequence entry, and
    collects duplicate keys and strings with control characters (with their lines)."""

    duplicate_keys: list[tuple[int, Any]]
    control_errors: list[tuple[int, str]]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as error:  # 2024-02-30, a 5,000-digit number
            reason = str(error)
            if "digits" in reason:
                reason = f"a number longer than {sys.get_int_max_str_digits():,} digits"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {str(node.value)[:40]!r}: {reason}", node.start_mark,
            ) from None


def _construct_map(loader: _LineConstructor, node: yaml.MappingNode) -> _Map:
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


def _construct_str(loader: _LineConstructor, node: yaml.ScalarNode) -> str:
    """A string; JSON's UTF-16 escapes of characters beyond U+FFFF (\\ud83d\\ude00) joined."""
    value = loader.construct_scalar(node)
    if _SURROGATE.search(value):
        try:
            value = value.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a \\u escape is half of a UTF-16 surrogate pair", node.start_mark
            ) from None
    problem = control_problem(value)
    if problem is not None:
        loader.control_errors.append((node.start_mark.line + 1, problem))
    return value


def _construct_seq(loader: _LineConstructor, node: yaml.SequenceNode) -> _Seq:
    sequence = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    sequence.line = node.start_mark.line + 1
    sequence.item_lines = [child.start_mark.line + 1 for child in node.value]
    return sequence


_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)
_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG, _construct_str)


class _PyLoader(_CheckedComposer, yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                _LineConstructor, yaml.resolver.Resolver):
    def __init__(self, text: str):
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _LineConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


_CParser = getattr(getattr(yaml, "cyaml", None), "CParser", None)
if _CParser is not None:
    # The composer comes first: its Python methods (with the counting) win over the ones
    # libyaml's parser also offers, which compose in C with unbounded recursion.
    class _FastLoader(_CheckedComposer, _CParser, _LineConstructor, yaml.resolver.Resolver):
        def __init__(self, text: str):
            _CParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            _LineConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)


def _non_printable(text: str, source: str) -> list[SpecError]:
    """Characters YAML refuses, each with its line and column (PyYAML would raise one error
    with a character offset, outside any line the researcher can find)."""
    errors = []
    for match in _NON_PRINTABLE.finditer(text):
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        errors.append(SpecError(
            source, text.count("\n", 0, start) + 1, "",
            f"column {start - line_start + 1}: the character {_code(match.group())} is not "
            "allowed in a YAML or JSON file (a control character or a non-character); remove it",
        ))
        if len(errors) == _MAX_REPORTED:
            break
    return errors


class _BrokenYaml(Exception):
    """libyaml found the document broken: PyYAML's parser reads it again (see load_document)."""


def load_document(text: str, source: str, limits: SpecLimits = DEFAULT_LIMITS) -> Any:
    """Parse YAML (or JSON, which YAML reads too) keeping line numbers; SpecInvalid if broken,
    over the depth or node limits, or holding characters that cannot be stored.

    A document libyaml cannot parse is read again by PyYAML's own parser: its messages are
    the ones researchers and tests know ("expected ',' or ']', but got ':'"), and it accepts
    a few things libyaml refuses (a lone UTF-16 surrogate escape, which the constructor then
    names). Only broken files pay for the second reading, and it is bounded like the first.
    """
    errors = _non_printable(text, source)
    if errors:
        raise SpecInvalid(errors)
    if USE_LIBYAML and _CParser is not None:
        try:
            return _load(_FastLoader, text, source, limits, broken=_BrokenYaml)
        except _BrokenYaml:
            pass
    return _load(_PyLoader, text, source, limits, broken=None)


def _load(loader_class: Any, text: str, source: str, limits: SpecLimits,
          broken: type[Exception] | None) -> Any:
    loader: Any = None
    try:
        # Inside the try: PyYAML's reader checks the characters when it is created.
        loader = loader_class(text)
        loader._start_counting(limits)
        loader.duplicate_keys, loader.control_errors = [], []
        document = loader.get_single_data()
    except _LimitReached as error:
        line = error.problem_mark.line + 1 if error.problem_mark else None
        raise SpecInvalid([SpecError(source, line, "", str(error.problem))]) from None
    except yaml.YAMLError as error:
        if broken is not None:
            raise broken() from None
        if isinstance(error, yaml.MarkedYAMLError):
            mark = error.problem_mark or error.context_mark
            line = mark.line + 1 if mark else None
            problem = f"not valid YAML/JSON: {error.problem}"
            raise SpecInvalid([SpecError(source, line, "", problem)]) from None
        raise SpecInvalid([SpecError(source, None, "", f"not valid YAML/JSON: {error}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    problems = [(line, f"key {key!r} appears twice in the same mapping")
                for line, key in loader.duplicate_keys] + loader.control_errors
    if problems:
        raise SpecInvalid([SpecError(source, line, "", message)
                           for line, message in sorted(problems, key=lambda p: p[0])])
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
    if isinstance(value, list | tuple):  # tuples: the pairs of a YAML !!omap
        return [_plain(val) for val in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    # What YAML can write but a JSON field cannot hold (the database would refuse the row).
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number; a JSON field cannot hold it")
    if isinstance(value, set | frozenset):
        raise ValueError("a set (!!set) cannot be stored; write a list")
    if isinstance(value, bytes):
        raise ValueError("binary data (bytes, !!binary) cannot be stored; write text")
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


# Sections whose length is bounded: name -> the SpecLimits attribute bounding it.
SECTION_LIMITS = {"systems": "max_systems", "criteria": "max_criteria", "items": "max_items",
                  "calibration": "max_items", "attention_checks": "max_items"}


def parse_study_spec(text: str, source: str, limits: SpecLimits = DEFAULT_LIMITS) -> StudySpec:
    """Parse and validate a whole study spec; raises SpecInvalid listing every problem.

    Bounded by `limits`: the size is checked before parsing, nesting and nodes while
    composing, and the sections' lengths before their entries are validated.
    """
    check_spec_size(_utf8_size(text), source, limits)
    document = load_document(text, source, limits)
    reader = _Reader(source)
    top = reader.mapping(document, "", 1)
    if top is None:
        raise SpecInvalid(reader.errors)
    too_long = _Reader(source)
    for section, attribute in SECTION_LIMITS.items():
        entries, limit = top.get(section), getattr(limits, attribute)
        if isinstance(entries, list) and len(entries) > limit:
            advice = ("; import the items from a CSV or JSONL file"
                      if section == "items" else "")
            too_long.error(reader.line_of(top, section), section, (
                f"{len(entries):,} entries; a study may have at most {limit:,} "
                f"({LIMIT_SETTINGS[attribute]}){advice}"))
    if too_long.errors:  # validating every entry of an oversized section would be wasted
        raise SpecInvalid(too_long.errors)
    allowed = {"study", "systems", "criteria", "items", "calibration", "attention_checks"}
    for key in top:
        if key not in allowed:
            reader.error(reader.line_of(top, key), str(key),
                         f"unknown section; expected one of {', '.join(sorted(allowed))}")
    settings_map = reader.mapping(top.get("study"), "study", reader.line_of(top, "study"))
    settings = reader.fields(settings_map, "study", STUDY_FIELDS) if settings_map else {}
    for name, problem in study_setting_problems(settings, limits).items():
        reader.error(reader.line_of(settings_map, name), f"study.{name}", problem)

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
    chain = show_if_problems([(c.key, c.show_if_criterion) for c, _, _ in criteria])
    for position, (criterion, path, line) in enumerate(criteria):
        if criterion.show_if_criterion is None:
            continue
        if position in chain:
            reader.error(line, f"{path}.show_if", chain[position])
            continue
        parent = by_key[criterion.show_if_criterion]
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


def _too_many_items(source: str, line: int, limits: SpecLimits) -> SpecInvalid:
    return SpecInvalid([SpecError(
        source, line, "item", f"more than {limits.max_items:,} items (EVALSTUDY_MAX_ITEMS); "
        "a study may not have more",
    )])


def _parse_items_csv(text: str, source: str, limits: SpecLimits) -> list[ItemSpec]:
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
    reader = _Reader(source)
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
