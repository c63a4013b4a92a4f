"""Integrity signals in the analysis (issue 18): how the results move without the flagged
raters (a sensitivity table), rater-level flags as covariates of the mixed models, and the
judgments split at each rater's recalibration round.

"Flagged" is `annotation.integrity`'s rule: a rater whose share of flagged answers exceeds its
limit on some signal (pasted free text, time away, keystroke-free free text, speed below the
speeder threshold, media not heard to the end). Nothing here excludes anyone from the main
results: the table shows both, and the reader decides.

Options:
- `integrity_covariates` (bool): the judgment table gets `rater.flagged` (0/1) and
  `rater.<signal>_share` (the rater's share of flagged answers per signal, 0 where
  unobserved), and the default models take `rater.flagged` as a fixed effect
  (`analysis.stats.covariates`).
- `split_at_recalibration` (bool): per-system means before and after the recalibration
  rounds of the raters who had one.

The table always gets `recalibration_round`: 0 before the rater's first round, k from the
start of their round k (`annotation.models.RecalibrationRound`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from evalstudy.criteria import BINARY_KINDS, binary_label, kinds_where

OPTION_COVARIATES = "integrity_covariates"
OPTION_SPLIT = "split_at_recalibration"
N_BOOT = 2000
SEED = 20260118
#: The kinds whose answers score a mean per system: a number where higher is better, or the
#: share of yes / meaning preserved (not MQM's penalty).
NUMERIC_KINDS = kinds_where(lambda kind: kind.score is not None and kind.score != "penalty")


def _boolean(name: str):
    def check(value: Any) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
    return check


OPTIONS: dict[str, Any] = {OPTION_COVARIATES: _boolean(OPTION_COVARIATES),
                           OPTION_SPLIT: _boolean(OPTION_SPLIT)}


def _rater_flags(study: Any) -> dict[int, Any]:
    from annotation.behaviour import study_integrity

    return study_integrity(study).raters


def _rounds(study: Any) -> dict[int, list[pd.Timestamp]]:
    from annotation.models import RecalibrationRound

    found: dict[int, list[pd.Timestamp]] = {}
    for rater, started in (RecalibrationRound.objects.filter(study=study)
                           .order_by("rater_id", "number").values_list("rater_id",
                                                                       "started_at")):
        found.setdefault(rater, []).append(pd.Timestamp(started))
    return found


def recalibration_rounds(judgments: pd.DataFrame,
                         rounds: dict[int, list[pd.Timestamp]]) -> pd.Series:
    """Each judgment's round: how many of its rater's rounds started at or before it."""
    if judgments.empty:
        return pd.Series([], dtype="int64", index=judgments.index)
    submitted = pd.to_datetime(judgments["submitted_at"], utc=True)
    values = [
        int(np.searchsorted(np.array([s.value for s in rounds.get(int(r), [])], dtype="int64"),
                            at.value, side="right")) if int(r) in rounds and pd.notna(at) else 0
        for r, at in zip(judgments["rater_id"], submitted, strict=True)]
    return pd.Series(values, dtype="int64", index=judgments.index)


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    judgments = judgments.copy()
    judgments["recalibration_round"] = recalibration_rounds(judgments, _rounds(study))
    if options.get(OPTION_COVARIATES):
        from annotation.integrity import SIGNALS

        flags = _rater_flags(study)
        ids = judgments["rater_id"] if not judgments.empty else pd.Series([], dtype="int64")
        judgments["rater.flagged"] = [int(bool(flags.get(int(r)) and flags[int(r)].flagged))
                                      for r in ids]
        for signal in SIGNALS:
            judgments[f"rater.{signal}_share"] = [
                float(flags[int(r)].shares.get(signal) or 0.0) if int(r) in flags else 0.0
                for r in ids]
    return judgments


# --- compute ---------------------------------------------------------------------------------
def _scores(rows: pd.DataFrame, kind: str) -> pd.Series:
    if kind in BINARY_KINDS:
        return rows["value"].map(lambda v: binary_label(kind, str(v))).astype("float64")
    return pd.to_numeric(rows["value"], errors="coerce")


def system_means(rows: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = SEED
                 ) -> list[dict[str, Any]]:
    """Per system: mean score, judgments, raters, and the difference from the first system
    (by name) with a 95% percentile CI from a bootstrap over raters (judgments of one rater
    are not independent, so raters are what is resampled). `rows`: columns rater_id, system,
    score."""
    rows = rows.dropna(subset=["score", "system"])
    if rows.empty:
        return []
    systems = sorted(rows["system"].astype(str).unique())
    raters = sorted(rows["rater_id"].unique())
    r_index = {r: k for k, r in enumerate(raters)}
    s_index = {s: k for k, s in enumerate(systems)}
    sums = np.zeros((len(raters), len(systems)))
    counts = np.zeros((len(raters), len(systems)))
    for rater, system, score in zip(rows["rater_id"], rows["system"].astype(str),
                                    rows["score"], strict=True):
        sums[r_index[rater], s_index[system]] += score
        counts[r_index[rater], s_index[system]] += 1
    generator = np.random.default_rng(seed)
    weights = generator.multinomial(len(raters), [1 / len(raters)] * len(raters), size=n_boot)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ sums) / (weights @ counts)
    total_sums, total_counts = sums.sum(axis=0), counts.sum(axis=0)
    out: list[dict[str, Any]] = []
    for k, system in enumerate(systems):
        entry: dict[str, Any] = {
            "system": system, "mean": float(total_sums[k] / total_counts[k]),
            "judgments": int(total_counts[k]), "raters": int((counts[:, k] > 0).sum())}
        if k > 0:
            difference = boot[:, k] - boot[:, 0]
            difference = difference[np.isfinite(difference)]
            entry["vs"] = systems[0]
            entry["difference"] = entry["mean"] - out[0]["mean"]
            if len(difference) >= 0.9 * n_boot and len(raters) > 1:
                low, high = np.percentile(difference, [2.5, 97.5])
                entry["ci"] = [float(low), float(high)]
            else:
                entry["ci"] = None
        out.append(entry)
    return out


def _humans(judgments: pd.DataFrame, study: Any) -> pd.DataFrame:
    kinds = dict(study.criteria.values_list("key", "kind"))
    humans = judgments[judgments["is_human"]] if not judgments.empty else judgments
    return humans[humans["criterion"].map(lambda k: kinds.get(k) in NUMERIC_KINDS)].assign(
        kind=lambda f: f["criterion"].map(kinds))


def sensitivity(humans: pd.DataFrame, flagged: set[int]) -> list[dict[str, Any]]:
    """Per criterion: per-system means with all raters and without the flagged ones."""
    table = []
    for key, rows in humans.groupby("criterion", sort=False):
        kind = str(rows["kind"].iloc[0])
        rows = rows.assign(score=_scores(rows, kind))
        dropped = rows["rater_id"].isin(list(flagged))
        table.append({
            "criterion": key, "kind": kind,
            "scale": "share of yes" if kind in BINARY_KINDS else "mean",
            "all": system_means(rows), "without_flagged": system_means(rows[~dropped]),
            "raters_dropped": int(rows.loc[dropped, "rater_id"].nunique()),
            "raters": int(rows["rater_id"].nunique()),
            "judgments_dropped": int(dropped.sum()), "judgments": int(len(rows)),
        })
    return table


def recalibration_split(humans: pd.DataFrame) -> list[dict[str, Any]]:
    """Per criterion and system: means before and after the rounds, over the judgments of the
    raters who had a recalibration round."""
    if "recalibration_round" not in humans.columns:
        return []
    recalibrated = humans.groupby("rater_id")["recalibration_round"].transform("max") > 0
    rows_all = humans[recalibrated]
    out = []
    for key, rows in rows_all.groupby("criterion", sort=False):
        kind = str(rows["kind"].iloc[0])
        rows = rows.assign(score=_scores(rows, kind), after=rows["recalibration_round"] > 0)
        systems = []
        for system, part in rows.groupby("system"):
            before, after = part[~part["after"]], part[part["after"]]
            systems.append({
                "system": str(system),
                "before": float(before["score"].mean()) if len(before) else None,
                "after": float(after["score"].mean()) if len(after) else None,
                "n_before": int(len(before)), "n_after": int(len(after))})
        out.append({"criterion": key, "kind": kind,
                    "raters": int(rows["rater_id"].nunique()), "systems": systems})
    return out


def _covariate_terms(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Where `rater.flagged` entered a fitted model: its coefficient per criterion."""
    found = []
    for criterion in result.get("criteria") or []:
        for model in ("clmm", "glmm"):
            fit = criterion.get(model)
            if not isinstance(fit, dict) or "rater.flagged" not in str(fit.get("formula")):
                continue
            for coefficient in fit.get("coefficients") or []:
                if "flagged" in str(coefficient.get("term")):
                    found.append({"criterion": criterion.get("key"), "model": model,
                                  "formula": fit.get("formula"), "engine": fit.get("engine"),
                                  "term": coefficient.get("term"),
                                  "estimate": coefficient.get("estimate"),
                                  "p": coefficient.get("p_value", coefficient.get("p"))})
    return found


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    from annotation.integrity import RATER_MIN_SLOTS, RATER_SHARES, SIGNAL_LABELS
    from annotation.models import RecalibrationRound, SlotBehaviour

    flags = _rater_flags(study)
    flagged = {rater for rater, found in flags.items() if found.flagged}
    has_signals = SlotBehaviour.objects.filter(slot__assignment__study=study).exists()
    has_rounds = RecalibrationRound.objects.filter(study=study).exists()
    asked = bool(options.get(OPTION_COVARIATES) or options.get(OPTION_SPLIT))
    if not (flagged or has_signals or has_rounds or asked) or judgments.empty:
        return None
    humans = _humans(judgments, study)
    names = dict(zip(judgments["rater_id"], judgments["rater"], strict=False))
    data: dict[str, Any] = {
        "rule": {"shares": RATER_SHARES, "min_slots": RATER_MIN_SLOTS,
                 "labels": SIGNAL_LABELS},
        "flagged_raters": [{"rater": str(names.get(r, r)), "signals": flags[r].signals,
                            "detail": flags[r].detail()} for r in sorted(flagged)
                           if r in names],
        "sensitivity": sensitivity(humans, flagged),
        "covariates": _covariate_terms(result) if options.get(OPTION_COVARIATES) else None,
    }
    if options.get(OPTION_SPLIT):
        data["recalibration_split"] = recalibration_split(humans)
    return data


