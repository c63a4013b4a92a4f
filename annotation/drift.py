"""Agreement over time, on plain data (a Django-free core): each rater's agreement with the
other raters per window of their judgments, and the windows that fall below a threshold.

Rule: a judgment of rater r on a unit (an output or a pair of outputs, and a criterion) is
scored when another rater answered the same unit; it scores 1 when r's answer is the others'
majority answer (r left out), 0 when it is not, and 1/k when the others' top answer is a tie
of k answers including r's (the chance a random tie-break would pick r's). A rater's scored
judgments are taken in submission order and cut into consecutive windows of `window`
judgments; a window's agreement is its mean score. Only full windows raise an alert (a last,
partial window is shown but a handful of judgments says little), when its agreement is below
the threshold.

The others' majority is read from every answer stored now, so a window's agreement can move
as other raters answer the same units later; an alert records the value it had when raised.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

# Whatever the caller names its raters by (ids, names): the results are keyed by it.
RaterT = TypeVar("RaterT", bound=Hashable)


@dataclass(frozen=True)
class Vote(Generic[RaterT]):
    rater: RaterT
    unit: Hashable  # what several raters judge (with the criterion)
    value: str
    order: tuple  # submission order (e.g. (submitted_at, judgment id))


@dataclass(frozen=True)
class Window:
    index: int  # 1-based, in submission order
    first: int  # 1-based positions of its first and last scored judgment
    last: int
    judgments: int
    agreement: float
    full: bool
    alert: bool


def agreement_scores(votes: Iterable[Vote[RaterT]]) -> dict[RaterT, list[tuple[tuple, float]]]:
    """rater -> [(order, score)] of their scored judgments, in submission order."""
    by_unit: dict[Hashable, list[Vote[RaterT]]] = defaultdict(list)
    for vote in votes:
        by_unit[vote.unit].append(vote)
    scored: dict[RaterT, list[tuple[tuple, float]]] = defaultdict(list)
    for cell in by_unit.values():
        if len({v.rater for v in cell}) < 2:
            continue
        for vote in cell:
            others = Counter(v.value for v in cell if v.rater != vote.rater)
            top = max(others.values())
            tied = [value for value, n in others.items() if n == top]
            score = (1.0 / len(tied)) if vote.value in tied else 0.0
            scored[vote.rater].append((vote.order, score))
    for rows in scored.values():
        rows.sort(key=lambda row: row[0])
    return dict(scored)


def agreement_windows(votes: Iterable[Vote[RaterT]], *, window: int,
                      threshold: float | None) -> dict[RaterT, list[Window]]:
    """rater -> their windows of agreement with the others (see the module's docstring);
    `threshold` None: no window alerts."""
    size = max(int(window), 1)
    found: dict[RaterT, list[Window]] = {}
    for rater, rows in agreement_scores(votes).items():
        windows = []
        for start in range(0, len(rows), size):
            chunk = [score for _order, score in rows[start:start + size]]
            mean = statistics.fmean(chunk)
            full = len(chunk) == size
            windows.append(Window(index=start // size + 1, first=start + 1,
                                  last=start + len(chunk), judgments=len(chunk),
                                  agreement=mean, full=full,
                                  alert=full and threshold is not None and mean < threshold))
        found[rater] = windows
    return found
