"""A typed parameter a component declares once (a scorer of `metrics.scorers.specs`, a proxy
method of `proxies.methods`), from which the forms build their inputs: a box for a yes/no, a
number input with its bounds, a menu of choices. No Django here.

A parameter left at its default is not stored: a run's parameters hold what the researcher
changed, as they did when they were typed as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOOL, INT, FLOAT, TEXT, CHOICE, RECORDS = "bool", "int", "float", "text", "choice", "records"
KINDS = (BOOL, INT, FLOAT, TEXT, CHOICE, RECORDS)


@dataclass(frozen=True)
class Param:
    """One parameter: its `name` (the key stored), `kind`, `default` (None: the component's
    own default, said in `help`), `choices` of a CHOICE, bounds of a number, the `columns`
    ((key, label) pairs) of RECORDS: a list of records of text, one row of inputs each."""

    name: str
    kind: str
    help: str = ""
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    label: str = ""
    columns: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"parameter {self.name!r}: kind must be one of {KINDS}, not "
                             f"{self.kind!r}")
        if (self.kind == CHOICE) != bool(self.choices):
            raise ValueError(f"parameter {self.name!r}: choices are for a {CHOICE} parameter, "
                             "which needs them")
        if (self.kind == RECORDS) != bool(self.columns):
            raise ValueError(f"parameter {self.name!r}: columns are for a {RECORDS} parameter, "
                             "which needs them")
        if self.kind == BOOL and not isinstance(self.default, bool):
            raise ValueError(f"parameter {self.name!r}: a yes/no parameter needs a default")

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")


def params_given(params: tuple[Param, ...], values: dict[str, Any]) -> dict[str, Any]:
    """The values to store: those given (not blank) that differ from their parameter's
    default, by name, in declaration order."""
    given = {}
    for param in params:
        value = values.get(param.name)
        if value is None or value in ("", []) or value == param.default:
            continue
        given[param.name] = value
    return given
