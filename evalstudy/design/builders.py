"""Builders that turn a study's items and systems into rater lists.

Vocabulary used throughout ``evalstudy.design``:

* **item** - one input (a source text, a prompt) identified by a string key.
* **system** - one generator whose output for an item is rated, identified by a string key.
* **output** - the text a system produced for an item, i.e. an ``(item, system)`` pair.
* **cell** - one thing a rater judges: a :class:`TargetCell`. For single-output studies it is an
  output; for pairwise studies it is an item plus two systems (``system`` shown left,
  ``system_b`` shown right).
* **list** - an ordered sequence of cells that one rater works through. A design is a set of
  lists; the builders here return ``list[list[TargetCell]]``, one inner list per design list.
* **seat** - one rater's copy of a list. Several seats may share a list.
* **replica** - one complete pass over all lists of a design. A study with ``r`` replicas has
  ``r`` seats per list, so every cell is judged ``r`` times overall.
* **slot** - one position in a seat's final running order: a calibration item, a target cell or
  an attention check (see :mod:`evalstudy.design.ordering`).

All builders are pure and deterministic: the same input always gives the same lists, so a design
can be rebuilt from the study's configuration at any time. Randomisation of the running order is
done per seat, later, by :func:`evalstudy.design.ordering.order_seat`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetCell:
    """One judgement target: an item with one system (or two, for pairwise cells).

    ``system`` is the left system of a pairwise cell; ``system_b`` is the right one and is
    ``None`` for single-output cells.
    """

    item: str
    system: str
    system_b: str | None = None
    # Ranking and best-worst cells: every system shown, in display order (``system`` and
    # ``system_b`` are its first two). Empty for other cells.
    shown: tuple[str, ...] = ()


class DesignError(ValueError):
    """Raised when a design cannot be built from the given input; the message is user-facing."""


def check_keys(kind: str, keys: Sequence[str]) -> list[str]:
    """Return ``keys`` as a list, raising :class:`DesignError` if empty or duplicated."""
    # A plain ``str`` is a Sequence[str] too; accepting it would silently treat every character
    # as a key, which is never what the caller meant.
    if isinstance(keys, str):
        raise DesignError(f"The {kind} must be given as a list of keys, not a single string.")
    out = list(keys)
    if not out:
        raise DesignError(f"At least one {kind[:-1]} is required, but no {kind} were given.")
    seen: set[str] = set()
    dups: list[str] = []
    for key in out:
        if key in seen and key not in dups:
            dups.append(key)
        seen.add(key)
    if dups:
        raise DesignError(f"Duplicate {kind[:-1]} keys: {', '.join(map(repr, dups))}.")
    return out


def latin_square(items: Sequence[str], systems: Sequence[str]) -> list[list[TargetCell]]:
    """Build a Latin-square design: each rater sees every item once, from one system.

    Guarantees, for ``n`` items and ``k`` systems:

    * exactly ``k`` lists, each containing every item exactly once, in the given item order;
    * within a list the per-system counts differ by at most one (also when ``k`` does not
      divide ``n``);
    * across the ``k`` lists every output ``(item, system)`` appears exactly once;
    * deterministic.

    List ``j`` gives item ``i`` the system ``(i + j) mod k``. Raises :class:`DesignError` for
    empty or duplicated keys.
    """
    item_keys = check_keys("items", items)
    system_keys = check_keys("systems", systems)
    k = len(system_keys)
    # Consecutive items cycle through the systems, so every list is balanced; shifting the
    # cycle by one per list gives each item every system exactly once over the k lists.
    return [
        [TargetCell(item, system_keys[(i + j) % k]) for i, item in enumerate(item_keys)]
        for j in range(k)
    ]


def crossed(items: Sequence[str], systems: Sequence[str]) -> list[list[TargetCell]]:
    """Build a fully crossed design: one list holding every output exactly once.

    The list is item-major (all systems of the first item, then of the second, ...). Every
    rater rates everything, which is what inter-rater agreement studies need. Raises
    :class:`DesignError` for empty or duplicated keys.
    """
    item_keys = check_keys("items", items)
    system_keys = check_keys("systems", systems)
    return [[TargetCell(item, system) for item in item_keys for system in system_keys]]


def _round_robin_pairs(k: int) -> list[tuple[int, int]]:
    """Return all ``k*(k-1)/2`` system index pairs as ``(left, right)``, in round order.

    Uses the circle method: pairs are grouped into rounds in which every system appears at
    most once, so any run of consecutive pairs exposes all systems about equally often. Sides
    alternate with the round (for the fixed player) and with the pair's position in the round
    (for the rotating players), which keeps any run of consecutive pairs left/right balanced
    per system within small bounds (see :func:`pairwise`).
    """
    # An odd field gets a dummy "bye" player (index k) whose pairs are dropped.
    m = k if k % 2 == 0 else k + 1
    pairs: list[tuple[int, int]] = []
    for r in range(m - 1):
        # The fixed player m-1 alternates sides by round; the i-th pair of the rotating
        # players gives the left side to the clockwise player for odd i.
        round_pairs = [(m - 1, r) if r % 2 else (r, m - 1)]
        for i in range(1, m // 2):
            x, y = (r + i) % (m - 1), (r - i) % (m - 1)
            round_pairs.append((x, y) if i % 2 else (y, x))
        pairs.extend((a, b) for a, b in round_pairs if a < k and b < k)
    return pairs


def pairwise(items: Sequence[str], systems: Sequence[str]) -> list[list[TargetCell]]:
    """Build a balanced pairwise-comparison design.

    Each cell shows one item with two different systems: ``system`` on the left and
    ``system_b`` on the right. With ``k >= 2`` systems there are ``P = k*(k-1)/2`` unordered
    pairs and ``2P`` ordered (oriented) pairs. Guarantees:

    * exactly ``2P`` lists, each containing every item exactly once, in the given item order;
    * within a list the unordered-pair counts differ by at most one;
    * across all lists every ``(item, unordered pair)`` appears exactly twice, once in each
      left/right orientation, so screen position is counterbalanced across raters;
    * over all lists together every system is left exactly as often as right; within a list
      each system's left and right counts differ by at most 3 (at most 2 for odd ``k``; not at
      all when ``2P`` divides the number of items);
    * within a list the number of cells showing each system (either side) differs by at most
      2 between systems for even ``k`` and at most 3 for odd ``k``;
    * deterministic.

    The two within-list bounds were verified exhaustively for 2 to 12 systems (any item count)
    and are property-tested for 2 to 6.

    Construction: a cyclic sequence ``O`` of the ``2P`` oriented pairs is made of the ``P``
    pairs in round-robin order (each round shows every system at most once, sides alternating
    from round to round), followed by the same ``P`` pairs with sides swapped. List ``j``
    gives item ``i`` the oriented pair ``O[(i + j) mod 2P]``, i.e. it is a Latin square over
    the oriented pairs. Raises :class:`DesignError` for fewer than two systems or for empty or
    duplicated keys.
    """
    item_keys = check_keys("items", items)
    system_keys = check_keys("systems", systems)
    k = len(system_keys)
    if k < 2:
        raise DesignError("A pairwise design needs at least two systems to compare.")
    forward = _round_robin_pairs(k)
    oriented = forward + [(b, a) for a, b in forward]
    size = len(oriented)
    # Position t of the cycle holds unordered pair t mod P, so any run of consecutive items
    # is pair-balanced; shifting by one per list gives each item every orientation once.
    lists: list[list[TargetCell]] = []
    for j in range(size):
        cells: list[TargetCell] = []
        for i, item in enumerate(item_keys):
            left, right = oriented[(i + j) % size]
            cells.append(TargetCell(item, system_keys[left], system_keys[right]))
        lists.append(cells)
    return lists


MAX_TUPLE = 6


def tuples(items: Sequence[str], systems: Sequence[str], size: int) -> list[list[TargetCell]]:
    """Build a design of tuples: each cell shows one item with ``size`` different systems side
    by side (ranking, best-worst scaling).

    With ``k`` systems there are ``M = C(k, size)`` sets of systems and ``M * size`` oriented
    tuples (each set in its ``size`` cyclic rotations). Guarantees:

    * exactly ``M * size`` lists, each containing every item exactly once, in item order;
    * across all lists every ``(item, set)`` appears ``size`` times, once in each rotation, so
      every system is shown in every position equally often for every item;
    * over the sets, every pair of systems appears together equally often (``C(k-2, size-2)``
      sets: all sets are used), and every system in ``C(k-1, size-1)`` of them;
    * within a list consecutive items take consecutive oriented tuples, so any run of ``M``
      items shows every set once;
    * deterministic.

    Construction: the oriented tuples in order (each set, then its rotations after all sets
    have appeared once); list ``j`` gives item ``i`` the tuple ``O[(i + j) mod (M * size)]``
    (a Latin square over the oriented tuples). Raises :class:`DesignError` for fewer than
    ``size`` systems, a size outside 2..6, or empty or duplicated keys.
    """
    from itertools import combinations

    item_keys = check_keys("items", items)
    system_keys = check_keys("systems", systems)
    if not 2 <= size <= MAX_TUPLE:
        raise DesignError(f"A tuple shows 2 to {MAX_TUPLE} outputs, not {size}.")
    if len(system_keys) < size:
        raise DesignError(f"Tuples of {size} outputs need at least {size} systems; the study "
                          f"has {len(system_keys)}.")
    sets = list(combinations(range(len(system_keys)), size))
    oriented = [tuple(chosen[(r + p) % size] for p in range(size))
                for r in range(size) for chosen in sets]
    total = len(oriented)
    lists: list[list[TargetCell]] = []
    for j in range(total):
        cells = []
        for i, item in enumerate(item_keys):
            shown = tuple(system_keys[s] for s in oriented[(i + j) % total])
            cells.append(TargetCell(item, shown[0], shown[1], shown))
        lists.append(cells)
    return lists


def split_list(cells: Sequence[TargetCell], items_per_rater: int | None) -> list[list[TargetCell]]:
    """Split one list into shorter lists holding at most ``items_per_rater`` distinct items.

    Guarantees:

    * ``None``, or a limit at least the number of distinct items, returns ``[list(cells)]``;
    * otherwise ``ceil(n / items_per_rater)`` chunks are made for ``n`` distinct items, whose
      distinct-item counts differ by at most one (10 items at 4 per rater -> 4, 3, 3);
    * all cells of one item land in the same chunk (crossed lists have several per item);
    * chunks follow the order of the items' first appearance, and the cells inside each chunk
      keep their original relative order; every cell appears in exactly one chunk.

    Raises :class:`DesignError` when ``items_per_rater`` is smaller than one.
    """
    if items_per_rater is not None and items_per_rater < 1:
        raise DesignError(f"Items per rater must be at least 1, got {items_per_rater}.")
    order: dict[str, int] = {}
    for cell in cells:
        order.setdefault(cell.item, len(order))
    n = len(order)
    if items_per_rater is None or items_per_rater >= n:
        return [list(cells)]
    n_chunks = math.ceil(n / items_per_rater)
    # The first ``extra`` chunks take one item more; this keeps sizes within one of each other
    # and, because there are ceil(n / ipr) chunks, never exceeds items_per_rater.
    base, extra = divmod(n, n_chunks)
    chunk_of_rank: list[int] = []
    for c in range(n_chunks):
        chunk_of_rank.extend([c] * (base + (1 if c < extra else 0)))
    chunks: list[list[TargetCell]] = [[] for _ in range(n_chunks)]
    for cell in cells:
        chunks[chunk_of_rank[order[cell.item]]].append(cell)
    return chunks
