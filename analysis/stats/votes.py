"""Aggregated judgments (counts of people per answer per unit, `annotation.votes`) in the
analysis, and the pairwise validity of metrics and proxies against the human majority.

Counts carry no rater, so only what counts can give is computed from them:

- shares per system (pairwise: the preference model with the counts as frequency weights,
  without a position term when the import declared the position unknown);
- agreement statistics that do not depend on who gave which answer: percent agreement,
  Krippendorff's alpha, Gwet's AC1 and Fleiss' kappa (each unit's answers are what they
  use). Cohen's kappa between raters, ICCs, rater random effects and the leave-one-rater-out
  ceiling need raters and are not computed from counts;
- for a pairwise criterion, `pairwise_validity`: each metric's and proxy rater's agreement
  with the majority of everyone (named raters and counted votes), under both tie rules, by
  agreement stratum, beside the ceiling of one person against the others.

Django-free: the frames come from `analysis.selectors.vote_counts` and `judgments_tidy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from annotation.preferences import merge_units, units_from_choices, units_from_votes
from evalstudy.criteria import KINDS, PAIR, kind_of

from . import agreement, models
from .agreement.base import Level
from .held_out import held_out_answers
from .pairwise_validity import LOO_RULES, RULES, as_table, pairwise_validity, picks_of_answers
from .validity import metric_directions

Section = Callable[[dict, str, list[str], Callable[[], Any]], None]


VOTE_COLUMNS = ["criterion", "criterion_kind", "item", "output", "system", "output_b",
                "system_b", "value", "count", "position_known"]


def design_with_votes(design: dict[str, Any], votes: pd.DataFrame) -> None:
    """The report's design section counts the votes and their systems too."""
    if votes.empty:
        return
    design["vote_counts"] = {"votes": int(votes["count"].sum()),
                             "criteria": sorted(votes["criterion"].unique())}
    design["systems"] = sorted({*design["systems"], *votes["system"].dropna(),
                                *votes["system_b"].dropna()})


def votes_summary(votes: pd.DataFrame, criterion: Mapping[str, Any], warnings: list[str],
                  section: Section, categories: list | None) -> dict[str, Any]:
    """What the counts of one criterion give: totals, the pairwise preference model (shares
    and Bradley-Terry, counts as weights) and identity-free agreement."""
    kind = kind_of(criterion["kind"]) if criterion["kind"] in KINDS else None
    votes = votes[votes["count"] > 0]
    if votes.empty:
        return {"n_units": 0, "n_votes": 0, "note": "every count is 0"}
    units = votes.groupby(["output", "output_b"], dropna=False)["count"].sum()
    out: dict[str, Any] = {
        "n_units": int(len(units)), "n_votes": int(votes["count"].sum()),
        "votes_per_unit": {"min": int(units.min()), "median": float(units.median()),
                           "max": int(units.max())} if len(units) else None,
        "position_known": bool(votes["position_known"].all()) if len(votes) else None,
        "note": ("Aggregated counts (people per answer), not named raters: rater-level "
                 "statistics (Cohen's kappa between raters, ICC, rater random effects, the "
                 "leave-one-rater-out ceiling) are not computed from them."),
    }
    if kind is not None and kind.shows == PAIR:
        frame = pd.DataFrame({"left_system": votes["system"], "right_system": votes["system_b"],
                              "choice": votes["value"], "count": votes["count"]})
        known = bool(out["position_known"])
        section(out, "preference", warnings, lambda: models.preference_model(
            frame, weight="count", position_known=known))
    expanded = expand(votes)
    if categories is not None and all(isinstance(c, int | float) for c in categories):
        # Stored answers are text ("3"); a numeric scale's labels are numbers (3).
        expanded["value"] = pd.to_numeric(expanded["value"], errors="coerce")
    if expanded.groupby("unit")["rater"].nunique().max() >= 2:
        level: Level = ("ordinal" if kind is not None and kind.level == "ordinal"
                        else "nominal")
        labels = categories if categories is not None else None
        section(out, "agreement", warnings, lambda: {
            "percent_agreement": agreement.percent_agreement(expanded, labels=labels),
            "krippendorff_alpha": agreement.krippendorff_alpha(
                expanded, level, labels=labels, n_boot=agreement.N_BOOT, seed=20240917,
                cluster="item"),
            "gwet_ac1": agreement.gwet_ac1(expanded, labels=labels),
            "fleiss_kappa": agreement.fleiss_kappa(expanded, labels=labels, unbalanced="gwet"),
        })
    return out


