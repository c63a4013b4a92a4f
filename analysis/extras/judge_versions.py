"""Judge prompt versions in the report: per criterion and prompt version of an LLM judge
(`proxies.versions`), its agreement with the human majority on held-out outputs only.

- Held-out outputs: for every version of one judge (criterion and method), the study's outputs
  outside the development split and outside every item any example of any of its versions
  came from. All versions of a judge are compared on these same outputs, so a later version's
  gain is not a change of test set, and no version is scored on a case it (or a successor)
  was shown. Of these, each version is scored on the units every run version (and backend)
  of the judge answered: a partial or failed run of one version drops units from all of
  them (counted per judge), and if none is common no figure is given.
- Figures per version (and per rater, where a version was run with several backends):
  n units, accuracy vs the strict human majority with a Wilson CI, Cohen's kappa with its
  analytic CI (`analysis.stats.judge_agreement`), read from the analysis' judgment table, so
  the run's filters (excluded raters, incomplete seats) apply to the humans as everywhere.
- Also stored: which outputs each version's examples came from and how many outputs the guard
  left out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pandas as pd

from evalstudy.criteria import BINARY_KINDS

OPTIONS: dict[str, Any] = {}


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    return judgments


def _units(rows: pd.DataFrame) -> dict[tuple[int, int | None], list[Any]]:
    """Answers per unit, a pair read as `proxies.versions` reads it (`oriented`: lower
    output id first, an answer given the other way round turned around), so the human
    majority counts every rater of a pair whichever way round each saw it."""
    from evalstudy.criteria import pair_oriented as oriented

    found: dict[tuple[int, int | None], list[Any]] = defaultdict(list)
    for output, output_b, value in zip(rows["output"], rows["output_b"], rows["value"],
                                       strict=True):
        missing = output_b is None or output_b != output_b  # None or NaN
        unit, answer = oriented(int(output), None if missing else int(output_b), str(value))
        found[unit].append(answer)
    return found


def _common_units(answered: dict[Any, set[Any]]) -> set[Any] | None:
    """The units every judge of one family that answered any unit answered (None: no judge
    answered one). A run that answered none (failed at once, or not started) has no figures
    to compare and is named as such instead of emptying everyone's set."""
    sets = [units for units in answered.values() if units]
    return set.intersection(*sets) if sets else None


def _family(study: Any, versions: list[Any]) -> dict[str, Any]:
    """The held-out outputs shared by one judge's versions, and what each version excluded."""
    from evalstudy.models import Output
    from proxies.versions import excluded_items

    outputs = dict(Output.objects.filter(item__study=study).values_list("id", "item_id"))
    items: set[int] = set()
    per_version = {}
    for version in versions:
        excluded = excluded_items(version)
        items |= excluded
        per_version[version.pk] = sum(1 for item in outputs.values() if item in excluded)
    held_out = {pk for pk, item in outputs.items() if item not in items}
    return {"held_out": held_out, "excluded_items": items, "per_version": per_version,
            "n_outputs": len(outputs)}


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    from analysis.stats.judge_agreement import agreement_with_majority
    from proxies.models import JudgePromptVersion, ProxyRun
    from proxies.versions import GUARD_SENTENCE

    versions = list(JudgePromptVersion.objects.filter(study=study)
                    .select_related("criterion", "parent")
                    .order_by("criterion__order", "criterion__key", "method", "number"))
    if not versions:
        return None
    raters: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for version_id, rater_id, run_id in (ProxyRun.objects.filter(
            study=study, prompt_version__isnull=False)
            .order_by("pk").values_list("prompt_version_id", "rater_id", "pk")):
        raters[version_id][rater_id].append(run_id)
    families: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for version in versions:
        families[(version.criterion.key, version.method)].append(version)
    item_names = dict(study.items.values_list("id", "external_id"))
    has_rater_id = "rater_id" in judgments.columns
    out: list[dict[str, Any]] = []
    for (key, method), members in families.items():
        family = _family(study, members)
        held_out = family["held_out"]
        rows = judgments[judgments["criterion"] == key] if len(judgments) else judgments
        kept = rows[rows["output"].isin(list(held_out))] if len(rows) else rows
        if len(kept) and "output_b" in kept:
            kept = kept[kept["output_b"].isna() | kept["output_b"].isin(list(held_out))]
        humans = _units(kept[kept["is_human"]]) if len(kept) else {}
        entry: dict[str, Any] = {
            "criterion": key, "kind": members[0].criterion.kind, "method": method,
            "n_outputs": family["n_outputs"], "n_held_out": len(held_out),
            "n_units_with_humans": len(humans),
            "excluded_items": sorted(item_names.get(pk, str(pk))
                                     for pk in family["excluded_items"]),
            "versions": []}
        # Every version (and every backend it was run with) is scored on the same units: the
        # held-out units with human judgments that all of them answered, so a partial or
        # failed run of one version cannot change the test set under the comparison.
        answers: dict[tuple[int, int], dict[Any, Any]] = {}
        for version in members:
            for rater_id in sorted(raters.get(version.pk, {})):
                mine = (kept[kept["rater_id"] == rater_id] if has_rater_id and len(kept)
                        else kept.iloc[0:0])
                answers[(version.pk, rater_id)] = {
                    "rows": mine, "judge": {unit: values[-1] for unit, values
                                            in _units(mine).items() if unit in humans}}
        common = _common_units({k: set(a["judge"]) for k, a in answers.items()})
        entry["n_common_units"] = None if common is None else len(common)
        for version in members:
            examples = version.examples or []
            row: dict[str, Any] = {
                "number": version.number,
                "parent": version.parent.number if version.parent else None,
                "n_examples": len(examples),
                "example_outputs": list(version.example_outputs or []),
                "example_items": sorted({str(e.get("item")) for e in examples}),
                # Its own lineage's exclusions (the table uses every version's, see above).
                "n_excluded_outputs": family["per_version"][version.pk],
                "raters": []}
            for rater_id, runs in sorted(raters.get(version.pk, {}).items()):
                mine, answered = (answers[(version.pk, rater_id)][k] for k in ("rows", "judge"))
                judge = {unit: value for unit, value in answered.items()
                         if common is not None and unit in common}
                figures = agreement_with_majority(entry["kind"], judge, humans)
                name = str(mine["rater"].iloc[0]) if len(mine) else f"rater {rater_id}"
                row["raters"].append({"rater": name, "runs": runs, "n_answered": len(answered),
                                      "n_not_common": len(answered) - len(judge), **figures})
            entry["versions"].append(row)
        out.append(entry)
    from kit.jsonable import to_jsonable

    return to_jsonable({"guard": GUARD_SENTENCE, "criteria": out})


