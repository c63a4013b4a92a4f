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
from functools import partial
from typing import Any, Literal

import numpy as np
import pandas as pd

from evalstudy.criteria import NO_PREFERENCE, binary_label, pairwise_choices
from kit.jsonable import to_jsonable
from metrics.scorers import registry
from proxies.quality import auc_with_ci

from . import agreement, descriptives, kinds, models, validity
from .agreement.base import Level
from .covariates import with_covariates
from .formula import Formula, FormulaError, is_formula_name, parse_formula
from .rbridge import r_available, r_unavailable_reason, r_versions
from .votes import (
    VOTE_COLUMNS,
    design_with_votes,
    graded_entry,
    pairwise_entry,
    votes_summary,
    with_counted_votes,
)

ORDINAL_KINDS = ("likert", "severity")
Weighting = Literal["linear", "quadratic"] | None
NOMINAL_KINDS = ("binary", "categorical", "pairwise")
# Called with a step's label; an analysis run's callback also takes `advance` (power).
Progress = Callable[..., None]


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
FORMULA_RESPONSES = {"likert": "rating", "binary": "y", "severity": "y", "slider": "score"}
FORMULA_BASE_COLUMNS = ("system", "item", "rater")
# Columns analyse_criterion adds to the judgments before fitting: metadata never takes their
# plain names, whatever the criterion's kind, so that the rule below needs no frame.
_ADDED_COLUMNS = ("unit", "rating", "y", "score")
_METADATA = ("item.", "system.", "rater.")  # rater.: analysis.stats.covariates


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


# --- agreement -------------------------------------------------------------------------------
#: Bootstrap replicates and seed of every agreement CI in a report (recorded in the result).
AGREEMENT_N_BOOT = agreement.N_BOOT
AGREEMENT_SEED = 20240917


def declared_categories(criterion: Mapping[str, Any]) -> list | None:
    """The criterion's declared scale, in order: Likert 1..scale_points, severity 0..2, yes/no,
    A/B (and "tie" when the criterion allows it), a categorical criterion's options. Every
    agreement statistic uses it as its category set: with the values observed instead, one
    rater pair's weighted kappa (and AC1's chance term) changes when another rater uses a new
    category. None when the criterion declares nothing usable (the observed values are then
    used, and the result says so)."""
    kind = criterion.get("kind")
    if kind == "likert":
        points = criterion.get("scale_points")
        return list(range(1, int(points) + 1)) if points else None
    if kind == "severity":
        return [0, 1, 2]
    if kind == "binary":
        return ["yes", "no"]
    if kind == "pairwise":
        return pairwise_choices(criterion.get("allow_tie"), criterion.get("allow_both"))
    options = list(criterion.get("options") or [])
    return options or None


def _on_scale(frame: pd.DataFrame, kind: str, labels: list | None
              ) -> tuple[pd.DataFrame, list | None, str, dict[str, int], list[str]]:
    """Values coded on the declared scale (numbers for ordered kinds). Returns the frame, the
    categories, where they came from, exclusions and warnings: values outside the declared
    scale are excluded and said so, never silently added to it."""
    excluded: dict[str, int] = {}
    notes: list[str] = []
    frame = frame[frame["value"].notna()]
    if kind in ORDINAL_KINDS:
        numbers = pd.to_numeric(frame["value"], errors="coerce")
        if numbers.isna().any():
            excluded["values_not_numeric"] = int(numbers.isna().sum())
            notes.append(f"{int(numbers.isna().sum())} ratings are not numbers: excluded")
        frame = frame.assign(value=numbers)[numbers.notna()]
        if (frame["value"] % 1 == 0).all():
            frame = frame.assign(value=frame["value"].astype(int))
    source = "declared scale"
    if labels is None:
        observed = agreement.category_order(frame["value"])
        notes.append("the criterion declares no scale: categories are the values observed "
                     f"({observed}); coefficients can shift when a new value appears")
        return frame, None, "observed values", excluded, notes
    categories = list(labels)
    seen = [v for v in NO_PREFERENCE if v not in categories and (frame["value"] == v).any()]
    if kind == "pairwise" and seen:  # the criterion record does not say they are allowed
        categories += seen
        source = f"declared scale (A, B) + {' + '.join(map(repr, seen))} (observed)"
    outside = ~frame["value"].isin(categories)
    if outside.any():
        values = sorted({str(v) for v in frame.loc[outside, "value"]})
        excluded["values_outside_scale"] = int(outside.sum())
        notes.append(f"{int(outside.sum())} ratings outside the declared scale {categories} "
                     f"({', '.join(values[:5])}) excluded")
        frame = frame[~outside]
    return frame, categories, source, excluded, notes


