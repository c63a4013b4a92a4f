"""Power analysis by simulation for a planned two-system study, with the analysis's own model.

Data-generating model: the model the study will be analysed with (analysis/stats/models/).

* Binary judgments (:class:`BinaryDesign`): the binomial GLMM ::

      logit P(y = 1) = baseline + effect * [system == B] + u_rater + v_item
      u_rater ~ N(0, rater_sd^2),  v_item ~ N(0, item_sd^2)

* Likert ratings (:class:`LikertDesign`): the cumulative link mixed model (R ``ordinal``) ::

      logit P(rating <= j) = theta_j - (effect * [system == B] + u_rater + v_item)

  with the pilot's thresholds ``theta_1 < ... < theta_(K-1)`` (ratings 1..K).

``effect`` is the conditional difference system B minus system A on the model's scale (the
``systemB`` coefficient); ``rater_sd``/``item_sd`` are the random-intercept SDs, ``baseline``
the intercept, ``thresholds`` the cut points: a pilot's fit gives them (:func:`sds_from_fit`,
:func:`pilot_from_fit`).

Design: ``n_items`` items, each with one output per system; each output gets
``ratings_per_output`` judgments. For every item, ``2 * ratings_per_output`` distinct raters
are drawn at random, the first half judging system A's output, the second half system B's (a
between-rater Latin square: no rater sees the same item twice). With fewer raters than that,
raters are drawn with replacement (and a warning says that some raters then see an item in
both conditions).

Tests (``test=``):

* ``"glmm"`` (binary, default) / ``"clmm"`` (Likert, default): each simulated study is refitted
  with the analysis model, ``y ~ system + (1|rater) + (1|item)`` by ``lme4::glmer`` (binomial,
  Laplace) or ``rating ~ system + (1|rater) + (1|item)`` by ``ordinal::clmm``, and the
  ``systemB`` coefficient's Wald z test is the test (the p-value the report prints). The
  refits run in the R worker (:mod:`analysis.stats.rbridge`), one request per chunk of
  ``chunk_size`` studies. A refit that fails (an R error, a non-convergence message, a
  non-finite SE: the models' rule for ``ModelFit.converged``) counts as NOT
  significant: the analysis would not report a converged effect from it. ``n_failed`` says
  how many, and ``power_converged`` gives the share among the others.
* ``"paired_t"``: a fast screen, NOT the analysis model: per item, the mean of system B's
  judgments minus system A's; a one-sample t test of these differences (n_items - 1 df). No
  refit, no R; its power is close to (usually below) the model's.
* ``"logit_cluster"`` (binary only): logistic regression with cluster-robust SEs by item
  (statsmodels); anti-conservative with few items.

Reproducibility: simulation ``i`` draws from its own generator,
``numpy.random.default_rng(SeedSequence(seed, spawn_key=(i,)))``, so every study, hence the
result, depends only on ``seed`` and ``i``: not on the chunk size, the number of R processes,
nor R's random number generator (the data are simulated in Python; R only refits). The same
seed gives the same studies to every test (common random numbers). Without a seed one is
drawn and reported (``PowerResult.seed``).

Power is the share of simulations with p < ``alpha`` with a Wilson CI at ``conf_level``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from analysis.stats.descriptives import wilson_ci
from evalstudy.criteria import KINDS, kind_of, kinds_where

__all__ = [
    "BinaryDesign",
    "DesignSearch",
    "LikertDesign",
    "PowerResult",
    "pilot_from_fit",
    "power_binary",
    "power_likert",
    "sds_from_fit",
    "simulate_binary_study",
    "simulate_likert_study",
    "smallest_design",
]

BINARY_TESTS = ("glmm", "paired_t", "logit_cluster")
LIKERT_TESTS = ("clmm", "paired_t")
TESTS = tuple(dict.fromkeys(BINARY_TESTS + LIKERT_TESTS))
#: The default models a pilot criterion's fit can come from (the simulations model ordered
#: points and binary decisions), and the kinds fitted with them.
PILOT_MODELS = ("clmm", "glmm")
PILOT_KINDS = kinds_where(lambda kind: kind.model in PILOT_MODELS)


def pilot_model(kind_name: Any) -> str | None:
    """The model of a pilot criterion of this kind ("clmm" or "glmm"), None when it has none
    a simulation can use."""
    model = kind_of(kind_name).model if kind_name in KINDS else None
    return model if model in PILOT_MODELS else None
#: Tests that refit the analysis model in R (slow: about 0.05-0.2 s per glmer refit and
#: 1-1.5 s per clmm refit at pilot sizes, on one core).
MODEL_TESTS = ("glmm", "clmm")
#: Studies refitted per R request: large enough that the request's overhead (writing and
#: reading the chunk, about 20 ms) is small, small enough for frequent progress reports.
DEFAULT_CHUNK_SIZE = 25
#: What a failed refit counts as.
FAILED_POLICY = "counted as not significant"
Progress = Callable[[int, int], None]


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
class LikertDesign(BinaryDesign):
    """A planned two-system Likert study: ``thresholds`` are the K-1 increasing cut points of
    the cumulative logit model (ratings 1..K; a pilot's ``fit_clmm`` thresholds), ``effect``
    the latent-scale difference B - A. ``baseline`` is unused (the thresholds place the scale)."""

    thresholds: tuple[float, ...] = (-1.5, -0.5, 0.5, 1.5)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.thresholds = tuple(float(t) for t in self.thresholds)
        if len(self.thresholds) < 1 or any(
                b <= a for a, b in zip(self.thresholds, self.thresholds[1:], strict=False)):
            raise ValueError("thresholds must be at least one increasing cut point")


@dataclass
class PowerResult:
    """Estimated power of one design.

    ``power`` = ``rejections`` / ``n_sim`` (failed refits count as not significant, see
    ``failed_policy``), Wilson CI ``ci_low``-``ci_high`` at ``conf_level``; ``power_converged``
    the share among refits that did not fail (None when all failed or for tests without a
    refit). ``test``: ``"glmm"``, ``"clmm"``, ``"paired_t"`` or ``"logit_cluster"``; ``model``
    says in words what was simulated and what was refitted or tested, ``engine`` what ran it.
    ``design``: the design's fields plus ``"outcome"`` (``"binary"`` or ``"likert"``).
    ``seed``: the seed used (drawn and reported when none was given). ``mean_difference``:
    the mean over simulations of the observed difference B - A (proportions of "yes" or mean
    ratings); ``mean_estimate``: the mean ``systemB`` estimate of the refits that did not fail.
    ``n_failed``, ``n_singular``: refits that failed / had a random-effect variance of ~0;
    ``failure_messages``: up to 5 distinct reasons. ``chunk_size``, ``n_chunks``: how the
    refits were sent to R (chunks run by this call); ``elapsed_s`` wall time,
    ``seconds_per_simulation``. ``stopped_early``: a design-search step that stopped once its
    CI lay on one side of the target (``n_sim`` is then the number run).
    ``pilot``: where the variance components came from (see :func:`pilot_from_fit`), with
    the pilot fit's warnings, or None. ``simulations``: per simulation ``{"sim", "p",
    "estimate", "se", "failed", "singular"}`` only with ``keep_simulations=True``.
    """

    power: float
    ci_low: float
    ci_high: float
    n_sim: int
    rejections: int
    alpha: float
    test: str
    design: dict[str, Any]
    seed: int | None
    mean_difference: float
    elapsed_s: float
    warnings: list[str] = field(default_factory=list)
    model: str = ""
    engine: str = ""
    conf_level: float = 0.95
    ci_method: str = "Wilson score interval"
    n_failed: int = 0
    failed_policy: str = FAILED_POLICY
    power_converged: float | None = None
    n_singular: int = 0
    failure_messages: list[str] = field(default_factory=list)
    mean_estimate: float | None = None
    chunk_size: int | None = None
    n_chunks: int = 1
    seconds_per_simulation: float = 0.0
    stopped_early: bool = False
    pilot: dict[str, Any] | None = None
    simulations: list[dict[str, Any]] | None = None


@dataclass
class DesignSearch:
    """Result of :func:`smallest_design`.

    ``value``: the smallest ``vary`` value found whose power meets the target (None if even
    ``hi`` does not), within ``resolution``: the search stops when the passing value and the
    largest failing value evaluated are at most ``max(1, resolution * value)`` apart
    (``failing_below``: that failing value, or None). ``evaluated``: every step of the search,
    by value, each with at most ``n_sim_per_step`` simulations (fewer when it stopped early,
    see ``PowerResult.stopped_early``; the ``start`` value with ``n_sim``); ``result``: the
    chosen value evaluated with ``n_sim`` simulations (the figure to report; None when no
    value passed). ``search``: how the search went, in words. ``warnings`` (e.g. the final
    estimate falling below the target by Monte Carlo noise).
    """

    target_power: float
    vary: str
    criterion: str
    value: int | None
    result: PowerResult | None
    evaluated: dict[int, PowerResult]
    n_sim: int = 0
    n_sim_per_step: int = 0
    resolution: float = 0.0
    failing_below: int | None = None
    search: str = ""
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# simulation


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _generator(seed: int, sim: int) -> np.random.Generator:
    """Simulation ``sim``'s own generator: the ``sim``-th child of ``SeedSequence(seed)``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(sim,)))


