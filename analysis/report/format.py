"""Formatting for the report: numbers, p-values and intervals as cells (a dash for what
is missing), the `Table` and `Block` the template lays out, and readable names."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from evalstudy.criteria import KINDS, AnswerKind, kind_of

DASH = "–"
SMALL_CLASS = 10  # fewer positives or negatives than this: an AUC's CI is a rough guide only
SMALL_GROUP = 10  # a deployment row on fewer outputs than this gets a warning


# --- formatting -----------------------------------------------------------------------------
def num(value: Any, digits: int = 3) -> str:
    if value is None or isinstance(value, bool):
        return DASH
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.{digits}f}" if math.isfinite(value) else DASH


def pval(value: Any) -> str:
    if value is None:
        return DASH
    try:
        value = float(value)
    except (TypeError, ValueError):
        return DASH
    if not math.isfinite(value):
        return DASH
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def pct(value: Any, digits: int = 1) -> str:
    return DASH if value is None else num(value, digits)


def interval(low: Any, high: Any, digits: int = 3) -> str:
    """`low – high`, or a dash when either end is missing or the interval has collapsed to a
    point (which says nothing about uncertainty: e.g. DeLong's variance is 0 at AUC 1)."""
    if low is None or high is None:
        return DASH
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError):
        return DASH
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        return DASH
    if high - low < 10 ** -digits:
        return "not estimable"
    return f"{low:.{digits}f} – {high:.{digits}f}"


def estimate_ci(estimate: dict | None) -> str:
    estimate = estimate or {}
    return interval(estimate.get("ci_low"), estimate.get("ci_high"))


def pair_of(values: Any) -> tuple[Any, Any]:
    if isinstance(values, list | tuple) and len(values) == 2:
        return values[0], values[1]
    return None, None


# --- the report's building blocks -------------------------------------------------------------
# An interval's dash glued to both bounds: no-break spaces, and word joiners because a line
# may break after a dash even before a no-break space (Unicode line breaking, UAX 14).
NO_BREAK_RANGE = "\u00a0\u2060–\u2060\u00a0"


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    title: str = ""
    numeric: tuple[int, ...] = ()  # column indexes aligned right
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def cell_class(self, index: int) -> str:
        return "num" if index in self.numeric else ""

    @property
    def body(self) -> list[list[tuple[str, str]]]:
        # A number's interval stays on one line ("(0.657 – 0.891)"): a narrow printed column
        # wraps between the estimate and its CI, never inside the CI.
        return [[(cell.replace(" – ", NO_BREAK_RANGE) if i in self.numeric else cell,
                  self.cell_class(i)) for i, cell in enumerate(row)] for row in self.rows]

    @property
    def head(self) -> list[tuple[str, str]]:
        return [(name, self.cell_class(i)) for i, name in enumerate(self.columns)]


@dataclass
class Block:
    """A titled part of a criterion or proxy section: paragraphs, tables, plots, warnings."""

    title: str = ""
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)  # (alt text, base64 PNG)
    warnings: list[str] = field(default_factory=list)
    engine: str = ""


MIN_SLICE_CLASS = 5  # an AUC on fewer positives or negatives than this is not shown


def slice_has_both_classes(row: dict) -> bool:
    return (row.get("auc") is not None and min(row.get("n_pos") or 0, row.get("n_neg") or 0)
            >= MIN_SLICE_CLASS)


# --- names ----------------------------------------------------------------------------------
def proxy_label(name: str) -> str:
    """`rater:latte judge [1a2b3c]` is a proxy rater; other names are metric values."""
    return name.split(":", 1)[1] if name.startswith("rater:") else name


def field_name(column: str) -> str:
    return column.split(".", 1)[1] if column.startswith(("item.", "system.")) else column


def warnings_of(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(w) for w in value.get("warnings") or []]
    return []


def table_dict(title: str, columns: list[tuple[str, str]], rows: list[list[Any]],
               notes: list[str] | None = None, warnings: list[str] | None = None
               ) -> dict[str, Any]:
    """A table in `templates/analysis/_report_block.html`'s shape, as the report sections of
    `analysis.extras` build them: `columns` are (name, css class; "num" aligns right)."""
    return {"title": title, "head": columns, "notes": list(notes or []),
            "warnings": list(warnings or []),
            "body": [[(cell, cls) for cell, (_name, cls) in zip(row, columns, strict=True)]
                     for row in rows]}


# --- what a report asks of a criterion's kind --------------------------------------------------

def answer_kind(name: Any) -> AnswerKind | None:
    """The kind of a criterion in a result (`c["kind"]`), None for one this version lacks."""
    return kind_of(name) if name in KINDS else None


def kind_families(name: Any) -> tuple[str, ...]:
    """The analysis families of a criterion's kind (`AnswerKind.analysis`): which sections a
    report of it has, and which methods ran."""
    kind = answer_kind(name)
    return kind.analysis if kind is not None else ()
