"""The analysis result as a tidy table of statistics (for the CSV export).

Every dict in the result that carries a number under `value` (estimates), `estimate`
(coefficients, contrasts), `statistic` (tests) or `auc`/`proportion` becomes one row, named
by its path: `criteria/usable/glmm/coefficients/systemB`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

COLUMNS = ("path", "statistic", "value", "ci_low", "ci_high", "se", "p_value", "n", "method")
_VALUE_KEYS = ("value", "estimate", "statistic", "proportion", "mean", "auc")


def _name(node: dict[str, Any], key: Any) -> str:
    for label in ("key", "term", "group", "proxy", "rater", "criterion", "level_a"):
        if isinstance(node.get(label), str):
            if label == "level_a" and isinstance(node.get("level_b"), str):
                return f"{node['level_a']}-{node['level_b']}"
            return node[label]
    return str(key)


def statistics_rows(result: Any, path: str = "") -> Iterator[dict[str, Any]]:
    if isinstance(result, dict):
        for key in _VALUE_KEYS:
            value = result.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield {
                    "path": path, "statistic": key, "value": value,
                    "ci_low": result.get("ci_low"), "ci_high": result.get("ci_high"),
                    "se": result.get("se"),
                    "p_value": result.get("p_value", result.get("p_adjusted")),
                    "n": result.get("n", result.get("n_obs")), "method": result.get("method", ""),
                }
                break
        for key, child in result.items():
            if key in ("fpr", "tpr", "thresholds", "means", "differences", "_seconds", "vcov"):
                continue  # curves and plot points are not statistics
            if isinstance(child, dict | list):
                yield from statistics_rows(child, f"{path}/{key}" if path else str(key))
    elif isinstance(result, list):
        for index, child in enumerate(result):
            if isinstance(child, dict):
                yield from statistics_rows(child, f"{path}/{_name(child, index)}")