def _simulate(d: BinaryDesign, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One study: outcomes (items, systems, k) (0/1, or ratings 1..K for a LikertDesign) and
    rater ids of the same shape."""
    k, s, items = d.ratings_per_output, d.n_systems, d.n_items
    per_item = k * s
    if d.latin_square:
        # distinct raters per item: the first `per_item` of a random permutation
        raters = rng.random((items, d.n_raters)).argsort(axis=-1)[:, :per_item]
    else:
        raters = rng.integers(0, d.n_raters, size=(items, per_item))
    raters = raters.reshape(items, s, k)
    u = rng.normal(0.0, d.rater_sd, size=d.n_raters) if d.rater_sd > 0 else np.zeros(d.n_raters)
    v = rng.normal(0.0, d.item_sd, size=items) if d.item_sd > 0 else np.zeros(items)
    eta = d.effect * np.arange(s)[None, :, None] + u[raters] + v[:, None, None]
    if isinstance(d, LikertDesign):
        latent = eta + rng.logistic(size=eta.shape)
        # rating j + 1 when theta_j < latent <= theta_(j+1): P(rating <= j) = expit(theta_j - eta)
        out = (1 + (latent[..., None] > np.asarray(d.thresholds)).sum(axis=-1)).astype(np.int16)
    else:
        out = (rng.random(eta.shape) < _expit(d.baseline + eta)).astype(np.int8)
    return out, raters


def _frame(d: BinaryDesign, outcome: np.ndarray, raters: np.ndarray, sim: int | None = None):
    import pandas as pd

    items, s, k = outcome.shape
    item_idx, sys_idx, _ = np.meshgrid(np.arange(items), np.arange(s), np.arange(k),
                                       indexing="ij")
    response = "rating" if isinstance(d, LikertDesign) else "y"
    columns: dict[str, Any] = {} if sim is None else {"sim": np.full(outcome.size, sim)}
    columns.update({
        response: outcome.ravel().astype(int),
        "system": pd.Categorical(np.array(["A", "B"])[sys_idx.ravel()], categories=["A", "B"]),
        "rater": raters.ravel().astype(int),
        "item": item_idx.ravel().astype(int),
    })
    return pd.DataFrame(columns)


def simulate_binary_study(design: BinaryDesign, seed: int | None = None, sim: int = 0):
    """Simulated study ``sim`` of ``seed`` (the one :func:`power_binary` refits) as a tidy
    DataFrame: ``y``, ``system`` (A/B), ``rater`` ("r<id>"), ``item`` ("i<id>")."""
    return _tidy(design, seed, sim)


def simulate_likert_study(design: LikertDesign, seed: int | None = None, sim: int = 0):
    """As :func:`simulate_binary_study` for a :class:`LikertDesign` (``rating`` 1..K)."""
    return _tidy(design, seed, sim)


def _tidy(design: BinaryDesign, seed: int | None, sim: int):
    outcome, raters = _simulate(design, _generator(_seed(seed), sim))
    frame = _frame(design, outcome, raters)
    frame["system"] = frame["system"].astype(str)
    frame["rater"] = "r" + frame["rater"].astype(str)
    frame["item"] = "i" + frame["item"].astype(str)
    return frame


def _seed(seed: int | None) -> int:
    if seed is None:
        # drawn from the OS, and reported so that the run can be repeated
        return int(np.random.SeedSequence().generate_state(1)[0])
    if int(seed) < 0:
        raise ValueError("seed must be >= 0")
    return int(seed)


# --------------------------------------------------------------------------------------------
# tests


def _paired_t_pvalues(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    means = y.mean(axis=3)  # (n, items, systems)
    diff = means[:, :, 1] - means[:, :, 0]
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


_SCREENS: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "paired_t": _paired_t_pvalues,
    "logit_cluster": _logit_cluster_pvalues,
}


def _model_text(d: BinaryDesign, test: str) -> str:
    if isinstance(d, LikertDesign):
        sim = ("simulated: cumulative logit, logit P(rating <= j) = theta_j - (effect * "
               "[system B] + u_rater + v_item), thresholds "
               f"{', '.join(f'{t:g}' for t in d.thresholds)}")
    else:
        sim = ("simulated: binomial GLMM, logit P(yes) = baseline + effect * [system B] + "
               "u_rater + v_item")
    sim += f"; effect {d.effect:g}, rater SD {d.rater_sd:g}, item SD {d.item_sd:g}"
    fitted = {
        "glmm": "refitted: lme4::glmer(y ~ system + (1|rater) + (1|item), binomial, Laplace); "
                "Wald z test of systemB (the analysis's model and test)",
        "clmm": "refitted: ordinal::clmm(rating ~ system + (1|rater) + (1|item), logit); "
                "Wald z test of systemB (the analysis's model and test)",
        "paired_t": "tested: paired t test of per-item mean differences (a fast screen, NOT "
                    "the analysis's model)",
        "logit_cluster": "tested: logistic regression with cluster-robust SEs by item (NOT "
                         "the analysis's model)",
    }[test]
    return f"{sim}; {fitted}"


@dataclass
class _Sims:
    """Per-simulation outcomes of one design (index = simulation number)."""

    p: np.ndarray
    diffs: np.ndarray
    est: np.ndarray
    se: np.ndarray
    failed: np.ndarray
    singular: np.ndarray
    messages: list[str]  # why each failed refit failed ("" for the others)
    engine: str = "numpy + scipy (no refit)"
    n_chunks: int = 0

    @classmethod
    def empty(cls) -> _Sims:
        return cls(np.empty(0), np.empty(0), np.empty(0), np.empty(0),
                   np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), [])

    def __len__(self) -> int:
        return len(self.p)

    def extend(self, other: _Sims) -> None:
        for name in ("p", "diffs", "est", "se", "failed", "singular"):
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))
        self.messages += other.messages
        self.engine = other.engine
        self.n_chunks += other.n_chunks


def _power_ci(rejections: int, n_sim: int, conf_level: float) -> tuple[float, float]:
    """Wilson CI of the power from ``n_sim`` >= 1 simulations."""
    ci = wilson_ci(rejections, n_sim, conf_level)
    if ci is None:
        raise ValueError("a power estimate needs at least one simulation")
    return ci


def _run(d: BinaryDesign, *, test: str, alpha: float, n_sim: int, seed: int | None,
         conf_level: float, chunk_size: int | None, cores: int, progress: Progress | None,
         keep_simulations: bool, pilot: Mapping[str, Any] | None,
         decide: float | None = None, resume: _Sims | None = None
         ) -> tuple[PowerResult, _Sims]:
    """Simulations ``0..n_sim-1`` of design ``d``. ``resume``: the outcomes of the first
    simulations, already computed (the same studies: they depend only on the seed and their
    number), which are not run again. ``decide``: a target power; the run stops after the
    chunk at which the Wilson CI of the power so far lies wholly above or below it (the
    design search's steps: a design far from the target is settled by a few simulations)."""
    if n_sim < 1:
        raise ValueError("n_sim must be >= 1")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    seed = _seed(seed)
    t0 = time.perf_counter()
    model_test = test in MODEL_TESTS
    chunk = int(chunk_size or (DEFAULT_CHUNK_SIZE if model_test else 500))
    if chunk < 1:
        raise ValueError("chunk_size must be >= 1")
    sims = _Sims.empty()
    if resume is not None:
        sims.extend(resume)
        sims.n_chunks = 0
    stopped_early = False
    while len(sims) < n_sim:
        block = range(len(sims), min(len(sims) + chunk, n_sim))
        sims.extend(_simulate_chunk(d, test, seed, block, cores))
        if progress is not None:
            progress(block.stop, n_sim)
        if decide is not None and len(sims) < n_sim:
            lo, hi = _power_ci(int(((sims.p < alpha) & ~sims.failed).sum()), len(sims),
                               conf_level)
            if hi < decide or lo >= decide:
                stopped_early = True
                break
    sims = _Sims(sims.p[:n_sim], sims.diffs[:n_sim], sims.est[:n_sim], sims.se[:n_sim],
                 sims.failed[:n_sim], sims.singular[:n_sim], sims.messages[:n_sim],
                 sims.engine, sims.n_chunks)
    return _result(d, test, sims, alpha=alpha, seed=seed, conf_level=conf_level, chunk=chunk,
                   elapsed=time.perf_counter() - t0, keep=keep_simulations, pilot=pilot,
                   stopped_early=stopped_early), sims


def _simulate_chunk(d: BinaryDesign, test: str, seed: int, block: range, cores: int) -> _Sims:
    studies = [_simulate(d, _generator(seed, i)) for i in block]
    outcomes = np.stack([o for o, _ in studies])
    diffs = outcomes[:, :, 1].mean(axis=(1, 2)) - outcomes[:, :, 0].mean(axis=(1, 2))
    n = len(block)
    if test not in MODEL_TESTS:
        return _Sims(_SCREENS[test](outcomes)[0], diffs, np.full(n, np.nan),
                     np.full(n, np.nan), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool),
                     [""] * n, n_chunks=1)
    out, engine = _refit_chunk(d, test, studies, block, cores)
    # a failed refit gets p = 1: never a rejection
    return _Sims(np.where(out["failed"], 1.0, out["p"]), diffs, out["estimate"], out["se"],
                 out["failed"], out["singular"],
                 [m if f else "" for m, f in zip(out["message"], out["failed"], strict=True)],
                 engine, 1)


def _result(d: BinaryDesign, test: str, sims: _Sims, *, alpha: float, seed: int,
            conf_level: float, chunk: int, elapsed: float, keep: bool,
            pilot: Mapping[str, Any] | None, stopped_early: bool) -> PowerResult:
    n_sim = len(sims)
    model_test = test in MODEL_TESTS
    reject = (sims.p < alpha) & ~sims.failed
    rejections = int(reject.sum())
    lo, hi = _power_ci(rejections, n_sim, conf_level)
    n_failed = int(sims.failed.sum())
    warnings: list[str] = []
    if not d.latin_square:
        warnings.append(
            f"{d.n_raters} raters < {d.ratings_per_output * d.n_systems} judgments per item: "
            "raters drawn with replacement, some see an item in both conditions")
    if n_failed:
        reasons = [m for m in sims.messages if m]
        warnings.append(f"{n_failed} of {n_sim} refits failed (did not converge or errored), "
                        f"{FAILED_POLICY}; e.g. {reasons[0]}")
    if stopped_early:
        warnings.append(f"stopped after {n_sim} simulations: the {conf_level:.0%} CI already "
                        "lay wholly on one side of the target power")
    ok = ~sims.failed
    design = {**asdict(d), "outcome": "likert" if isinstance(d, LikertDesign) else "binary"}
    if "thresholds" in design:
        design["thresholds"] = list(design["thresholds"])
        design.pop("baseline")
    return PowerResult(
        power=rejections / n_sim, ci_low=lo, ci_high=hi, n_sim=n_sim, rejections=rejections,
        alpha=alpha, test=test, design=design, seed=seed,
        mean_difference=float(sims.diffs.mean()), elapsed_s=elapsed, warnings=warnings,
        model=_model_text(d, test), engine=sims.engine, conf_level=conf_level,
        n_failed=n_failed,
        power_converged=(float(reject[ok].mean()) if model_test and ok.any() else None),
        n_singular=int(sims.singular.sum()),
        failure_messages=list(dict.fromkeys(m for m in sims.messages if m))[:5],
        mean_estimate=float(np.mean(sims.est[ok])) if model_test and ok.any() else None,
        chunk_size=chunk, n_chunks=sims.n_chunks, seconds_per_simulation=elapsed / n_sim,
        stopped_early=stopped_early, pilot=dict(pilot) if pilot else None,
        simulations=[
            {"sim": i, "p": float(sims.p[i]), "estimate": _num(sims.est[i]),
             "se": _num(sims.se[i]), "failed": bool(sims.failed[i]),
             "singular": bool(sims.singular[i])}
            for i in range(n_sim)] if keep else None,
    )


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _refit_chunk(d: BinaryDesign, test: str, studies: Sequence[tuple[np.ndarray, np.ndarray]],
                 sims: range, cores: int) -> tuple[dict[str, np.ndarray], str]:
    """One R request: the chunk's studies refitted with the analysis model."""
    import pandas as pd

    from analysis.stats import rbridge
    from analysis.stats.models.binomial import NON_CONVERGENCE

    if not rbridge.r_available():
        raise rbridge.RUnavailableError(
            f"test={test!r} refits the analysis model in R, which is unavailable "
            f"({rbridge.r_unavailable_reason()}); test='paired_t' is a fast screen without R")
    frame = pd.concat([_frame(d, o, r, sim=i) for (o, r), i in zip(studies, sims, strict=True)],
                      ignore_index=True)
    likert = test == "clmm"
    formula = ("rating" if likert else "y") + " ~ system + (1|rater) + (1|item)"
    out = rbridge.r_function("evalstudy_power_refit")(
        rbridge.RFrame(frame, levels={"system": ["A", "B"]}), "clmm" if likert else "glmer",
        formula, "systemB", NON_CONVERGENCE.pattern, int(cores))
    if [int(x) for x in out["sim"]] != list(sims):
        raise RuntimeError("the R worker returned the simulations out of order")
    v = rbridge.r_versions()
    engine = (f"R ordinal::clmm {v.get('ordinal')}" if likert
              else f"R lme4::glmer {v.get('lme4')}") + f" via Rscript (R {v.get('R')})"
    return {
        "estimate": np.asarray(out["estimate"], dtype=float),
        "se": np.asarray(out["se"], dtype=float),
        "p": np.nan_to_num(np.asarray(out["p"], dtype=float), nan=1.0),
        "failed": np.asarray(out["failed"], dtype=bool),
        "singular": np.asarray(out["singular"], dtype=bool),
        "message": [str(m) for m in out["message"]],
    }, engine


# --------------------------------------------------------------------------------------------
# entry points


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
    test: str = "glmm",
    conf_level: float = 0.95,
    chunk_size: int | None = None,
    cores: int = 1,
    progress: Progress | None = None,
    keep_simulations: bool = False,
    pilot: Mapping[str, Any] | None = None,
) -> PowerResult:
    """Power of a binary-judgment design: ``n_sim`` studies simulated from the binomial GLMM
    and refitted with it (``test="glmm"``; see the module docstring for the alternatives).
    ``chunk_size`` studies per R request (default 25); ``cores`` > 1 refits each chunk in
    that many forked R processes (same result). ``progress(done, n_sim)`` after each chunk.
    ``pilot``: recorded in the result (see :func:`pilot_from_fit`)."""
    if test not in BINARY_TESTS:
        raise ValueError(f"test must be one of {BINARY_TESTS} for binary judgments")
    d = BinaryDesign(n_raters, n_items, ratings_per_output, effect, rater_sd, item_sd,
                     baseline, n_systems)
    return _run(d, test=test, alpha=alpha, n_sim=n_sim, seed=seed, conf_level=conf_level,
                chunk_size=chunk_size, cores=cores, progress=progress,
                keep_simulations=keep_simulations, pilot=pilot)[0]


