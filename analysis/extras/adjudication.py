"""Adjudicated labels in the analysis (option `labels`), and how the raters' majority agrees
with them.

- `labels: "raters"` (the default): the statistics read the raters' judgments, as always.
- `labels: "adjudicated"`: for every unit an expert labelled on the adjudication queue
  (analysis.adjudication), the human raters' judgments of that criterion on that unit are
  replaced by one row holding the expert's label (rater "adjudicator", kind expert). Proxies'
  judgments stay: they are compared with the adjudicated label where there is one.

What the replacement does to the statistics, said in the report:
- an adjudicated unit weighs as one judgment where it weighed as many;
- the "adjudicator" is one more level of the rater random effect; a criterion where every
  human judgment was replaced is left with that one rater, and its mixed model cannot
  estimate a rater variance (the fit fails or is singular): the section names such criteria;
- agreement coefficients are computed on the units that were not adjudicated, which are the
  units the raters agreed on more (the queue took the others): read agreement from a run
  with `labels: "raters"`.

`compute` reports, whatever the option, per criterion how many units were adjudicated and how
often the raters' majority (strict: a tie on top is no majority) matches the adjudicated label,
read from the database (human raters, the raters the researcher excluded left out unless the
run includes them), so it is the same under both options.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from evalstudy.criteria import PAIR, kinds_where

#: The kinds whose answers judge a pair of outputs (a unit is the pair, either way round).
PAIR_KINDS = kinds_where(lambda kind: kind.shows == PAIR)

LABEL_CHOICES = ("raters", "adjudicated")
ADJUDICATOR = "adjudicator"
ADJUDICATOR_ID = -1  # never a database id


def _check_labels(value: Any) -> None:
    if value not in LABEL_CHOICES:
        raise ValueError(f"must be one of {', '.join(LABEL_CHOICES)} (got {value!r})")


OPTIONS: dict[str, Any] = {"labels": _check_labels}


def _adjudications(study: Any) -> list[Mapping[str, Any]]:
    from analysis.models import Adjudication

    return list(Adjudication.objects.filter(study=study).values(
        "criterion__key", "criterion__kind", "output_id", "output_b_id", "value",
        "numeric_value"))


def _canonical_units(rows: pd.DataFrame, pairwise: bool) -> list[tuple[int, int | None]]:
    if not pairwise:
        return [(int(o), None) for o in rows["output"]]
    units: list[tuple[int, int | None]] = []
    for output, output_b in zip(rows["output"], rows["output_b"], strict=True):
        if output_b is None or output_b != output_b:
            units.append((int(output), None))
        else:
            first, second = sorted((int(output), int(output_b)))
            units.append((first, second))
    return units


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    if options.get("labels", "raters") != "adjudicated" or judgments.empty:
        return judgments
    labels = _adjudications(study)
    if not labels:
        return judgments
    name = ADJUDICATOR
    if name in set(judgments["rater"]):
        name = f"{ADJUDICATOR} (expert labels)"  # a rater of the study bears the name
    by_criterion: dict[str, dict[tuple[int, int | None], Mapping[str, Any]]] = {}
    for label in labels:
        by_criterion.setdefault(label["criterion__key"], {})[
            (label["output_id"], label["output_b_id"])] = label
    drop = np.zeros(len(judgments), dtype=bool)
    added: list[dict[str, Any]] = []
    positions = np.arange(len(judgments))
    for key, units in by_criterion.items():
        mask = (judgments["criterion"] == key).to_numpy() & judgments["is_human"].to_numpy(
            dtype=bool)
        if not mask.any():
            continue
        rows = judgments.iloc[positions[mask]]
        pairwise = str(rows["criterion_kind"].iloc[0]) in PAIR_KINDS
        unit_of_row = _canonical_units(rows, pairwise)
        templates: dict[tuple[int, int | None], int] = {}
        for position, unit in zip(positions[mask], unit_of_row, strict=True):
            if unit in units:
                drop[position] = True
                templates.setdefault(unit, position)
        for unit, position in templates.items():
            row = judgments.iloc[position].to_dict()
            if pairwise and int(row["output"]) != unit[0]:
                # The template row saw the pair the other way round: read it as stored.
                row["output"], row["output_b"] = row["output_b"], row["output"]
                row["system"], row["system_b"] = row["system_b"], row["system"]
            label = units[unit]
            row.update({
                "judgment": None, "rater": name, "rater_id": ADJUDICATOR_ID,
                "rater_kind": "expert", "is_human": True, "seat": None, "slot": None,
                "slot_kind": "target", "value": label["value"],
                "numeric": label["numeric_value"], "served_at": None, "submitted_at": None,
                "seconds": np.nan})
            added.append(row)
    if not added:
        return judgments
    kept = judgments.loc[~drop]
    # The added rows' empty columns (judgment, seat, times) are left to the concatenation to
    # fill, so each column keeps the dtype the kept rows give it.
    extra = pd.DataFrame(added, columns=judgments.columns).dropna(axis=1, how="all")
    merged = pd.concat([kept, extra], ignore_index=True)[list(judgments.columns)]
    return merged.sort_values(["criterion", "item", "system", "rater"]).reset_index(drop=True)


def _raters_answers(study: Any, labels: list[Mapping[str, Any]], options: dict[str, Any]
                    ) -> dict[tuple[str, tuple[int, int | None]], list[str]]:
    """The human raters' answers on each adjudicated unit, a pair's read as stored."""
    from annotation.models import Judgment
    from evalstudy.models import AssignmentSlot, Enrollment, Rater

    keys = {label["criterion__key"] for label in labels}
    outputs = {label["output_id"] for label in labels} | {
        label["output_b_id"] for label in labels if label["output_b_id"]}
    found = Judgment.objects.filter(
        slot__assignment__study=study, slot__kind=AssignmentSlot.Kind.TARGET,
        criterion__key__in=keys, rater__kind__in=Rater.HUMAN_KINDS, slot__output__in=outputs)
    if not (options.get("filters") or {}).get("include_excluded"):
        found = found.exclude(rater__in=Enrollment.objects.filter(
            study=study, excluded_at__isnull=False).values("rater"))
    answers: dict[tuple[str, tuple[int, int | None]], list[str]] = {}
    for key, kind, output, output_b, value in found.values_list(
            "criterion__key", "criterion__kind", "slot__output_id", "slot__output_b_id",
            "value"):
        if kind in PAIR_KINDS and output_b is not None and output > output_b:
            output, output_b = output_b, output
            value = {"A": "B", "B": "A"}.get(value, value)
        answers.setdefault((key, (output, output_b)), []).append(value)
    return answers


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    used = options.get("labels", "raters")
    labels = _adjudications(study)
    if not labels and used == "raters":
        return None
    answers = _raters_answers(study, labels, options) if labels else {}
    per_criterion: dict[str, dict[str, Any]] = {}
    for label in labels:
        key = label["criterion__key"]
        entry = per_criterion.setdefault(key, {
            "criterion": key, "kind": label["criterion__kind"], "adjudicated": 0,
            "with_majority": 0, "majority_agrees": 0, "changed": []})
        entry["adjudicated"] += 1
        given = answers.get((key, (label["output_id"], label["output_b_id"])), [])
        ranked = Counter(given).most_common()
        if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]):
            entry["with_majority"] += 1
            entry["majority_agrees"] += int(ranked[0][0] == label["value"])
    for entry in per_criterion.values():
        entry["agreement"] = (entry["majority_agrees"] / entry["with_majority"]
                              if entry["with_majority"] else None)
        del entry["changed"]
    data: dict[str, Any] = {"labels": used, "criteria": list(per_criterion.values()),
                            "warnings": []}
    if used == "adjudicated" and not judgments.empty:
        humans = judgments[judgments["is_human"].astype(bool)]
        replaced = humans[humans["rater_id"] == ADJUDICATOR_ID] if "rater_id" in humans else (
            humans.iloc[0:0])
        for entry in data["criteria"]:
            of_criterion = humans[humans["criterion"] == entry["criterion"]]
            entry["in_table"] = int((replaced["criterion"] == entry["criterion"]).sum())
            entry["raters_left"] = int(of_criterion["rater"].nunique())
            if entry["raters_left"] < 2:
                data["warnings"].append(
                    f"{entry['criterion']}: every human judgment was replaced by an "
                    "adjudicated label, so one rater is left: a mixed model cannot estimate "
                    "a rater variance, and its fit fails or is singular.")
            if entry["in_table"] < entry["adjudicated"]:
                data["warnings"].append(
                    f"{entry['criterion']}: {entry['adjudicated'] - entry['in_table']} "
                    "adjudicated unit(s) have no human judgment among those this analysis "
                    "reads (its filters), so their labels were not used.")
    return data


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    used = data.get("labels", "raters")
    if used == "adjudicated":
        paragraphs = [
            "Labels used: adjudicated. For every unit an expert labelled on the adjudication "
            "queue, the human raters' judgments of that criterion were replaced by the "
            "expert's label (one row, rater 'adjudicator', kind expert); every other unit "
            "keeps its raters' judgments, and proxies are compared with the adjudicated label "
            "where there is one. An adjudicated unit weighs as one judgment.",
            "Agreement coefficients in this report are computed on the units that were not "
            "adjudicated, which are those the raters agreed on more: read the raters' "
            "agreement from an analysis with labels 'raters'.",
        ]
    else:
        paragraphs = [
            "Labels used: the raters' judgments (the adjudicated labels below were not used "
            "by the statistics; start an analysis with labels 'adjudicated' to use them)."]
    paragraphs.append(
        "Majority agreement: the share of adjudicated units with a strict majority among the "
        "human raters (a tie on top is no majority) whose majority answer is the adjudicated "
        "label.")
    head = [("Criterion", ""), ("Kind", ""), ("Units adjudicated", "num"),
            ("With a raters' majority", "num"), ("Majority = adjudicated", "num"),
            ("Majority agreement", "num")]
    if used == "adjudicated":
        head += [("Adjudicated rows in the table", "num"), ("Human raters left", "num")]
    body = []
    for entry in data.get("criteria", []):
        agreement = entry.get("agreement")
        row = [(entry["criterion"], ""), (entry["kind"], ""), (entry["adjudicated"], "num"),
               (entry["with_majority"], "num"), (entry["majority_agrees"], "num"),
               ("—" if agreement is None else f"{agreement:.0%}", "num")]
        if used == "adjudicated":
            row += [(entry.get("in_table", 0), "num"), (entry.get("raters_left", 0), "num")]
        body.append(row)
    tables = [{"title": "Adjudicated units per criterion", "head": head, "body": body,
               "notes": [], "warnings": []}] if body else []
    if not body:
        paragraphs.append("No unit has been adjudicated yet.")
    return {"title": "Adjudicated labels", "blocks": [{
        "title": "", "paragraphs": paragraphs, "tables": tables,
        "warnings": list(data.get("warnings", []))}]}
