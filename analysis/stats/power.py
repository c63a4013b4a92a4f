"""Power analysis by simulation for a planned binary-judgment study (two systems).

Data-generating model (the binomial GLMM that the study will be analysed with)::

    logit P(y = 1) = baseline + effect * [system == 1] + u_rater + v_item
    u_rater ~ N(0, rater_sd^2),  v_item ~ N(0, item_sd^2)

Design: ``n_items`` items, each with one output per system; each output gets
``ratings_per_output`` judgments. For every item, ``ratings_per_output * 2`` distinct raters
are drawn at random, the first half judging system 0's output and the second half system 1's
(a between-rater Latin-square: no rater sees the same item twice). When there are fewer raters
than that, raters are drawn with replacement (and a warning says that some raters then see an
item in both conditions).

``effect`` is the conditional log-odds difference (system 1 minus system 0), i.e. the
``system`` coefficient of ``glmer(y ~ system + (1|rater) + (1|item))``; ``rater_sd`` and
``item_sd`` are the random-intercept SDs (square roots of ``ModelFit.random_effects``; see
:func:`sds_from_fit`). ``baseline`` is the log-odds of "yes" for system 0 (0 = 50 %).

The FAST test applied to each simulated data set (fitting glmer 1,000 times is too slow):

* ``test="paired_t"`` (default): per item, the proportion of "yes" for system 1 minus that for
  system 0; a two-sided one-sample t test of these item-level differences against 0
  (n_items - 1 df). Items are the pairing unit, so item variance cancels; rater variance adds
  noise (raters differ between the two outputs of an item), which the t test absorbs. Under
  the null its type-I error is close to ``alpha``; its power is close to (usually slightly
  below) that of the GLMM Wald test, so the design it recommends is, if anything, on the safe
  side.
* ``test="logit_cluster"``: logistic regression ``y ~ system`` (statsmodels GLM) with
  cluster-robust SEs by item, Wald z test. About 50x slower; anti-conservative with few items.

Power is the share of simulations with p < ``alpha``, with a Wilson CI. Everything is
deterministic given ``seed`` (``numpy.random.default_rng``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from analysis.stats.descriptives import wilson_ci

__all__ = [
    "BinaryDesign",
    "DesignSearch",
    "PowerResult",
    "power_binary",
    "simulate_binary_study",
    "sds_from_fit",
    "smallest_design",
]

TESTS = ("paired_t", "logit_cluster")
_BATCH_CELLS = 2_000_000  # judgments simulated per batch (bounds memory)


@dataclass
class BinaryDesign:
    """A planned two-system binary-judgment study (see the module docstring)."""

    n_raters: int
    n_items: int
    ratings_per_output: int
    effect: float
    rater_sd: float = 0.0
    item_sd: float = 0.0
    baseline: float = 0.0
    n_systems: int = 2

    def __post_init__(self) -> None:
        if self.n_systems != 2:
            raise ValueError("only two-system designs are supported")
        if self.n_items < 2:
            raise ValueError("need at least 2 items")
        if self.n_raters < 1 or self.ratings_per_output < 1:
            raise ValueError("need at least 1 rater and 1 rating per output")
        if self.rater_sd < 0 or self.item_sd < 0:
            raise ValueError("SDs must be >= 0")

    @property
    def n_judgments(self) -> int:
        return self.n_items * self.n_systems * self.ratings_per_output

    @property
    def latin_square(self) -> bool:
        """True when every item can get distinct raters for all its judgments."""
        return self.n_raters >= self.ratings_per_output * self.n_systems


@dataclass
class PowerResult:
    power: float
    ci_low: float
    ci_high: float
    n_sim: int
    rejections: int
    alpha: float
    test: str
    design: dict[str, Any]
    seed: int | None
    mean_difference: float  # mean over simulations of the observed difference in proportions
    elapsed_s: float
    warnings: list[str] = field(default_factory=list)


@dataclass
class DesignSearch:
    """Result of :func:`smallest_design`: ``value`` is the smallest ``vary`` value meeting the
    target (None if even ``hi`` does not); ``evaluated`` every design tried, by value."""

    target_power: float
    vary: str
    criterion: str
    value: int | None
    result: PowerResult | None
    evaluated: dict[int, PowerResult]


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _simulate_batch(d: BinaryDesign, n: int, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` simulated studies: y (n, items, systems, k) and rater ids of the same shape."""
    k, s, items = d.ratings_per_output, d.n_systems, d.n_items
    per_item = k * s
    if d.latin_square:
        # distinct raters per item: the first `per_item` of a random permutation
        raters = rng.random((n, items, d.n_raters)).argsort(axis=-1)[..., :per_item]
    else:
        raters = rng.integers(0, d.n_raters, size=(n, items, per_item))
    raters = raters.reshape(n, items, s, k)
    u = rng.normal(0.0, d.rater_sd, size=(n, d.n_raters)) if d.rater_sd > 0 else \
        np.zeros((n, d.n_raters))
    v = rng.normal(0.0, d.item_sd, size=(n, items)) if d.item_sd > 0 else np.zeros((n, items))
    eta = (d.baseline
           + d.effect * np.arange(s)[None, None, :, None]
           + np.take_along_axis(u, raters.reshape(n, -1), axis=1).reshape(raters.shape)
           + v[:, :, None, None])
    y = (rng.random(eta.shape) < _expit(eta)).astype(np.int8)
    return y, raters


