"""The whole analysis of a study, from tidy tables to one JSON-able result (no Django here).

Input
-----
- `judgments`: one row per judgment with at least `rater`, `is_human`, `output`, `item`,
  `system`, `system_b` (pairwise), `criterion`, `criterion_kind`, `value`, `numeric`,
  `seconds`, and item/system metadata as `item.<field>` / `system.<field>` columns.
- `criteria`: [{"key", "kind", "scale_points", "options"}] in display order.
- `metrics`: one row per output (`output`, `item`, `system`) with a column per metric value
  (e.g. `wer`, `bertscore_f`, `sd`), or None.

Every section is computed on its own: a section that fails records its error and the rest of
the analysis goes on (a report with one failed model is better than no report).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import agreement, descriptives, models, validity
from .rbridge import r_available, r_unavailable_reason, r_versions

ORDINAL_KINDS = ("likert", "severity")
NOMINAL_KINDS = ("binary", "categorical", "pairwise")
# Metric values where lower means better (more likely meaning preserved).
LOWER_IS_BETTER = {"wer", "cer", "mer", "wil", "sd", "heval", "nker", "sub_rate", "del_rate",
                   "ins_rate", "substitutions", "deletions", "insertions"}
HEADLINE_SCORES = ("wer", "cer", "bleu", "chrf", "rouge1_f", "rougeL_f", "bertscore_f", "sd",
                   "cosine", "heval")
Progress = Callable[[str], None]


def to_jsonable(value: Any) -> Any:
    """Dataclasses, numpy and pandas values to plain JSON (NaN and inf become None)."""
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return to_jsonable(value.to_dict(orient="records"))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def binary_label(kind: str, value: str) -> float | None:
    """1/0 for "meaning preserved"/"yes", None where the kind has no binary reading.
    Severity follows LATTE: levels 0 and 1 preserve the meaning."""
    if kind == "binary":
        return {"yes": 1.0, "no": 0.0}.get(value)
    if kind == "severity":
        return {"0": 1.0, "1": 1.0, "2": 0.0}.get(value)
    return None


def _section(result: dict, name: str, warnings: list[str], compute: Callable[[], Any]) -> None:
    started = time.perf_counter()
    try:
        result[name] = to_jsonable(compute())
    except Exception as error:  # noqa: BLE001 - recorded; the rest of the analysis goes on
        result[name] = {"error": f"{type(error).__name__}: {error}"}
        warnings.append(f"{name}: {type(error).__name__}: {error}")
    result.setdefault("_seconds", {})[name] = round(time.perf_counter() - started, 3)


def _model_frame(rows: pd.DataFrame, response: str, values: pd.Series) -> pd.DataFrame:
    frame = rows.copy()
    frame[response] = values.to_numpy()
    # Metadata columns become plain names usable in formulas (system.temp -> temp).
    renames = {}
    for column in frame.columns:
        if column.startswith(("system.", "item.")):
            plain = column.split(".", 1)[1]
            if plain not in frame.columns and plain not in renames.values():
                renames[column] = plain
    return frame.rename(columns=renames)


def _agreement(rows: pd.DataFrame, kind: str, labels: list[str] | None) -> dict[str, Any]:
    """Agreement among the human raters of one criterion (units = outputs or output pairs)."""
    humans = rows[rows["is_human"]]
    frame = pd.DataFrame({"unit": humans["unit"], "rater": humans["rater"],
                          "value": humans["value"], "item": humans["item"]})
    per_unit = frame.groupby("unit")["rater"].nunique()
    if per_unit.empty or per_unit.max() < 2:
        return {"note": "no output was rated by two or more humans"}
    level = "ordinal" if kind in ORDINAL_KINDS else "nominal"
    numeric = kind in ORDINAL_KINDS
    if numeric:
        frame["value"] = pd.to_numeric(frame["value"])
        labels = sorted(frame["value"].unique().tolist())
    out: dict[str, Any] = {
        "level": level,
        "percent_agreement": agreement.percent_agreement(frame),
        "krippendorff_alpha": agreement.bootstrap_ci(
            frame, lambda d: agreement.krippendorff_alpha(d, level, labels=labels),
            n_boot=200, cluster="item"),
        "gwet_ac1": agreement.gwet_ac1(frame, labels=labels),
    }
    try:
        out["fleiss_kappa"] = agreement.fleiss_kappa(frame, labels=labels, unbalanced="drop")
    except ValueError as error:
        out["fleiss_kappa"] = {"note": str(error)}
    out["cohen_pairs"] = _cohen_pairs(frame, numeric, labels)
    if kind == "likert":
        try:
            out["icc"] = agreement.icc(frame)
        except ValueError as error:
            out["icc"] = {"note": str(error)}
    if kind in ("binary", "severity"):
        binary = frame.assign(value=[binary_label(kind, str(v if not numeric else int(v)))
                                     for v in frame["value"]])
        out["binary_alpha"] = agreement.krippendorff_alpha(binary.dropna(), "nominal")
    return out


MAX_RATER_PAIRS = 50  # listed in the report
MAX_PAIRS_COMPUTED = 300  # kappa computed for at most this many pairs (most shared units)
MIN_SHARED_UNITS = 5


def _cohen_pairs(frame: pd.DataFrame, ordinal: bool, labels: list | None) -> dict[str, Any]:
    """Cohen's kappa for pairs of human raters sharing enough units (unweighted; linear and
    quadratic too for ordered scales) and the pairs' mean.

    Crowd designs have thousands of rater pairs, most sharing few units: shared counts for all
    pairs come from one matrix product, and kappa is computed for the MAX_PAIRS_COMPUTED
    pairs that share the most units (the report says how many pairs were eligible).
    """
    wide = frame.pivot(index="rater", columns="unit", values="value")
    raters = wide.index.tolist()
    values = wide.to_numpy(dtype=object)
    present = wide.notna().to_numpy()
    counts = present.astype(np.int32) @ present.T.astype(np.int32)
    first, second = np.triu_indices(len(raters), 1)
    shared = counts[first, second]
    eligible = np.flatnonzero(shared >= MIN_SHARED_UNITS)
    chosen = eligible[np.argsort(-shared[eligible], kind="stable")][:MAX_PAIRS_COMPUTED]
    weightings = [None, "linear", "quadratic"] if ordinal else [None]
    pairs = []
    for index in chosen:
        i, j = first[index], second[index]
        mask = present[i] & present[j]
        row: dict[str, Any] = {"rater_a": raters[i], "rater_b": raters[j], "n": int(mask.sum())}
        for weights in weightings:
            estimate = agreement.cohen_kappa(values[i][mask], values[j][mask], weights=weights,
                                             labels=labels)
            row[weights or "unweighted"] = estimate.value
        pairs.append(row)
    summary = {
        name: float(np.nanmean([p[name] for p in pairs])) if pairs else None
        for name in [w or "unweighted" for w in weightings]
    }
    return {"n_pairs": int(len(eligible)), "n_computed": len(pairs), "mean": summary,
            "pairs": pairs[:MAX_RATER_PAIRS], "min_shared_units": MIN_SHARED_UNITS}


def _ceiling(rows: pd.DataFrame, kind: str) -> Any:
    frame = pd.DataFrame({"unit": rows["unit"], "rater": rows["rater"], "value": rows["value"],
                          "item": rows["item"]})
    humans = sorted(rows.loc[rows["is_human"], "rater"].unique().tolist())
    proxies = sorted(rows.loc[~rows["is_human"], "rater"].unique().tolist())
    if len(humans) < 2:
        return {"note": "fewer than two human raters"}
    weights = "linear" if kind in ORDINAL_KINDS else None
    labels = None
    if kind in ORDINAL_KINDS:
        frame["value"] = pd.to_numeric(frame["value"])
        labels = sorted(frame["value"].dropna().unique().tolist())
    return agreement.human_ceiling(frame, humans=humans, proxies=proxies, weights=weights,
                                   labels=labels)


def _global_formula(options: dict[str, Any], kind: str) -> str | None:
    """`options["formula"]` applies to the criteria whose response it names: `rating ~ ...`
    to Likert criteria, `y ~ ...` to binary (and severity mapped to binary) ones."""
    formula = options.get("formula")
    if not formula:
        return None
    response = formula.split("~", 1)[0].strip()
    wanted = "rating" if kind == "likert" else "y" if kind in ("binary", "severity") else None
    return formula if response == wanted else None


def analyse_criterion(rows: pd.DataFrame, criterion: dict[str, Any], options: dict[str, Any],
                      warnings: list[str]) -> dict[str, Any]:
    kind, key = criterion["kind"], criterion["key"]
    rows = rows.copy()
    rows["unit"] = rows["output"].astype(str)
    if kind == "pairwise":
        rows["unit"] = rows["output"].astype(str) + "|" + rows["output_b"].astype(str)
    humans = rows[rows["is_human"]]
    result: dict[str, Any] = {
        "key": key, "kind": kind, "n_judgments": int(len(humans)),
        "n_raters": int(humans["rater"].nunique()), "n_outputs": int(humans["unit"].nunique()),
    }
    if humans.empty:
        return result
    formula = (options.get("formulas") or {}).get(key) or _global_formula(options, kind)
    engine = options.get("engine", "auto")
    fits: dict[str, Any] = {}  # fitted models, for contrasts computed from them
    if kind == "likert":
        ratings = pd.to_numeric(humans["value"])
        frame = _model_frame(humans, "rating", ratings)
        levels = {"rating": list(range(1, int(criterion.get("scale_points") or 5) + 1))}
        _section(result, "descriptives", warnings,
                 lambda: descriptives.likert_summary(frame, value="rating", by="system"))
        _section(result, "distribution", warnings,
                 lambda: frame.groupby(["system", "rating"]).size().rename("n").reset_index())
        _section(result, "clmm", warnings, lambda: fits.setdefault("clmm", models.fit_clmm(
            frame, formula or models.DEFAULT_CLMM_FORMULA, levels=levels, engine=engine)))
        _section(result, "clm", warnings, lambda: models.fit_clm(
            frame, models.DEFAULT_CLM_FORMULA, levels=levels, engine=engine))
        if frame["system"].nunique() > 2 and "clmm" in fits:
            _section(result, "contrasts", warnings,
                     lambda: models.pairwise_contrasts(fits["clmm"], "system"))
    elif kind in ("binary", "severity"):
        y = humans["value"].map(lambda v: binary_label(kind, str(v)))
        frame = _model_frame(humans, "y", y)
        _section(result, "proportions", warnings,
                 lambda: descriptives.proportion_summary(frame, value="y", by="system"))
        _section(result, "glmm", warnings, lambda: fits.setdefault(
            "glmm", models.fit_binomial_glmm(frame, formula or models.DEFAULT_GLMM_FORMULA,
                                             engine=engine)))
        if frame["system"].nunique() > 2 and "glmm" in fits:
            _section(result, "contrasts", warnings,
                     lambda: models.pairwise_contrasts(fits["glmm"], "system"))
        if kind == "severity":
            levels_frame = _model_frame(humans, "rating",
                                        pd.to_numeric(humans["value"]).map(lambda v: 3 - v))
            _section(result, "severity_levels", warnings,
                     lambda: levels_frame.groupby(["system", "rating"]).size().rename("n")
                     .reset_index())
    elif kind == "pairwise":
        frame = pd.DataFrame({"left_system": humans["system"], "right_system": humans["system_b"],
                              "choice": humans["value"], "rater": humans["rater"]})
        _section(result, "preference", warnings,
                 lambda: models.preference_model(frame, cluster="rater"))
    elif kind == "categorical":
        _section(result, "distribution", warnings,
                 lambda: humans.groupby(["system", "value"]).size().rename("n").reset_index())
        options_set = {str(o).upper() for o in criterion.get("options") or []}
        if {"TP", "FP", "FN"} <= options_set:
            frame = humans.assign(label=humans["value"].str.upper())
            _section(result, "classification", warnings,
                     lambda: descriptives.classification_summary(frame, label="label",
                                                                 by="system"))
    else:  # free text: counted, not modelled
        result["answered"] = int((humans["value"].str.strip() != "").sum())
        return result
    _section(result, "agreement", warnings,
             lambda: _agreement(rows, kind, list(criterion.get("options") or []) or None))
    _section(result, "ceiling", warnings, lambda: _ceiling(rows, kind))
    return result


def _human_majority(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
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
    """Every metric value and proxy rater against the human binary label of one criterion."""
    kind, key = criterion["kind"], criterion["key"]
    rows = judgments[judgments["criterion"] == key]
    majority = _human_majority(rows, kind)
    if majority.empty:
        return {"note": "no human judgments"}
    items = rows.drop_duplicates("output").set_index("output")
    scores = pd.DataFrame(index=majority.index)
    orientation: dict[str, bool] = {}
    if metrics is not None and not metrics.empty:
        indexed = metrics.set_index("output")
        for column in HEADLINE_SCORES:
            if column in indexed.columns:
                scores[column] = indexed[column].reindex(scores.index)
                orientation[column] = column not in LOWER_IS_BETTER
    proxies = rows[~rows["is_human"]]
    for rater, proxy_rows in proxies.groupby("rater"):
        numeric = proxy_rows.set_index("output")["numeric"]
        if numeric.isna().all():
            numeric = proxy_rows.set_index("output")["value"].map(
                lambda v: binary_label(kind, str(v)))
        name = f"rater:{rater}"
        scores[name] = numeric.groupby(level=0).mean().reindex(scores.index)
        orientation[name] = True
    slice_columns = [c for c in rows.columns if c.startswith("item.")] + ["system"]
    table = scores.join(majority).join(items[slice_columns])
    # Every human rating as a case (LATTE reports AUC against single ratings too).
    per_rating = rows[rows["is_human"]].assign(
        label=rows["value"].map(lambda v: binary_label(kind, str(v))))[["output", "label"]]
    per_rating = per_rating.dropna().join(scores, on="output")
    out: dict[str, Any] = {"criterion": key, "n_outputs": int(len(table)), "proxies": []}
    for name, higher in orientation.items():
        entry: dict[str, Any] = {"proxy": name, "higher_is_positive": higher}
        usable = table.dropna(subset=[name, "majority"])
        if usable["majority"].nunique() < 2:
            entry["note"] = "the human labels have a single class: AUC undefined"
            out["proxies"].append(entry)
            continue
        _section(entry, "auc", warnings, lambda u=usable, n=name, h=higher: validity.auc_with_ci(
            u[n].to_numpy(), u["majority"].to_numpy(), higher_is_positive=h))
        ratings = per_rating.dropna(subset=[name])
        if ratings["label"].nunique() == 2:
            _section(entry, "auc_per_rating", warnings,
                     lambda r=ratings, n=name, h=higher: validity.auc_with_ci(
                         r[n].to_numpy(), r["label"].to_numpy(), higher_is_positive=h))
        by_slice: dict[str, Any] = {}
        for column in slice_columns:
            if 1 < usable[column].nunique() <= 30:
                _section(by_slice, column, warnings,
                         lambda u=usable, n=name, h=higher, c=column: validity.auc_by_slice(
                             u, n, "majority", c, higher_is_positive=h, include_overall=False))
        by_slice.pop("_seconds", None)
        entry["by_slice"] = by_slice
        both = table.dropna(subset=[name, "share"])
        if len(both) >= 5:
            _section(entry, "correlations", warnings, lambda b=both, n=name: validity.correlations(
                b[n].to_numpy(), b["share"].to_numpy(), n_boot=500))
            if name.startswith("rater:"):
                # A proxy's probability and the share of humans saying yes share a 0..1 scale,
                # so their agreement (not just correlation) is meaningful.
                _section(entry, "bland_altman", warnings, lambda b=both, n=name:
                         validity.bland_altman(b[n].to_numpy(), b["share"].to_numpy()))
        out["proxies"].append(entry)
    _section(out, "williams", warnings, lambda: _williams(table, list(orientation)))
    if "wer" in table.columns:
        group = options.get("deployment_group") or (
            "item.speaker" if "item.speaker" in table.columns else "system")
        proxy_cols = [n for n in orientation if n.startswith("rater:")]
        deploy = table.dropna(subset=["wer", "majority"]).rename(
            columns={"majority": "meaning_preserved"})
        if not deploy.empty:
            _section(out, "deployment", warnings, lambda: validity.deployment_table(
                deploy, group, proxy_cols=proxy_cols))
    return out


def _williams(table: pd.DataFrame, names: list[str]) -> list[dict[str, Any]]:
    """Williams' test for each pair of proxies: is one's Pearson correlation with the share of
    humans judging positive different from the other's? (Dependent correlations sharing the
    human variable, on the outputs where all three are known.)"""
    rows = []
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            known = table.dropna(subset=[first, second, "share"])
            if len(known) < 5:
                continue
            r12 = known["share"].corr(known[first])
            r13 = known["share"].corr(known[second])
            r23 = known[first].corr(known[second])
            if not all(math.isfinite(v) for v in (r12, r13, r23)):
                continue
            test = validity.williams_test(r12, r13, r23, len(known))
            rows.append({"proxy_a": first, "proxy_b": second, "r_a": r12, "r_b": r13,
                         "r_ab": r23, "n": int(len(known)), "test": test})
    return rows


def analyse(judgments: pd.DataFrame, criteria: list[dict[str, Any]],
            metrics: pd.DataFrame | None = None, options: dict[str, Any] | None = None,
            progress: Progress | None = None) -> dict[str, Any]:
    """Everything the report shows, as JSON-able data. `progress(step)` is called per step."""
    options = options or {}
    progress = progress or (lambda step: None)
    warnings: list[str] = []
    started = time.perf_counter()
    humans = judgments[judgments["is_human"]] if not judgments.empty else judgments
    result: dict[str, Any] = {
        "design": {
            "judgments": int(len(judgments)), "human_judgments": int(len(humans)),
            "raters": to_jsonable(judgments.groupby("rater_kind")["rater"].nunique().to_dict())
            if not judgments.empty else {},
            "items": int(judgments["item"].nunique()) if not judgments.empty else 0,
            "systems": sorted(judgments["system"].dropna().unique().tolist())
            if not judgments.empty else [],
            "median_seconds": to_jsonable(humans["seconds"].median())
            if not humans.empty else None,
        },
        "engines": {"r_available": r_available(), "r_unavailable_reason": r_unavailable_reason(),
                    "versions": r_versions() if r_available() else {}},
        "criteria": [],
        "validity": [],
    }
    for criterion in criteria:
        progress(f"criterion {criterion['key']}")
        rows = judgments[judgments["criterion"] == criterion["key"]]
        result["criteria"].append(analyse_criterion(rows, criterion, options, warnings))
    for criterion in criteria:
        if criterion["kind"] in ("binary", "severity"):
            progress(f"proxies vs humans on {criterion['key']}")
            entry: dict[str, Any] = {}
            _section(entry, "result", warnings, lambda c=criterion: proxy_validity(
                judgments, c, metrics, options, warnings))
            result["validity"].append(entry["result"])
    if options.get("power"):
        progress("power analysis")
        from . import power

        _section(result, "power", warnings, lambda: power.smallest_design(**options["power"]))
    result["warnings"] = warnings
    result["seconds"] = round(time.perf_counter() - started, 3)
    return to_jsonable(result)
