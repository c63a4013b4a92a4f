"""The analysis of the answer kinds that are neither categories nor Likert points: sliders
(direct assessment), error spans (MQM, ESA), rankings and best-worst scaling (no Django here).
`pipeline.analyse_criterion` hands them here with its section runner, so that each section
fails on its own as the others do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from evalstudy.criteria import MQM_DEFAULT_WEIGHTS

from . import agreement, descriptives, models, rankings, spans

KINDS = ("slider", "span", "ranking", "best_worst")
AGREEMENT_N_BOOT = agreement.N_BOOT
AGREEMENT_SEED = 20240917


def analyse(kind: str, result: dict[str, Any], rows: pd.DataFrame, humans: pd.DataFrame,
            criterion: dict[str, Any], *, formula: str | None, engine: str,
            warnings: list[str], section: Callable[..., None],
            model_frame: Callable[..., pd.DataFrame],
            rater_keys: Callable[[pd.DataFrame], tuple[str, Any]]) -> None:
    """Fill `result` with the sections of one criterion of `kind` (one of KINDS)."""
    if kind == "slider":
        frame = model_frame(humans, "score", pd.to_numeric(humans["value"]).astype(float))
        fits: dict[str, Any] = {}
        section(result, "slider", warnings,
                lambda: descriptives.slider_summary(frame, value="score", by="system"))
        section(result, "lmm", warnings, lambda: fits.setdefault("lmm", models.fit_lmm(
            frame, formula or models.for_frame(models.DEFAULT_LMM_FORMULA, frame), engine=engine)))
        if frame["system"].nunique() > 2 and "lmm" in fits:
            section(result, "contrasts", warnings,
                    lambda: models.pairwise_contrasts(fits["lmm"], "system"))
        key, _ = rater_keys(humans)
        section(result, "agreement", warnings, lambda: interval_agreement(pd.DataFrame({
            "unit": humans["unit"], "rater": humans[key],
            "value": pd.to_numeric(humans["value"]).astype(float), "item": humans["item"]})))
    elif kind == "span":
        weights = criterion.get("severity_weights") or dict(MQM_DEFAULT_WEIGHTS)
        section(result, "mqm", warnings, lambda: spans.mqm_summary(humans, weights))
        sides = ("output", "reference") if criterion.get("span_reference") else ("output",)
        section(result, "span_agreement", warnings,
                lambda: spans.span_agreement(humans, sides=sides))
    elif kind == "ranking":
        ordered = rankings.rankings_of(humans)
        section(result, "ranks", warnings, lambda: rankings.rank_summary(ordered))
        section(result, "plackett_luce", warnings, lambda: rankings.plackett_luce(ordered))
    elif kind == "best_worst":
        section(result, "best_worst", warnings, lambda: rankings.bws_scores(humans))
    else:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")


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