def _mark_source(estimates: Iterable[Any], source: str) -> None:
    for estimate in estimates:
        if isinstance(estimate, agreement.Agreement) and estimate.categories_from == "labels":
            estimate.categories_from = source


def _agreement(rows: pd.DataFrame, kind: str, labels: list | None) -> dict[str, Any]:
    """Agreement among the human raters of one criterion (units = outputs or output pairs).

    `labels`: the declared scale (`declared_categories`). JSON shape (after `to_jsonable`):

    {"level": "nominal" | "ordinal", "categories": [...], "categories_from": "declared scale"
     | "observed values" | "declared scale (A, B) + 'tie' (observed)", "n_units", "n_raters",
     "n_ratings", "excluded": {reason: count}, "warnings": [str],
     "bootstrap": {"n_boot", "seed", "cluster"},
     "percent_agreement", "krippendorff_alpha", "gwet_ac1", "fleiss_kappa": Estimate,
     "gwet_ac2_quadratic", "gwet_ac2_ordinal": Estimate (ordinal kinds),
     "binary_alpha": Estimate (binary, severity),
     "icc": {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k": Estimate} (Likert) or
            {"note", "warnings"},
     "cohen_pairs": {"n_pairs", "n_computed", "min_shared_units", "mean": {weighting: float},
                     "mean_estimates": {weighting: Estimate}, "pairs": [{"rater_a",
                     "rater_b", "n", weighting: float, "ci": {weighting: [low, high]}}],
                     "n_units", "n_raters", "excluded", "warnings", "categories",
                     "ci_method"}}

    where Estimate = `agreement.Agreement` as a dict: "value", "ci_low", "ci_high", "n",
    "method", "p_value", "details", "se", "ci_method", "n_units", "n_raters", "n_ratings",
    "excluded", "warnings", "level", "weights", "categories", "categories_from", "n_boot",
    "seed", "cluster" (None where not applicable; NaN becomes None). Without two ratings on
    any unit: {"note", ...}.
    """
    humans = rows[rows["is_human"]]
    key, names = _rater_keys(humans)
    frame = pd.DataFrame({"unit": humans["unit"], "rater": humans[key],
                          "value": humans["value"], "item": humans["item"]})
    per_unit = frame.groupby("unit")["rater"].nunique()
    if per_unit.empty or per_unit.max() < 2:
        return {"note": "no output was rated by two or more humans"}
    level: Level = "ordinal" if kind in ORDINAL_KINDS else "nominal"
    ordinal = kind in ORDINAL_KINDS
    frame, categories, source, excluded, notes = _on_scale(frame, kind, labels)
    if frame.empty or frame.groupby("unit")["rater"].nunique().max() < 2:
        return {"note": "no output was rated by two or more humans on the declared scale",
                "excluded": excluded, "warnings": notes}
    boot: dict[str, Any] = {"n_boot": AGREEMENT_N_BOOT, "seed": AGREEMENT_SEED,
                            "cluster": "item"}
    out: dict[str, Any] = {
        "level": level, "categories": categories, "categories_from": source,
        "n_units": int(frame["unit"].nunique()), "n_raters": int(frame["rater"].nunique()),
        "n_ratings": int(len(frame)), "excluded": excluded, "warnings": notes,
        "bootstrap": boot,
    }
    out["percent_agreement"] = agreement.percent_agreement(frame, labels=categories)
    out["krippendorff_alpha"] = agreement.krippendorff_alpha(frame, level, labels=categories,
                                                             **boot)
    out["gwet_ac1"] = agreement.gwet_ac1(frame, labels=categories)
    if ordinal:
        # AC1 ignores the order of an ordinal scale; AC2 credits near misses (irrCAC weights).
        out["gwet_ac2_quadratic"] = agreement.gwet_ac1(frame, labels=categories,
                                                       weights="quadratic")
        out["gwet_ac2_ordinal"] = agreement.gwet_ac1(frame, labels=categories,
                                                     weights="ordinal")
    out["fleiss_kappa"] = agreement.fleiss_kappa(frame, labels=categories, unbalanced="gwet")
    out["cohen_pairs"] = _cohen_pairs(frame, ordinal, categories, names)
    if kind == "likert":
        try:
            out["icc"] = agreement.icc(frame.assign(value=frame["value"].astype(float)),
                                       seed=AGREEMENT_SEED)
        except ValueError as error:
            out["icc"] = {"note": str(error), "warnings": [f"ICC not computed: {error}"]}
    if kind in ("binary", "severity"):
        binary = frame.assign(value=[binary_label(kind, str(v)) for v in frame["value"]])
        out["binary_alpha"] = agreement.krippendorff_alpha(
            binary.dropna(subset=["value"]), "nominal", labels=[1.0, 0.0], **boot)
        out["binary_alpha"].categories = ["meaning preserved", "not preserved"] \
            if kind == "severity" else ["yes", "no"]
    _mark_source([*out.values(), *(out.get("icc") or {}).values(),
                  *out["cohen_pairs"]["mean_estimates"].values()],
                 source if categories is not None else "observed values")
    return out


