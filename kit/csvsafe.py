"""CSV output that spreadsheets cannot turn into formulas.

A text cell starting with = + - @ (or a tab/carriage return) is read as a formula by Excel,
LibreOffice and Google Sheets; item ids, output texts and rater names come from outside, so
every export writes them through `SafeDictWriter`, which prefixes such cells with a quote.
Numbers are written as they are (a negative number is not a formula). Missing values, whatever
pandas made of them (NaN, NaT, None), are empty cells: an export never writes "nan" or "NaT".
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def plain_cell(value: Any) -> Any:
    """A value as CSV and JSON exports want it: None for anything missing (None, NaN, pandas'
    NaT and NA), ISO 8601 for dates and times, plain Python for numpy scalars."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NaTType", "NAType"):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value


def safe_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_TRIGGERS):
        return "'" + value
    return value


class SafeDictWriter(csv.DictWriter):
    def __init__(self, stream: SupportsWrite[str], fieldnames: Iterable[str], **kwargs: Any):
        super().__init__(stream, fieldnames=list(fieldnames), **kwargs)

    def writerow(self, rowdict: Mapping[str, Any]) -> Any:
        return super().writerow({key: safe_cell(plain_cell(value))
                                 for key, value in rowdict.items()})
