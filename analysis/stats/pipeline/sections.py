"""How the analysis runs one section: on its own, timed, its failure recorded (no Django).

A section that fails records its error and the rest of the analysis goes on: a report with
one failed model is better than no report."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kit.jsonable import to_jsonable

#: Called with a step's label; an analysis run's callback also takes `advance` (power).
Progress = Callable[..., None]
#: The signature of `run_section`, for the helpers that are handed it.
SectionRunner = Callable[[dict, str, list[str], Callable[[], Any]], None]


def run_section(result: dict, name: str, warnings: list[str],
                compute: Callable[[], Any]) -> None:
    """`result[name] = compute()` made JSON-able, or `{"error": ...}` (and a warning) when it
    raises; its time goes to `result["_seconds"][name]`."""
    started = time.perf_counter()
    try:
        result[name] = to_jsonable(compute())
    except Exception as error:  # noqa: BLE001 - recorded; the rest of the analysis goes on
        result[name] = {"error": f"{type(error).__name__}: {error}"}
        warnings.append(f"{name}: {type(error).__name__}: {error}")
    result.setdefault("_seconds", {})[name] = round(time.perf_counter() - started, 3)


def news(progress: Progress, text: str) -> None:
    """News within a step (which section runs, a fit's iteration): the analysis run's callback
    moves its step text and heartbeat without counting a step; a callback that takes no
    `advance` (a plain `progress(step)`) hears nothing."""
    if _takes_advance(progress):
        progress(text, advance=False)


def _takes_advance(progress: Progress) -> bool:
    import inspect

    try:
        parameters = inspect.signature(progress).parameters
    except (TypeError, ValueError):
        return False
    return "advance" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def silent(step: str, **_: Any) -> None:
    """The progress callback of a caller that wants none."""
