"""A problem found in a spec or a file, with its place, and the exception that carries them all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def spec_problem_rows(error: SpecInvalid) -> list[dict[str, Any]]:
    """The problems as the API's error body lists them: `{"source", "row", "field",
    "message"}` each (see kit.rest)."""
    return [{"source": e.source, "row": e.line, "field": e.path, "message": e.message}
            for e in error.errors]