def power_likert(
    n_raters: int,
    n_items: int,
    ratings_per_output: int,
    effect: float,
    thresholds: Sequence[float],
    rater_sd: float = 0.0,
    item_sd: float = 0.0,
    *,
    n_systems: int = 2,
    alpha: float = 0.05,
    n_sim: int = 1000,
    seed: int | None = None,
    test: str = "clmm",
    conf_level: float = 0.95,
    chunk_size: int | None = None,
    cores: int = 1,
    progress: Progress | None = None,
    keep_simulations: bool = False,
    pilot: Mapping[str, Any] | None = None,
) -> PowerResult:
    """Power of a Likert design: studies simulated from the cumulative link mixed model with
    the given ``thresholds`` and refitted with ``ordinal::clmm`` (``test="clmm"``; about 1 s
    per refit: 1,000 simulations take about 20 min on one core) or screened with
    ``test="paired_t"``. Other arguments as :func:`power_binary`."""
    if test not in LIKERT_TESTS:
        raise ValueError(f"test must be one of {LIKERT_TESTS} for Likert ratings")
    d = LikertDesign(n_raters, n_items, ratings_per_output, effect, rater_sd, item_sd,
                     0.0, n_systems, tuple(thresholds))
    return _run(d, test=test, alpha=alpha, n_sim=n_sim, seed=seed, conf_level=conf_level,
                chunk_size=chunk_size, cores=cores, progress=progress,
                keep_simulations=keep_simulations, pilot=pilot)[0]


