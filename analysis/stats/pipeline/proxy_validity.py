"""Proxies against humans on a criterion whose answers read as a binary decision (no Django):
every metric value and proxy rater against the human majority label, with AUCs, slices,
correlations, Williams' tests between proxies and LATTE's deployment table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from evalstudy.criteria import binary_label
from kit.jsonable import to_jsonable
from metrics.scorers import registry, specs
from proxies.quality import auc_with_ci

from .. import validity
from ..options import deployment_group_column
from .sections import run_section


def human_majority(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Per output: share of human raters who judged it positive, and the majority label
    (outputs with a tie are left out of majority-based statistics)."""
    humans = rows[rows["is_human"]].copy()
    humans["label"] = humans["value"].map(lambda v: binary_label(kind, str(v)))
    grouped = humans.dropna(subset=["label"]).groupby("output")["label"]
    frame = pd.DataFrame({"share": grouped.mean(), "n": grouped.size()})
    frame["majority"] = np.where(frame["share"] > 0.5, 1.0,
                                 np.where(frame["share"] < 0.5, 0.0, np.nan))
    return frame


def proxy_validity(judgments: pd.DataFrame, criterion: dict[str, Any],
                   metrics: pd.DataFrame | None, options: dict[str, Any],
                   warnings: list[str]) -> dict[str, Any]:
    """Every metric value and proxy rater against the human binary label of one criterion.

    `options["proxy_raters"]` (built by the Django side: `analysis.selectors.proxy_raters`)
    maps a proxy rater's name to what the judgments cannot say (see `proxy_scores`): its
    decision threshold on this criterion, the outputs it may not be scored on at all (a
    learned proxy's training and dev outputs) and those its decisions may not be counted on
    (the dev split its threshold was chosen on). Every figure of a proxy (AUC, slices,
    correlations, Williams, deployment) uses only the outputs it may be scored on, and each
    entry says which and how many (`evaluated_on`)."""
    kind, key = criterion["kind"], criterion["key"]
    rows = judgments[judgments["criterion"] == key]
    majority = human_majority(rows, kind)
    if majority.empty:
        return {"criterion": key, "note": "no human judgments"}
    items = rows.drop_duplicates("output").set_index("output")
    scores = pd.DataFrame(index=majority.index)
    orientation: dict[str, bool] = {}
    if metrics is not None and not metrics.empty:
        indexed = metrics.set_index("output")
        # Each metric's main values (its scorer's declaration, `metrics.scorers.registry`).
        for column in registry.headline_values():
            if column in indexed.columns:
                scores[column] = indexed[column].reindex(scores.index)
                orientation[column] = registry.higher_is_better(column)
    labelled = majority["majority"].notna()
    evaluated_on = {name: outputs_evaluated_on(scores[name], labelled, frozenset(), None)
                    for name in orientation}
    decisions = pd.DataFrame(index=majority.index)
    deciders: dict[str, dict[str, Any]] = {}
    infos = options.get("proxy_raters") or {}
    for rater, proxy_rows in rows[~rows["is_human"]].groupby("rater"):
        name = f"rater:{rater}"
        found = proxy_scores(proxy_rows, kind, key, infos.get(str(rater)), scores.index,
                              labelled)
        scores[name], decisions[name] = found["score"], found["decision"]
        orientation[name] = True
        evaluated_on[name], deciders[name] = found["evaluated_on"], found["decider"]
    slice_columns = [c for c in rows.columns if c.startswith("item.")] + ["system"]
    group_columns = [c for c in rows.columns if c.startswith("system.")]
    table = scores.join(majority).join(items[slice_columns + group_columns])
    if metrics is not None and "wer" in table.columns:
        table = table.join(wer_counts(metrics.set_index("output"), table.index))
    # Every human rating as a case (LATTE reports AUC against single ratings too).
    per_rating = rows[rows["is_human"]].assign(
        label=rows["value"].map(lambda v: binary_label(kind, str(v))))[["output", "label"]]
    per_rating = per_rating.dropna().join(scores, on="output")
    out: dict[str, Any] = {"criterion": key, "n_outputs": int(len(table)), "proxies": []}
    for name, higher in orientation.items():
        entry: dict[str, Any] = {"proxy": name, "higher_is_positive": higher,
                                 "evaluated_on": evaluated_on[name]}
        if name in deciders:
            entry["decisions"] = {k: v for k, v in deciders[name].items()
                                  if k not in ("decider", "excluded")}
        usable = table.dropna(subset=[name, "majority"])
        if usable["majority"].nunique() < 2:
            entry["note"] = ("no output left to evaluate it on (see evaluated_on)" if usable.empty
                             else "the human labels have a single class: AUC undefined")
            out["proxies"].append(entry)
            continue
        run_section(entry, "auc", warnings, partial(
            auc_with_ci, usable[name].to_numpy(), usable["majority"].to_numpy(),
            higher_is_positive=higher))
        ratings = per_rating.dropna(subset=[name])
        if ratings["label"].nunique() == 2:
            run_section(entry, "auc_per_rating", warnings,
                     partial(auc_with_ci, ratings[name].to_numpy(),
                             ratings["label"].to_numpy(), higher_is_positive=higher))
        by_slice: dict[str, Any] = {}
        for column in slice_columns:
            if 1 < usable[column].nunique() <= 30:
                run_section(by_slice, column, warnings,
                         partial(validity.auc_by_slice, usable, name, "majority", column,
                                 higher_is_positive=higher, include_overall=False))
        by_slice.pop("_seconds", None)
        entry["by_slice"] = by_slice
        entry["by_slice_method"] = validity.SLICE_METHOD
        both = table.dropna(subset=[name, "share"])
        if len(both) >= 5:
            run_section(entry, "correlations", warnings, partial(
                validity.correlations, both[name].to_numpy(), both["share"].to_numpy(),
                n_boot=500))
            if name.startswith("rater:"):
                # A proxy's probability and the share of humans saying yes share a 0..1 scale,
                # so their agreement (not just correlation) is meaningful.
                run_section(entry, "bland_altman", warnings, partial(
                    validity.bland_altman, both[name].to_numpy(), both["share"].to_numpy()))
        out["proxies"].append(entry)
    run_section(out, "williams", warnings, lambda: williams_tests(table, orientation))
    if isinstance(out["williams"], list):
        # Pairs without a test (identical scores, too few outputs) are listed apart, with
        # the reason: `williams` holds only tests, as a report's table of them expects.
        out["williams_skipped"] = [row for row in out["williams"] if row["test"] is None]
        out["williams"] = [row for row in out["williams"] if row["test"] is not None]
    if "wer" in table.columns or deciders:
        run_section(out, "deployment", warnings, lambda: deployment_tables(
            table, decisions, deciders, [n for n in orientation if n not in deciders],
            options.get("deployment_group")))
    return out


