"""Rater pairs in crowd-shaped studies: the analysis cost follows the ratings, not the number
of raters squared.

The defect (issue): a crowd study of 7,150 raters x 1,000 pairwise items (7,150 judgments)
spent 1,317 s of its 1,377 s in the rater-pair step, which built a raters x raters table of
shared units (and then indexed all 25.6 million pairs of its upper triangle), only to find
that no pair shared the 5 units a Cohen's kappa needs. These tests fail on that code: it
densifies (memory) and multiplies when nobody can share enough units (the product is watched).
Results on ordinary designs are those of the old dense computation (a reference written out
here), pair for pair.
"""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from analysis.stats import pipeline
from analysis.stats.agreement import rater_pair_overlaps

CROWD_RATERS = 6_000  # a raters x raters float table would take 288 MB, its triangle more


def crowd_rows(raters: int = CROWD_RATERS, items: int = 800, seed: int = 1) -> pd.DataFrame:
    """A tidy pairwise table as `analyse_criterion` hands it to `_agreement`: every rater
    judges one item pair (units are integer keys)."""
    rng = np.random.default_rng(seed)
    item = rng.permutation(np.resize(np.arange(items), raters))
    return pd.DataFrame({
        "unit": item.astype(np.int64), "rater": [f"crowd-{r:05d}" for r in range(raters)],
        "value": rng.choice(np.array(["A", "B", "tie"], dtype=object), raters),
        "item": [f"item-{i}" for i in item], "is_human": True,
    })


def dense_reference(rater: np.ndarray, unit: np.ndarray, n_raters: int, n_units: int,
                    min_shared: int) -> list[tuple[int, int, int]]:
    """The old computation: every pair of the raters x raters table's upper triangle, row by
    row, then the eligible ones most shared first (a stable sort)."""
    present = np.zeros((n_raters, n_units), dtype=np.int64)
    present[rater, unit] = 1
    counts = present @ present.T
    first, second = np.triu_indices(n_raters, 1)
    shared = counts[first, second]
    eligible = np.flatnonzero(shared >= min_shared)
    chosen = eligible[np.argsort(-shared[eligible], kind="stable")]
    return [(int(first[k]), int(second[k]), int(shared[k])) for k in chosen]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_overlaps_equal_the_dense_table_pair_for_pair(seed):
    rng = np.random.default_rng(seed)
    n_raters, n_units = 40, 60
    cells = rng.choice(n_raters * n_units, size=900, replace=False)
    rater, unit = np.divmod(cells, n_units)
    for min_shared in (1, 5, 12):
        pairs = rater_pair_overlaps(rater, unit, n_raters=n_raters, n_units=n_units,
                                    min_shared=min_shared)
        got = list(zip(pairs.first.tolist(), pairs.second.tolist(), pairs.shared.tolist(),
                       strict=True))
        assert got == dense_reference(rater, unit, n_raters, n_units, min_shared)
        assert pairs.n_rater_pairs == n_raters * (n_raters - 1) // 2
        assert pairs.n_too_few == pairs.n_rater_pairs - len(got)


