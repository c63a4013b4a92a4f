"""The `plan:` block of a study file: the pre-registered stopping rule of an adaptive study
(`evalstudy.models.StudyPlan`), checked field by field and against the file's systems
and criteria with the rules the admin and `evalstudy.services.adaptive.plan_problems`
apply, so a file that parses is a plan the study can open with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import criteria as rules
from .fields import Reader, as_bool, as_text, key_up_to, one_of, type_name

SPENDING = ("obrien_fleming", "pocock")
#: The kinds a plan's criterion may be of: those the adaptive design builds its slots for
#: (each kind says which designs it takes, `AnswerKind.designs`).
PLAN_KINDS = rules.kinds_where(lambda kind: "adaptive" in kind.designs)
# PositiveIntegerField's largest value: beyond it the database would refuse the row.
MAX_WHOLE = 2**31 - 1


@dataclass
class PlanSpec:
    """StudyPlan's plan fields, as a file writes them (the criterion by its key)."""

    criterion: str | None = None
    contrasts: list[list[str]] = field(default_factory=list)
    target_ci_width: float | None = None
    stop_on_decision: bool = False
    alpha: float = 0.05
    spending: str = "obrien_fleming"
    check_every: int = 100
    max_looks: int = 20
    max_judgments: int = 5000
    # Where the block was written (for errors about it found on import).
    line: int | None = field(default=None, compare=False)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    if not 1 <= value <= MAX_WHOLE:
        raise ValueError(f"must be at least 1 and at most {MAX_WHOLE:,}, got {value}")
    return value


def _number(minimum: float, maximum: float, *, open_low: bool) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        low_ok = value > minimum if open_low else value >= minimum
        if not low_ok or value > maximum:
            low = f"more than {minimum}" if open_low else f"at least {minimum}"
            raise ValueError(f"must be {low} and at most {maximum}, got {value}")
        return float(value)

    return check


def _contrast_list(value: Any) -> list[Any]:
    # The entries are checked one by one (with their lines) by `parse_plan`.
    if not isinstance(value, list):
        raise ValueError(f"expected a list of pairs of system names, got {type_name(value)}")
    return value


PLAN_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "criterion": (key_up_to(60), None),
    "contrasts": (_contrast_list, list),
    "target_ci_width": (_number(0.0, 1e6, open_low=True), None),
    "stop_on_decision": (as_bool, False),
    "alpha": (_number(0.001, 0.5, open_low=False), 0.05),
    "spending": (one_of(SPENDING), "obrien_fleming"),
    "check_every": (_whole, 100),
    "max_looks": (_whole, 20),
    "max_judgments": (_whole, 5000),
}


def parse_plan(reader: Reader, top: Mapping[str, Any], *, design: str,
               systems: set[str], criterion_kinds: Mapping[str, str]) -> PlanSpec | None:
    """The file's `plan:` block (None when it has none), every problem recorded in `reader`
    with its line and field path (`plan.contrasts[1]`, ...)."""
    if "plan" not in top or top["plan"] is None:
        return None
    line = reader.line_of(top, "plan")
    mapping = reader.mapping(top["plan"], "plan", line)
    if mapping is None:
        return None
    values = reader.fields(mapping, "plan", PLAN_FIELDS)
    if design != "adaptive":
        reader.error(line, "plan", f"a stopping plan is read only by the adaptive design "
                                   f"(study.design is {design!r}): set design: adaptive, or "
                                   "remove the plan")
    key = values.get("criterion")
    if key is not None:
        kind = criterion_kinds.get(key)
        if kind is None:
            reader.error(reader.line_of(mapping, "criterion"), "plan.criterion",
                         f"names {key!r}, which is not a criterion of the study")
        elif kind not in PLAN_KINDS:
            reader.error(reader.line_of(mapping, "criterion"), "plan.criterion",
                         f"{key!r} is a {kind} criterion; the plan reads a pairwise one")
    contrasts: list[list[str]] = []
    raw = values.get("contrasts") or []
    for index, pair in enumerate(raw):
        where = reader.line_of(raw, index) or reader.line_of(mapping, "contrasts")
        path = f"plan.contrasts[{index}]"
        try:
            names = [as_text(name).strip() for name in pair] if isinstance(pair, list) else None
        except ValueError:
            names = None
        if names is None or len(names) != 2:
            reader.error(where, path, "write a contrast as a pair of system names, e.g. "
                                      "[ours, baseline]")
            continue
        if names[0] == names[1]:
            reader.error(where, path, f"compares {names[0]!r} with itself; name two "
                                      "different systems")
            continue
        unknown = [name for name in names if name not in systems]
        if unknown:
            reader.error(where, path, f"{', '.join(map(repr, unknown))} is not a system of "
                                      "the study")
            continue
        contrasts.append(names)
    if "contrasts" in values:
        values["contrasts"] = contrasts
    if values.get("target_ci_width") is None and values.get("stop_on_decision") is False:
        reader.error(line, "plan", "needs a target_ci_width or stop_on_decision: true (the "
                                   "rule must be able to stop before its last look)")
    if len(values) != len(PLAN_FIELDS):  # a field was invalid (reported)
        return None
    return PlanSpec(**values, line=line)


def plan_to_document(plan: PlanSpec) -> dict[str, Any]:
    """The block as `parse_plan` reads it back (fields left at "none" are left out)."""
    document: dict[str, Any] = {}
    if plan.criterion is not None:
        document["criterion"] = plan.criterion
    if plan.contrasts:
        document["contrasts"] = [list(pair) for pair in plan.contrasts]
    if plan.target_ci_width is not None:
        document["target_ci_width"] = plan.target_ci_width
    document.update(stop_on_decision=plan.stop_on_decision, alpha=plan.alpha,
                    spending=plan.spending, check_every=plan.check_every,
                    max_looks=plan.max_looks, max_judgments=plan.max_judgments)
    return document
