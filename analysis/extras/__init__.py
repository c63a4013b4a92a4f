"""Parts of an analysis that read more of the study than its judgments: integrity signals,
adjudicated labels, the joint pairwise model, the blindness audit, the stopping rule, judge
prompt versions. Each module here has the same four names, so `analysis.services` runs them
all without knowing any:

- `OPTIONS`: {option key: check(value) -> None, raising ValueError with the reason}; the
  keys join the analysis options a run may be started with.
- `prepare(study, judgments, options) -> judgments`: the tidy judgment table the statistics
  will read, changed if the part's options ask (e.g. adjudicated labels instead of the
  raters', rater-level flags as columns a formula may name). Must return the frame.
- `compute(study, judgments, result, options) -> dict | None`: the part's own results,
  stored as `result["extras"][<module name>]` (JSON-able), None when it has nothing to say.
- `section(data, result) -> dict | None`: its report section, {"title": str, "blocks":
  [block, ...]} in `templates/analysis/_report_block.html`'s shape, from what `compute`
  stored (a report is rendered from the stored result alone).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pandas as pd

# Report order.
PARTS = ("integrity", "adjudication", "pairwise_joint", "blindness", "stopping",
         "judge_versions")


def _modules() -> list[tuple[str, Any]]:
    return [(name, importlib.import_module(f"analysis.extras.{name}")) for name in PARTS]


def extra_options() -> dict[str, Callable[[Any], None]]:
    checks: dict[str, Callable[[Any], None]] = {}
    for _name, module in _modules():
        checks.update(module.OPTIONS)
    return checks


def extras_prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]
                   ) -> pd.DataFrame:
    for _name, module in _modules():
        judgments = module.prepare(study, judgments, options)
    return judgments


def extras_compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
                   options: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    for name, module in _modules():
        data = module.compute(study, judgments, result, options)
        if data is not None:
            extras[name] = data
    return extras


def extras_sections(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The report sections, in PARTS order, of the parts that stored something."""
    stored = result.get("extras") or {}
    sections = []
    for name, module in _modules():
        if name in stored:
            section = module.section(stored[name], result)
            if section:
                sections.append(section)
    return sections