_VARY = {"items": "n_items", "raters": "n_raters", "ratings_per_output": "ratings_per_output"}


def smallest_design(
    target_power: float,
    vary: str = "items",
    *,
    lo: int | None = None,
    hi: int = 1000,
    start: int | None = None,
    criterion: str = "estimate",
    n_sim_per_step: int | None = None,
    resolution: float | None = None,
    progress: Progress | None = None,
    **params: Any,
) -> DesignSearch:
    """Smallest ``vary`` ("items", "raters" or "ratings_per_output") in ``[lo, hi]`` whose
    simulated power reaches ``target_power``.

    ``params`` are the other arguments of :func:`power_binary` (or of :func:`power_likert`
    when they include ``thresholds``), e.g. ``n_raters=40, ratings_per_output=3, effect=0.5,
    rater_sd=0.8, item_sd=1.0, n_sim=1000, seed=1``. ``criterion="estimate"`` compares the
    power estimate with the target; ``"ci_low"`` its lower Wilson bound (more conservative).

    Search: from ``start`` (default ``lo``; e.g. the planned design, evaluated with the full
    ``n_sim``), halving while the value passes (``lo`` at least) or doubling until one passes
    (``hi`` at most), then bisection, assuming power increases with the varied quantity.
    Every step uses the same ``seed``: simulation ``i`` of every step is the same draw
    (common random numbers), which keeps the estimated power curve nearly monotone.

    Fewer simulations per step, stated in the result: each step runs at most
    ``n_sim_per_step`` (default ``n_sim`` for the fast screens; for model refits, which cost
    a glmer/clmm fit per simulation, ``min(n_sim, max(50, n_sim // 5))``), in chunks, and
    stops as soon as the Wilson CI of its power lies wholly above or below the target (a
    design far from it is settled by a chunk); the bisection stops at a bracket of
    ``max(1, resolution * value)`` (default 0 for the screens: the exact smallest value; 0.1
    for the refits, whose step estimates carry more Monte Carlo error than that). The chosen
    value is then evaluated with ``n_sim`` simulations (``result``), reusing its step's
    simulations (the same studies). ``progress(done, total)``: simulations run so far, and
    that count plus those planned for the current step.
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
    likert = "thresholds" in params
    test = params.get("test") or ("clmm" if likert else "glmm")
    n_sim = int(params.pop("n_sim", 1000))
    if n_sim_per_step is None:
        n_sim_per_step = n_sim if test not in MODEL_TESTS else min(n_sim, max(50, n_sim // 5))
    if resolution is None:
        resolution = 0.1 if test in MODEL_TESTS else 0.0
    if n_sim_per_step < 1 or resolution < 0:
        raise ValueError("n_sim_per_step must be >= 1 and resolution >= 0")
    if lo is None:
        lo = 2 if vary == "items" else 1
    if lo > hi:
        raise ValueError("lo must be <= hi")
    params["seed"] = _seed(params.get("seed"))
    first = min(max(lo if start is None else int(start), lo), hi)
    t0 = time.perf_counter()
    evaluated: dict[int, PowerResult] = {}
    outcomes: dict[int, _Sims] = {}
    done = [0]
    # the chunks of a step: small, so that a settled step stops early
    step_chunk = params.pop("chunk_size", None) or (10 if test in MODEL_TESTS else None)

    def run(v: int, sims: int, decide: float | None) -> PowerResult:
        d, options = _design({**params, key: v}, likert)

        def step_progress(k: int, total: int) -> None:
            if progress is not None:
                progress(done[0] + k - len(outcomes.get(v, ())), done[0] + total
                         - len(outcomes.get(v, ())))

        result, outcomes_v = _run(d, n_sim=sims, progress=step_progress, decide=decide,
                                  resume=outcomes.get(v), keep_simulations=False,
                                  chunk_size=step_chunk, **options)
        done[0] += len(outcomes_v) - len(outcomes.get(v, ()))
        outcomes[v] = outcomes_v
        return result

    def passes(r: PowerResult) -> bool:
        return (r.power if criterion == "estimate" else r.ci_low) >= target_power

    def ok(v: int) -> bool:
        if v not in evaluated:
            full = v == first and start is not None
            evaluated[v] = run(v, n_sim if full else n_sim_per_step,
                               None if full else target_power if criterion == "estimate"
                               else None)
        return passes(evaluated[v])

    search = (f"from {vary} = {first}: halving or doubling, then bisection to a bracket of "
              f"max(1, {resolution:g} x value); steps of at most {n_sim_per_step} simulations, "
              "stopped once their CI is wholly above or below the target; the chosen value "
              f"evaluated with {n_sim}")
    a: int | None = None  # largest value known to fail
    b = first
    if ok(b):
        while b > lo:
            c = max(lo, b // 2)
            if not ok(c):
                a = c
                break
            b = c
    else:
        while not ok(b):
            a = b
            if b >= hi:
                return DesignSearch(target_power, vary, criterion, None, None,
                                    dict(sorted(evaluated.items())), n_sim, n_sim_per_step,
                                    resolution, a, search=search,
                                    elapsed_s=time.perf_counter() - t0)
            b = min(hi, 2 * b)
    while a is not None and b - a > max(1, math.floor(resolution * b)):
        mid = (a + b) // 2
        if ok(mid):
            b = mid
        else:
            a = mid
    final = evaluated[b] if evaluated[b].n_sim >= n_sim else run(b, n_sim, None)
    warnings = []
    if not passes(final):
        warnings.append(
            f"with {n_sim} simulations the chosen {vary} = {b} gives power {final.power:.3f} "
            f"(CI {final.ci_low:.3f}-{final.ci_high:.3f}), short of the target {target_power}: "
            f"the search's steps (at most {n_sim_per_step} simulations each) put it just "
            "above; consider a slightly larger value")
    return DesignSearch(target_power, vary, criterion, b, final, dict(sorted(evaluated.items())),
                        n_sim, n_sim_per_step, resolution, a, search=search,
                        elapsed_s=time.perf_counter() - t0, warnings=warnings)


_DESIGN_FIELDS = ("n_raters", "n_items", "ratings_per_output", "effect", "rater_sd", "item_sd",
                  "baseline", "n_systems", "thresholds")
_RUN_FIELDS = ("test", "alpha", "seed", "conf_level", "cores", "pilot")


def _design(params: Mapping[str, Any], likert: bool) -> tuple[BinaryDesign, dict[str, Any]]:
    """The design and the run options of :func:`power_binary` / :func:`power_likert`'s
    arguments (checked as they check them)."""
    unknown = set(params) - set(_DESIGN_FIELDS) - set(_RUN_FIELDS)
    if unknown:
        raise TypeError(f"unexpected arguments {sorted(unknown)}")
    fields = {k: v for k, v in params.items() if k in _DESIGN_FIELDS}
    options = {"test": "clmm" if likert else "glmm", "alpha": 0.05, "seed": None,
               "conf_level": 0.95, "cores": 1, "pilot": None,
               **{k: v for k, v in params.items() if k in _RUN_FIELDS}}
    if likert:
        if options["test"] not in LIKERT_TESTS:
            raise ValueError(f"test must be one of {LIKERT_TESTS} for Likert ratings")
        fields.pop("baseline", None)
        fields["thresholds"] = tuple(fields["thresholds"])
        return LikertDesign(**fields), options
    if options["test"] not in BINARY_TESTS:
        raise ValueError(f"test must be one of {BINARY_TESTS} for binary judgments")
    return BinaryDesign(**fields), options


# --------------------------------------------------------------------------------------------
# pilots


def _field(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a ModelFit (or Coefficient) or of its JSON form (a dict)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def sds_from_fit(fit: Any, rater: str = "rater", item: str = "item") -> dict[str, float]:
    """``rater_sd``, ``item_sd`` and ``baseline`` (the intercept) from a pilot
    :class:`~analysis.stats.models.ModelFit` of ``fit_binomial_glmm`` or its JSON form (0 for
    an absent random effect)."""
    re_ = _field(fit, "random_effects") or {}
    out = {
        "rater_sd": math.sqrt(max(float(re_.get(rater) or 0.0), 0.0)),
        "item_sd": math.sqrt(max(float(re_.get(item) or 0.0), 0.0)),
    }
    for c in _field(fit, "coefficients") or []:
        if _field(c, "term") == "(Intercept)":
            out["baseline"] = float(_field(c, "estimate"))
    return out


def pilot_from_fit(fit: Any, rater: str = "rater", item: str = "item"
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Design parameters from a pilot's fit and where they came from.

    Returns ``(params, pilot)``: ``params`` holds ``rater_sd``, ``item_sd`` and ``baseline``
    (binomial GLMM) or ``thresholds`` (CLMM), to pass to :func:`power_binary` /
    :func:`power_likert`; ``pilot`` = ``{"engine", "formula", "n_obs", "random_effects",
    "converged", "warnings", "fallback"}`` for the result (``PowerResult.pilot``): numbers
    derived from a fit carry its warnings (a singular pilot fit's zero variance, say, makes
    the power optimistic). A fallback fit (no random effects estimated) gives SDs of 0 and
    says so in ``warnings``.
    """
    params: dict[str, Any] = sds_from_fit(fit, rater, item)
    thresholds = _field(fit, "thresholds") or []
    if thresholds:
        params.pop("baseline", None)
        params["thresholds"] = [float(_field(t, "estimate")) for t in thresholds]
    extra = _field(fit, "extra") or {}
    warnings = list(_field(fit, "warnings") or [])
    if extra.get("fallback"):
        warnings.append("the pilot fit estimated no random effects (fallback engine): the "
                        "simulated rater and item SDs are 0, which overstates power")
    for name in (rater, item):
        if name not in (_field(fit, "random_effects") or {}):
            warnings.append(f"the pilot fit has no {name!r} random effect: its SD is taken as 0, "
                            "which overstates power if that variance exists")
    converged = bool(_field(fit, "converged", True))
    if not converged:
        warnings.append("the pilot fit did not converge: its variance components are suspect")
    pilot = {
        "engine": _field(fit, "engine"), "formula": _field(fit, "formula"),
        "n_obs": _field(fit, "n_obs"),
        "random_effects": dict(_field(fit, "random_effects") or {}),
        "converged": converged, "warnings": warnings,
        "fallback": bool(extra.get("fallback", False)),
    }
    return params, pilot