def simulate_binary_study(design: BinaryDesign, seed: int | np.random.Generator | None = None):
    """One simulated data set as a tidy DataFrame (``y``, ``system``, ``rater``, ``item``),
    e.g. to check the analysis pipeline or to fit a GLMM on it."""
    import pandas as pd

    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    y, raters = _simulate_batch(design, 1, rng)
    _, items, s, k = y.shape
    item_idx, sys_idx, _ = np.meshgrid(np.arange(items), np.arange(s), np.arange(k),
                                       indexing="ij")
    return pd.DataFrame({
        "y": y[0].ravel().astype(int),
        "system": np.array(["A", "B"])[sys_idx.ravel()],
        "rater": [f"r{r}" for r in raters[0].ravel()],
        "item": [f"i{i}" for i in item_idx.ravel()],
    })


def _paired_t_pvalues(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    props = y.mean(axis=3)  # (n, items, systems)
    diff = props[:, :, 1] - props[:, :, 0]
    m = diff.mean(axis=1)
    sd = diff.std(axis=1, ddof=1)
    n_items = diff.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = m / (sd / math.sqrt(n_items))
    p = 2 * sps.t.sf(np.abs(t), df=n_items - 1)
    # zero spread: no evidence when the mean difference is 0, certain otherwise
    p = np.where(sd > 0, p, np.where(m == 0, 1.0, 0.0))
    return p, m


def _logit_cluster_pvalues(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import warnings

    import statsmodels.api as sm

    n, items, s, k = y.shape
    system = np.broadcast_to(np.arange(s)[None, :, None], (items, s, k)).ravel().astype(float)
    item = np.broadcast_to(np.arange(items)[:, None, None], (items, s, k)).ravel()
    X = np.column_stack([np.ones_like(system), system])
    ps, ms = np.empty(n), np.empty(n)
    for i in range(n):
        yi = y[i].ravel().astype(float)
        ms[i] = yi[system == 1].mean() - yi[system == 0].mean()
        if yi.min() == yi.max() or ms[i] in (-1.0, 1.0):
            ps[i] = 1.0 if ms[i] == 0 else 0.0
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = sm.GLM(yi, X, family=sm.families.Binomial()).fit(
                    cov_type="cluster", cov_kwds={"groups": item})
                ps[i] = float(res.pvalues[1])
            except Exception:  # perfect separation etc.
                ps[i] = 0.0 if ms[i] != 0 else 1.0
    return ps, ms


_TEST_FUNCS: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "paired_t": _paired_t_pvalues,
    "logit_cluster": _logit_cluster_pvalues,
}


def power_binary(
    n_raters: int,
    n_items: int,
    ratings_per_output: int,
    effect: float,
    rater_sd: float = 0.0,
    item_sd: float = 0.0,
    *,
    baseline: float = 0.0,
    n_systems: int = 2,
    alpha: float = 0.05,
    n_sim: int = 1000,
    seed: int | None = None,
    test: str = "paired_t",
    conf_level: float = 0.95,
) -> PowerResult:
    """Estimated power (share of simulations rejecting at ``alpha``) with a Wilson CI."""
    if test not in _TEST_FUNCS:
        raise ValueError(f"test must be one of {TESTS}")
    if n_sim < 1:
        raise ValueError("n_sim must be >= 1")
    d = BinaryDesign(n_raters, n_items, ratings_per_output, effect, rater_sd, item_sd,
                     baseline, n_systems)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    batch = max(1, _BATCH_CELLS // max(1, d.n_items * max(d.n_raters, d.n_judgments // n_items)))
    pvals, diffs = [], []
    done = 0
    while done < n_sim:
        n = min(batch, n_sim - done)
        y, _ = _simulate_batch(d, n, rng)
        p, m = _TEST_FUNCS[test](y)
        pvals.append(p)
        diffs.append(m)
        done += n
    p = np.concatenate(pvals)
    rejections = int((p < alpha).sum())
    lo, hi = wilson_ci(rejections, n_sim, conf_level)
    warnings = []
    if not d.latin_square:
        warnings.append(
            f"{n_raters} raters < {ratings_per_output * n_systems} judgments per item: raters "
            "drawn with replacement, some see an item in both conditions")
    return PowerResult(
        power=rejections / n_sim, ci_low=lo, ci_high=hi, n_sim=n_sim, rejections=rejections,
        alpha=alpha, test=test, design=asdict(d), seed=seed,
        mean_difference=float(np.concatenate(diffs).mean()),
        elapsed_s=time.perf_counter() - t0, warnings=warnings,
    )


_VARY = {"items": "n_items", "raters": "n_raters", "ratings_per_output": "ratings_per_output"}


def smallest_design(
    target_power: float,
    vary: str = "items",
    *,
    lo: int | None = None,
    hi: int = 1000,
    criterion: str = "estimate",
    **params: Any,
) -> DesignSearch:
    """Smallest ``vary`` ("items", "raters" or "ratings_per_output") in ``[lo, hi]`` whose
    simulated power reaches ``target_power``.

    ``params`` are the other arguments of :func:`power_binary` (e.g. ``n_raters=40,
    ratings_per_output=3, effect=0.5, rater_sd=0.8, item_sd=1.0, n_sim=500, seed=1``).
    ``criterion="estimate"`` compares the power estimate with the target; ``"ci_low"`` its
    lower Wilson bound (more conservative). Bisection, assuming power increases with the
    varied quantity; every evaluation uses the same ``seed`` (common random numbers), which
    keeps the estimated power curve nearly monotone.
    """
    if vary not in _VARY:
        raise ValueError(f"vary must be one of {sorted(_VARY)}")
    if criterion not in ("estimate", "ci_low"):
        raise ValueError("criterion must be 'estimate' or 'ci_low'")
    if not 0 < target_power < 1:
        raise ValueError("target_power must be in (0, 1)")
    key = _VARY[vary]
    if key in params:
        raise ValueError(f"{key} is what is varied; do not pass it")
    if lo is None:
        lo = 2 if vary == "items" else 1
    if lo > hi:
        raise ValueError("lo must be <= hi")
    evaluated: dict[int, PowerResult] = {}

    def evaluate(v: int) -> PowerResult:
        if v not in evaluated:
            evaluated[v] = power_binary(**{**params, key: v})
        return evaluated[v]

    def ok(r: PowerResult) -> bool:
        return (r.power if criterion == "estimate" else r.ci_low) >= target_power

    if not ok(evaluate(hi)):
        return DesignSearch(target_power, vary, criterion, None, None, dict(sorted(
            evaluated.items())))
    if ok(evaluate(lo)):
        return DesignSearch(target_power, vary, criterion, lo, evaluated[lo],
                            dict(sorted(evaluated.items())))
    a, b = lo, hi  # invariant: a fails, b passes
    while b - a > 1:
        mid = (a + b) // 2
        if ok(evaluate(mid)):
            b = mid
        else:
            a = mid
    return DesignSearch(target_power, vary, criterion, b, evaluated[b],
                        dict(sorted(evaluated.items())))


def sds_from_fit(fit: Any, rater: str = "rater", item: str = "item") -> dict[str, float]:
    """``rater_sd``, ``item_sd`` and ``baseline`` (the intercept) from a pilot
    :class:`~analysis.stats.models.ModelFit` of ``fit_binomial_glmm`` (0 for an absent
    random effect)."""
    re_ = getattr(fit, "random_effects", {}) or {}
    out = {
        "rater_sd": math.sqrt(max(float(re_.get(rater, 0.0)), 0.0)),
        "item_sd": math.sqrt(max(float(re_.get(item, 0.0)), 0.0)),
    }
    for c in getattr(fit, "coefficients", []):
        if c.term == "(Intercept)":
            out["baseline"] = float(c.estimate)
    return out
