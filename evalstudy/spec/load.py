"""Reading a file's text: bytes to text (UTF-8 only, saying why not), and YAML or JSON with the
line of every key and entry, bounded by `SpecLimits` while it is composed."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import yaml

from .errors import SpecError, SpecInvalid
from .limits import DEFAULT_LIMITS, SpecLimits, char_code, control_problem

# Byte-order marks of the encodings spreadsheets save as "Unicode text".
_OTHER_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32",
               b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
# Characters YAML does not allow in a file (PyYAML's own test): C0 and C1 controls but tab,
# newline, carriage return and NEL, DEL, surrogates and the non-characters U+FFFE/U+FFFF.
_NON_PRINTABLE = re.compile(
    "[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_MAX_REPORTED = 20


class LineMap(dict[Any, Any]):
    line: int = 0
    key_lines: dict[Any, int]


class LineList(list[Any]):
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
    # The parser's event methods, which this composer reads as a mixin of the loader below
    # (PyYAML's stubs declare them on the Parser, not on the Composer).
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]

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

    def compose_node(self, parent: Any, index: Any) -> yaml.Node | None:
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
        if node is None:
            return None
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


def _construct_map(loader: _LineConstructor, node: yaml.MappingNode) -> LineMap:
    loader.flatten_mapping(node)
    mapping = LineMap()
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


def _construct_seq(loader: _LineConstructor, node: yaml.SequenceNode) -> LineList:
    sequence = LineList(loader.construct_object(child, deep=True) for child in node.value)
    sequence.line = node.start_mark.line + 1
    sequence.item_lines = [child.start_mark.line + 1 for child in node.value]
    return sequence


# types-PyYAML types a constructor's loader as the loader class it is added to; these take the
# subclass they are added to, which the stubs' type variable cannot express.
_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_map)  # type: ignore[type-var]
_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
                                 _construct_seq)  # type: ignore[type-var]
_LineConstructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG,
                                 _construct_str)  # type: ignore[type-var]


class _PyLoader(_CheckedComposer, yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                _LineConstructor, yaml.resolver.Resolver):
    def __init__(self, text: str):
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _LineConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


# None when PyYAML was built without libyaml; a class (typed loosely: its stubs are optional).
_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)
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
            f"column {start - line_start + 1}: the character {char_code(match.group())} is not "
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
