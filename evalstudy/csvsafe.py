"""CSV output that spreadsheets cannot turn into formulas.

A text cell starting with = + - @ (or a tab/carriage return) is read as a formula by Excel,
LibreOffice and Google Sheets; item ids, output texts and rater names come from outside, so
every export writes them through `SafeDictWriter`, which prefixes such cells with a quote.
Numbers are written as they are (a negative number is not a formula).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from typing import IO, Any

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_TRIGGERS):
        return "'" + value
    return value


class SafeDictWriter(csv.DictWriter):
    def __init__(self, stream: IO[str], fieldnames: Iterable[str], **kwargs: Any):
        super().__init__(stream, fieldnames=list(fieldnames), **kwargs)

    def writerow(self, rowdict: Mapping[str, Any]) -> Any:
        return super().writerow({key: safe_cell(value) for key, value in rowdict.items()})
