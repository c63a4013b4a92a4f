"""Judgments of outputs that may reveal their system, reported apart (the blindness audit,
evalstudy.blindness, re-run on the study's outputs as they are at analysis time).

- `compute`: which outputs the audit flags; per criterion and system, the mean (binary and
  severity criteria: the share of yes / meaning preserved) on flagged and on unflagged
  outputs with their counts; the system comparison (difference from the first system, 95%
  bootstrap CI resampling raters, as the integrity section computes it) with every judgment
  and without the judgments of flagged outputs; for pairwise criteria, per pair of systems,
  the share of non-tie answers preferring the first with a Wilson CI, with and without pairs
  that show a flagged output. If raters were unblinded by a leak, a system's flagged and
  unflagged means differ, or the comparison moves when flagged outputs are left out.
- option `exclude_identity_leaks` (bool, default false): `prepare` drops every judgment of a
  flagged output (pairwise, ranking and best-worst: of a slot that showed a flagged output
  among others) from the table every other section reads; this section still shows the
  flagged judgments (read again with the run's filters) and says how many were left out.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from analysis.extras.integrity import system_means
from evalstudy.criteria import BINARY_KINDS, PAIR, TUPLE, binary_label, kind_of, kinds_where

OPTION = "exclude_identity_leaks"
#: The kinds whose answers score one number (a mean, or the share of yes / meaning preserved).
SCORED_KINDS = kinds_where(lambda kind: kind.score is not None)
#: The kinds whose slots show a tuple of outputs (the slot flagged when any of them is).
TUPLE_KINDS = kinds_where(lambda kind: kind.shows == TUPLE)


def _check_option(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")


OPTIONS: dict[str, Any] = {OPTION: _check_option}


def _audit(study: Any) -> Any:
    from evalstudy.selectors import study_blindness_audit

    return study_blindness_audit(study)


def flagged_rows(judgments: pd.DataFrame, flagged: set[int]) -> np.ndarray:
    """Whether each judgment's slot showed a flagged output: its output, its pairwise B
    output, or (ranking and best-worst) any output shown."""
    if judgments.empty or not flagged:
        return np.zeros(len(judgments), dtype=bool)
    wanted = list(flagged)
    mask = judgments["output"].isin(wanted).to_numpy()
    if "output_b" in judgments:
        mask |= judgments["output_b"].isin(wanted).to_numpy()
    tuples = judgments["criterion_kind"].isin(TUPLE_KINDS).to_numpy()
    if tuples.any():
        from evalstudy.models import AssignmentSlot

        slots = judgments.loc[tuples, "slot"].unique().tolist()
        shown = dict(AssignmentSlot.objects.filter(pk__in=slots)
                     .values_list("id", "shown_outputs"))
        mask[tuples] |= judgments.loc[tuples, "slot"].map(
            lambda slot: bool(flagged.intersection(shown.get(slot) or []))).to_numpy(bool)
    return mask


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    if not options.get(OPTION) or judgments.empty:
        return judgments
    mask = flagged_rows(judgments, _audit(study).flagged_outputs)
    if not mask.any():
        return judgments
    return judgments[~mask].reset_index(drop=True)


# --- compute ---------------------------------------------------------------------------------
def _scores(rows: pd.DataFrame, kind: str) -> pd.Series:
    if kind in BINARY_KINDS:
        return rows["value"].map(lambda v: binary_label(kind, str(v))).astype("float64")
    return pd.to_numeric(rows["numeric"], errors="coerce")


def _mean(rows: pd.DataFrame) -> dict[str, Any]:
    scores = rows["score"].dropna()
    return {"n": int(len(scores)), "value": float(scores.mean()) if len(scores) else None}


def scored_split(rows: pd.DataFrame, kind: str) -> dict[str, Any]:
    """Per system: flagged and unflagged means with counts, and the system comparison with
    every judgment and without the flagged ones. `rows`: one criterion's judgments with a
    boolean `flagged` column."""
    rows = rows.assign(score=_scores(rows, kind)).dropna(subset=["score"])
    systems = []
    for system, group in rows.groupby("system", sort=True):
        systems.append({"system": str(system), "flagged": _mean(group[group["flagged"]]),
                        "unflagged": _mean(group[~group["flagged"]])})
    return {"systems": systems, "all": system_means(rows),
            "unflagged_only": system_means(rows[~rows["flagged"]])}


def _preference(rows: pd.DataFrame, first: str, second: str) -> dict[str, Any]:
    from analysis.stats.descriptives import wilson_ci

    a_first = rows["system"] == first
    wins = int((((rows["value"] == "A") & a_first) | ((rows["value"] == "B") & ~a_first)).sum())
    ties = int((~rows["value"].isin(["A", "B"])).sum())
    decided = int(len(rows) - ties)
    ci = wilson_ci(wins, decided)
    return {"n": int(len(rows)), "ties": ties, "decided": decided,
            "share": wins / decided if decided else None, "ci": list(ci) if ci else None}


def pairwise_split(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per pair of systems: the share of decided answers preferring the first (by name), with
    every pair shown and without pairs that showed a flagged output."""
    rows = rows.dropna(subset=["system", "system_b"])
    out = []
    systems = sorted(set(rows["system"].astype(str)) | set(rows["system_b"].astype(str)))
    for first, second in combinations(systems, 2):
        pair = rows[((rows["system"] == first) & (rows["system_b"] == second))
                    | ((rows["system"] == second) & (rows["system_b"] == first))]
        if pair.empty:
            continue
        out.append({"first": first, "second": second,
                    "flagged_pairs": int(pair["flagged"].sum()),
                    "all": _preference(pair, first, second),
                    "unflagged_only": _preference(pair[~pair["flagged"]], first, second)})
    return out


