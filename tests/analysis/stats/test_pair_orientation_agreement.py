"""A pair's two orientations are one unit for agreement (issue 30): on a counterbalanced
design one rater sees outputs (10, 11) as (A, B) and another sees them as (11, 10), so the
second's "B" says what the first's "A" says. Before, (10, 11) and (11, 10) were two units
and the report said "no output was rated by two or more humans" while the pairwise
validity counted 2 votes on every pair.

Tiny counterbalanced study: 6 pairs of a1/a2 outputs; r0 sees each with its lower id on
the left, r1 with it on the right, and both always mean the same output (a tie stays a
tie); a judge sees the pairs as r1 does and answers as they do.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.stats.pipeline import analyse_criterion
from evalstudy.criteria import pair_oriented

PAIRS = [(10, 11), (12, 13), (14, 15), (16, 17), (18, 19), (20, 21)]
# The answer with the pair shown in (lower id, higher id) order.
IN_ORDER = ["A", "A", "B", "tie", "B", "A"]


def counterbalanced_rows() -> pd.DataFrame:
    rows = []
    for index, ((low, high), answer) in enumerate(zip(PAIRS, IN_ORDER, strict=True)):
        # r1 and the judge see the pair the other way round: the same opinion reads flipped.
        (_, _), flipped = pair_oriented(high, low, answer)
        for rater, human, shown, value in (("r0", True, (low, high), answer),
                                           ("r1", True, (high, low), flipped),
                                           ("judge", False, (high, low), flipped)):
            rows.append({"rater": rater, "is_human": human, "output": shown[0],
                         "output_b": shown[1], "item": f"item-{index}",
                         "system": "s1" if shown[0] == low else "s2",
                         "system_b": "s2" if shown[0] == low else "s1",
                         "criterion": "better", "criterion_kind": "pairwise",
                         "value": value, "numeric": None, "seconds": 1.0})
    return pd.DataFrame(rows)


def analysed() -> dict:
    return analyse_criterion(counterbalanced_rows(),
                             {"key": "better", "kind": "pairwise", "allow_tie": True}, {}, [])


def test_raters_who_saw_a_pair_in_opposite_orientations_and_agree_share_one_unit():
    result = analysed()
    agreement = result["agreement"]
    assert "note" not in agreement, agreement
    assert result["n_outputs"] == len(PAIRS)  # 6 pairs, not 12 orientations
    assert agreement["n_units"] == len(PAIRS) and agreement["n_raters"] == 2
    assert agreement["percent_agreement"]["value"] == pytest.approx(1.0)
    assert agreement["krippendorff_alpha"]["value"] == pytest.approx(1.0)
    (pair,) = agreement["cohen_pairs"]["pairs"]
    assert pair["n"] == len(PAIRS) and pair["unweighted"] == pytest.approx(1.0)


def test_a_judge_seeing_the_pairs_the_other_way_round_is_scored_on_the_same_units():
    ceiling = analysed()["ceiling"]
    assert "note" not in ceiling and "error" not in ceiling, ceiling
    assert ceiling["n_units"] == len(PAIRS)
    (judge,) = ceiling["proxies"]
    assert judge["n_units"] == 2 * len(PAIRS)  # summed over the two held-out humans
    assert judge["percent_agreement"] == pytest.approx(1.0)
    assert [h["percent_agreement"] for h in ceiling["humans"]] == pytest.approx([1.0, 1.0])