def expand(votes: pd.DataFrame) -> pd.DataFrame:
    """The counts as one row per vote (unit, rater, value, item) for statistics that use only
    each unit's answers: `rater` numbers the votes of a unit (0, 1, ...) and identifies
    nobody."""
    keys = pd.factorize(pd.MultiIndex.from_arrays([
        votes["output"], pd.to_numeric(votes["output_b"], errors="coerce").fillna(-1)]))[0]
    repeats = votes["count"].to_numpy(dtype=int)
    unit = np.repeat(keys, repeats)
    frame = pd.DataFrame({"unit": unit, "value": np.repeat(votes["value"].to_numpy(), repeats),
                          "item": np.repeat(votes["item"].to_numpy(), repeats)})
    frame["rater"] = frame.groupby("unit").cumcount()
    return frame


def pairwise_entry(rows: pd.DataFrame, votes: pd.DataFrame | None,
                   metrics: pd.DataFrame | None, criterion: Mapping[str, Any],
                   proxy_raters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The validity entry of a pairwise criterion: every metric (scores per output, their
    direction as their scorers declare it: `validity.metric_directions`) and every proxy rater
    against the human majority of each pair, with the one-person ceiling
    (`pairwise_validity`). A proxy rater is scored only on the pairs it may be counted on
    (`held_out_answers`: `held_out` says how many pairs of each were left out, and why)."""
    rows, held_out = held_out_answers(rows, proxy_raters)
    humans = rows[rows["is_human"]]
    parts = []
    if not humans.empty:
        parts.append(units_from_choices(humans))
    if votes is not None and not votes.empty:
        parts.append(units_from_votes(votes))
    if not parts:
        return {"criterion": criterion["key"], "kind": criterion.get("kind"),
                "note": "no human preferences"}
    units = merge_units(*parts)
    scores = pd.DataFrame(index=pd.Index([], name="output"))
    directions: dict[str, bool] = {}
    if metrics is not None and not metrics.empty:
        scores = metrics.set_index("output")
        directions = {c: higher for c, higher in metric_directions(scores).items()
                      if scores[c].notna().any()}
    picks = {f"rater:{name}": picks_of_answers(units, answers)
             for name, answers in rows[~rows["is_human"]].groupby("rater")}
    result = pairwise_validity(units, scores, directions, picks)
    return {
        "criterion": criterion["key"], "kind": criterion.get("kind"),
        "n_units": result.n_units,
        "n_votes": result.n_votes, "n_human_ties": result.n_human_ties,
        "strata": result.strata, "method": result.method,
        "tables": {rule: as_table(result, rule) for rule in (*RULES, *LOO_RULES)},
        "sources": {"named raters": int(len(humans)),
                    "counted votes": int(votes["count"].sum()) if votes is not None
                    and not votes.empty else 0},
        "held_out": {f"rater:{name}": found for name, found in held_out.items()},
    }


def graded_entry(rows: pd.DataFrame, votes: pd.DataFrame | None, metrics: pd.DataFrame | None,
                 criterion: Mapping[str, Any], options: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """The validity entry of a Likert or slider criterion (`graded_validity`), each proxy
    rater scored on the outputs it may be counted on (`options["proxy_raters"]`)."""
    from .graded_validity import graded_validity

    return graded_validity(rows, votes, metrics, criterion,
                           (options or {}).get("proxy_raters"))


def with_counted_votes(judgments: pd.DataFrame, votes: pd.DataFrame, key: str) -> pd.DataFrame:
    """`judgments` plus criterion `key`'s counted votes as human ratings (rater "counted
    votes", one row per vote), for statistics that need only each output's human answers:
    the majority label and share the binary and severity validity compare proxies with."""
    counted = votes[(votes["criterion"] == key) & (votes["count"] > 0)]
    if counted.empty:
        return judgments
    repeats = counted["count"].to_numpy(dtype=int)
    rows = pd.DataFrame({column: np.repeat(counted[column].to_numpy(), repeats)
                         for column in ("criterion", "item", "output", "system", "value")})
    rows = rows.assign(rater="counted votes", rater_kind="counted", is_human=True,
                       criterion_kind=counted["criterion_kind"].iloc[0])
    return pd.concat([judgments, rows], ignore_index=True)