# --- proxies: scores, decisions and the outputs they may be evaluated on ----------------------

def output_ids(values: Any) -> frozenset:
    return frozenset(values or ())


def outputs_evaluated_on(score: pd.Series, labelled: pd.Series, excluded: frozenset,
                  because: str | None) -> dict[str, Any]:
    """Which outputs a proxy's figures use, and how many it had a score for but left out."""
    known = score.notna() & labelled
    dropped = known & score.index.isin(list(excluded))
    if because is None:
        outputs = "every output with a human majority label and a score of this proxy"
    else:
        outputs = ("only outputs this proxy never saw in training or threshold choice; "
                   + because)
    return {"outputs": outputs, "n_outputs": int((known & ~dropped).sum()),
            "n_excluded": int(dropped.sum()), "excluded_because": because}


def proxy_scores(proxy_rows: pd.DataFrame, kind: str, key: str, info: Mapping[str, Any] | None,
                  index: pd.Index, labelled: pd.Series) -> dict[str, Any]:
    """One proxy rater's score (P(yes), or its answers' binary reading where it stored no
    number) and 0/1 decision per output, with the outputs it may not be evaluated on blanked.

    `info` (Django side, `analysis.selectors.proxy_raters`), every key optional:
    - `thresholds[criterion key]`: {threshold, source, rule}. With a threshold, an output is
      predicted preserved when its score >= threshold: the rule the judge itself applied to
      store its answer (proxies.methods.decide), so decisions follow the run's
      threshold even where only the score was kept. Without one (a rubric judge's most likely
      severity level, imported judgments) the stored answers are the decisions.
    - `exclude_scores` / `exclude_scores_because`: output ids the proxy may not be scored on
      at all (a learned proxy's training and dev outputs, and outputs sharing a reference
      with them): in-sample scores flatter a trained proxy.
    - `exclude_decisions` / `exclude_decisions_because`: outputs its decisions may not be
      counted on (the dev split its threshold was chosen on); its scores still count, since
      AUC and correlations do not depend on the threshold.
    """
    info = info or {}
    by_output = proxy_rows.set_index("output")
    numeric = pd.to_numeric(by_output["numeric"], errors="coerce").groupby(level=0).mean()
    stored = by_output["value"].map(lambda v: binary_label(kind, str(v)))
    stored = stored.groupby(level=0).mean()
    # Several answers per output (a judge sampled repeatedly): their majority; a tie is none.
    stored_decision = pd.Series(np.where(stored > 0.5, 1.0, np.where(stored < 0.5, 0.0, np.nan)),
                                index=stored.index)
    score = (numeric if numeric.notna().any() else stored).reindex(index)
    setting = (info.get("thresholds") or {}).get(key) or {}
    threshold = setting.get("threshold")
    if threshold is not None and numeric.notna().any():
        decision = (numeric >= float(threshold)).astype(float).where(numeric.notna(),
                                                                     stored_decision)
        rule = setting.get("rule") or f"predicted preserved when the score >= {threshold:g}"
    else:
        decision = stored_decision
        rule = setting.get("rule") or "the proxy's stored answers (preserved or not)"
    decision = decision.reindex(index)
    no_scores = output_ids(info.get("exclude_scores"))
    no_decisions = no_scores | output_ids(info.get("exclude_decisions"))
    scores_because = ((info.get("exclude_scores_because") or "outputs it may not be scored on")
                      if no_scores else None)
    reasons = [scores_because] if scores_because else []
    if info.get("exclude_decisions"):
        reasons.append(info.get("exclude_decisions_because")
                       or "outputs its decisions may not count on")
    decisions_because = "; ".join(reasons) or None
    evaluated = outputs_evaluated_on(score, labelled, no_scores, scores_because)
    if info.get("note"):
        evaluated["note"] = info["note"]
    elif not info and "rater_kind" in proxy_rows and (proxy_rows["rater_kind"] == "metric").any():
        evaluated["note"] = ("no record of the outputs this proxy was trained on was given: if "
                             "it was trained on this study, these figures include its training "
                             "outputs")
    decided = outputs_evaluated_on(decision, labelled, no_decisions, decisions_because)
    score = score.where(~score.index.isin(list(no_scores)))
    decision = decision.where(~decision.index.isin(list(no_decisions)))
    return {
        "score": score,
        "decision": decision,
        "evaluated_on": evaluated,
        "decider": {
            "threshold": None if threshold is None else float(threshold),
            "threshold_source": setting.get("source") or (
                "none: the stored answers are the decisions" if threshold is None else ""),
            "rule": rule,
            "n_outputs": decided["n_outputs"],
            "n_excluded": decided["n_excluded"],
            "excluded_because": decisions_because,
            "excluded": no_decisions,
        },
    }


