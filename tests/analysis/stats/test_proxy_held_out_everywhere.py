"""Every table that compares a proxy's answers with the humans leaves out the outputs the
proxy may not be counted on (the dev split its threshold was chosen on, a learned proxy's
training outputs), as the deployment table does, and says how many (issue 30: the human
ceiling scored a dev-threshold judge on its own 100 dev outputs)."""

from __future__ import annotations

import pandas as pd

from analysis.stats.pipeline.families import FAMILIES, CriterionAnalysis, kind_or_none
from analysis.stats.pipeline.rater_agreement import unit_keys
from analysis.stats.votes import graded_entry
from kit.jsonable import to_jsonable

DEV = [0, 1, 2, 3, 4, 5]
BECAUSE = "the 6 dev outputs its threshold was chosen on"
INFO = {"judge": {"thresholds": {"usable": {"threshold": 0.5, "source": "chosen on a dev split",
                                            "rule": "predicted preserved when P(yes) >= 0.5"}},
                  "exclude_decisions": DEV, "exclude_decisions_because": BECAUSE}}


def rows_of(kind: str, answers_of: dict[str, list[str]]) -> pd.DataFrame:
    """20 outputs, every rater answering each (answers_of[rater][output])."""
    rows = [{"rater": rater, "rater_kind": "expert" if rater.startswith("h") else "llm",
             "is_human": rater.startswith("h"), "value": value, "numeric": None,
             "output": output, "item": f"item-{output}", "system": "AB"[output % 2],
             "criterion": "usable", "criterion_kind": kind}
            for rater, answers in answers_of.items() for output, value in enumerate(answers)]
    return pd.DataFrame(rows)


def ceiling_of(rows: pd.DataFrame, criterion: dict, options: dict) -> dict:
    rows = rows.assign(unit=unit_keys(rows, pairwise=False))
    result: dict = {}
    analysis = CriterionAnalysis(criterion, kind_or_none(criterion["kind"]), rows,
                                 rows[rows["is_human"]], result, options, [], None)
    FAMILIES["ceiling"].run(analysis)
    return to_jsonable(result["ceiling"])


def binary_answers() -> dict[str, list[str]]:
    first = ["yes", "no"] * 10
    second = ["yes", "no"] * 9 + ["no", "yes"]
    # The judge is right on its dev outputs (0-5) and wrong on the last four held-out ones.
    judge = [*first[:16], "no", "yes", "no", "yes"]
    return {"h1": first, "h2": second, "h3": list(first), "judge": judge}


def test_the_ceiling_scores_a_dev_threshold_judge_on_held_out_outputs_only():
    criterion = {"key": "usable", "kind": "binary"}
    rows = rows_of("binary", binary_answers())
    everything = ceiling_of(rows, criterion, {})
    (all_units,) = everything["proxies"]
    held_out = ceiling_of(rows, criterion, {"proxy_raters": INFO})
    (judge,) = held_out["proxies"]
    # Each held-out human (3) brings 20 units; the judge's 6 dev outputs go from each.
    assert all_units["n_units"] == 60 and all_units["n_excluded"] == 0
    assert judge["n_units"] == 3 * (20 - len(DEV))
    assert judge["n_excluded"] == len(DEV)
    assert judge["excluded_because"] == BECAUSE
    # Its agreement is now taken on outputs it never tuned on (it is worse there).
    assert judge["percent_agreement"] < all_units["percent_agreement"]
    # The humans' own ceiling does not change.
    assert held_out["mean_kappa"] == everything["mean_kappa"]


def test_a_graded_proxy_is_correlated_on_held_out_outputs_only():
    criterion = {"key": "usable", "kind": "likert", "scale_points": 5}
    human = [str(1 + output % 5) for output in range(20)]
    rows = rows_of("likert", {"h1": human, "h2": human, "judge": human})
    out = to_jsonable(graded_entry(rows, None, None, criterion, {"proxy_raters": INFO}))
    (judge,) = out["proxies"]
    assert judge["n_outputs"] == 20 - len(DEV)
    assert judge["n_excluded"] == len(DEV) and judge["excluded_because"] == BECAUSE


def test_the_report_says_the_ceiling_scored_the_judge_on_held_out_outputs():
    from analysis.report.criteria import criterion_view

    criterion = {"key": "usable", "kind": "binary"}
    ceiling = ceiling_of(rows_of("binary", binary_answers()), criterion, {"proxy_raters": INFO})
    view = criterion_view({"key": "usable", "kind": "binary", "n_judgments": 60,
                           "n_raters": 3, "n_outputs": 20, "ceiling": ceiling})
    notes = [n for b in view["blocks"] for t in b.tables for n in t.notes]
    assert any("held-out outputs only: 6 left out" in n and BECAUSE in n for n in notes)


def test_a_pairwise_proxy_is_scored_on_pairs_outside_its_dev_split_only():
    from analysis.stats.votes import pairwise_entry

    rows = pd.DataFrame([
        {"rater": rater, "rater_kind": "expert" if rater.startswith("h") else "llm",
         "is_human": rater.startswith("h"), "value": "A", "output": 2 * pair,
         "output_b": 2 * pair + 1, "item": f"item-{pair}", "system": "A", "system_b": "B",
         "criterion": "better", "criterion_kind": "pairwise"}
        for pair in range(10) for rater in ("h1", "h2", "judge")])
    criterion = {"key": "better", "kind": "pairwise"}
    everything = to_jsonable(pairwise_entry(rows, None, None, criterion))
    held_out = to_jsonable(pairwise_entry(rows, None, None, criterion, INFO))
    # Dev outputs 0-5 touch pairs 0, 1 and 2.
    assert held_out["held_out"] == {"rater:judge": {"n_excluded": 3,
                                                    "excluded_because": BECAUSE}}

    def judged(entry: dict) -> int:
        (row,) = [r for r in next(iter(entry["tables"].values())) if r["proxy"] == "rater:judge"]
        return row["all"]["n"]

    assert judged(everything) == 10 and judged(held_out) == 7
