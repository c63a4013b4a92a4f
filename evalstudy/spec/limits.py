"""Bounds on what a spec, an item file or a study may hold (`SpecLimits`), and the checks
that apply them to single values: the study settings' bounds, a spec's size, control
characters in text."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, SpecInvalid

MAX_FIELD_CHARS = 1_000_000
# The csv module refuses fields over 131,072 characters by default; allow what the spec allows
# (a long context passage is legitimate) and name the limit ourselves when it is exceeded.
csv.field_size_limit(MAX_FIELD_CHARS)


@dataclass(frozen=True)
class SpecLimits:
    """Bounds on what a spec, an item file or a study may hold.

    The defaults are those of the settings named in `LIMIT_SETTINGS` (config/settings/base.py);
    Django code passes the configured values (`evalstudy.services.spec_limits`). Each refusal
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
    size = values.get("tuple_size")
    if isinstance(size, int) and not isinstance(size, bool) and not 2 <= size <= 6:
        problems["tuple_size"] = f"must be from 2 to 6 outputs, got {size}"
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


def check_spec_size(size: int, source: str, limits: SpecLimits = DEFAULT_LIMITS) -> None:
    """SpecInvalid when a spec of `size` bytes is over the limit; call it before reading."""
    if size > limits.max_bytes:
        raise SpecInvalid([SpecError(
            source, None, "", f"the spec is {size:,} bytes, over the limit of "
            f"{limits.max_bytes:,} bytes (EVALSTUDY_SPEC_MAX_BYTES); keep the study, systems "
            "and criteria in the spec and import the items from a CSV or JSONL file",
        )])


# Controls that escapes (YAML "\0", "\e", "\x01"; JSON "\u0000") can still write into a
# string: PostgreSQL refuses NUL in text and JSON, and none of them belongs in rated text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def char_code(character: str) -> str:
    return f"U+{ord(character):04X}"


def control_problem(text: str) -> str | None:
    """Why `text` (one string from a file) cannot be stored, or None."""
    match = _CONTROL.search(text)
    if match is None:
        return None
    return (f"the text holds the control character {char_code(match.group())} (written as an "
            "escape such as \\0, \\x01 or \\u0000); only tab, newline and carriage return "
            "are allowed")