# --- the deployment table (LATTE Table 5) -----------------------------------------------------

WER_ERRORS, WER_WORDS = "wer_errors", "wer_ref_words"


def wer_counts(metrics: pd.DataFrame, index: pd.Index) -> pd.DataFrame:
    """Per output, the WER's errors (S + D + I) and reference words, as the WER scorer stores
    them: a group's corpus WER sums them (`deployment_tables`). Empty where not stored."""
    columns = [*specs.WER_ERROR_COUNTS, specs.WER_REFERENCE_WORDS]
    if not set(columns) <= set(metrics.columns):
        return pd.DataFrame(index=index)
    counts = metrics[columns].apply(pd.to_numeric, errors="coerce").reindex(index)
    errors = counts[list(specs.WER_ERROR_COUNTS)].sum(axis=1, min_count=len(
        specs.WER_ERROR_COUNTS))
    return pd.DataFrame({WER_ERRORS: errors, WER_WORDS: counts[specs.WER_REFERENCE_WORDS]})

def deployment_tables(table: pd.DataFrame, decisions: pd.DataFrame,
                deciders: Mapping[str, dict[str, Any]], metric_names: Sequence[str],
                wanted_group: str | None) -> dict[str, Any]:
    """LATTE's Table 5 per group within system: WordAcc, the human meaning-preservation %
    and each proxy's LATTEScore on the same outputs, and who would accept each model.

    WordAcc is LATTE's per speaker: 100 - min(WER, 100) with the group's corpus WER (its
    errors over its reference words, from the WER scorer's stored counts; the mean of the
    per-output WordAcc only where a WER is stored without its counts, and the rule says so).
    The main table holds every output of the criterion and the proxies that may be counted
    on all of them; each figure uses the outputs it has a value for and counts them
    (`word_acc_n`, `human_n`, `proxy_n`): WordAcc every output with a WER and a proxy every
    output it decided, whatever the humans said, so a tied human majority (no label) moves
    only the human %. A proxy whose decisions may
    not count on some outputs (trained or tuned on them) gets a table of its own on the
    outputs it may count on, WordAcc and human % recomputed there: comparing its LATTEScore
    with a human % taken over other outputs would mean nothing. Proxies sharing the same
    exclusions share a table."""
    group = deployment_group_column(wanted_group, table.columns)
    system = None if group == "system" else "system"
    has_wer = "wer" in table.columns
    with_wer = table["wer"].notna() if has_wer else None
    corpus = (has_wer and WER_WORDS in table.columns
              and bool(table.loc[with_wer, [WER_ERRORS, WER_WORDS]].notna().all(axis=None)))
    frame = table.rename(columns={"majority": "meaning_preserved"})
    frame = frame[[c for c in dict.fromkeys((
        "meaning_preserved", "wer", *((WER_ERRORS, WER_WORDS) if corpus else ()), "system",
        group)) if c in frame.columns]].copy()
    outputs = ("every output of the criterion: WordAcc on those with a WER, the human % on "
               "those with a human majority label (a tie has none)" if has_wer else
               "every output of the criterion: the human % on those with a human majority "
               "label (a tie has none)")
    sets: dict[frozenset, list[str]] = {}
    for name, decider in deciders.items():
        frame[name] = decisions[name].reindex(frame.index)
        sets.setdefault(frozenset(decider["excluded"]) & frozenset(frame.index), []).append(name)
    main = sets.pop(frozenset(), [])

    def one_table(names: list[str], excluded: frozenset, because: str | None) -> dict[str, Any]:
        part = frame.drop(index=list(excluded))
        computed = validity.deployment_table(
            part, group, system_col=system, wer_col="wer" if has_wer else None,
            proxy_cols=names, word_acc="corpus" if corpus else "mean",
            errors_col=WER_ERRORS if corpus else None,
            ref_words_col=WER_WORDS if corpus else None)
        rules = [{"decider": "human",
                  "rule": "the majority of human raters says the meaning is preserved; "
                          "accept when at least 70% of the group's outputs with a majority "
                          "are"}]
        if has_wer:
            rules.insert(0, {"decider": "word_acc", "rule": (
                "WordAcc = 100 - min(WER %, 100) with the group's corpus WER (its errors "
                "S + D + I over its reference words), on every output with a WER; accept at "
                "80 or more" if corpus else
                "WordAcc = 100 - min(WER %, 100), the mean over the group's outputs with a "
                "WER (the WER counts a corpus WER needs are not stored); accept at 80 or "
                "more")})
        for name in names:
            decider = deciders[name]
            rules.append({"decider": name, "rule": decider["rule"] + "; LATTEScore = % of "
                          "the group's outputs predicted preserved, accept at 70 or more",
                          "threshold": decider["threshold"],
                          "threshold_source": decider["threshold_source"]})
        held_out = because is not None
        return {
            "outputs": outputs + (f", less those its decisions may not count on: {because}"
                                  if held_out else ""),
            "n_outputs": int(len(part)), "n_excluded": int(len(excluded)),
            "excluded_because": because,
            "n_without_group": int(part[group].isna().sum()),
            "proxies": names, "deciders": rules, **to_jsonable(computed),
        }

    result: dict[str, Any] = {"group_by": group, "within": system}
    left_out = [{"proxy": name, "reason": "a metric value has no decision threshold: only "
                 "WordAcc (from WER) and proxies that decide (LLM judges, learned proxies) "
                 "get a decision column"} for name in metric_names if name != "wer"]
    result["left_out"] = left_out
    result.update(one_table(main, frozenset(), None))
    result["held_out_tables"] = [
        one_table(names, excluded, "; ".join(sorted({
            deciders[n]["excluded_because"] or "" for n in names})) or "excluded outputs")
        for excluded, names in sets.items()]
    return result