MAX_RATER_PAIRS = 50  # listed in the report
MAX_PAIRS_COMPUTED = 300  # kappa computed for at most this many pairs (most shared units)
MIN_SHARED_UNITS = 5


def _cohen_pairs(frame: pd.DataFrame, ordinal: bool, labels: list | None,
                 names: Mapping[Any, Any] | None = None) -> dict[str, Any]:
    """Cohen's kappa for pairs of human raters sharing enough units (unweighted; linear and
    quadratic too for ordered scales), each with its analytic CI, and the pairs' mean with a
    bootstrap CI over items.

    Crowd designs have millions of rater pairs, most sharing no unit: the eligible pairs come
    from `agreement.rater_pair_overlaps` (sparse, no raters x raters table; nothing is
    multiplied when no rater has MIN_SHARED_UNITS units), and kappa is computed for the
    MAX_PAIRS_COMPUTED pairs that share the most units (the result says how many pairs were
    eligible and how many were left out). All pairs use the same category set (the declared
    scale). `names` maps the frame's rater keys to the names the result shows.
    """
    rater_index, raters = pd.factorize(frame["rater"])
    unit_index, units = pd.factorize(frame["unit"])
    overlaps = agreement.rater_pair_overlaps(rater_index, unit_index, n_raters=len(raters),
                                             n_units=len(units), min_shared=MIN_SHARED_UNITS)
    chosen = slice(0, MAX_PAIRS_COMPUTED)
    first, second = overlaps.first[chosen], overlaps.second[chosen]
    weightings: list[Weighting] = [None, "linear", "quadratic"] if ordinal else [None]
    names_of = [w or "unweighted" for w in weightings]
    pairs = [(raters[a], raters[b]) for a, b in zip(first, second, strict=True)]
    excluded = {}
    if overlaps.n_too_few:
        excluded["pairs_sharing_too_few_units"] = overlaps.n_too_few
    if overlaps.n_eligible - len(pairs):
        excluded["pairs_not_computed"] = overlaps.n_eligible - len(pairs)
    notes = []
    if overlaps.n_eligible > len(pairs):
        notes.append(f"kappa computed for the {len(pairs)} of {overlaps.n_eligible} eligible "
                     "pairs sharing the most outputs")
    rows: list[dict[str, Any]] = []
    means: dict[str, Any] = {}
    if pairs:
        rows, means = agreement.pairwise_kappas(
            frame, pairs, labels=labels, weightings=weightings, n_boot=AGREEMENT_N_BOOT,
            seed=AGREEMENT_SEED, cluster="item")
    if names is not None:
        for row in rows:
            row["rater_a"], row["rater_b"] = names[row["rater_a"]], names[row["rater_b"]]
    involved = {r for pair in pairs for r in pair}
    return {"n_pairs": overlaps.n_eligible, "n_computed": len(rows),
            "mean": {name: means[name].value if name in means else None for name in names_of},
            "mean_estimates": means,
            "pairs": rows[:MAX_RATER_PAIRS], "min_shared_units": MIN_SHARED_UNITS,
            "n_units": int(frame.loc[frame["rater"].isin(involved), "unit"].nunique())
            if involved else 0,
            "n_raters": len(involved), "excluded": excluded, "warnings": notes,
            "categories": labels, "ci_method": "pairs: analytic (Fleiss-Cohen-Everitt, t); "
            f"mean: percentile bootstrap over items (B={AGREEMENT_N_BOOT}, "
            f"seed={AGREEMENT_SEED})"}


