"""Per-seat running order: calibration, shuffled targets and interleaved attention checks.

A seat is one rater's copy of a design list (see :mod:`evalstudy.design.builders`). Each seat gets
its own reproducible seed from :func:`seat_seed`, and :func:`order_seat` turns the seat's target
cells into the sequence of slots the rater will see.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evalstudy.design.builders import DesignError, TargetCell

SlotKind = Literal["calibration", "target", "attention"]

_SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class SeatSlot:
    """One position in a seat's running order.

    ``cell`` is set for ``kind == "target"``; ``control`` holds the calibration or
    attention-check key for the other kinds.
    """

    kind: SlotKind
    cell: TargetCell | None = None
    control: str | None = None


def seat_seed(study_seed: int, seat_index: int) -> int:
    """Derive a seat's seed from the study seed and the seat's index.

    Deterministic across processes and Python versions (unlike ``hash()``), non-negative and
    below ``2**63`` so it fits a signed 64-bit database column. Different seats of a study get
    unrelated seeds, so neighbouring seats do not get correlated shuffles.
    """
    data = f"{int(study_seed)}:{int(seat_index)}".encode("ascii")
    digest = hashlib.blake2b(data, digest_size=8, person=b"evalstudy-seat").digest()
    return int.from_bytes(digest, "big") & _SEED_MASK


def _spread_items(cells: list[TargetCell]) -> list[TargetCell]:
    """Reorder ``cells`` so that no two adjacent cells share an item, whenever possible.

    Greedy repair of an already shuffled list: at each position take the earliest remaining cell
    whose item differs from the previous one and whose removal still leaves an arrangement
    without adjacent repeats. A list that already has no repeats is returned unchanged. When no
    arrangement without repeats exists (one item holds more than half the cells), the most
    frequent other item is taken instead, which gives the fewest possible repeats.
    """
    if all(a.item != b.item for a, b in itertools.pairwise(cells)):
        return list(cells)  # nothing to repair (always the case when every item is distinct)
    remaining = list(cells)
    counts = Counter(cell.item for cell in remaining)
    # Max-heap of (-count, item) with lazy deletion: a count that changed is pushed again and
    # its stale entry skipped when it surfaces. Keeps "the two largest counts" O(log n) per
    # step instead of a scan of every item (which made long crossed lists quadratic).
    heap = [(-count, item) for item, count in counts.items()]
    heapq.heapify(heap)

    def top_two() -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        while heap and len(found) < 2:
            negative, item = heapq.heappop(heap)
            if counts.get(item, 0) == -negative and all(item != f[0] for f in found):
                found.append((item, -negative))
        for item, count in found:
            heapq.heappush(heap, (-count, item))
        return found

    out: list[TargetCell] = []
    prev: str | None = None
    while remaining:
        left = len(remaining)
        top = top_two()
        choice: int | None = None
        for idx, cell in enumerate(remaining):
            item = cell.item
            if item == prev:
                continue
            others_max = top[0][1] if top[0][0] != item else (top[1][1] if len(top) > 1 else 0)
            # After placing ``item``, ``left - 1`` cells remain. They can be arranged without
            # repeats, starting with anything but ``item``, iff no item exceeds half of them
            # rounded up, and ``item`` itself leaves room for a different first cell.
            if 2 * others_max <= left and 2 * (counts[item] - 1) <= left - 1:
                choice = idx
                break
        if choice is None:
            # Repeats are unavoidable: use the most frequent item other than ``prev`` (the
            # earliest such cell), or accept a repeat when only ``prev`` is left.
            candidates = [i for i, c in enumerate(remaining) if c.item != prev]
            if candidates:
                choice = max(candidates, key=lambda i: (counts[remaining[i].item], -i))
            else:
                choice = 0
        cell = remaining.pop(choice)
        counts[cell.item] -= 1
        if counts[cell.item] == 0:
            del counts[cell.item]
        else:
            heapq.heappush(heap, (-counts[cell.item], cell.item))
        out.append(cell)
        prev = cell.item
    return out


def order_seat(
    targets: Sequence[TargetCell],
    *,
    calibration: Sequence[str],
    attention_checks: Sequence[str],
    attention_every: int,
    seed: int,
    randomise: bool = True,
) -> list[SeatSlot]:
    """Build a seat's running order.

    Guarantees:

    * the calibration keys come first, in the given order (``kind="calibration"``);
    * every target appears exactly once (``kind="target"``). With ``randomise`` they are
      shuffled with ``random.Random(seed)`` (same seed -> same order), and then repaired so
      that two cells of the same item are never adjacent whenever that is possible (crossed
      lists); without ``randomise`` they keep the given order;
    * when ``attention_every > 0`` and ``attention_checks`` is non-empty, exactly
      ``len(targets) // attention_every`` attention checks are inserted
      (``kind="attention"``), one per consecutive block of ``attention_every`` targets, at a
      seeded random position after the t-th target of its block (``1 <= t <= attention_every``).
      Hence a check is never the first slot after calibration and two checks are never
      adjacent. Check keys cycle through ``attention_checks`` in a seed-shuffled order. Check
      positions are seeded even when ``randomise`` is false;
    * the whole result depends only on the arguments (deterministic).

    Raises :class:`DesignError` when ``attention_every`` is negative.
    """
    if attention_every < 0:
        raise DesignError(f"Attention-check interval must be 0 or more, got {attention_every}.")
    rng = random.Random(seed)
    ordered = list(targets)
    if randomise:
        rng.shuffle(ordered)
        ordered = _spread_items(ordered)

    # checks_after[p] is the check key to insert right after the p-th target (0-based).
    checks_after: dict[int, str] = {}
    if attention_every > 0 and attention_checks:
        keys = list(attention_checks)
        rng.shuffle(keys)
        for block in range(len(ordered) // attention_every):
            t = rng.randint(1, attention_every)
            checks_after[block * attention_every + t - 1] = keys[block % len(keys)]

    slots = [SeatSlot(kind="calibration", control=key) for key in calibration]
    for pos, cell in enumerate(ordered):
        slots.append(SeatSlot(kind="target", cell=cell))
        if pos in checks_after:
            slots.append(SeatSlot(kind="attention", control=checks_after[pos]))
    return slots
