"""Property tests for per-seat ordering in ``evalstudy.design.ordering``."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise as neighbours

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalstudy.design import (
    DesignError,
    SeatSlot,
    TargetCell,
    crossed,
    latin_square,
    order_seat,
    pairwise,
    seat_seed,
)

seeds = st.integers(min_value=-(2**63), max_value=2**64)


def keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def targets_of(slots: list[SeatSlot]) -> list[TargetCell]:
    return [s.cell for s in slots if s.kind == "target" and s.cell is not None]


def adjacent_repeats(cells: list[TargetCell]) -> int:
    return sum(1 for a, b in neighbours(cells) if a.item == b.item)


# --- seat_seed ------------------------------------------------------------------------------


def test_seat_seed_no_collisions_and_range() -> None:
    values = [seat_seed(12345, i) for i in range(10_000)]
    assert len(set(values)) == len(values)
    assert all(0 <= v < 2**63 for v in values)


@given(seeds, st.integers(min_value=0, max_value=10**6))
def test_seat_seed_deterministic_and_depends_on_both(study_seed: int, seat: int) -> None:
    value = seat_seed(study_seed, seat)
    assert value == seat_seed(study_seed, seat)
    assert 0 <= value < 2**63
    assert value != seat_seed(study_seed + 1, seat)
    assert value != seat_seed(study_seed, seat + 1)


# --- order_seat -----------------------------------------------------------------------------


@st.composite
def seat_targets(draw: st.DrawFn) -> list[TargetCell]:
    """One list of some design, over 1..60 items and 1..6 systems (2..6 for pairwise)."""
    design = draw(st.sampled_from(["latin", "crossed", "pairwise"]))
    n = draw(st.integers(min_value=1, max_value=60))
    k = draw(st.integers(min_value=2 if design == "pairwise" else 1, max_value=6))
    builder = {"latin": latin_square, "crossed": crossed, "pairwise": pairwise}[design]
    lists = builder(keys("i", n), keys("s", k))
    return lists[draw(st.integers(min_value=0, max_value=len(lists) - 1))]


@given(
    seat_targets(),
    st.lists(st.text(min_size=1, max_size=5), max_size=4),
    st.lists(st.text(min_size=1, max_size=5), max_size=5, unique=True),
    st.integers(min_value=0, max_value=25),
    seeds,
    st.booleans(),
)
def test_order_seat_properties(
    targets: list[TargetCell],
    calibration: list[str],
    checks: list[str],
    every: int,
    seed: int,
    randomise: bool,
) -> None:
    slots = order_seat(
        targets,
        calibration=calibration,
        attention_checks=checks,
        attention_every=every,
        seed=seed,
        randomise=randomise,
    )

    # Calibration prefix exact, and nowhere else.
    prefix = slots[: len(calibration)]
    assert [(s.kind, s.control, s.cell) for s in prefix] == [
        ("calibration", key, None) for key in calibration
    ]
    body = slots[len(calibration) :]
    assert all(s.kind != "calibration" for s in body)

    # Every target exactly once; kept in order when not randomising.
    placed = targets_of(body)
    assert Counter(placed) == Counter(targets)
    if not randomise:
        assert placed == targets

    # Attention checks: exact count, never first, never adjacent, one per block.
    expected = len(targets) // every if every > 0 and checks else 0
    check_positions = [p for p, s in enumerate(body) if s.kind == "attention"]
    assert len(check_positions) == expected
    assert all(body[p].cell is None and body[p].control in checks for p in check_positions)
    if check_positions:
        assert check_positions[0] > 0
    assert all(b - a > 1 for a, b in neighbours(check_positions))
    for block, position in enumerate(check_positions):
        targets_before = sum(1 for s in body[:position] if s.kind == "target")
        assert block * every + 1 <= targets_before <= (block + 1) * every

    # Check keys cycle through one (shuffled) order of all keys.
    used = [body[p].control for p in check_positions]
    cycle = used[: len(checks)]
    assert len(set(cycle)) == len(cycle)
    assert all(key == cycle[i % len(checks)] for i, key in enumerate(used))

    # Deterministic.
    again = order_seat(
        targets,
        calibration=calibration,
        attention_checks=checks,
        attention_every=every,
        seed=seed,
        randomise=randomise,
    )
    assert again == slots


@given(
    st.integers(min_value=2, max_value=60),
    st.integers(min_value=1, max_value=6),
    seeds,
)
def test_crossed_seats_never_repeat_an_item_back_to_back(n: int, k: int, seed: int) -> None:
    targets = crossed(keys("i", n), keys("s", k))[0]
    slots = order_seat(
        targets, calibration=[], attention_checks=["ac"], attention_every=3, seed=seed
    )
    placed = targets_of(slots)
    assert Counter(placed) == Counter(targets)
    assert adjacent_repeats(placed) == 0


@given(
    st.lists(st.sampled_from("abcdef"), min_size=1, max_size=40),
    seeds,
)
def test_shuffle_repeats_are_minimal(items: list[str], seed: int) -> None:
    # Any multiset of items: no adjacent repeats when possible, otherwise the fewest possible.
    targets = [TargetCell(item, f"s{i}") for i, item in enumerate(items)]
    slots = order_seat(targets, calibration=[], attention_checks=[], attention_every=0, seed=seed)
    placed = targets_of(slots)
    assert Counter(placed) == Counter(targets)
    most = max(Counter(items).values())
    # The most frequent item needs most - 1 separators; each missing separator is one repeat.
    assert adjacent_repeats(placed) == max(0, most - 1 - (len(items) - most))


def test_order_seat_seeded_shuffle_reproducible_and_varies() -> None:
    targets = latin_square(keys("i", 20), ["x", "y"])[0]

    def order(seed: int) -> list[TargetCell]:
        slots = order_seat(
            targets, calibration=["c"], attention_checks=[], attention_every=0, seed=seed
        )
        return targets_of(slots)

    assert order(7) == order(7)
    assert len({tuple(order(seed)) for seed in range(10)}) == 10
    assert order(7) != targets


def test_order_seat_without_checks_or_interval() -> None:
    targets = latin_square(keys("i", 10), ["x"])[0]
    for checks, every in [([], 2), (["ac"], 0), (["ac"], 11)]:
        slots = order_seat(
            targets, calibration=[], attention_checks=checks, attention_every=every, seed=1
        )
        assert all(s.kind == "target" for s in slots)
        assert len(slots) == 10


def test_order_seat_check_every_target() -> None:
    # With an interval of 1 every target is followed by exactly one check.
    targets = latin_square(keys("i", 5), ["x"])[0]
    slots = order_seat(
        targets,
        calibration=["c1", "c2"],
        attention_checks=["a1", "a2"],
        attention_every=1,
        seed=3,
        randomise=False,
    )
    kinds = [s.kind for s in slots]
    assert kinds == ["calibration"] * 2 + ["target", "attention"] * 5
    assert targets_of(slots) == targets


def test_order_seat_empty_targets() -> None:
    slots = order_seat([], calibration=["c"], attention_checks=["a"], attention_every=1, seed=0)
    assert slots == [SeatSlot(kind="calibration", control="c")]


def test_order_seat_rejects_negative_interval() -> None:
    with pytest.raises(DesignError):
        order_seat([], calibration=[], attention_checks=["a"], attention_every=-1, seed=0)
