"""Agreement on integer keys (the ids `judgments_tidy` gives): the same results as on text
keys and as the krippendorff package, and validation whose memory follows the ratings.

Before: the pipeline turned output ids into text (`astype(str)`, and "a|b" for pairs) and
every coefficient factorised that text again; the duplicate check counted over every
units x raters cell, 392 MB for a crowd table of 7,000 raters x 7,000 units with 14,000
ratings (test below: it fails on that code).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest

from analysis.stats import pipeline
from analysis.stats.agreement import (
    fleiss_kappa,
    gwet_ac1,
    human_ceiling,
    krippendorff_alpha,
    percent_agreement,
)
from analysis.stats.agreement.base import factorize_keys


@pytest.mark.parametrize("values", [
    [5, 3, 5, 9, 3, 3, 12],
    [2**40, 7, 2**40],  # a range too wide for the scatter path: hashing, same answer
    np.array([4, 4, 1], dtype=np.uint16),
    [-3, 0, -3, 2],
    np.array([], dtype=np.int64),
])
def test_factorize_keys_is_pandas_factorize(values):
    series = pd.Series(values)
    codes, uniques = factorize_keys(series)
    expected_codes, expected_uniques = pd.factorize(series)
    assert codes.tolist() == expected_codes.tolist()
    assert list(uniques) == list(expected_uniques)
    assert uniques.dtype == expected_uniques.dtype


def ratings(seed: int = 3, raters: int = 60, units: int = 90, n: int = 3_000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cells = rng.choice(raters * units, size=n, replace=False)
    rater, unit = np.divmod(cells, units)
    clear = rng.beta(1.2, 0.8, units)
    value = np.where(rng.random(n) < clear[unit], "yes", "no")
    return pd.DataFrame({"unit": unit.astype(np.int64) + 5_000,
                         "rater": rater.astype(np.int64) + 17, "value": value,
                         "item": (unit // 3).astype(np.int64)})


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(unit=[f"out{u}" for u in frame["unit"]],
                        rater=[f"rater{r}" for r in frame["rater"]])


def test_integer_keys_give_the_results_of_text_keys():
    frame = ratings()
    text = as_text(frame)
    labels = ["yes", "no"]
    for compute in (
        lambda d: krippendorff_alpha(d, "nominal", labels=labels, n_boot=300, seed=4,
                                     cluster="item"),
        lambda d: krippendorff_alpha(d, "nominal", labels=labels, n_boot=300, seed=4),
        lambda d: gwet_ac1(d, labels=labels),
        lambda d: fleiss_kappa(d, labels=labels, unbalanced="gwet"),
        lambda d: percent_agreement(d, labels=labels),
    ):
        ours, theirs = compute(frame), compute(text)
        assert (ours.value, ours.ci_low, ours.ci_high) == (theirs.value, theirs.ci_low,
                                                           theirs.ci_high)
        assert (ours.n_units, ours.n_raters, ours.n_ratings) == (
            theirs.n_units, theirs.n_raters, theirs.n_ratings)
    ceiling = human_ceiling(frame, labels=labels, n_boot=200, seed=2, cluster="item")
    ceiling_text = human_ceiling(text, labels=labels, n_boot=200, seed=2, cluster="item")
    assert (ceiling.mean_kappa, ceiling.kappa_ci) == (ceiling_text.mean_kappa,
                                                      ceiling_text.kappa_ci)


def test_alpha_on_integer_keys_equals_the_package_to_1e_12():
    krippendorff = pytest.importorskip("krippendorff")  # GPL: dev-only reference
    frame = ratings(seed=8, raters=120, units=300, n=20_000)
    frame = frame.assign(value=(frame["value"] == "yes").astype(np.int64))
    wide = frame.pivot(index="rater", columns="unit", values="value").to_numpy(dtype=float)
    theirs = krippendorff.alpha(reliability_data=wide, level_of_measurement="nominal")
    assert krippendorff_alpha(frame, "nominal").value == pytest.approx(theirs, abs=1e-12)


def test_pipeline_units_are_integer_keys_with_the_old_grouping():
    """Output ids are used as they are; a pairwise unit is the pair of outputs whichever way
    round it was shown (issue 30: (12, 13) and (13, 12) of a counterbalanced design are one
    unit), in the order of first appearance of the text keys ("12", "12|13")."""
    rows = pd.DataFrame({"output": [12, 12, 13, 12, 14], "output_b": [13, 14, 12, 13, 12]})
    single = pipeline.unit_keys(rows, pairwise=False)
    assert single.tolist() == [12, 12, 13, 12, 14]
    pairs = pipeline.unit_keys(rows, pairwise=True)
    assert pd.factorize(pairs)[0].tolist() == [0, 1, 0, 0, 1]
    assert pairs.dtype.kind == "i"
    # Ids that are not integers (imported tables) are coded; a missing one stays a unit.
    odd = pd.DataFrame({"output": ["a", None, "a", "b"], "output_b": [None] * 4})
    assert pipeline.unit_keys(odd, pairwise=False).tolist() == [0, 1, 0, 2]


def test_duplicate_check_of_a_sparse_table_follows_the_ratings():
    # 7,000 raters x 7,000 units, 14,000 ratings: the old check counted 49 million cells.
    raters = 7_000
    rater = np.repeat(np.arange(raters), 2)
    unit = (rater + np.tile([0, 1], raters)) % raters
    frame = pd.DataFrame({"unit": unit, "rater": rater,
                          "value": np.where(unit % 3 == 0, "yes", "no")})
    tracemalloc.start()
    try:
        value = percent_agreement(frame).value
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == pytest.approx(percent_agreement(as_text(frame)).value, abs=1e-15)
    assert peak < 32 * 1024**2
    twice = pd.concat([frame, frame.iloc[[5]]], ignore_index=True)
    with pytest.raises(ValueError, match=r"rated unit .* more than once"):
        percent_agreement(twice)
