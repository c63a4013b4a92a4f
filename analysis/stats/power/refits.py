"""The tests of a simulated study: fast screens in Python, or a refit of the analysis model in
the R worker, chunk by chunk; and the power they give."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# scipy.stats and the descriptives load where they compute: the web request that checks a
# run's power option imports this package.
from .designs import (
    DEFAULT_CHUNK_SIZE,
    FAILED_POLICY,
    MODEL_TESTS,
    BinaryDesign,
    LikertDesign,
    PowerResult,
    Progress,
)
from .simulate import chosen_seed, simulate_judgments, simulation_generator, study_frame

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
    from scipy import stats as sps

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
class SimulatedOutcomes:
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
    def empty(cls) -> SimulatedOutcomes:
        return cls(np.empty(0), np.empty(0), np.empty(0), np.empty(0),
                   np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), [])

    def __len__(self) -> int:
        return len(self.p)

    def extend(self, other: SimulatedOutcomes) -> None:
        for name in ("p", "diffs", "est", "se", "failed", "singular"):
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))
        self.messages += other.messages
        self.engine = other.engine
        self.n_chunks += other.n_chunks


def _power_ci(rejections: int, n_sim: int, conf_level: float) -> tuple[float, float]:
    """Wilson CI of the power from ``n_sim`` >= 1 simulations."""
    from analysis.stats.descriptives import wilson_ci

    ci = wilson_ci(rejections, n_sim, conf_level)
    if ci is None:
        raise ValueError("a power estimate needs at least one simulation")
    return ci


def run_simulations(d: BinaryDesign, *, test: str, alpha: float, n_sim: int, seed: int | None,
         conf_level: float, chunk_size: int | None, cores: int, progress: Progress | None,
         keep_simulations: bool, pilot: Mapping[str, Any] | None,
         decide: float | None = None, resume: SimulatedOutcomes | None = None
         ) -> tuple[PowerResult, SimulatedOutcomes]:
    """Simulations ``0..n_sim-1`` of design ``d``. ``resume``: the outcomes of the first
    simulations, already computed (the same studies: they depend only on the seed and their
    number), which are not run again. ``decide``: a target power; the run stops after the
    chunk at which the Wilson CI of the power so far lies wholly above or below it (the
    design search's steps: a design far from the target is settled by a few simulations)."""
    if n_sim < 1:
        raise ValueError("n_sim must be >= 1")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    seed = chosen_seed(seed)
    t0 = time.perf_counter()
    model_test = test in MODEL_TESTS
    chunk = int(chunk_size or (DEFAULT_CHUNK_SIZE if model_test else 500))
    if chunk < 1:
        raise ValueError("chunk_size must be >= 1")
    sims = SimulatedOutcomes.empty()
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
    sims = SimulatedOutcomes(sims.p[:n_sim], sims.diffs[:n_sim], sims.est[:n_sim],
                             sims.se[:n_sim], sims.failed[:n_sim], sims.singular[:n_sim],
                             sims.messages[:n_sim], sims.engine, sims.n_chunks)
    return _result(d, test, sims, alpha=alpha, seed=seed, conf_level=conf_level, chunk=chunk,
                   elapsed=time.perf_counter() - t0, keep=keep_simulations, pilot=pilot,
                   stopped_early=stopped_early), sims


def _simulate_chunk(d: BinaryDesign, test: str, seed: int, block: range,
                    cores: int) -> SimulatedOutcomes:
    studies = [simulate_judgments(d, simulation_generator(seed, i)) for i in block]
    outcomes = np.stack([o for o, _ in studies])
    diffs = outcomes[:, :, 1].mean(axis=(1, 2)) - outcomes[:, :, 0].mean(axis=(1, 2))
    n = len(block)
    if test not in MODEL_TESTS:
        return SimulatedOutcomes(_SCREENS[test](outcomes)[0], diffs, np.full(n, np.nan),
                                 np.full(n, np.nan), np.zeros(n, dtype=bool),
                                 np.zeros(n, dtype=bool), [""] * n, n_chunks=1)
    out, engine = _refit_chunk(d, test, studies, block, cores)
    # a failed refit gets p = 1: never a rejection
    return SimulatedOutcomes(np.where(out["failed"], 1.0, out["p"]), diffs, out["estimate"],
                             out["se"], out["failed"], out["singular"],
                             [m if f else "" for m, f in zip(out["message"], out["failed"],
                                                             strict=True)],
                             engine, 1)


def _result(d: BinaryDesign, test: str, sims: SimulatedOutcomes, *, alpha: float, seed: int,
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
    frame = pd.concat([study_frame(d, o, r, sim=i)
                       for (o, r), i in zip(studies, sims, strict=True)], ignore_index=True)
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