# --------------------------------------------------------------------------------------------
# the analysis option `power`

#: Keys of the analysis option ``power``: the arguments of :func:`smallest_design` (with
#: ``target_power``) or of :func:`power_binary` / :func:`power_likert` (without), plus
#: ``pilot``: the key of a binary, severity or Likert criterion of the study whose fitted model
#: in this analysis is the pilot (variance components, intercept or thresholds).
OPTION_KEYS = frozenset({
    "target_power", "vary", "lo", "hi", "start", "criterion", "n_sim_per_step", "resolution",
    "n_raters", "n_items", "ratings_per_output", "effect", "rater_sd", "item_sd", "baseline",
    "thresholds", "alpha", "n_sim", "seed", "test", "conf_level", "chunk_size", "cores",
    "pilot",
})
_SEARCH_KEYS = ("vary", "lo", "hi", "start", "criterion", "n_sim_per_step", "resolution")
#: Most simulations an analysis run may ask for (a refit each: bounded time on the worker).
MAX_OPTION_SIMULATIONS = 20_000


def check_option(spec: Any, criteria: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The analysis option ``power`` checked before a run exists (ValueError saying what is
    wrong); returns it as a dict. The numbers are checked again when the run computes it."""
    if not isinstance(spec, Mapping):
        raise ValueError("power must be an object of power-analysis settings")
    unknown = set(spec) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown power settings {sorted(unknown)}; known: "
                         f"{sorted(OPTION_KEYS)}")
    if "effect" not in spec:
        raise ValueError("power needs 'effect' (the B - A difference on the model's scale)")
    search = [k for k in _SEARCH_KEYS if k in spec]
    if search and "target_power" not in spec:
        raise ValueError(f"power settings {search} belong to the design search: give "
                         "'target_power' too")
    if spec.get("test") is not None and spec["test"] not in TESTS:
        raise ValueError(f"power test must be one of {', '.join(TESTS)}")
    for name in ("n_sim", "n_sim_per_step", "chunk_size", "cores"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ValueError(f"power {name} must be a positive integer")
    if int(spec.get("n_sim") or 1000) > MAX_OPTION_SIMULATIONS:
        raise ValueError(f"power n_sim must be at most {MAX_OPTION_SIMULATIONS}")
    if "pilot" in spec:
        kinds = {str(c["key"]): c["kind"] for c in criteria}
        if pilot_model(kinds.get(str(spec["pilot"]))) is None:
            raise ValueError("power pilot must name a binary, severity or likert criterion "
                             "of the study (its fitted model is the pilot)")
    return dict(spec)


def run_option(spec: Mapping[str, Any], criteria_results: Sequence[Mapping[str, Any]] = (),
               progress: Progress | None = None) -> PowerResult | DesignSearch:
    """The analysis option ``power``: :func:`smallest_design` when it has ``target_power``,
    else one design's power. With ``pilot`` (a criterion key), that criterion's fit in this
    analysis (``criteria_results``: the pipeline's JSON entries) gives the variance components
    and the intercept or thresholds that the option does not set itself, and the result
    records it with its warnings (``PowerResult.pilot``)."""
    spec = dict(check_option(spec, [{"key": c.get("key"), "kind": c.get("kind")}
                                    for c in criteria_results]))
    key = spec.pop("pilot", None)
    if key is not None:
        entry = next((c for c in criteria_results if str(c.get("key")) == str(key)), None)
        fit = None if entry is None else entry.get(pilot_model(entry.get("kind")) or "glmm")
        if not isinstance(fit, Mapping) or "error" in fit:
            why = (fit or {}).get("error") if isinstance(fit, Mapping) else "no model was fitted"
            raise ValueError(f"power pilot {key!r}: no pilot model ({why})")
        params, pilot = pilot_from_fit(fit)
        pilot["criterion"] = str(key)
        for name, value in params.items():
            spec.setdefault(name, value)
        spec["pilot"] = pilot
    if "target_power" in spec:
        return smallest_design(spec.pop("target_power"), progress=progress, **spec)
    fn = power_likert if "thresholds" in spec else power_binary
    return fn(progress=progress, **spec)