def test_overlaps_of_many_raters_never_build_a_raters_by_raters_array():
    # 100,000 raters, two units each, in 50,000 disjoint pairs sharing both (raters 2k and
    # 2k + 1 rate units 2k and 2k + 1): a dense table would be 80 GB. Peak traced memory
    # stays within a few times the input.
    raters = 100_000
    rater = np.repeat(np.arange(raters), 2)
    unit = 2 * (rater // 2) + np.tile([0, 1], raters)
    tracemalloc.start()
    try:
        pairs = rater_pair_overlaps(rater, unit, n_raters=raters, n_units=raters,
                                    min_shared=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pairs.n_eligible == raters // 2 and set(pairs.shared.tolist()) == {2}
    assert pairs.first.tolist()[:3] == [0, 2, 4] and pairs.second.tolist()[:3] == [1, 3, 5]
    assert peak < 100 * 1024**2


def test_crowd_pairs_are_skipped_before_any_product(monkeypatch):
    """No rater has the 5 units a pair needs: nothing is multiplied, let alone densified, and
    the result says how many pairs were left out."""
    products = []
    original = sparse.csr_matrix.__matmul__

    def watched(self, other):
        products.append((self.shape, getattr(other, "shape", None)))
        return original(self, other)

    monkeypatch.setattr(sparse.csr_matrix, "__matmul__", watched)
    frame = crowd_rows()
    out = pipeline.cohen_pairs(frame, False, ["A", "B", "tie"])
    assert products == []
    assert out["n_pairs"] == 0 and out["n_computed"] == 0 and out["pairs"] == []
    assert out["excluded"] == {
        "pairs_sharing_too_few_units": CROWD_RATERS * (CROWD_RATERS - 1) // 2}
    assert out["mean"] == {"unweighted": None}


def test_crowd_agreement_stays_small_in_memory():
    """The whole agreement section of a crowd-shaped criterion: no raters x raters (nor
    raters x units) table. The old code needed 288 MB for the shared counts alone here."""
    frame = crowd_rows()
    tracemalloc.start()
    try:
        out = pipeline.rater_agreement(frame, "pairwise", ["A", "B", "tie"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out["n_raters"] == CROWD_RATERS and out["cohen_pairs"]["n_pairs"] == 0
    assert out["krippendorff_alpha"].n_units == 800
    assert peak < 64 * 1024**2


def test_pipeline_pairs_equal_the_old_dense_choice():
    """A Latin-square-like study where pairs share 5 to 30 units: the pairs chosen, their
    order, counts and kappas are those of the dense computation."""
    rng = np.random.default_rng(5)
    rows = []
    for unit in range(120):
        for rater in rng.choice(30, size=6, replace=False):
            rows.append((unit, f"r{rater:02d}", int(rng.integers(1, 4)), f"i{unit // 2}"))
    frame = pd.DataFrame(rows, columns=["unit", "rater", "value", "item"])
    out = pipeline.cohen_pairs(frame, True, [1, 2, 3])
    rater_index, raters = pd.factorize(frame["rater"])
    unit_index, units = pd.factorize(frame["unit"])
    expected = dense_reference(rater_index, unit_index, len(raters), len(units),
                               pipeline.MIN_SHARED_UNITS)
    assert out["n_pairs"] == len(expected) > 0
    listed = [(p["rater_a"], p["rater_b"], p["n"]) for p in out["pairs"]]
    assert listed == [(raters[a], raters[b], n) for a, b, n in
                      expected[:pipeline.MAX_RATER_PAIRS]]
    pairs_total = len(raters) * (len(raters) - 1) // 2
    assert out["excluded"]["pairs_sharing_too_few_units"] == pairs_total - len(expected)
    by_rater = {r: dict(zip(g["unit"], g["value"], strict=True))
                for r, g in frame.groupby("rater")}
    for pair in out["pairs"][:5]:
        a, b = by_rater[pair["rater_a"]], by_rater[pair["rater_b"]]
        shared = sorted(set(a) & set(b))
        table = np.zeros((3, 3))
        for u in shared:
            table[a[u] - 1, b[u] - 1] += 1
        p = table / table.sum()
        pe = p.sum(axis=1) @ p.sum(axis=0)
        assert pair["unweighted"] == pytest.approx((np.trace(p) - pe) / (1 - pe), abs=1e-12)


def test_raters_sharing_a_name_stay_two_raters():
    """Agreement keys raters on their ids where the table has them (`judgments_tidy` gives
    `rater_id`): two raters both called "Alice" who rated the same output were one rater
    rating it twice, and the agreement section failed."""
    rows = []
    for unit, (alice_1, alice_2, bob) in enumerate(itertools.product("ab", repeat=3)):
        rows += [(unit, 11, "Alice", alice_1), (unit, 12, "Alice", alice_2),
                 (unit, 13, "Bob", bob)]
    frame = pd.DataFrame(rows, columns=["unit", "rater_id", "rater", "value"])
    frame = frame.assign(value=frame["value"].map({"a": "yes", "b": "no"}), is_human=True,
                         item=frame["unit"].astype(str))
    out = pipeline.rater_agreement(frame, "binary", ["yes", "no"])
    assert "note" not in out and out["n_raters"] == 3 and out["n_ratings"] == 24
    assert out["krippendorff_alpha"].n_raters == 3
    ceiling = pipeline.human_ceiling(frame, "binary", ["yes", "no"])
    assert [row.rater for row in ceiling.humans] == ["Alice", "Alice", "Bob"]
    assert ceiling.n_humans == 3
