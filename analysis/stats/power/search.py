"""The entry points: the power of one design, and the smallest design reaching a target
power."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .designs import (
    BINARY_TESTS,
    LIKERT_TESTS,
    MODEL_TESTS,
    BinaryDesign,
    DesignSearch,
    LikertDesign,
    PowerResult,
    Progress,
)
from .refits import SimulatedOutcomes, run_simulations
from .simulate import chosen_seed

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
    return run_simulations(d, test=test, alpha=alpha, n_sim=n_sim, seed=seed, conf_level=conf_level,
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
    return run_simulations(d, test=test, alpha=alpha, n_sim=n_sim, seed=seed, conf_level=conf_level,
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
    params["seed"] = chosen_seed(params.get("seed"))
    first = min(max(lo if start is None else int(start), lo), hi)
    t0 = time.perf_counter()
    evaluated: dict[int, PowerResult] = {}
    outcomes: dict[int, SimulatedOutcomes] = {}
    done = [0]
    # the chunks of a step: small, so that a settled step stops early
    step_chunk = params.pop("chunk_size", None) or (10 if test in MODEL_TESTS else None)

    def run(v: int, sims: int, decide: float | None) -> PowerResult:
        d, options = _design({**params, key: v}, likert)

        def step_progress(k: int, total: int) -> None:
            if progress is not None:
                progress(done[0] + k - len(outcomes.get(v, ())), done[0] + total
                         - len(outcomes.get(v, ())))

        result, outcomes_v = run_simulations(d, n_sim=sims, progress=step_progress, decide=decide,
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
