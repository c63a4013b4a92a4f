"""What each criterion kind accepts, as plain functions (no Django).

Values are stored as text, in one canonical spelling per kind, so that an answer from the
browser, an import file or a proxy judge compares equal when it means the same thing:

- likert: "1".."n";  binary: "yes"/"no";  severity: "0"/"1"/"2";
- pairwise: "A"/"B" (or "tie" when the criterion allows ties);
- categorical: one of the options, spelled as configured;  text: any string.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LIKERT = "likert"
BINARY = "binary"
SEVERITY = "severity"
PAIRWISE = "pairwise"
CATEGORICAL = "categorical"
TEXT = "text"
KINDS = (LIKERT, BINARY, SEVERITY, PAIRWISE, CATEGORICAL, TEXT)

LIKERT_MIN_POINTS = 2
LIKERT_MAX_POINTS = 11
TEXT_MAX_LENGTH = 10_000



def gettext_noop(text: str) -> str:
    """Marks `text` for translation (`makemessages` collects it; the Django layer translates
    it when it shows it to a rater). The identity: this module knows nothing of Django."""
    return text


# LATTE's human scale: 0 meaning fully preserved, 1 mostly preserved, 2 meaning lost.
SEVERITY_DEFAULT_LABELS = (
    gettext_noop("Meaning fully preserved"),
    gettext_noop("Meaning mostly preserved (minor errors)"),
    gettext_noop("Meaning lost or changed"),
)

_YES = {"yes", "y", "true", "1"}
_NO = {"no", "n", "false", "0"}


@dataclass(frozen=True)
class CriterionRule:
    """The parts of a criterion that decide which values are valid."""

    kind: str
    scale_points: int | None = None
    options: Sequence[str] = field(default_factory=tuple)
    allow_tie: bool = False

    def choices(self) -> list[str] | None:
        """The canonical values, in display order; None for free text."""
        if self.kind == LIKERT:
            return [str(point) for point in range(1, (self.scale_points or 0) + 1)]
        if self.kind == BINARY:
            return ["yes", "no"]
        if self.kind == SEVERITY:
            return ["0", "1", "2"]
        if self.kind == PAIRWISE:
            return ["A", "B", "tie"] if self.allow_tie else ["A", "B"]
        if self.kind == CATEGORICAL:
            return list(self.options)
        return None

    def normalise(self, raw: object) -> str:
        """Return the canonical spelling of `raw`, or raise ValueError saying why it is invalid."""
        if raw is None:
            raise ValueError("a value is required")
        if isinstance(raw, bool):
            text = "yes" if raw else "no"
        elif isinstance(raw, float) and raw.is_integer():
            text = str(int(raw))
        else:
            text = str(raw).strip()
        if self.kind == TEXT:
            if len(text) > TEXT_MAX_LENGTH:
                raise ValueError(f"text longer than {TEXT_MAX_LENGTH} characters")
            return text
        if text == "":
            raise ValueError("a value is required")
        if self.kind == BINARY:
            lowered = text.lower()
            if lowered in _YES:
                return "yes"
            if lowered in _NO:
                return "no"
        elif self.kind == PAIRWISE:
            upper = text.upper()
            if upper in {"A", "B"}:
                return upper
            if self.allow_tie and text.lower() == "tie":
                return "tie"
        elif self.kind == CATEGORICAL:
            for option in self.options:
                if text == option or text.lower() == option.lower():
                    return option
        else:
            choices = self.choices() or []
            if text in choices:
                return text
        allowed = ", ".join(repr(choice) for choice in self.choices() or [])
        raise ValueError(f"{text!r} is not one of {allowed}")

    def numeric(self, value: str) -> float | None:
        """A number for ordered kinds (likert points, severity levels); None otherwise."""
        if self.kind in (LIKERT, SEVERITY) and value != "":
            return float(value)
        return None


def check_rule(
    kind: str,
    *,
    scale_points: int | None,
    labels: Sequence[str] | Mapping[str, str] | None,
    options: Sequence[str],
) -> list[str]:
    """Problems with a criterion's configuration, as readable sentences (empty when valid)."""
    problems: list[str] = []
    if kind not in KINDS:
        return [f"kind {kind!r} is not one of {', '.join(KINDS)}"]
    if kind == LIKERT:
        if scale_points is None or not LIKERT_MIN_POINTS <= scale_points <= LIKERT_MAX_POINTS:
            problems.append(
                f"likert needs scale_points between {LIKERT_MIN_POINTS} and {LIKERT_MAX_POINTS}"
            )
        elif isinstance(labels, Mapping):
            for point in labels:
                if not str(point).isdigit() or not 1 <= int(point) <= scale_points:
                    problems.append(
                        f"anchor label for point {point!r} is outside 1..{scale_points}"
                    )
    elif scale_points is not None:
        problems.append(f"scale_points only applies to likert criteria, not {kind}")
    if kind == SEVERITY and labels and (isinstance(labels, Mapping) or len(labels) != 3):
        problems.append("severity labels must be a list of exactly 3 descriptions (levels 0, 1, 2)")
    if kind == CATEGORICAL:
        if len(options) < 2:
            problems.append("categorical needs at least 2 options")
        if len({option.lower() for option in options}) != len(options):
            problems.append("categorical options must be distinct (ignoring case)")
    elif options:
        problems.append(f"options only apply to categorical criteria, not {kind}")
    return problems


# --- binary readings -------------------------------------------------------------------------
#: The kinds whose answers read as "meaning preserved" or not: what LATTE and learned proxies
#: answer, what a proxy's AUC and threshold are computed against, and what `binary_label` maps.
BINARY_KINDS = frozenset({BINARY, SEVERITY})


def binary_label(kind: str, value: str) -> float | None:
    """1/0 for "meaning preserved"/"yes", None where the kind has no binary reading.
    Severity follows LATTE: levels 0 and 1 preserve the meaning."""
    if kind == BINARY:
        return {"yes": 1.0, "no": 0.0}.get(value)
    if kind == SEVERITY:
        return {"0": 1.0, "1": 1.0, "2": 0.0}.get(value)
    return None