def _interval(figure: dict[str, Any] | None, percent: bool) -> str:
    if not figure:
        return "—"
    fmt = (lambda v: f"{v:.0%}") if percent else (lambda v: f"{v:.2f}")
    value = fmt(figure["value"])
    if figure.get("ci_low") is None or figure.get("ci_high") is None:
        return value
    return f"{value} [{fmt(figure['ci_low'])}, {fmt(figure['ci_high'])}]"


def _common_sentence(entry: dict[str, Any]) -> str:
    """Which units every version is scored on, and what the comparison left out for it."""
    common = entry.get("n_common_units")
    judges = [r for v in entry["versions"] for r in v["raters"]]
    silent = ", ".join(f"v{v['number']} ({r['rater']})" for v in entry["versions"]
                       for r in v["raters"] if not r["n_answered"])
    none_yet = (f" Runs that answered no held-out unit with human judgments, so not compared: "
                f"{silent}." if silent else "")
    if common is None:
        return ("No version's run has answered a held-out unit with human judgments yet."
                if judges else "No version has been run yet.")
    if not common:
        return ("Not compared: no held-out unit with human judgments was answered by every "
                "version's run, so no two versions can be scored on the same units; no "
                "figure is given." + none_yet)
    dropped = ", ".join(
        f"v{v['number']} ({r['rater']}): {r['n_not_common']}"
        for v in entry["versions"] for r in v["raters"] if r["n_not_common"])
    return (f"All versions are compared on the same {common} held-out units with human "
            "judgments: those every version's run answered. "
            + (f"Units a run answered but another did not, left out of its figures: "
               f"{dropped}." if dropped else "No unit was left out for that.") + none_yet)


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    criteria = data.get("criteria") or []
    if not criteria:
        return None
    blocks = []
    for entry in criteria:
        paragraphs = [
            data.get("guard", ""),
            f"Held out: {entry['n_held_out']} of the study's {entry['n_outputs']} outputs "
            f"({entry['n_units_with_humans']} units with human judgments); left out as the "
            f"development split or the items of examples: items "
            f"{', '.join(entry['excluded_items']) or 'none'}.",
            _common_sentence(entry),
            "Accuracy: the share of held-out units where the judge gives the strict human "
            "majority's answer (ties among the humans left out), Wilson 95% CI; Cohen's kappa "
            "of the judge vs that majority, analytic 95% CI."
            + (" Compared on the binary reading (meaning preserved or not)."
               if entry["kind"] in BINARY_KINDS else ""),
        ]
        head = [("Version", ""), ("Built from", ""), ("Examples", "num"),
                ("Examples from items", ""), ("Judge (rater)", ""), ("n", "num"),
                ("Accuracy [95% CI]", "num"), ("Cohen's kappa [95% CI]", "num")]
        body = []
        for version in entry["versions"]:
            common = [(f"v{version['number']}", ""),
                      (f"v{version['parent']}" if version["parent"] else "—", ""),
                      (version["n_examples"], "num"),
                      (", ".join(version["example_items"]) or "—", "")]
            if not version["raters"]:
                body.append([*common, ("not run yet", ""), ("—", "num"), ("—", "num"),
                             ("—", "num")])
            for rater in version["raters"]:
                body.append([*common, (rater["rater"], ""), (rater["n"], "num"),
                             (_interval(rater["accuracy"], True), "num"),
                             (_interval(rater["kappa"], False), "num")])
        blocks.append({
            "title": f"{entry['criterion']}: {entry['method']} judge prompt versions",
            "paragraphs": paragraphs,
            "tables": [{"title": "Agreement with the human majority on held-out outputs",
                        "head": head, "body": body, "notes": [], "warnings": []}],
            "warnings": []})
    return {"title": "Judge prompt versions", "blocks": blocks}