def _ceiling(rows: pd.DataFrame, kind: str, labels: list | None = None) -> Any:
    """Leave-one-rater-out human ceiling, proxies scored against the same references, on the
    declared scale, with bootstrap CIs over items (see `agreement.human_ceiling`). Raters are
    listed in the order of their names and shown by name."""
    key, names = _rater_keys(rows)
    frame = pd.DataFrame({"unit": rows["unit"], "rater": rows[key], "value": rows["value"],
                          "item": rows["item"]})
    raters = rows.drop_duplicates(key).sort_values(list(dict.fromkeys(["rater", key])),
                                                   kind="stable")
    humans = raters.loc[raters["is_human"], key].tolist()
    proxies = raters.loc[~raters["is_human"], key].tolist()
    if len(humans) < 2:
        return {"note": "fewer than two human raters"}
    weights: Weighting = "linear" if kind in ORDINAL_KINDS else None
    frame, categories, source, excluded, notes = _on_scale(frame, kind, labels)
    result = agreement.human_ceiling(
        frame, humans=humans, proxies=proxies, weights=weights, labels=categories,
        n_boot=AGREEMENT_N_BOOT, seed=AGREEMENT_SEED, cluster="item")
    if names is not None:
        for row in [*result.humans, *result.proxies]:
            row.rater = names[row.rater]
    result.categories_from = source
    result.excluded = {**excluded, **result.excluded}
    result.warnings = notes + result.warnings
    return result


def _rater_keys(rows: pd.DataFrame) -> tuple[str, dict[Any, Any] | None]:
    """The column that identifies raters, and their names by key where the two differ.

    `judgments_tidy` gives each rater's database id (`rater_id`) beside its name (`rater`):
    agreement runs on the ids (integer keys factorise several times faster than names, and
    two raters who share a display name stay two raters) and shows names. A table without
    ids (imported, built by hand) uses the names as keys."""
    if "rater_id" not in rows.columns:
        return "rater", None
    first = rows.drop_duplicates("rater_id")
    return "rater_id", dict(zip(first["rater_id"].tolist(), first["rater"].tolist(),
                                strict=True))


def _unit_keys(rows: pd.DataFrame, pairwise: bool) -> pd.Series:
    """Integer keys of what is rated: the output id (a pair of outputs for pairwise
    criteria). Integer ids are used as they are; other ids (and a pair's two) are coded by
    first appearance, a missing id being a value of its own. Units are never shown, so no
    text is built for them (`astype(str)` cost 0.2 s per million judgments, and every
    agreement statistic then factorised the text again)."""
    output = rows["output"]
    if not pairwise and pd.api.types.is_integer_dtype(output.dtype):
        return output
    first, _ = pd.factorize(output, use_na_sentinel=False)
    if not pairwise:
        return pd.Series(first.astype(np.int64), index=rows.index)
    second, seconds = pd.factorize(rows["output_b"], use_na_sentinel=False)
    return pd.Series(first.astype(np.int64) * max(len(seconds), 1) + second, index=rows.index)