# --- the report ------------------------------------------------------------------------------


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    from analysis.report.format import num, table_dict

    labels = data["rule"]["labels"]
    rule = "; ".join(f"{labels[s]} in more than {share:.0%} of their answers"
                     for s, share in data["rule"]["shares"].items())
    paragraphs = [
        "A rater is flagged when, over at least "
        f"{data['rule']['min_slots']} answers where a signal was observed, they were: {rule}. "
        "Flags are evidence, not exclusions: the main results keep every rater; the table "
        "shows the same means without the flagged raters. Differences are from the first "
        "system, with 95% bootstrap CIs resampling raters (binary and severity criteria: "
        "share of yes).",
        ("Flagged raters: " + "; ".join(f"{r['rater']} ({r['detail']})"
                                         for r in data["flagged_raters"]))
        if data["flagged_raters"] else "No rater was flagged."]
    rows = []
    for criterion in data["sensitivity"]:
        without = {e["system"]: e for e in criterion["without_flagged"]}
        for entry in criterion["all"]:
            other = without.get(entry["system"], {})
            rows.append([
                criterion["criterion"], entry["system"], num(entry["mean"]), _ci(entry),
                num(other.get("mean")), _ci(other),
                f"{criterion['raters_dropped']} of {criterion['raters']}",
                f"{criterion['judgments_dropped']} of {criterion['judgments']}"])
    tables = [table_dict("With and without the flagged raters", [
        ("Criterion", ""), ("System", ""), ("All raters", "num"),
        ("Difference [95% CI]", "num"), ("Without flagged", "num"),
        ("Difference [95% CI]", "num"), ("Raters dropped", "num"),
        ("Judgments dropped", "num")], rows)] if rows else []
    if data.get("covariates") is not None:
        terms = data["covariates"]
        paragraphs.append(
            "Rater-level flag as a covariate (rater.flagged: 1 for a flagged rater): " + "; ".join(
                f"{t['criterion']} ({t['model']}, {t['formula']}): {t['term']} = "
                f"{num(t['estimate'])}" for t in terms)
            if terms else "Rater-level flag as a covariate: no model took it (no rater "
                          "flagged among a criterion's raters, or a user formula applied).")
    split = data.get("recalibration_split")
    if split is not None:
        split_rows = [[c["criterion"], s["system"], num(s["before"]), s["n_before"],
                       num(s["after"]), s["n_after"]] for c in split for s in c["systems"]]
        paragraphs.append(
            "Before and after recalibration: the judgments of the raters who had a "
            "recalibration round, before their first round and from its start on."
            if split_rows else "No rater had a recalibration round.")
        if split_rows:
            tables.append(table_dict("Before and after recalibration", [
                ("Criterion", ""), ("System", ""), ("Before", "num"), ("n", "num"),
                ("After", "num"), ("n", "num")], split_rows))
    return {"title": "Integrity signals",
            "blocks": [{"title": "", "paragraphs": paragraphs, "tables": tables,
                        "plots": [], "warnings": []}]}


def _ci(entry: dict[str, Any]) -> str:
    if "difference" not in entry:
        return "(reference)" if entry else "–"
    ci = entry.get("ci")
    text = f"{entry['difference']:+.3f}"
    return text + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
