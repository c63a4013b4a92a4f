"""The human ceiling and the REML ICC on crowd designs: thousands of raters who each rate a
unit or two. Their cost follows the ratings; their results are those of the general path.

Before: the ICC's crossed REML factorised a dense Schur complement of the smaller factor on
every evaluation of its criterion (36,000 in the parametric bootstrap): a Likert crowd study
of 7,150 raters x 1,000 items spent 454 s there, and with more items than raters the matrix
is raters x raters. The ceiling bootstrapped a q x q table per rater even when the rater had
a single cell (15 s for that study). Measured by bench/analysis.py (--crowd-kind likert).
"""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from analysis.stats.agreement import human_ceiling, icc, variance_components

# The module, not the function the package exports under the same name.
icc_module = sys.modules["analysis.stats.agreement.icc"]
ceiling_module = sys.modules["analysis.stats.agreement.ceiling"]


def crowd(raters: int, items: int, seed: int, extra: float = 0.2) -> pd.DataFrame:
    """Each rater rates one item (items in turn); a share `extra` of them rates a second one,
    which connects raters through items. Likert-like values from item effects."""
    rng = np.random.default_rng(seed)
    item = rng.permutation(np.resize(np.arange(items), raters))
    second = rng.random(raters) < extra
    units = np.concatenate([item, (item[second] + 1 + rng.integers(0, items - 1,
                                                                     second.sum())) % items])
    who = np.concatenate([np.arange(raters), np.flatnonzero(second)])
    effect = rng.normal(0, 1, items)
    value = np.clip(np.round(3 + effect[units] + rng.normal(0, 1, units.size)), 1, 5)
    return pd.DataFrame({"unit": units, "rater": who, "value": value,
                         "item": units // 2})


def full_tables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ceiling without its single-cell shortcut: every non-empty table keeps q x q
    features (the general path)."""
    original = ceiling_module._CeilingTables.__init__

    def init(self, table, cell, n_tables, q, kernel):
        original(self, table, cell, n_tables, q, kernel)
        qq = q * q
        present = np.unique(table * qq + cell)
        self.multi = np.flatnonzero(np.bincount(present // qq, minlength=n_tables) > 0)
        self.single = np.empty(0, dtype=np.int64)
        position = np.full(n_tables, -1, dtype=np.int64)
        position[self.multi] = np.arange(self.multi.size)
        self.size_multi = self.n_features = self.multi.size * qq
        self.features = position[table] * qq + cell
        self.single_kappa = self.single_pct = np.empty(0)

    monkeypatch.setattr(ceiling_module._CeilingTables, "__init__", init)


def test_ceiling_single_cell_tables_give_the_full_tables_results_bit_for_bit(monkeypatch):
    frame = crowd(1_500, 300, seed=3).assign(value=lambda d: d["value"].astype(int))
    rng = np.random.default_rng(9)
    proxy = pd.DataFrame({"unit": np.arange(300), "rater": -1,
                          "value": rng.integers(1, 6, 300), "item": np.arange(300) // 2})
    frame = pd.concat([frame, proxy], ignore_index=True)

    def ceilings():
        return [dataclasses.asdict(human_ceiling(
            frame, proxies=[-1], weights=weights, labels=[1, 2, 3, 4, 5], tie_break=ties,
            n_boot=200, seed=4, cluster="item"))
            for weights in (None, "linear") for ties in ("split", "lowest")]

    fast = ceilings()
    full_tables_only(monkeypatch)
    assert repr(fast) == repr(ceilings())
    assert all(row["kappa_ci"][0] is not None for row in fast)


def test_reml_on_a_crowd_never_builds_a_dense_levels_by_levels_matrix():
    # 4,000 raters x 3,500 items: the dense path held 3,500 x 3,500 matrices (98 MB each)
    # and factorised one on every evaluation.
    frame = crowd(4_000, 3_500, seed=1)
    tracemalloc.start()
    try:
        components = variance_components(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert components.converged and components.item > 0.5
    assert peak < 48 * 1024**2


@pytest.mark.parametrize("extra", [0.0, 0.2])  # 0: one unit per rater, a diagonal complement
def test_sparse_reml_agrees_with_the_dense_factorisation(monkeypatch, extra):
    frame = crowd(900, 420, seed=2, extra=extra)
    sparse_fit = variance_components(frame)
    sparse_icc = icc(frame, n_boot=20, seed=1)
    monkeypatch.setattr(icc_module._REML, "_SPARSE_MIN_LEVELS", 10**9)
    dense_fit = variance_components(frame)
    dense_icc = icc(frame, n_boot=20, seed=1)
    assert sparse_fit.reml_criterion == pytest.approx(dense_fit.reml_criterion, rel=1e-12)
    # With one rating per rater, rater and residual variance are not separable (only their
    # sum is): the criterion is flat along it, and only what is identified is compared.
    separable = extra > 0
    compared = {"item": lambda f: f.item, "intercept": lambda f: f.intercept,
                "rater + residual": lambda f: f.rater + f.residual}
    if separable:
        compared.update({"rater": lambda f: f.rater, "residual": lambda f: f.residual})
    for name, value in compared.items():
        assert value(sparse_fit) == pytest.approx(value(dense_fit), rel=1e-5, abs=1e-7), name
    for name, estimate in sparse_icc.items():
        if not separable and name.startswith("ICC3"):
            continue
        other = dense_icc[name]
        assert estimate.value == pytest.approx(other.value, abs=1e-7), name
        assert estimate.ci_low == pytest.approx(other.ci_low, abs=1e-5), name
        assert estimate.ci_high == pytest.approx(other.ci_high, abs=1e-5), name


def test_one_judgment_raters_have_no_kappa_rather_than_a_ceiling_of_zero():
    """Every rater judged one pair (votes imported as invented raters): the ceiling kappa was
    averaged as 0.000, because a rater agreeing with the others had an undefined kappa
    (dropped) and one disagreeing a kappa of 0 (kept)."""
    rows = []
    for unit in range(40):
        for vote in range(7):
            rows.append({"unit": unit, "rater": unit * 10 + vote, "item": unit,
                         "value": "A" if vote < 5 else "B"})
    result = human_ceiling(pd.DataFrame(rows), labels=["A", "B"])
    assert np.isnan(result.mean_kappa)
    assert 0.6 < result.mean_percent_agreement < 0.8  # 5 of 7 agree with the others
    assert any("no kappa" in note and "undefined" in note for note in result.warnings)