# --- Williams' test -------------------------------------------------------------------------

def williams_tests(table: pd.DataFrame, orientation: Mapping[str, bool]) -> list[dict[str, Any]]:
    """Williams' test for each pair of proxies: does one's Pearson correlation with the share
    of humans judging positive differ from the other's? (Dependent correlations sharing the
    human variable, on the outputs where all three are known.)

    Correlations are direction-aligned first: a lower-is-better score (WER) is negated, so
    that "correlates better with humans" means a larger r for every metric. Comparing the
    signed r of WER (-0.71) with BLEU's (0.54) would test the wrong thing: WER's is the
    stronger. `r_a`, `r_b`, `r_ab` are the aligned correlations, `sign_a`/`sign_b` the
    factors applied and `direction_a`/`direction_b` say so. A pair whose test is undefined
    (identical or perfectly correlated scores, fewer than 5 outputs) gets a `note` and no
    `test`. `p_adjusted`: Holm over the pairs tested on this criterion."""
    names = list(orientation)
    rows: list[dict[str, Any]] = []
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            sign_a = 1.0 if orientation[first] else -1.0
            sign_b = 1.0 if orientation[second] else -1.0
            row: dict[str, Any] = {
                "proxy_a": first, "proxy_b": second,
                "direction_a": direction_note(orientation[first]),
                "direction_b": direction_note(orientation[second]),
                "sign_a": sign_a, "sign_b": sign_b,
                "r_a": None, "r_b": None, "r_ab": None, "n": 0, "test": None,
                "p_adjusted": None,
            }
            rows.append(row)
            known = table.dropna(subset=[first, second, "share"])
            row["n"] = int(len(known))
            if len(known) < 5:
                row["note"] = "fewer than 5 outputs with both scores and a human share"
                continue
            r12 = sign_a * known["share"].corr(known[first])
            r13 = sign_b * known["share"].corr(known[second])
            r23 = sign_a * sign_b * known[first].corr(known[second])
            row.update({"r_a": r12, "r_b": r13, "r_ab": r23})
            if not all(math.isfinite(v) for v in (r12, r13, r23)):
                row["note"] = "a correlation is undefined (a constant score or human share)"
                continue
            if abs(r23) >= 1 - 1e-12:
                row["note"] = ("the two scores are perfectly correlated (r_ab = "
                               f"{r23:+.0f}): the same ranking, nothing to compare")
                continue
            try:
                row["test"] = validity.williams_test(r12, r13, r23, len(known))
            except ValueError as error:
                row["note"] = f"Williams' test undefined: {error}"
    tested = [row for row in rows if row["test"] is not None]
    adjusted = validity.holm_adjust([row["test"].p_value for row in tested])
    for row, p in zip(tested, adjusted, strict=True):
        row["p_adjusted"] = p
        row["p_adjustment"] = f"Holm over the {len(tested)} Williams tests of this criterion"
    return rows


def direction_note(higher_is_positive: bool) -> str:
    return ("higher is better" if higher_is_positive
            else "lower is better: negated before comparing")
