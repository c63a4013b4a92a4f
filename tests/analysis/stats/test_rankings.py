"""Plackett-Luce and best-worst scores: pinned to R's survival::clogit on the exploded
rankings, to Bradley-Terry's closed form with two outputs, and to counts worked by hand."""

from __future__ import annotations

import io
import json
import math
import subprocess

import numpy as np
import pandas as pd
import pytest

from analysis.stats import rbridge as rb
from analysis.stats.rankings import bws_scores, plackett_luce, rank_summary

needs_r = pytest.mark.skipif(not rb.r_available(),
                             reason=f"R unavailable: {rb.r_unavailable_reason()}")


def _simulated(seed: int = 4, n: int = 150) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    worth = {"a": 0.0, "b": 0.7, "c": -0.5, "d": 1.2}
    rankings = []
    for _ in range(n):
        shown = list(rng.choice(list(worth), size=3, replace=False))
        # Gumbel noise on the log-worths gives Plackett-Luce rankings.
        noisy = {s: worth[s] + rng.gumbel() for s in shown}
        rankings.append(sorted(shown, key=lambda s: -noisy[s]))
    return rankings


@needs_r
def test_plackett_luce_equals_rs_rank_ordered_logit():
    rankings = _simulated()
    rows = []
    for stratum_base, ranking in enumerate(rankings):
        for stage in range(len(ranking) - 1):
            for system in ranking[stage:]:
                rows.append({"stratum": f"{stratum_base}-{stage}", "system": system,
                             "chosen": int(system == ranking[stage])})
    csv = pd.DataFrame(rows).to_csv(index=False)
    script = ("d <- read.csv(file('stdin')); d$system <- factor(d$system, levels = "
              "c('a','b','c','d')); library(survival); f <- clogit(chosen ~ system + "
              "strata(stratum), data = d); write.csv(data.frame(est = coef(f), "
              "se = sqrt(diag(vcov(f)))), stdout())")
    out = subprocess.run(["Rscript", "-e", script], input=csv, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    r = pd.read_csv(io.StringIO(out), index_col=0)
    fit = plackett_luce(rankings)
    by = {row["system"]: row for row in fit["systems"]}
    for system in "bcd":
        assert math.isclose(by[system]["log_worth"], r.loc[f"system{system}", "est"],
                            abs_tol=1e-5)
        assert math.isclose(by[system]["se"], r.loc[f"system{system}", "se"], abs_tol=1e-5)
    assert by["a"]["reference"] and by["a"]["log_worth"] == 0.0
    assert [row["system"] for row in fit["systems"]] == ["d", "b", "a", "c"]


def test_two_outputs_is_bradley_terry_in_closed_form():
    rankings = [["x", "y"]] * 30 + [["y", "x"]] * 10
    fit = plackett_luce(rankings)
    y = next(r for r in fit["systems"] if r["system"] == "y")
    assert math.isclose(y["log_worth"], math.log(10 / 30), abs_tol=1e-6)
    assert math.isclose(y["se"], math.sqrt(1 / 30 + 1 / 10), abs_tol=1e-6)
    assert math.isclose(next(r["worth_share"] for r in fit["systems"] if r["system"] == "x"),
                        0.75, abs_tol=1e-6)


def test_a_system_that_always_wins_is_said_to_have_no_finite_estimate():
    fit = plackett_luce([["w", "x", "y"], ["w", "y", "x"], ["x", "w", "y"], ["w", "x", "y"]]
                        + [["x", "y"]] * 3 + [["y", "x"]] * 2 + [["y", "w"]], reference="x")
    assert fit["converged"] and not fit["warnings"]
    # w always first; x and y split between themselves: x and y compare both ways (the
    # reference comes from them, their difference has an interval), w has no finite estimate.
    always = plackett_luce([["w", "x", "y"]] * 4 + [["w", "y", "x"]] * 4 + [["x", "y"]] * 3
                           + [["y", "x"]] * 3)
    by = {r["system"]: r for r in always["systems"]}
    assert always["reference"] == "x" and not always["converged"]
    assert not by["w"]["reliable"] and by["w"]["ci_low"] is None
    assert by["y"]["reliable"] and by["y"]["ci_low"] < 0 < by["y"]["ci_high"]
    assert abs(by["y"]["log_worth"]) < 1e-6
    assert always["warnings"] == [
        "w: always ranked above, or always below, the systems ranked both ways against x "
        "(x, y), or never shown with them: log-worths relative to them have no finite "
        "estimate (shown without intervals)"]


def test_mean_ranks_and_best_worst_counts_by_hand():
    summary = {r["system"]: r for r in rank_summary([["a", "b", "c"], ["b", "a", "c"]])}
    assert summary["a"]["mean_rank"] == 1.5 and summary["c"]["last"] == 1.0
    judgments = pd.DataFrame({
        "value": ["best=A;worst=D", "best=B;worst=D", "best=A;worst=C"],
        "shown": [json.dumps(["p", "q", "r", "s"]), json.dumps(["q", "p", "s", "r"]),
                  json.dumps(["p", "q", "r", "s"])],
        "item": ["i1", "i2", "i3"]})
    scores = {r["system"]: r for r in bws_scores(judgments, n_boot=200)["systems"]}
    # p: best 3 times of 3 shown; r: worst twice (shown as D then C), s: worst once.
    assert scores["p"]["score"] == 1.0 and scores["p"]["best"] == 3
    assert scores["r"]["score"] == pytest.approx(-2 / 3)
    assert scores["s"]["score"] == pytest.approx(-1 / 3)
    assert scores["q"]["score"] == 0.0
    assert scores["r"]["ci_low"] <= scores["r"]["score"] <= scores["r"]["ci_high"]
