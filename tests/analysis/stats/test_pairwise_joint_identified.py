"""The joint pairwise model says "not identified (why)" instead of printing estimates when its
information matrix is singular or the fit diverges (issue 30: on a 36-answer study it printed
beta = -83123.363 and cut points 5153.365 / 5154.265 as estimates, with a trailing note)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.extras import pairwise_joint as section_part
from analysis.stats.pairwise_joint import joint_preference_model
from kit.jsonable import to_jsonable
from tests.analysis.stats.test_pairwise_joint import simulate


def answers(rows: list[tuple[str, str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame([(a, b, v) for a, b, v, n in rows for _ in range(n)],
                        columns=["system", "system_b", "value"])


def levels_separated_by_quality() -> pd.DataFrame:
    """36 answers on three systems whose no-preference answers sort perfectly by the pair's
    mean quality (every no-preference answer on the best pair says "both good", on the worst
    "both bad"): beta and the cut points run off to infinity."""
    return answers([
        ("hi", "mid", "A", 4), ("mid", "hi", "B", 3), ("hi", "mid", "both_good", 3),
        ("mid", "lo", "A", 4), ("lo", "mid", "B", 3), ("mid", "lo", "both_bad", 3),
        ("hi", "lo", "A", 4), ("lo", "hi", "B", 3), ("hi", "lo", "tie", 3),
        ("mid", "hi", "A", 2), ("lo", "mid", "A", 2), ("lo", "hi", "A", 2)])


def always_wins() -> pd.DataFrame:
    """x beats y whatever the side, and they never tie: complete separation."""
    return answers([("x", "y", "A", 8), ("y", "x", "B", 8),
                    ("y", "z", "A", 5), ("z", "y", "A", 5), ("y", "z", "tie", 2)])


def assert_no_estimates(fit) -> None:
    assert fit.status == "not identified"
    assert fit.theta == [] and fit.contrasts == [] and fit.cuts == []
    assert fit.nu is None and fit.beta is None and fit.position is None
    assert fit.not_identified_because


def test_levels_perfectly_sorted_by_quality_are_not_identified():
    data = levels_separated_by_quality()
    assert len(data) == 36
    fit = joint_preference_model(data, allow_tie=True, allow_both=True)
    assert_no_estimates(fit)
    assert any("singular" in why for why in fit.not_identified_because)
    assert any("the fit diverges: cut point both_bad | tie, cut point tie | both_good, beta "
               "ran past 30" in why for why in fit.not_identified_because)
    # What the data say is still there: the answers per pair and how they entered.
    assert sum(p["n"] for p in fit.pair_shares) == 36 and fit.counts["both_good"] == 3


def test_a_system_that_always_wins_is_not_identified():
    fit = joint_preference_model(always_wins(), allow_tie=True, allow_both=False)
    assert_no_estimates(fit)


def test_a_well_posed_study_still_gets_its_estimates():
    fit = joint_preference_model(simulate(np.random.default_rng(3), 3000), allow_tie=True,
                                 allow_both=True)
    assert fit.status == "estimated" and fit.not_identified_because == []
    assert len(fit.theta) == 4 and len(fit.cuts) == 2 and fit.beta.se is not None


def test_the_report_shows_the_reason_instead_of_the_table():
    fit = to_jsonable(joint_preference_model(levels_separated_by_quality(), allow_tie=True,
                                             allow_both=True))
    shown = section_part.section({"criteria": [{"key": "better", "prompt": "Which is better?",
                                                "allow_tie": True, "allow_both": True,
                                                "fit": fit, "notes": []}]}, {})
    (block,) = shown["blocks"]
    titles = [t["title"] for t in block["tables"]]
    assert "Parameters" not in titles and "Quality contrasts" not in titles
    assert "Answers per pair of systems" in titles
    (warning,) = [w for w in block["warnings"] if w.startswith("Joint model not identified")]
    assert fit["not_identified_because"][0] in warning
