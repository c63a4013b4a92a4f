"""Plain JSON from what the statistics and the proxies produce (no Django here): results are
stored in JSONFields and served by the API, which take neither dataclasses nor numpy values."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Dataclasses, numpy and pandas values to plain JSON (NaN and inf become None)."""
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    # A DataFrame exists only once pandas is loaded: looked up, not imported (importing it
    # would cost every process that stores a result 1-2 s, pandas or not).
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(value, pd.DataFrame):
        return to_jsonable(value.to_dict(orient="records"))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