def _table_for(study: Any, judgments: pd.DataFrame, options: dict[str, Any]
               ) -> tuple[pd.DataFrame, bool]:
    """The judgments this section splits, and whether they were read again: with the option
    set, the run's table no longer holds the flagged judgments."""
    if not options.get(OPTION):
        return judgments, False
    from analysis.selectors import JudgmentFilter, judgments_tidy

    return judgments_tidy(study, JudgmentFilter(**(options.get("filters") or {}))), True


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    audit = _audit(study)
    summary = audit.summary()
    if not summary["outputs"]:
        return None
    flagged = audit.flagged_outputs
    table, reread = _table_for(study, judgments, options)
    if not table.empty:
        table = table.assign(flagged=flagged_rows(table, flagged))
    criteria = []
    kinds = dict(study.criteria.values_list("key", "kind"))
    for key, rows in (table.groupby("criterion", sort=False) if not table.empty else ()):
        kind = kinds.get(key)
        entry: dict[str, Any] = {"criterion": key, "kind": kind,
                                 "judgments": int(len(rows)),
                                 "flagged_judgments": int(rows["flagged"].sum())}
        if kind in SCORED_KINDS:
            entry["scale"] = "share of yes" if kind in BINARY_KINDS else "mean"
            entry.update(scored_split(rows, kind))
        elif kind is not None and kind_of(kind).shows == PAIR:
            entry["pairs"] = pairwise_split(rows)
        criteria.append(entry)
    return {
        "audit": {key: summary[key] for key in ("outputs", "flagged_outputs", "systems",
                                                "skipped")},
        "terms": summary["terms"][:30], "boilerplate": summary["boilerplate"][:10],
        "excluded": bool(options.get(OPTION)), "reread": reread,
        "judgments": int(len(table)),
        "flagged_judgments": int(table["flagged"].sum()) if not table.empty else 0,
        "criteria": criteria,
    }


# --- the report ------------------------------------------------------------------------------


def _difference(entry: dict[str, Any] | None) -> str:
    from analysis.report.format import num

    if not entry:
        return "–"
    if "difference" not in entry:
        return f"{num(entry['mean'])} (reference)"
    ci = entry.get("ci")
    return f"{entry['difference']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")


