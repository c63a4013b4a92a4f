"""The whole analysis of a study, step by step: the design, each criterion's families, the
validity of metrics and proxies, power (no Django here; see the package's docstring)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pandas as pd

from kit.jsonable import to_jsonable

from .. import descriptives
from ..covariates import with_covariates
from ..formulas import check_formulas
from ..rbridge import r_available, r_unavailable_reason, r_versions
from ..votes import VOTE_COLUMNS, design_with_votes, votes_summary
from .families import analyse_criterion, analyse_validity
from .rater_agreement import declared_categories
from .sections import Progress, run_section, silent


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
    progress = progress or silent
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
        analysed = analyse_criterion(rows, criterion, options, warnings, progress)
        counted = votes[votes["criterion"] == criterion["key"]]
        if not counted.empty:
            run_section(analysed, "votes", warnings, partial(
                votes_summary, counted, criterion, warnings, run_section,
                declared_categories(criterion)))
        result["criteria"].append(analysed)
    for criterion in criteria:
        result["validity"] += analyse_validity(judgments, votes, metrics, criterion, options,
                                               warnings, progress)
    if options.get("power"):
        progress("power analysis")
        import inspect

        from .. import power

        # Simulations refit the analysis model (minutes): a progress callback that takes
        # `advance` (the analysis run's) shows "done/total simulations" within this step.
        try:
            detail = "advance" in inspect.signature(progress).parameters
        except (TypeError, ValueError):
            detail = False

        def simulations_done(done: int, total: int) -> None:
            if detail:
                progress(f"power analysis: {done}/{total} simulations", advance=False)

        run_section(result, "power", warnings, lambda: power.run_option(
            options["power"], result["criteria"], progress=simulations_done))
    result["warnings"] = warnings
    result["seconds"] = round(time.perf_counter() - started, 3)
    return to_jsonable(result)
