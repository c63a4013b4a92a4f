"""A whole study spec (YAML or JSON): its parsed shapes and `parse_study_spec`, which checks
every section and how they relate (outputs for every system, show_if on earlier criteria,
expected answers of calibration and attention items)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import criteria as rules
from .errors import SpecInvalid
from .fields import (
    CONTROL_FIELDS,
    CRITERION_FIELDS,
    ITEM_FIELDS,
    PAIRWISE_DESIGNS,
    STUDY_FIELDS,
    SYSTEM_FIELDS,
    Reader,
)
from .limits import (
    DEFAULT_LIMITS,
    LIMIT_SETTINGS,
    SpecLimits,
    check_spec_size,
    study_setting_problems,
)
from .load import load_document
from .plan import PlanSpec, parse_plan

KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")


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
    allow_both: bool = False
    required: bool = True
    show_if_criterion: str | None = None
    show_if_values: list[str] = field(default_factory=list)
    scale_min: int | None = None
    scale_max: int | None = None
    severity_weights: dict[str, Any] = field(default_factory=dict)
    span_reference: bool = False


@dataclass
class ItemSpec:
    external_id: str
    reference: str = ""
    context: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    line: int | None = field(default=None, compare=False)
    # Media files (evalstudy.media): the item's, and per system its output's; a path in the
    # media archive or directory, or an https URL.
    media: str = ""
    output_media: dict[str, str] = field(default_factory=dict)
    # Where each media reference was written, when not on `line` (a CSV's output_media, per
    # system, is on the output's row).
    media_lines: dict[str, int] = field(default_factory=dict, compare=False)


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
    # The adaptive design's pre-registered stopping rule (None: the file has no plan block).
    plan: PlanSpec | None = None


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


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _unique(reader: Reader, keys: list[tuple[str, str, int]], what: str) -> None:
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
    reader = Reader(source)
    top = reader.mapping(document, "", 1)
    if top is None:
        raise SpecInvalid(reader.errors)
    too_long = Reader(source)
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
    allowed = {"study", "systems", "criteria", "items", "calibration", "attention_checks",
               "plan"}
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
            options=criterion.options, scale_min=criterion.scale_min,
            scale_max=criterion.scale_max, severity_weights=criterion.severity_weights,
            span_reference=criterion.span_reference, allow_both=criterion.allow_both,
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
        item = item_from_mapping(reader, mapping, path, line)
        if item is not None:
            items.append((item, path, line))
    _unique(reader, [(i.external_id, p, line) for i, p, line in items], "item id")
    for item, path, line in items:
        check_outputs(reader, item, system_names, path, line)

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

    plan = parse_plan(reader, top, design=design, systems=system_names,
                      criterion_kinds={c.key: c.kind for c, _, _ in criteria})

    if not settings_map:
        pass
    elif design in PAIRWISE_DESIGNS and len(systems) < 2:
        reader.error(reader.line_of(top, "systems"), "systems", f"{design} needs 2 or more systems")
    for kind in rules.all_kinds():
        if not kind.one_per_study:
            continue
        of_kind = [(path, line) for criterion, path, line in criteria
                   if criterion.kind == kind.name]
        for path, line in of_kind[1:]:
            reader.error(line, path, f"a study takes one {kind.name} criterion (raters mark "
                                     "each error once, with its category and severity)")
    if design in PAIRWISE_DESIGNS:
        for criterion, path, line in criteria:
            if rules.kind_of(criterion.kind).one_output_only:
                reader.error(line, path, f"{criterion.kind} criteria mark errors in one "
                                         "output: they need a design that shows one output "
                                         "at a time")
    if reader.errors:
        raise SpecInvalid(reader.errors)
    return StudySpec(
        settings=settings, systems=[s for s, _, _ in systems],
        criteria=[c for c, _, _ in criteria], items=[i for i, _, _ in items],
        calibration=controls["calibration"], attention_checks=controls["attention_checks"],
        plan=plan,
    )


def _rule(criterion: CriterionSpec) -> rules.CriterionRule:
    return rules.CriterionRule(
        kind=criterion.kind, scale_points=criterion.scale_points,
        options=tuple(criterion.options), allow_tie=criterion.allow_tie,
        allow_both=criterion.allow_both, scale_min=criterion.scale_min,
        scale_max=criterion.scale_max,
        severity_weights=criterion.severity_weights or None,
        span_reference=criterion.span_reference,
    )


def item_from_mapping(
    reader: Reader, mapping: dict[str, Any], path: str, line: int
) -> ItemSpec | None:
    values = reader.fields(mapping, path, ITEM_FIELDS)
    if values.keys() != ITEM_FIELDS.keys():  # a field is missing or invalid (reported)
        return None
    return ItemSpec(
        external_id=values["id"], reference=values["reference"], context=values["context"],
        metadata=values["metadata"], outputs=values["outputs"], line=line,
        media=values["media"], output_media=values["output_media"],
    )


def check_outputs(
    reader: Reader, item: ItemSpec, system_names: set[str], path: str, line: int | None
) -> None:
    for name in item.outputs:
        if name not in system_names:
            reader.error(line, f"{path}.outputs",
                         f"output for {name!r}, which is not a system of the study")
    for name in sorted(system_names - item.outputs.keys()):
        reader.error(line, f"{path}.outputs", f"no output for system {name!r}")
    for name in item.output_media:
        if name not in system_names:
            reader.error(line, f"{path}.output_media",
                         f"media for {name!r}, which is not a system of the study")


def _control_from_mapping(
    reader: Reader, mapping: dict[str, Any], path: str, line: int, design: str,
    criteria: dict[str, CriterionSpec],
) -> ControlSpec | None:
    values = reader.fields(mapping, path, CONTROL_FIELDS)
    if values.keys() != CONTROL_FIELDS.keys():  # a field is missing or invalid (reported)
        return None
    if design in PAIRWISE_DESIGNS:
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
        if not rules.kind_of(criterion.kind).takes_expected:
            reader.error(line, f"{path}.expected.{key}", f"{criterion.kind} criteria take no "
                                                          "expected answer (there is no single "
                                                          "right marking)")
            continue
        try:
            expected[key] = _rule(criterion).normalise_expected(raw)
        except ValueError as error:
            reader.error(line, f"{path}.expected.{key}", str(error))
    return ControlSpec(
        key=values["id"], reference=values["reference"], context=values["context"], text=text,
        text_b=text_b, expected=expected, feedback=values["feedback"],
    )