def _share(entry: dict[str, Any]) -> str:
    if entry["share"] is None:
        return f"– (n {entry['n']})"
    ci = entry["ci"]
    return (f"{entry['share']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            + f" (n {entry['decided']}, ties {entry['ties']})")


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    from analysis.report.format import num, table_dict

    audit = data["audit"]
    paragraphs = [
        f"The blindness audit (re-run on the outputs at analysis time) flags "
        f"{audit['flagged_outputs']} of {audit['outputs']} outputs whose text may tell raters "
        "which system wrote them: a system's name or alias, one of the study's identity terms, "
        "a built-in model or vendor name, or a phrase typical of one system (boilerplate). "
        f"{data['flagged_judgments']} of {data['judgments']} judgments are of such outputs "
        "(pairwise, ranking and best-worst: of a slot that showed one). Below, each system's "
        "judgments are split between flagged and unflagged outputs, and the system comparison "
        "is shown with and without the flagged ones: where a system's flagged mean differs "
        "from its unflagged mean, or the comparison moves without them, knowing the system "
        "may have changed the answers. Differences are from the first system, with 95% "
        "bootstrap CIs resampling raters (binary and severity criteria: share of yes)."]
    if data["excluded"]:
        paragraphs.append(
            f"Option {OPTION}: the {data['flagged_judgments']} judgments of flagged outputs "
            "were left out of every other section of this report; this section reads them "
            "from the study again, with the run's filters.")
    elif audit["flagged_outputs"]:
        paragraphs.append(f"The other sections keep every judgment (option {OPTION} leaves "
                          "the flagged ones out).")
    if data["terms"]:
        paragraphs.append("Most frequent hits: " + "; ".join(
            f"{t['term']} ({t['kind']}) in {t['outputs']} output(s) of {t['system']}"
            for t in data["terms"][:10]) + ".")
    per_system = table_dict("Outputs flagged per system", [
        ("System", ""), ("Outputs", "num"), ("Flagged", "num"), ("Share", "num")],
        [[row["system"], row["outputs"], row["flagged_outputs"],
          "–" if row["share"] is None else f"{row['share']:.1%}"] for row in audit["systems"]])
    if not audit["flagged_outputs"]:
        # Nothing to split: flagged columns of dashes and a comparison repeated unchanged
        # would read as if something had been checked against something.
        return {"title": "Blindness audit", "blocks": [{
            "title": "", "tables": [per_system], "plots": [], "warnings": [],
            "paragraphs": [
                f"The blindness audit (re-run on the outputs at analysis time) flags none of "
                f"the {audit['outputs']} outputs: no system name or alias, identity term, "
                "built-in model or vendor name, or phrase typical of one system was found, so "
                "no judgment is read apart."]}]}
    tables = [per_system]
    split_rows, comparison_rows, pair_rows = [], [], []
    for criterion in data["criteria"]:
        for entry in criterion.get("systems", []):
            split_rows.append([
                criterion["criterion"], criterion["scale"], entry["system"],
                num(entry["flagged"]["value"]), entry["flagged"]["n"],
                num(entry["unflagged"]["value"]), entry["unflagged"]["n"]])
        without = {e["system"]: e for e in criterion.get("unflagged_only", [])}
        for entry in criterion.get("all", []):
            comparison_rows.append([criterion["criterion"], entry["system"],
                                    _difference(entry), _difference(without.get(entry["system"]))])
        for pair in criterion.get("pairs", []):
            pair_rows.append([criterion["criterion"], f"{pair['first']} over {pair['second']}",
                              _share(pair["all"]), _share(pair["unflagged_only"]),
                              pair["flagged_pairs"]])
    if split_rows:
        tables.append(table_dict("Judgments of flagged and unflagged outputs", [
            ("Criterion", ""), ("Scale", ""), ("System", ""), ("Flagged", "num"),
            ("n", "num"), ("Unflagged", "num"), ("n", "num")], split_rows))
    if comparison_rows:
        tables.append(table_dict("System comparison with and without flagged outputs", [
            ("Criterion", ""), ("System", ""), ("All judgments", "num"),
            ("Without flagged outputs", "num")], comparison_rows))
    if pair_rows:
        table = table_dict("Pairwise preference with and without pairs showing a flagged output", [
            ("Criterion", ""), ("Pair", ""), ("All pairs", "num"),
            ("Without flagged", "num"), ("Judgments of flagged pairs", "num")], pair_rows)
        table["notes"].append("Share of decided answers (ties apart) preferring the first "
                              "system, Wilson 95% CI treating answers as independent.")
        tables.append(table)
    return {"title": "Blindness audit",
            "blocks": [{"title": "", "paragraphs": paragraphs, "tables": tables,
                        "plots": [], "warnings": []}]}