def analyse_criterion(rows: pd.DataFrame, criterion: dict[str, Any], options: dict[str, Any],
                      warnings: list[str]) -> dict[str, Any]:
    """One criterion's statistics. A user formula (see `criterion_formula`) is parsed here
    against the rows' columns and only its rebuilt text reaches the models; a bad one raises
    FormulaError (`analyse` checks every formula before it starts)."""
    kind, key = criterion["kind"], criterion["key"]
    parsed = criterion_formula(options, criterion, rows.columns)
    formula = parsed.text if parsed is not None else None
    rows = rows.copy()
    rows["unit"] = _unit_keys(rows, kind == "pairwise")
    humans = rows[rows["is_human"]]
    result: dict[str, Any] = {
        "key": key, "kind": kind, "n_judgments": int(len(humans)),
        "n_raters": int(humans["rater"].nunique()), "n_outputs": int(humans["unit"].nunique()),
        "n_items": int(humans["item"].nunique()),
    }
    if humans.empty:
        return result
    if formula is None and humans["system"].nunique() < 2:
        warnings.append(f"{key}: one system only: the default models have no system term "
                        "(intercept and random effects), describing that system alone")
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
            frame, formula or models.for_frame(models.DEFAULT_CLMM_FORMULA, frame), levels=levels,
            engine=engine)))
        _section(result, "clm", warnings, lambda: models.fit_clm(
            frame, models.for_frame(models.DEFAULT_CLM_FORMULA, frame), levels=levels,
            engine=engine))
        if frame["system"].nunique() > 2 and "clmm" in fits:
            _section(result, "contrasts", warnings,
                     lambda: models.pairwise_contrasts(fits["clmm"], "system"))
        if "clmm" in fits:
            # Diagnosed on every fit; no penalised ordinal model is offered.
            result["separation"] = to_jsonable(models.separation_report(
                fits["clmm"], option=options.get("separation", "auto"), key="clmm"))
            if result["separation"]["detected"]:
                warnings.append(f"{key}: {result['separation']['diagnosis']}")
    elif kind in ("binary", "severity"):
        y = humans["value"].map(lambda v: binary_label(kind, str(v)))
        frame = _model_frame(humans, "y", y)
        _section(result, "proportions", warnings,
                 lambda: descriptives.proportion_summary(frame, value="y", by="system"))
        _section(result, "glmm", warnings, lambda: fits.setdefault(
            "glmm", models.fit_binomial_glmm(
                frame, formula or models.for_frame(models.DEFAULT_GLMM_FORMULA, frame),
                engine=engine)))
        # Separation (a system at 0% or 100% "yes"): glmer's estimates for it are infinite, so
        # the penalised fit is added (option separation: auto, penalised, off) and both are
        # reported, each saying what it is; every contrast carries its fit's warnings.
        separation = options.get("separation", "auto")
        if "glmm" in fits and models.wants_penalised(fits["glmm"], separation):
            _section(result, "glmm_penalised", warnings, lambda: fits.setdefault(
                "glmm_penalised", models.fit_binomial_penalised(
                    frame, formula or models.for_frame(models.DEFAULT_GLMM_FORMULA, frame))))
        for name, section in (("glmm", "contrasts"), ("glmm_penalised", "contrasts_penalised")):
            if frame["system"].nunique() > 2 and name in fits:
                _section(result, section, warnings,
                         partial(models.pairwise_contrasts, fits[name], "system"))
        if "glmm" in fits:
            failed = result.get("glmm_penalised")
            result["separation"] = to_jsonable(models.separation_report(
                fits["glmm"], option=separation, key="glmm",
                penalised=fits.get("glmm_penalised"), penalised_key="glmm_penalised",
                penalised_error=failed.get("error") if isinstance(failed, dict) else None))
            if result["separation"]["detected"]:
                warnings.append(f"{key}: {result['separation']['diagnosis']} "
                                f"({result['separation']['note']})")
        if kind == "severity":
            _section(result, "severity_levels", warnings,
                     lambda: descriptives.severity_distribution(humans, criterion.get("labels")))
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
    elif kind in kinds.KINDS:
        kinds.analyse(kind, result, rows, humans, criterion, formula=formula, engine=engine,
                      warnings=warnings, section=_section, model_frame=_model_frame,
                      rater_keys=_rater_keys)
        return result
    else:  # free text: counted, not modelled
        result["answered"] = int((humans["value"].str.strip() != "").sum())
        return result
    scale = declared_categories(criterion)
    _section(result, "agreement", warnings, lambda: _agreement(rows, kind, scale))
    _section(result, "ceiling", warnings, lambda: _ceiling(rows, kind, scale))
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
    """Every metric value and proxy rater against the human binary label of one criterion.

    `options["proxy_raters"]` (built by the Django side: `analysis.selectors.proxy_raters`)
    maps a proxy rater's name to what the judgments cannot say (see `_proxy_scores`): its
    decision threshold on this criterion, the outputs it may not be scored on at all (a
    learned proxy's training and dev outputs) and those its decisions may not be counted on
    (the dev split its threshold was chosen on). Every figure of a proxy (AUC, slices,
    correlations, Williams, deployment) uses only the outputs it may be scored on, and each
    entry says which and how many (`evaluated_on`)."""
    kind, key = criterion["kind"], criterion["key"]
    rows = judgments[judgments["criterion"] == key]
    majority = _human_majority(rows, kind)
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
    evaluated_on = {name: _evaluated_on(scores[name], labelled, frozenset(), None)
                    for name in orientation}
    decisions = pd.DataFrame(index=majority.index)
    deciders: dict[str, dict[str, Any]] = {}
    infos = options.get("proxy_raters") or {}
    for rater, proxy_rows in rows[~rows["is_human"]].groupby("rater"):
        name = f"rater:{rater}"
        found = _proxy_scores(proxy_rows, kind, key, infos.get(str(rater)), scores.index,
                              labelled)
        scores[name], decisions[name] = found["score"], found["decision"]
        orientation[name] = True
        evaluated_on[name], deciders[name] = found["evaluated_on"], found["decider"]
    slice_columns = [c for c in rows.columns if c.startswith("item.")] + ["system"]
    group_columns = [c for c in rows.columns if c.startswith("system.")]
    table = scores.join(majority).join(items[slice_columns + group_columns])
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
        _section(entry, "auc", warnings, partial(
            auc_with_ci, usable[name].to_numpy(), usable["majority"].to_numpy(),
            higher_is_positive=higher))
        ratings = per_rating.dropna(subset=[name])
        if ratings["label"].nunique() == 2:
            _section(entry, "auc_per_rating", warnings,
                     partial(auc_with_ci, ratings[name].to_numpy(),
                             ratings["label"].to_numpy(), higher_is_positive=higher))
        by_slice: dict[str, Any] = {}
        for column in slice_columns:
            if 1 < usable[column].nunique() <= 30:
                _section(by_slice, column, warnings,
                         partial(validity.auc_by_slice, usable, name, "majority", column,
                                 higher_is_positive=higher, include_overall=False))
        by_slice.pop("_seconds", None)
        entry["by_slice"] = by_slice
        entry["by_slice_method"] = validity.SLICE_METHOD
        both = table.dropna(subset=[name, "share"])
        if len(both) >= 5:
            _section(entry, "correlations", warnings, partial(
                validity.correlations, both[name].to_numpy(), both["share"].to_numpy(),
                n_boot=500))
            if name.startswith("rater:"):
                # A proxy's probability and the share of humans saying yes share a 0..1 scale,
                # so their agreement (not just correlation) is meaningful.
                _section(entry, "bland_altman", warnings, partial(
                    validity.bland_altman, both[name].to_numpy(), both["share"].to_numpy()))
        out["proxies"].append(entry)
    _section(out, "williams", warnings, lambda: _williams(table, orientation))
    if isinstance(out["williams"], list):
        # Pairs without a test (identical scores, too few outputs) are listed apart, with
        # the reason: `williams` holds only tests, as a report's table of them expects.
        out["williams_skipped"] = [row for row in out["williams"] if row["test"] is None]
        out["williams"] = [row for row in out["williams"] if row["test"] is not None]
    if "wer" in table.columns or deciders:
        _section(out, "deployment", warnings, lambda: _deployment(
            table, decisions, deciders, [n for n in orientation if n not in deciders],
            options.get("deployment_group")))
    return out


