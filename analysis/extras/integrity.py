"""(filled by this part's work; see analysis.extras for the four names)"""

from __future__ import annotations

from typing import Any

import pandas as pd

OPTIONS: dict[str, Any] = {}


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    return judgments


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    return None


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    return None
