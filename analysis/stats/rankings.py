"""Rankings and best-worst scaling (no Django here).

Input: human judgments of one ranking or best-worst criterion, with `value` as stored
(`evalstudy.criteria`: "B>A>C", "best=A;worst=C") and `shown`, the systems in the order the
outputs were shown (a JSON list: the first is A, the second B, ...), plus `item`, `rater`.

Rankings: the Plackett-Luce model (Luce 1959; Plackett 1975), maximum likelihood. A ranking
s1 > s2 > ... > sk of the outputs shown has probability prod_j w_sj / sum_{m>=j} w_sm; with
log-worths theta (the reference system's fixed at 0) the fit is the rank-ordered ("exploded")
conditional logit, so R's survival::clogit on the exploded choices gives the same estimates
and standard errors (pinned in the tests). SEs come from the observed information; a system
ranked above (or below) the rest every time they met has no finite estimate (the "ranked
above" graph is not strongly connected, Hunter 2004), which the result says. With two
outputs per ranking this is the Bradley-Terry model.

Best-worst scaling: the counting scores of Orme (2009) and Kiritchenko & Mohammad (2017),
(times best - times worst) / times shown, from -1 to 1, with percentile bootstrap CIs that
resample items (every judgment of an item together).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from evalstudy.criteria import LETTERS, best_worst_of, ranking_of

N_BOOT = 2000
SEED = 20240917


def _shown(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(v) for v in json.loads(value)] if isinstance(value, str) and value else []


def rankings_of(judgments: pd.DataFrame) -> list[list[str]]:
    """Each judgment's ranking as system names, best first."""
    out = []
    for value, shown in zip(judgments["value"], judgments["shown"], strict=True):
        systems = dict(zip(LETTERS, _shown(shown), strict=False))
        out.append([systems[letter] for letter in ranking_of(str(value))])
    return out


def _loglik(theta: np.ndarray, stages: list[tuple[int, np.ndarray]]) -> tuple[float, np.ndarray,
                                                                               np.ndarray]:
    """Log-likelihood, gradient and Hessian of the Plackett-Luce model at `theta`. Each stage
    is (the index chosen, the indices still available, the chosen one among them)."""
    ll = 0.0
    grad = np.zeros_like(theta)
    hess = np.zeros((len(theta), len(theta)))
    for chosen, available in stages:
        logits = theta[available]
        top = logits.max()
        weights = np.exp(logits - top)
        p = weights / weights.sum()
        ll += theta[chosen] - (top + math.log(weights.sum()))
        grad[chosen] += 1.0
        grad[available] -= p
        hess[np.ix_(available, available)] -= np.diag(p) - np.outer(p, p)
    return ll, grad, hess


def plackett_luce(rankings: Sequence[Sequence[str]], *, reference: str | None = None,
                  conf_level: float = 0.95) -> dict[str, Any]:
    """Plackett-Luce log-worths of the systems (`reference`, by default the first in sorted
    order, at 0) with Wald SEs and CIs, and each system's worth as a share of the total (the
    probability of being ranked first among all systems)."""
    systems = sorted({s for ranking in rankings for s in ranking})
    if len(systems) < 2:
        raise ValueError("rankings of fewer than two systems")
    index = {s: i for i, s in enumerate(systems)}
    groups = _strong_groups(rankings, index)
    largest = max(set(groups), key=lambda g: (list(groups).count(g), -list(groups).index(g)))
    if reference not in systems:
        reference = next(s for s in systems if groups[index[s]] == largest)
    stages = []
    for ranking in rankings:
        order = [index[s] for s in ranking]
        for j in range(len(order) - 1):
            stages.append((order[j], np.array(order[j:])))
    free = [i for i, s in enumerate(systems) if s != reference]

    def negative(params: np.ndarray) -> tuple[float, np.ndarray]:
        theta = np.zeros(len(systems))
        theta[free] = params
        ll, grad, _ = _loglik(theta, stages)
        return -ll, -grad[free]

    fit = optimize.minimize(negative, np.zeros(len(free)), jac=True, method="BFGS",
                            options={"gtol": 1e-9, "maxiter": 2000})
    theta = np.zeros(len(systems))
    theta[free] = fit.x
    ll, _, hess = _loglik(theta, stages)
    warnings = []
    # Maximum likelihood is finite only when every group of systems was ranked above the rest
    # at least once and below it at least once (Hunter 2004): the "ranked above" graph is
    # strongly connected. Systems outside the reference's group have no finite log-worth.
    home = groups[index[reference]]
    separated = [s for s in systems if groups[index[s]] != home]
    try:
        cov = np.linalg.inv(-hess[np.ix_(free, free)])
        se_free = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        se_free = np.full(len(free), math.nan)
        warnings.append("the information matrix is singular: some systems are never compared "
                        "with the others (standard errors not available)")
    if separated:
        group = ", ".join(s for s in systems if groups[index[s]] == home)
        warnings.append(
            f"{', '.join(separated)}: always ranked above, or always below, the systems "
            f"ranked both ways against {reference} ({group}), or never shown with them: "
            "log-worths relative to them have no finite estimate (shown without intervals)")
    z = float(sps.norm.ppf(0.5 + conf_level / 2))
    se = dict(zip([systems[i] for i in free], se_free, strict=True))
    worth = np.exp(theta - theta.max())
    share = worth / worth.sum()
    rows: list[dict[str, Any]] = []
    for i, system in enumerate(systems):
        s = se.get(system)
        reliable = system not in separated and (s is None or math.isfinite(s))
        rows.append({
            "system": system, "log_worth": float(theta[i]),
            "se": None if s is None or not math.isfinite(s) else float(s),
            "ci_low": None if s is None or not reliable else float(theta[i] - z * s),
            "ci_high": None if s is None or not reliable else float(theta[i] + z * s),
            "p_value": None if s is None or not reliable or s == 0
            else float(2 * sps.norm.sf(abs(theta[i] / s))),
            "worth_share": float(share[i]), "reference": system == reference,
            "reliable": reliable,
        })
    rows.sort(key=lambda r: -float(r["log_worth"]))
    return {"systems": rows, "reference": reference, "n_rankings": len(rankings),
            "loglik": float(ll), "converged": bool(fit.success) and not separated,
            "conf_level": conf_level, "warnings": warnings,
            "method": "Plackett-Luce maximum likelihood (rank-ordered logit); Wald intervals "
                      "from the observed information"}


