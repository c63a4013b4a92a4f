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
the analysis goes on (a report with one failed model is better than no report). A user's model
formula is the exception: one outside the grammar of `formula.py` is refused (FormulaError)
before anything is computed, since it is a mistake (or an attack), not a property of the data.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import agreement, descriptives, models, validity
from .formula import Formula, FormulaError, is_formula_name, parse_formula
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


# --- user formulas ---------------------------------------------------------------------------
#: The response column each modelled criterion kind is fitted on; a user's formula names it or
#: the criterion's own key.
FORMULA_RESPONSES = {"likert": "rating", "binary": "y", "severity": "y"}
FORMULA_BASE_COLUMNS = ("system", "item", "rater")
# Columns analyse_criterion adds to the judgments before fitting: metadata never takes their
# plain names, whatever the criterion's kind, so that the rule below needs no frame.
_ADDED_COLUMNS = ("unit", "rating", "y")
_METADATA = ("item.", "system.")


def metadata_aliases(columns: Iterable[str]) -> dict[str, str]:
    """Plain names of metadata columns (`system.temp` -> `temp`) where the plain name is free:
    not a column of the judgments, not one the pipeline adds, not an earlier alias (item
    fields come before system fields, as `judgments_tidy` orders them)."""
    columns = [str(c) for c in columns]
    taken = set(columns) | set(_ADDED_COLUMNS)
    aliases: dict[str, str] = {}
    for column in columns:
        if column.startswith(_METADATA):
            plain = column.split(".", 1)[1]
            if plain not in taken:
                aliases[column] = plain
                taken.add(plain)
    return aliases


def formula_columns(columns: Iterable[str]) -> list[str]:
    """The columns a user's formula may name, given the tidy judgment table's columns: system,
    item, rater and each item/system metadata field, under its plain name where it has one
    and under its dotted name (`speaker` and `item.speaker`). The service checks formulas
    with this before a run exists (columns from the database), the pipeline again on the
    data: one rule for both."""
    columns = [str(c) for c in columns]
    aliases = metadata_aliases(columns)
    names = list(FORMULA_BASE_COLUMNS)
    names += [aliases[c] for c in columns if c in aliases]
    names += [c for c in columns if c.startswith(_METADATA)]
    return [n for n in dict.fromkeys(names) if is_formula_name(n)]


def criterion_formula(options: Mapping[str, Any], criterion: Mapping[str, Any],
                      columns: Iterable[str]) -> Formula | None:
    """The user's formula for one criterion, parsed against `formula_columns(columns)` and
    given the internal response (`rating` or `y`); None where the default model applies.

    `options["formulas"][key]` wins; its response is the internal name or the key. Otherwise
    `options["formula"]` applies when its response names this criterion's kind (`rating ~`:
    Likert, `y ~`: binary and severity) or its key. Raises FormulaError."""
    kind, key = criterion["kind"], str(criterion["key"])
    internal = FORMULA_RESPONSES.get(kind)
    if internal is None:
        return None
    allowed = formula_columns(columns)
    formulas = options.get("formulas") or {}
    if key in formulas:
        return parse_formula(formulas[key], allowed, responses=[internal, key],
                             label=f"formulas[{key}]").with_response(internal)
    text = options.get("formula")
    if text is None:
        return None
    parsed = parse_formula(text, allowed, responses=["rating", "y", key], label="formula")
    return parsed.with_response(internal) if parsed.response[0] in (internal, key) else None


def check_formulas(options: Mapping[str, Any], criteria: Sequence[Mapping[str, Any]],
                   columns: Iterable[str]) -> dict[str, Formula]:
    """Every formula of `options` checked against the study's criteria and columns (the
    tidy judgment table's, see `formula_columns`): {criterion key: its formula} for the
    criteria given one. Raises FormulaError with a located message for the first bad one,
    an unknown criterion key in `formulas`, or a formula for a criterion that has no model."""
    columns = [str(c) for c in columns]
    allowed = formula_columns(columns)
    by_key = {str(c["key"]): c for c in criteria}
    modelled = [k for k, c in by_key.items() if c["kind"] in FORMULA_RESPONSES]
    criteria_list = f"criteria with a model are {', '.join(modelled) or '(none)'}"
    formulas = options.get("formulas")
    if formulas is not None and not isinstance(formulas, Mapping):
        raise FormulaError("formulas", "must map criterion keys to formulas",
                           allowed=criteria_list)
    for key in formulas or {}:
        label = f"formulas[{key}]"
        if key not in by_key:
            raise FormulaError(label, f"the study has no criterion {key!r}",
                               allowed=criteria_list)
        if by_key[key]["kind"] not in FORMULA_RESPONSES:
            raise FormulaError(label, f"criterion {key!r} is {by_key[key]['kind']}: formulas "
                                      "apply to likert, binary and severity criteria",
                               allowed=criteria_list)
    resolved: dict[str, Formula] = {}
    for key in formulas or {}:
        found = criterion_formula({"formulas": formulas}, by_key[key], columns)
        if found is not None:
            resolved[key] = found
    text = options.get("formula")
    if text is not None:
        # Checked even when no criterion takes it: a refused formula is refused everywhere.
        parsed = parse_formula(text, allowed, responses=["rating", "y", *modelled],
                               label="formula")
        for key in modelled:
            internal = FORMULA_RESPONSES[by_key[key]["kind"]]
            if key not in resolved and parsed.response[0] in (internal, key):
                resolved[key] = parsed.with_response(internal)
    return resolved


def _model_frame(rows: pd.DataFrame, response: str, values: pd.Series) -> pd.DataFrame:
    frame = rows.copy()
    frame[response] = values.to_numpy()
    # Metadata columns get plain names usable in formulas (system.temp -> temp); the dotted
    # columns stay, so a formula may name either (see formula_columns).
    for column, plain in metadata_aliases(rows.columns).items():
        frame[plain] = frame[column]
    return frame


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


def analyse_criterion(rows: pd.DataFrame, criterion: dict[str, Any], options: dict[str, Any],
                      warnings: list[str]) -> dict[str, Any]:
    """One criterion's statistics. A user formula (see `criterion_formula`) is parsed here
    against the rows' columns and only its rebuilt text reaches the models; a bad one raises
    FormulaError (`analyse` checks every formula before it starts)."""
    kind, key = criterion["kind"], criterion["key"]
    parsed = criterion_formula(options, criterion, rows.columns)
    formula = parsed.text if parsed is not None else None
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
    """Everything the report shows, as JSON-able data. `progress(step)` is called per step.
    Raises FormulaError, before computing anything, for a formula outside the grammar."""
    options = options or {}
    # Resolved once for all criteria (a global formula may name any criterion's key); each
    # criterion then gets its own formula, rebuilt, with the internal response.
    resolved = check_formulas(options, criteria, judgments.columns)
    options = {**options, "formula": None,
               "formulas": {key: found.text for key, found in resolved.items()}}
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
