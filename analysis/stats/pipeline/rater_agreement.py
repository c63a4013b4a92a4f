"""Agreement among a criterion's raters, as the report shows it: on the criterion's declared
scale, with bootstrap CIs over items, and the leave-one-rater-out human ceiling (no Django).
What the statistics treat as categories, ordered points or a binary reading the criterion's
kind says (`evalstudy.criteria`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from evalstudy.criteria import (
    KINDS,
    NO_PREFERENCE,
    PAIR,
    AnswerKind,
    kind_of,
    pair_oriented,
    rule_of,
)

from .. import agreement
from ..agreement.base import Level
from ..held_out import held_out_answers

Weighting = Literal["linear", "quadratic"] | None


def _kind(name: str) -> AnswerKind | None:
    return kind_of(name) if name in KINDS else None


def _ordinal(kind: AnswerKind | None) -> bool:
    return kind is not None and kind.level == "ordinal"


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
    kind = _kind(str(criterion.get("kind") or ""))
    if kind is not None:
        return kind.categories(rule_of(criterion))
    options = list(criterion.get("options") or [])
    return options or None


def on_declared_scale(frame: pd.DataFrame, kind_name: str, labels: list | None
              ) -> tuple[pd.DataFrame, list | None, str, dict[str, int], list[str]]:
    """Values coded on the declared scale (numbers for ordered kinds). Returns the frame, the
    categories, where they came from, exclusions and warnings: values outside the declared
    scale are excluded and said so, never silently added to it."""
    kind = _kind(kind_name)
    excluded: dict[str, int] = {}
    notes: list[str] = []
    frame = frame[frame["value"].notna()]
    if _ordinal(kind):
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
    # A pair's criterion record does not say whether ties are allowed: seen ones are kept.
    if kind is not None and kind.shows == PAIR and seen:
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


def mark_source(estimates: Iterable[Any], source: str) -> None:
    for estimate in estimates:
        if isinstance(estimate, agreement.Agreement) and estimate.categories_from == "labels":
            estimate.categories_from = source


def rater_agreement(rows: pd.DataFrame, kind_name: str, labels: list | None) -> dict[str, Any]:
    """Agreement among the human raters of one criterion (units = outputs or output pairs).

    `labels`: the declared scale (`declared_categories`). JSON shape (after `to_jsonable`):

    {"level": "nominal" | "ordinal", "categories": [...], "categories_from": "declared scale"
     | "observed values" | "declared scale (A, B) + 'tie' (observed)", "n_units", "n_raters",
     "n_ratings", "excluded": {reason: count}, "warnings": [str],
     "bootstrap": {"n_boot", "seed", "cluster"},
     "percent_agreement", "krippendorff_alpha", "gwet_ac1", "fleiss_kappa": Estimate,
     "gwet_ac2_quadratic", "gwet_ac2_ordinal": Estimate (kinds of ordered points),
     "binary_alpha": Estimate (kinds whose answers score a binary decision),
     "icc": {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k": Estimate} (ordered points
            that score a number: Likert) or
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
    kind = _kind(kind_name)
    humans = in_unit_orientation(rows[rows["is_human"]], kind)
    key, names = rater_keys(humans)
    frame = pd.DataFrame({"unit": humans["unit"], "rater": humans[key],
                          "value": humans["value"], "item": humans["item"]})
    per_unit = frame.groupby("unit")["rater"].nunique()
    if per_unit.empty or per_unit.max() < 2:
        return {"note": "no output was rated by two or more humans"}
    ordinal = _ordinal(kind)
    level: Level = "ordinal" if ordinal else "nominal"
    frame, categories, source, excluded, notes = on_declared_scale(frame, kind_name, labels)
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
    out["cohen_pairs"] = cohen_pairs(frame, ordinal, categories, names)
    if ordinal and kind is not None and kind.score == "numeric":
        try:
            out["icc"] = agreement.icc(frame.assign(value=frame["value"].astype(float)),
                                       seed=AGREEMENT_SEED)
        except ValueError as error:
            out["icc"] = {"note": str(error), "warnings": [f"ICC not computed: {error}"]}
    if kind is not None and kind.binary_reading:
        binary = frame.assign(value=[kind.binary(str(v)) for v in frame["value"]])
        out["binary_alpha"] = agreement.krippendorff_alpha(
            binary.dropna(subset=["value"]), "nominal", labels=[1.0, 0.0], **boot)
        out["binary_alpha"].categories = list(kind.binary_names())
    mark_source([*out.values(), *(out.get("icc") or {}).values(),
                  *out["cohen_pairs"]["mean_estimates"].values()],
                 source if categories is not None else "observed values")
    return out


MAX_RATER_PAIRS = 50  # listed in the report
MAX_PAIRS_COMPUTED = 300  # kappa computed for at most this many pairs (most shared units)
MIN_SHARED_UNITS = 5


def cohen_pairs(frame: pd.DataFrame, ordinal: bool, labels: list | None,
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


def human_ceiling(rows: pd.DataFrame, kind_name: str, labels: list | None = None,
                  proxy_raters: Mapping[str, Any] | None = None) -> Any:
    """Leave-one-rater-out human ceiling, proxies scored against the same references, on the
    declared scale, with bootstrap CIs over items (see `agreement.human_ceiling`). Raters are
    listed in the order of their names and shown by name.

    A proxy is scored only on the outputs it may be counted on (`proxy_raters`, the
    pipeline's option: not its threshold's dev split nor a learned proxy's training outputs,
    `held_out_answers`); its row says how many units were left out and why. A pairwise
    criterion's answers are read in their unit's orientation (`in_unit_orientation`)."""
    rows, left_out = held_out_answers(rows, proxy_raters)
    rows = in_unit_orientation(rows, _kind(kind_name))
    key, names = rater_keys(rows)
    frame = pd.DataFrame({"unit": rows["unit"], "rater": rows[key], "value": rows["value"],
                          "item": rows["item"]})
    raters = rows.drop_duplicates(key).sort_values(list(dict.fromkeys(["rater", key])),
                                                   kind="stable")
    humans = raters.loc[raters["is_human"], key].tolist()
    proxies = raters.loc[~raters["is_human"], key].tolist()
    if len(humans) < 2:
        return {"note": "fewer than two human raters"}
    weights: Weighting = "linear" if _ordinal(_kind(kind_name)) else None
    frame, categories, source, excluded, notes = on_declared_scale(frame, kind_name, labels)
    result = agreement.human_ceiling(
        frame, humans=humans, proxies=proxies, weights=weights, labels=categories,
        n_boot=AGREEMENT_N_BOOT, seed=AGREEMENT_SEED, cluster="item")
    if names is not None:
        for row in [*result.humans, *result.proxies]:
            row.rater = names[row.rater]
    for row in result.proxies:
        found = left_out.get(str(row.rater)) or {}
        row.n_excluded = found.get("n_excluded", 0)
        row.excluded_because = found.get("excluded_because")
    result.categories_from = source
    result.excluded = {**excluded, **result.excluded}
    result.warnings = notes + result.warnings
    return result


def rater_keys(rows: pd.DataFrame) -> tuple[str, dict[Any, Any] | None]:
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


def unit_keys(rows: pd.DataFrame, pairwise: bool) -> pd.Series:
    """Integer keys of what is rated: the output id (a pair of outputs for pairwise
    criteria). Integer ids are used as they are; other ids (and a pair's two) are coded by
    first appearance, a missing id being a value of its own. Units are never shown, so no
    text is built for them (`astype(str)` cost 0.2 s per million judgments, and every
    agreement statistic then factorised the text again).

    A pair is one unit whichever way round it was shown: (A, B) and (B, A) of a
    counterbalanced design share a key, so their answers must be read in one orientation
    before they are compared (`in_unit_orientation`)."""
    output = rows["output"]
    if not pairwise and pd.api.types.is_integer_dtype(output.dtype):
        return output
    if not pairwise:
        first, _ = pd.factorize(output, use_na_sentinel=False)
        return pd.Series(first.astype(np.int64), index=rows.index)
    low, high, n_codes, _ = pair_sides(rows)
    return pd.Series(low * max(n_codes, 1) + high, index=rows.index)


def pair_sides(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Each row's pair as (first, second) codes of one unit, the number of codes, and
    whether the row showed the pair the other way round. Both outputs are coded together;
    the pair's order is `evalstudy.criteria.pair_oriented`'s (the lower output id first,
    the lower code for ids that are not integers)."""
    both = pd.concat([rows["output"], rows["output_b"]], ignore_index=True)
    codes, uniques = pd.factorize(both, use_na_sentinel=False)
    codes = codes.astype(np.int64)
    first, second = codes[:len(rows)], codes[len(rows):]
    if pd.api.types.is_integer_dtype(both.dtype) and not both.isna().any():
        swapped = rows["output"].to_numpy() > rows["output_b"].to_numpy()
    else:
        swapped = first > second
    low = np.where(swapped, second, first)
    high = np.where(swapped, first, second)
    return low, high, len(uniques), swapped


def in_unit_orientation(rows: pd.DataFrame, kind: AnswerKind | None) -> pd.DataFrame:
    """A pairwise criterion's answers read in their unit's orientation (`unit_keys`): a row
    that showed the pair the other way round has "A" and "B" swapped (a tie stays a tie), so
    two raters who saw (A, B) and (B, A) and preferred the same output agree. Other kinds'
    rows are returned as they are. Only agreement reads answers this way: the preference
    model needs the side each answer was given on (its position effect)."""
    if kind is None or kind.shows != PAIR or rows.empty or "output_b" not in rows:
        return rows
    *_, swapped = pair_sides(rows)
    if not swapped.any():
        return rows
    values = rows["value"]
    flipped = {value: pair_oriented(1, 0, value)[1]
               for value in pd.unique(values[swapped])}
    return rows.assign(value=values.where(~swapped, values.map(flipped)))


def interval_agreement(frame: pd.DataFrame) -> dict[str, Any]:
    """Agreement on a continuous score (sliders; `frame`: unit, rater, value, item):
    Krippendorff's alpha at the interval level with a bootstrap CI over items, and the ICCs.
    Chance-corrected statistics for categories (kappa, AC1) do not apply to a 0-100 scale."""
    if frame.groupby("unit")["rater"].nunique().max() < 2:
        return {"note": "no output was rated by two or more humans"}
    out: dict[str, Any] = {
        "level": "interval", "n_units": int(frame["unit"].nunique()),
        "n_raters": int(frame["rater"].nunique()), "n_ratings": int(len(frame)),
        "bootstrap": {"n_boot": AGREEMENT_N_BOOT, "seed": AGREEMENT_SEED, "cluster": "item"},
        "krippendorff_alpha": agreement.krippendorff_alpha(
            frame, "interval", n_boot=AGREEMENT_N_BOOT, seed=AGREEMENT_SEED, cluster="item"),
    }
    try:
        out["icc"] = agreement.icc(frame, seed=AGREEMENT_SEED)
    except ValueError as error:
        out["icc"] = {"note": str(error), "warnings": [f"ICC not computed: {error}"]}
    return out