def _strong_groups(rankings: Sequence[Sequence[str]], index: dict[str, int]) -> np.ndarray:
    """The strongly connected components of the "ranked above" graph: a label per system."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rows, cols = [], []
    for ranking in rankings:
        order = [index[s] for s in ranking]
        for i, above in enumerate(order):
            for below in order[i + 1:]:
                rows.append(above)
                cols.append(below)
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(index), len(index)))
    _, labels = connected_components(graph, directed=True, connection="strong")
    return labels


def rank_summary(rankings: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """Per system: times shown, mean rank (1 = best), share ranked first and last."""
    shown: dict[str, list[int]] = {}
    sizes: dict[str, list[int]] = {}
    for ranking in rankings:
        for rank, system in enumerate(ranking, start=1):
            shown.setdefault(system, []).append(rank)
            sizes.setdefault(system, []).append(len(ranking))
    rows: list[dict[str, Any]] = []
    for system, ranks in shown.items():
        r, k = np.array(ranks), np.array(sizes[system])
        rows.append({"system": system, "n": int(len(r)), "mean_rank": float(r.mean()),
                     "first": float((r == 1).mean()), "last": float((r == k).mean())})
    return sorted(rows, key=lambda row: row["mean_rank"])


def bws_scores(judgments: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = SEED,
               conf_level: float = 0.95) -> dict[str, Any]:
    """Best-worst counting scores per system, (best - worst) / shown, with percentile
    bootstrap CIs over items."""
    records = []
    for value, shown, item in zip(judgments["value"], judgments["shown"], judgments["item"],
                                  strict=True):
        best, worst = best_worst_of(str(value))
        for letter, system in zip(LETTERS, _shown(shown), strict=False):
            records.append((item, system, letter == best, letter == worst))
    frame = pd.DataFrame(records, columns=["item", "system", "best", "worst"])
    if frame.empty:
        raise ValueError("no best-worst judgments")
    per_item = frame.groupby(["item", "system"]).agg(
        shown=("best", "size"), best=("best", "sum"), worst=("worst", "sum"))
    systems = sorted(frame["system"].unique())
    items = per_item.index.get_level_values("item").unique()
    counts = per_item.unstack("system", fill_value=0)
    shown_m = counts["shown"].reindex(columns=systems, fill_value=0).to_numpy(dtype=float)
    net_m = (counts["best"] - counts["worst"]).reindex(columns=systems,
                                                        fill_value=0).to_numpy(dtype=float)
    totals = per_item.groupby("system").sum()
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(items), size=(n_boot, len(items)))
    # Each replicate: the items drawn (with replacement), all their judgments together.
    weights = np.stack([np.bincount(row, minlength=len(items)) for row in draws])
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ net_m) / (weights @ shown_m)
    alpha = (1 - conf_level) / 2
    rows: list[dict[str, Any]] = []
    for j, system in enumerate(systems):
        t = totals.loc[system]
        score = float((t["best"] - t["worst"]) / t["shown"])
        valid = boot[:, j][np.isfinite(boot[:, j])]
        low, high = ((float(np.quantile(valid, alpha)), float(np.quantile(valid, 1 - alpha)))
                     if len(items) > 1 and len(valid) else (None, None))
        rows.append({"system": system, "shown": int(t["shown"]), "best": int(t["best"]),
                     "worst": int(t["worst"]), "score": score, "ci_low": low, "ci_high": high})
    rows.sort(key=lambda r: -float(r["score"]))
    return {"systems": rows, "n_judgments": int(len(judgments)), "n_items": int(len(items)),
            "bootstrap": {"n_boot": n_boot, "seed": seed, "cluster": "item"},
            "method": "best-worst counting scores (best - worst) / shown, from -1 to 1; "
                      "percentile bootstrap over items"}

