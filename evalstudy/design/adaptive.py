"""Adaptive pairwise allocation: the next pairs go where the plan's contrasts are least certain.

A Bradley-Terry model, P(A beats B) = logit^-1(beta_A - beta_B), learns from one comparison of
systems i and j the Fisher information w_ij u u^T, with u = e_i - e_j and w_ij = p (1 - p) at
the current strengths. The covariance of the strengths after n comparisons is the inverse of
the summed information; a contrast d (e.g. beta_i - beta_j) has variance d^T Sigma d, and its
CI width is proportional to its square root. Adding one comparison changes Sigma by a rank-one
(Sherman-Morrison) update, so the effect of every candidate pair on every contrast's variance
is known in closed form before anything is shown to a rater.

`allocate_seat` builds one rater's seat greedily: at each step the unordered pair whose
comparison lowers the largest variance among the plan's contrasts the most (ties: the largest
drop of their sum, then the pair used least), then an item for it and an orientation, under the
design's balance constraints:

* the rater sees each item at most once (no item twice in a seat, none the rater has seen);
* positions are counterbalanced: the ordered pair (A, B) shown less often so far is used, so
  each ordered pair is shown about equally often as A and as B;
* an item's pairs are spread: the item on which this pair was shown least often, then the item
  shown least often overall.

Everything assigned counts, answered or not, so raters arriving together are not all sent to
the same pair. The position (A) effect is left out of the information: counterbalancing makes
it orthogonal to the strengths.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalstudy.design.builders import DesignError, TargetCell, check_keys

# Information added to every strength before any comparison exists: a weak prior that keeps
# the covariance finite (it is dwarfed by one comparison's p(1 - p) of up to 0.25).
PRIOR_INFORMATION = 1e-4
SOFT_MAX = 16


def all_pairs(systems: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of systems, in the given order."""
    return [(a, b) for i, a in enumerate(systems) for b in systems[i + 1:]]


@dataclass
class Uncertainty:
    """The covariance of the Bradley-Terry strengths implied by the comparisons counted, at
    the given strengths, and the contrasts of the plan."""

    systems: list[str]
    strengths: np.ndarray
    contrasts: list[tuple[str, str]]
    covariance: np.ndarray

    @classmethod
    def build(cls, systems: Sequence[str], strengths: Mapping[str, float],
              contrasts: Sequence[tuple[str, str]],
              pair_counts: Mapping[tuple[str, str], int]) -> Uncertainty:
        keys = check_keys("systems", systems)
        if len(keys) < 2:
            raise DesignError("An adaptive pairwise design needs at least two systems.")
        index = {s: i for i, s in enumerate(keys)}
        for a, b in contrasts:
            if a not in index or b not in index or a == b:
                raise DesignError(f"The contrast {a!r} - {b!r} does not name two of the "
                                  "study's systems.")
        beta = np.array([float(strengths.get(s, 0.0)) for s in keys])
        information = np.eye(len(keys)) * PRIOR_INFORMATION
        for (a, b), n in pair_counts.items():
            if n and a in index and b in index and a != b:
                u = _unit(index[a], index[b], len(keys))
                information += n * _weight(beta[index[a]] - beta[index[b]]) * np.outer(u, u)
        return cls(systems=keys, strengths=beta, contrasts=list(contrasts),
                   covariance=np.linalg.inv(information))

    def index(self, system: str) -> int:
        return self.systems.index(system)

    def contrast_variances(self) -> dict[tuple[str, str], float]:
        """Each plan contrast's variance under the current covariance."""
        out = {}
        for a, b in self.contrasts:
            u = _unit(self.index(a), self.index(b), len(self.systems))
            out[(a, b)] = float(u @ self.covariance @ u)
        return out

    def best_pair(self, pair_uses: Mapping[frozenset[str], int]) -> tuple[str, str]:
        """The unordered pair whose next comparison lowers the largest contrast variance most
        (then the sum of the contrast variances, then the pair used least, then list order)."""
        k = len(self.systems)
        candidates = all_pairs(self.systems)
        c_matrix = np.array([_unit(self.index(a), self.index(b), k) for a, b in candidates])
        d_matrix = np.array([_unit(self.index(a), self.index(b), k) for a, b in self.contrasts])
        cross = d_matrix @ self.covariance @ c_matrix.T  # contrasts x candidates
        own = np.einsum("ij,jk,ik->i", c_matrix, self.covariance, c_matrix)
        base = np.einsum("ij,jk,ik->i", d_matrix, self.covariance, d_matrix)
        weights = np.array([_weight(self.strengths[self.index(a)] - self.strengths[self.index(b)])
                            for a, b in candidates])
        after = base[:, None] - cross ** 2 * (weights / (1.0 + weights * own))[None, :]
        # The largest variance through a smooth stand-in, the power mean of order SOFT_MAX:
        # the plain maximum stalls where two contrasts share it (no one comparison lowers
        # both) and leads a greedy choice into a cycle of pairs; a smooth convex criterion
        # minimised one comparison at a time converges to the design that minimises it
        # (Wynn 1970), which is within a factor (#contrasts)^(1/SOFT_MAX) of the minimax one.
        scaled = after / base.max()
        criterion = np.sum(scaled ** SOFT_MAX, axis=0)
        best = min(range(len(candidates)), key=lambda c: (
            round(float(criterion[c]), 12), pair_uses.get(frozenset(candidates[c]), 0), c))
        return candidates[best]

    def add(self, a: str, b: str) -> None:
        """Count one more comparison of a and b (Sherman-Morrison update)."""
        i, j = self.index(a), self.index(b)
        u = _unit(i, j, len(self.systems))
        w = _weight(self.strengths[i] - self.strengths[j])
        su = self.covariance @ u
        self.covariance = self.covariance - np.outer(su, su) * (w / (1.0 + w * float(u @ su)))


