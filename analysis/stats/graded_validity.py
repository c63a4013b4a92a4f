"""Does a metric follow the scores people gave? Validity of metrics and proxy raters against
Likert and slider criteria.

Per output: the mean human score (named raters, and counted votes weighted by their count).
Per metric or proxy rater (a proxy's own score of the output): Pearson, Spearman and Kendall
correlations with the mean human score, each with a bootstrap CI over outputs (`validity.
correlations`); for a Likert criterion also the cumulative link model of every human rating
with the metric as predictor (`rating ~ metric`, the metric standardised so that the
coefficient is the change in log-odds of a higher rating per standard deviation of the
metric); and the human ceiling in the same units: the correlation of one rater's scores
with the mean of the OTHER raters on the same outputs (leave one rater out), averaged over
raters with at least 5 outputs, beside each proxy's correlation with the mean of all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from evalstudy.criteria import KINDS, kind_of

from . import models, validity
from .held_out import held_out_answers

MIN_OUTPUTS = 5


def mean_scores(humans: pd.DataFrame, votes: pd.DataFrame | None) -> pd.DataFrame:
    """Per output: `mean` (human score) and `n` (people), from named ratings and counts."""
    named = pd.DataFrame({"output": humans["output"],
                          "score": pd.to_numeric(humans["value"], errors="coerce"),
                          "weight": 1.0}).dropna()
    parts = [named]
    if votes is not None and not votes.empty:
        parts.append(pd.DataFrame({"output": votes["output"],
                                   "score": pd.to_numeric(votes["value"], errors="coerce"),
                                   "weight": votes["count"].astype(float)}).dropna())
    rows = pd.concat(parts, ignore_index=True)
    rows = rows[rows["weight"] > 0]
    rows["weighted"] = rows["score"] * rows["weight"]
    grouped = rows.groupby("output")[["weighted", "weight"]].sum()
    return pd.DataFrame({"mean": grouped["weighted"] / grouped["weight"],
                         "n": grouped["weight"]})


def ceiling(humans: pd.DataFrame, key: str = "rater") -> dict[str, Any]:
    """One rater against the mean of the others (leave one rater out), Spearman and Pearson,
    averaged over raters with at least MIN_OUTPUTS outputs shared with others."""
    frame = pd.DataFrame({"rater": humans[key], "output": humans["output"],
                          "score": pd.to_numeric(humans["value"], errors="coerce")}).dropna()
    totals = frame.groupby("output")["score"].agg(["sum", "count"])
    values: dict[str, list[float]] = {"spearman": [], "pearson": []}
    for _, mine in frame.groupby("rater"):
        joined = mine.join(totals, on="output")
        others = joined[joined["count"] > 1]
        if len(others) < MIN_OUTPUTS:
            continue
        rest = (others["sum"] - others["score"]) / (others["count"] - 1)
        if np.ptp(others["score"]) == 0 or np.ptp(rest) == 0:
            continue
        values["spearman"].append(float(stats.spearmanr(others["score"], rest).statistic))
        values["pearson"].append(float(stats.pearsonr(others["score"], rest).statistic))
    return {"raters": len(values["spearman"]),
            **{name: float(np.mean(v)) if v else None for name, v in values.items()},
            "method": "each rater vs the mean of the other raters on the same outputs "
                      f"(leave one rater out), mean over raters with >= {MIN_OUTPUTS} outputs"}


def graded_validity(rows: pd.DataFrame, votes: pd.DataFrame | None,
                    metrics: pd.DataFrame | None, criterion: Mapping[str, Any],
                    proxy_raters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`proxy_raters` (the pipeline's option): a proxy rater is correlated only on the
    outputs it may be counted on (`held_out_answers`); its entry says how many it lost."""
    rows, held_out = held_out_answers(rows, proxy_raters)
    kind, key = criterion["kind"], criterion["key"]
    # Ordered points get the ordinal fit of each metric too (a slider's scale is continuous).
    ordered = kind in KINDS and kind_of(kind).level == "ordinal"
    humans = rows[rows["is_human"]]
    human = mean_scores(humans, votes)
    out: dict[str, Any] = {"criterion": key, "kind": kind, "n_outputs": int(len(human)),
                           "proxies": [], "ceiling": ceiling(humans) if len(humans) else None}
    if len(human) < MIN_OUTPUTS:
        out["note"] = f"fewer than {MIN_OUTPUTS} outputs with a human score"
        return out
    scores = pd.DataFrame(index=human.index)
    directions: dict[str, bool] = {}
    if metrics is not None and not metrics.empty:
        indexed = metrics.set_index("output")
        for column, higher in validity.metric_directions(indexed).items():
            scores[column] = indexed[column].reindex(scores.index)
            directions[column] = higher
    for rater, answers in rows[~rows["is_human"]].groupby("rater"):
        score = pd.to_numeric(answers.set_index("output")["value"], errors="coerce")
        scores[f"rater:{rater}"] = score.groupby(level=0).mean().reindex(scores.index)
        directions[f"rater:{rater}"] = True
    for name, higher in directions.items():
        both = pd.DataFrame({"metric": scores[name], "human": human["mean"]}).dropna()
        entry: dict[str, Any] = {"proxy": name, "higher_is_better": higher,
                                 "n_outputs": int(len(both))}
        if name.startswith("rater:"):
            found = held_out.get(name.removeprefix("rater:")) or {}
            entry["n_excluded"] = found.get("n_excluded", 0)
            entry["excluded_because"] = found.get("excluded_because")
        if len(both) < MIN_OUTPUTS or np.ptp(both["metric"]) == 0:
            entry["note"] = "too few outputs with a score, or a constant score"
            out["proxies"].append(entry)
            continue
        try:
            entry["correlations"] = validity.correlations(
                both["metric"].to_numpy(), both["human"].to_numpy(), n_boot=1000, seed=7)
        except ValueError as error:
            entry["note"] = str(error)
        if ordered and not name.startswith("rater:"):
            entry["ordinal"] = _ordinal(humans, scores[name], criterion)
        out["proxies"].append(entry)
    return out


def _ordinal(humans: pd.DataFrame, metric: pd.Series, criterion: Mapping[str, Any]
             ) -> dict[str, Any]:
    """`rating ~ metric` (standardised) on every human rating: a cumulative link model."""
    values = metric.reindex(humans["output"]).to_numpy(dtype=float)
    frame = pd.DataFrame({"rating": pd.to_numeric(humans["value"], errors="coerce").to_numpy(),
                          "metric_z": (values - np.nanmean(values)) / np.nanstd(values)}
                         ).dropna()
    levels = {"rating": list(range(1, int(criterion.get("scale_points") or 5) + 1))}
    try:
        fit = models.fit_clm(frame, "rating ~ metric_z", levels=levels, engine="statsmodels",
                             nominal_test=False)
    except (ValueError, RuntimeError, np.linalg.LinAlgError) as error:
        return {"error": str(error)}
    term = next((c for c in fit.coefficients if c.term == "metric_z"), None)
    return {"estimate": term.estimate if term else None,
            "ci": (term.ci_low, term.ci_high) if term else None,
            "p_value": term.p_value if term else None, "n": fit.n_obs,
            "formula": "rating ~ metric (standardised), " + fit.engine}