# --- proxies: scores, decisions and the outputs they may be evaluated on ----------------------

def _output_ids(values: Any) -> frozenset:
    return frozenset(values or ())


def _evaluated_on(score: pd.Series, labelled: pd.Series, excluded: frozenset,
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


def _proxy_scores(proxy_rows: pd.DataFrame, kind: str, key: str, info: Mapping[str, Any] | None,
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
    no_scores = _output_ids(info.get("exclude_scores"))
    no_decisions = no_scores | _output_ids(info.get("exclude_decisions"))
    scores_because = ((info.get("exclude_scores_because") or "outputs it may not be scored on")
                      if no_scores else None)
    reasons = [scores_because] if scores_because else []
    if info.get("exclude_decisions"):
        reasons.append(info.get("exclude_decisions_because")
                       or "outputs its decisions may not count on")
    decisions_because = "; ".join(reasons) or None
    evaluated = _evaluated_on(score, labelled, no_scores, scores_because)
    if info.get("note"):
        evaluated["note"] = info["note"]
    elif not info and "rater_kind" in proxy_rows and (proxy_rows["rater_kind"] == "metric").any():
        evaluated["note"] = ("no record of the outputs this proxy was trained on was given: if "
                             "it was trained on this study, these figures include its training "
                             "outputs")
    decided = _evaluated_on(decision, labelled, no_decisions, decisions_because)
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

DEPLOYMENT_DEFAULT_GROUPS = ("item.speaker",)


def deployment_group_column(wanted: str | None, columns: Iterable[str]) -> str:
    """The column to group by: `deployment_group` as given, or as an item or system field
    (`speaker` -> `item.speaker`); by default the speaker where items have one, else the
    system."""
    columns = list(columns)
    if wanted:
        for column in (wanted, f"item.{wanted}", f"system.{wanted}"):
            if column in columns:
                return column
        fields = [c for c in columns if c.startswith(("item.", "system."))] + ["system"]
        raise ValueError(f"deployment_group {wanted!r} is not a field of the items or systems "
                         f"(known: {', '.join(fields)})")
    return next((c for c in DEPLOYMENT_DEFAULT_GROUPS if c in columns), "system")


def _deployment(table: pd.DataFrame, decisions: pd.DataFrame,
                deciders: Mapping[str, dict[str, Any]], metric_names: Sequence[str],
                wanted_group: str | None) -> dict[str, Any]:
    """LATTE's Table 5 per group within system: WordAcc, the human meaning-preservation %
    and each proxy's LATTEScore on the same outputs, and who would accept each model.

    The main table holds every output with a human majority label (and a WER where the study
    has one) and the proxies that may be counted on all of them. A proxy whose decisions may
    not count on some outputs (trained or tuned on them) gets a table of its own on the
    outputs it may count on, WordAcc and human % recomputed there: comparing its LATTEScore
    with a human % taken over other outputs would mean nothing. Proxies sharing the same
    exclusions share a table."""
    group = deployment_group_column(wanted_group, table.columns)
    system = None if group == "system" else "system"
    has_wer = "wer" in table.columns
    base = table.dropna(subset=["majority", *(["wer"] if has_wer else [])])
    frame = base.rename(columns={"majority": "meaning_preserved"})
    frame = frame[[c for c in dict.fromkeys(("meaning_preserved", "wer", "system", group))
                   if c in frame.columns]].copy()
    outputs = ("every output with a human majority label"
               + (" and a WER" if has_wer else ""))
    sets: dict[frozenset, list[str]] = {}
    for name, decider in deciders.items():
        frame[name] = decisions[name].reindex(frame.index)
        sets.setdefault(frozenset(decider["excluded"]) & frozenset(frame.index), []).append(name)
    main = sets.pop(frozenset(), [])

    def one_table(names: list[str], excluded: frozenset, because: str | None) -> dict[str, Any]:
        part = frame.drop(index=list(excluded))
        computed = validity.deployment_table(
            part, group, system_col=system, wer_col="wer" if has_wer else None,
            proxy_cols=names)
        rules = [{"decider": "human",
                  "rule": "the majority of human raters says the meaning is preserved; "
                          "accept when at least 70% of the group's outputs are"}]
        if has_wer:
            rules.insert(0, {"decider": "word_acc",
                             "rule": "WordAcc = 100 - min(WER%, 100), mean over the group's "
                                     "outputs; accept at 80 or more"})
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

def _williams(table: pd.DataFrame, orientation: Mapping[str, bool]) -> list[dict[str, Any]]:
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
                "direction_a": _direction(orientation[first]),
                "direction_b": _direction(orientation[second]),
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


def _direction(higher_is_positive: bool) -> str:
    return ("higher is better" if higher_is_positive
            else "lower is better: negated before comparing")


def _silent(step: str, **_: Any) -> None:
    """The progress callback of a caller that wants none."""


def analyse(judgments: pd.DataFrame, criteria: list[dict[str, Any]],
            metrics: pd.DataFrame | None = None, options: dict[str, Any] | None = None,
            progress: Progress | None = None, votes: pd.DataFrame | None = None
            ) -> dict[str, Any]:
    """Everything the report shows, as JSON-able data. `progress(step)` is called per step.
    `votes`: aggregated judgments (`analysis.selectors.vote_counts`), kept apart from the
    raters' judgments (`analysis.stats.votes`). Raises FormulaError, before computing
    anything, for a formula outside the grammar."""
    options = with_covariates(options or {}, criteria, judgments)
    # Resolved once for all criteria (a global formula may name any criterion's key); each
    # criterion then gets its own formula, rebuilt, with the internal response.
    resolved = check_formulas(options, criteria, judgments.columns)
    options = {**options, "formula": None,
               "formulas": {key: found.text for key, found in resolved.items()}}
    progress = progress or _silent
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
            # Only positive durations are timings: imported judgments have none, and simulated
            # ones are served and submitted at once (a median of 0.0 s would read as data).
            "median_seconds": descriptives.median_timing(humans),
        },
        "engines": {"r_available": r_available(), "r_unavailable_reason": r_unavailable_reason(),
                    "versions": r_versions() if r_available() else {}},
        "criteria": [],
        "validity": [],
    }
    votes = votes if votes is not None else pd.DataFrame(columns=VOTE_COLUMNS)
    design_with_votes(result["design"], votes)
    for criterion in criteria:
        progress(f"criterion {criterion['key']}")
        rows = judgments[judgments["criterion"] == criterion["key"]]
        analysed = analyse_criterion(rows, criterion, options, warnings)
        counted = votes[votes["criterion"] == criterion["key"]]
        if not counted.empty:
            _section(analysed, "votes", warnings, partial(
                votes_summary, counted, criterion, warnings, _section,
                declared_categories(criterion)))
        result["criteria"].append(analysed)
    for criterion in criteria:
        if criterion["kind"] in ("pairwise", "likert", "slider"):
            progress(f"metrics and proxies vs humans on {criterion['key']}")
            found: dict[str, Any] = {}
            _section(found, "result", warnings, partial(
                pairwise_entry if criterion["kind"] == "pairwise" else graded_entry,
                judgments[judgments["criterion"] == criterion["key"]],
                votes[votes["criterion"] == criterion["key"]], metrics, criterion))
            result["validity"].append(found["result"])
        if criterion["kind"] in ("binary", "severity"):
            progress(f"proxies vs humans on {criterion['key']}")
            entry: dict[str, Any] = {}
            _section(entry, "result", warnings, partial(
                proxy_validity, with_counted_votes(judgments, votes, criterion["key"]),
                criterion, metrics, options, warnings))
            result["validity"].append(entry["result"])
    if options.get("power"):
        progress("power analysis")
        import inspect

        from . import power

        # Simulations refit the analysis model (minutes): a progress callback that takes
        # `advance` (the analysis run's) shows "done/total simulations" within this step.
        try:
            detail = "advance" in inspect.signature(progress).parameters
        except (TypeError, ValueError):
            detail = False

        def simulations_done(done: int, total: int) -> None:
            if detail:
                progress(f"power analysis: {done}/{total} simulations", advance=False)

        _section(result, "power", warnings, lambda: power.run_option(
            options["power"], result["criteria"], progress=simulations_done))
    result["warnings"] = warnings
    result["seconds"] = round(time.perf_counter() - started, 3)
    return to_jsonable(result)