def _unit(i: int, j: int, k: int) -> np.ndarray:
    u = np.zeros(k)
    u[i], u[j] = 1.0, -1.0
    return u


def _weight(difference: float) -> float:
    p = 1.0 / (1.0 + math.exp(-float(difference)))
    return max(p * (1.0 - p), 1e-6)


@dataclass
class Tally:
    """What has been assigned so far, answered or not: ordered pair uses (for positions),
    unordered pair uses per item and overall, and uses per item."""

    ordered: Counter[tuple[str, str]]
    per_item_pair: Counter[tuple[str, frozenset[str]]]
    pairs: Counter[frozenset[str]]
    items: Counter[str]

    @classmethod
    def of(cls, cells: Iterable[TargetCell]) -> Tally:
        tally = cls(Counter(), Counter(), Counter(), Counter())
        for cell in cells:
            if cell.system_b is not None:
                tally.count(cell)
        return tally

    def count(self, cell: TargetCell) -> None:
        assert cell.system_b is not None
        pair = frozenset((cell.system, cell.system_b))
        self.ordered[(cell.system, cell.system_b)] += 1
        self.per_item_pair[(cell.item, pair)] += 1
        self.pairs[pair] += 1
        self.items[cell.item] += 1

    def unordered_counts(self) -> dict[tuple[str, str], int]:
        out: Counter[tuple[str, str]] = Counter()
        for (a, b), n in self.ordered.items():
            out[(a, b) if a < b else (b, a)] += n
        return dict(out)


def allocate_seat(*, items: Sequence[str], systems: Sequence[str],
                  strengths: Mapping[str, float], contrasts: Sequence[tuple[str, str]],
                  assigned: Iterable[TargetCell], size: int,
                  seen_items: Iterable[str] = (), tally: Tally | None = None
                  ) -> list[TargetCell]:
    """One rater's next `size` pairwise cells (fewer when the rater runs out of unseen items),
    chosen greedily where the plan's largest contrast variance drops most (see the module's
    docstring for the constraints). `assigned`: every cell of the study assigned so far;
    `strengths`: the current Bradley-Terry estimates by system (missing: 0); `contrasts`: the
    plan's (empty: every pair). A caller that keeps its own `tally` of `assigned` (a
    simulation) passes it instead; it is updated in place. Deterministic."""
    item_keys = check_keys("items", items)
    if size < 1:
        raise DesignError(f"A seat needs at least one cell, got {size}.")
    tally = tally if tally is not None else Tally.of(assigned)
    plan = list(contrasts) or all_pairs(list(systems))
    state = Uncertainty.build(systems, strengths, plan, tally.unordered_counts())
    order = {item: position for position, item in enumerate(item_keys)}
    available = set(item_keys) - set(seen_items)
    cells: list[TargetCell] = []
    while len(cells) < size and available:
        a, b = state.best_pair(tally.pairs)
        pair = frozenset((a, b))
        item = min(available, key=lambda i: (tally.per_item_pair[(i, pair)], tally.items[i],
                                             order[i]))
        # The orientation shown less often so far; on a tie, alternate by the item's place.
        forward, backward = tally.ordered[(a, b)], tally.ordered[(b, a)]
        if forward > backward or (forward == backward and order[item] % 2):
            a, b = b, a
        cell = TargetCell(item, a, b)
        cells.append(cell)
        tally.count(cell)
        state.add(a, b)
        available.discard(item)
    return cells
