"""The outputs a proxy may be compared with the humans on (no Django).

`options["proxy_raters"]` (`analysis.selectors.proxy_raters`) names, per proxy rater, the
outputs it may not be scored on (`exclude_scores`: a learned proxy's training and dev outputs)
and those its decisions may not count on (`exclude_decisions`: the dev split its threshold
was chosen on). A proxy's stored answer is its decision, so every table that compares its
answers with the humans' (the human ceiling, graded and pairwise validity) leaves out both,
as the deployment table does, and says how many it left out and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd


def answers_not_to_count(info: Mapping[str, Any] | None) -> tuple[frozenset, str | None]:
    """The output ids a proxy's answers may not be compared with the humans on, and why."""
    info = info or {}
    excluded: set = set()
    reasons: list[str] = []
    for key in ("exclude_scores", "exclude_decisions"):
        if info.get(key):
            excluded |= set(info[key])
            reasons.append(str(info.get(f"{key}_because") or f"outputs listed in {key}"))
    return frozenset(excluded), "; ".join(reasons) or None


def held_out_answers(rows: pd.DataFrame, infos: Mapping[str, Any] | None
                     ) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """`rows` less each proxy rater's answers on outputs it may not be counted on (a pair is
    left out when either of its outputs is), and per proxy rater name the number of units
    (distinct outputs or pairs it answered) left out and why. Humans' rows are kept."""
    left_out: dict[str, dict[str, Any]] = {}
    if not infos or rows.empty:
        return rows, left_out
    drop = pd.Series(False, index=rows.index)
    proxies = rows[~rows["is_human"].astype(bool)]
    for rater, answers in proxies.groupby("rater"):
        excluded, because = answers_not_to_count(infos.get(str(rater)))
        if not excluded:
            continue
        hit = answers["output"].isin(list(excluded))
        if "output_b" in answers.columns:
            hit |= answers["output_b"].isin(list(excluded))
        units = ["output", "output_b"] if "output_b" in answers.columns else ["output"]
        left_out[str(rater)] = {
            "n_excluded": int(len(answers.loc[hit, units].drop_duplicates())),
            "excluded_because": because}
        drop.loc[hit[hit].index] = True
    return rows[~drop], left_out
