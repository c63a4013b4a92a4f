"""Property tests for the Django-free list builders in ``evalstudy.design.builders``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalstudy.design import (
    DesignError,
    TargetCell,
    crossed,
    latin_square,
    pairwise,
    split_list,
)

Builder = Callable[[Sequence[str], Sequence[str]], list[list[TargetCell]]]


def keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


n_items = st.integers(min_value=1, max_value=60)
n_systems = st.integers(min_value=1, max_value=6)
n_pair_systems = st.integers(min_value=2, max_value=6)


K = TypeVar("K", bound=Hashable)


def spread(counts: Counter[K], universe: Sequence[K]) -> int:
    """Max minus min count over ``universe`` (keys missing from ``counts`` count as zero)."""
    values = [counts[key] for key in universe]
    return max(values) - min(values)


# --- latin_square ---------------------------------------------------------------------------


@given(n_items, n_systems)
def test_latin_square_properties(n: int, k: int) -> None:
    items, systems = keys("i", n), keys("s", k)
    lists = latin_square(items, systems)

    assert len(lists) == k
    for cells in lists:
        # Every item exactly once, in the given order, with a single system per cell.
        assert [c.item for c in cells] == items
        assert all(c.system_b is None for c in cells)
        # Systems balanced within the list, also when k does not divide n.
        assert spread(Counter(c.system for c in cells), systems) <= 1

    outputs = Counter((c.item, c.system) for cells in lists for c in cells)
    assert outputs == Counter({(i, s): 1 for i in items for s in systems})
    assert latin_square(items, systems) == lists


def test_latin_square_classic_construction() -> None:
    lists = latin_square(["a", "b", "c", "d"], ["x", "y", "z"])
    assert [[c.system for c in cells] for cells in lists] == [
        ["x", "y", "z", "x"],
        ["y", "z", "x", "y"],
        ["z", "x", "y", "z"],
    ]


def test_latin_square_single_system() -> None:
    assert latin_square(["a", "b"], ["x"]) == [[TargetCell("a", "x"), TargetCell("b", "x")]]


@pytest.mark.parametrize("builder", [latin_square, crossed, pairwise])
@pytest.mark.parametrize(
    ("items", "systems"),
    [
        ([], ["x", "y"]),
        (["a"], []),
        (["a", "b", "a"], ["x", "y"]),
        (["a", "b"], ["x", "y", "x"]),
        ("ab", ["x", "y"]),
    ],
)
def test_builders_reject_bad_keys(
    builder: Builder, items: Sequence[str], systems: Sequence[str]
) -> None:
    with pytest.raises(DesignError):
        builder(items, systems)


def test_duplicate_message_names_the_key() -> None:
    with pytest.raises(DesignError, match="'a'"):
        latin_square(["a", "a"], ["x"])


# --- crossed --------------------------------------------------------------------------------


@given(n_items, n_systems)
def test_crossed_properties(n: int, k: int) -> None:
    items, systems = keys("i", n), keys("s", k)
    lists = crossed(items, systems)
    assert len(lists) == 1
    # Item-major order, every output exactly once.
    assert lists[0] == [TargetCell(i, s) for i in items for s in systems]
    assert crossed(items, systems) == lists


# --- pairwise -------------------------------------------------------------------------------


@given(n_items, n_pair_systems)
def test_pairwise_properties(n: int, k: int) -> None:
    items, systems = keys("i", n), keys("s", k)
    lists = pairwise(items, systems)
    n_pairs = k * (k - 1) // 2
    all_pairs = [frozenset((a, b)) for ai, a in enumerate(systems) for b in systems[ai + 1 :]]

    assert len(lists) == 2 * n_pairs
    for cells in lists:
        assert [c.item for c in cells] == items
        assert all(c.system_b is not None and c.system != c.system_b for c in cells)
        # Unordered pairs balanced within the list.
        pair_counts = Counter(frozenset((c.system, c.system_b)) for c in cells)
        assert spread(pair_counts, all_pairs) <= 1
        # Left/right and exposure balance within the list (bounds documented in pairwise()).
        side = Counter[str]()
        shown = Counter[str]()
        for c in cells:
            assert c.system_b is not None
            side[c.system] += 1
            side[c.system_b] -= 1
            shown[c.system] += 1
            shown[c.system_b] += 1
        assert max(abs(side[s]) for s in systems) <= (2 if k % 2 else 3)
        if n % (2 * n_pairs) == 0:
            assert all(side[s] == 0 for s in systems)
        assert spread(shown, systems) <= (3 if k % 2 else 2)

    # Across lists: every (item, unordered pair) twice, once in each orientation.
    oriented = Counter((c.item, c.system, c.system_b) for cells in lists for c in cells)
    expected = Counter({(i, a, b): 1 for i in items for a in systems for b in systems if a != b})
    assert oriented == expected

    # Over all lists every system is on the left exactly as often as on the right.
    left = Counter(c.system for cells in lists for c in cells)
    right = Counter(c.system_b for cells in lists for c in cells)
    assert all(left[s] == right[s] for s in systems)

    assert pairwise(items, systems) == lists


def test_pairwise_two_systems() -> None:
    lists = pairwise(["a", "b", "c"], ["x", "y"])
    assert lists == [
        [TargetCell("a", "x", "y"), TargetCell("b", "y", "x"), TargetCell("c", "x", "y")],
        [TargetCell("a", "y", "x"), TargetCell("b", "x", "y"), TargetCell("c", "y", "x")],
    ]


def test_pairwise_needs_two_systems() -> None:
    with pytest.raises(DesignError, match="two systems"):
        pairwise(["a", "b"], ["x"])


# --- split_list -----------------------------------------------------------------------------


def items_of(cells: list[TargetCell]) -> list[str]:
    """Distinct items in order of first appearance."""
    return list(dict.fromkeys(c.item for c in cells))


@given(
    n_items,
    n_systems,
    st.sampled_from(["latin", "crossed", "pairwise"]),
    st.integers(min_value=1, max_value=70),
)
def test_split_list_properties(n: int, k: int, design: str, ipr: int) -> None:
    items, systems = keys("i", n), keys("s", max(k, 2) if design == "pairwise" else k)
    builder: Builder = {"latin": latin_square, "crossed": crossed, "pairwise": pairwise}[design]
    cells = builder(items, systems)[0]
    chunks = split_list(cells, ipr)

    if ipr >= n:
        assert chunks == [cells]
        return
    assert len(chunks) == math.ceil(n / ipr)
    sizes = [len(items_of(chunk)) for chunk in chunks]
    assert max(sizes) <= ipr
    assert max(sizes) - min(sizes) <= 1
    # All cells of an item stay together, and the original order is kept.
    owner: dict[str, int] = {}
    for index, chunk in enumerate(chunks):
        for c in chunk:
            assert owner.setdefault(c.item, index) == index
    assert [c for chunk in chunks for c in chunk] == cells


def test_split_list_none_and_large_limit() -> None:
    cells = crossed(["a", "b", "c"], ["x", "y"])[0]
    assert split_list(cells, None) == [cells]
    assert split_list(cells, 3) == [cells]
    assert split_list(cells, 10) == [cells]
    assert split_list([], 2) == [[]]


def test_split_list_sizes_as_equal_as_possible() -> None:
    cells = latin_square(keys("i", 10), ["x"])[0]
    assert [len(chunk) for chunk in split_list(cells, 4)] == [4, 3, 3]


def test_split_list_keeps_interleaved_items_together() -> None:
    # Cells of one item need not be adjacent in the input; each chunk keeps input order.
    cells = [
        TargetCell("a", "x"),
        TargetCell("b", "x"),
        TargetCell("c", "x"),
        TargetCell("a", "y"),
        TargetCell("c", "y"),
        TargetCell("b", "y"),
    ]
    assert split_list(cells, 2) == [
        [TargetCell("a", "x"), TargetCell("b", "x"), TargetCell("a", "y"), TargetCell("b", "y")],
        [TargetCell("c", "x"), TargetCell("c", "y")],
    ]


@pytest.mark.parametrize("ipr", [0, -3])
def test_split_list_rejects_small_limit(ipr: int) -> None:
    with pytest.raises(DesignError):
        split_list([TargetCell("a", "x")], ipr)
