"""Benchmark: the whole analysis of a simulated study; its GLMM vs R; alpha vs krippendorff.

What is measured
----------------
A simulated study of ``--raters`` x ``--items`` (default 200 x 1,000) with two systems and two
criteria: ``meaning`` (binary yes/no) and ``fluency`` (Likert 1-5). The issue asks for 50,000
judgments of each kind from 200 raters and 1,000 items, crossed; a full crossing would be
200,000 per criterion, so each item is rated by ``--ratings-per-item`` (50) raters and each rater
rates 250 items. The design is a connected, balanced overlap rather than disjoint blocks: item
``i`` is rated by the 50 consecutive raters (mod 200) starting at ``i * 200 // 1000``, so every
rater rates exactly 250 items (5 per start, 50 starts) and any two neighbouring raters share
most of their items. A rater sees item ``i`` from system ``(i + rater) % 2``, so each output
(item x system, 2,000 in all) is rated by 25 raters and each rater judges 125 outputs of each
system. Every judgment event answers both criteria: 50,000 binary + 50,000 Likert = 100,000
rows in the tidy judgments table.

Simulation (seeded): binary ``logit P(yes) = 1.0 - 0.5 [system B] + u_rater + v_item`` with
``u ~ N(0, 0.8^2)``, ``v ~ N(0, 1.2^2)``; Likert from a cumulative logit model, latent
``-0.4 [system B] + u'_rater + v'_item + logistic noise`` cut at ``(-2.5, -1, 0.5, 2)``, with
``u' ~ N(0, 0.7^2)``, ``v' ~ N(0, 1.0^2)``.

Three measurements, each printed as a table of operation / count / seconds / rate / ratio:

1. **The whole analysis**: ``analysis.stats.pipeline.analyse(judgments, criteria)`` (no
   metrics, default options: engine "auto", i.e. R ``lme4::glmer`` for the GLMM and R
   ``ordinal`` for the CLMM/CLM, both in the R worker process of ``rbridge``), with its own
   per-section seconds (``_seconds``). ``--no-clmm`` gives the Likert criterion the formula
   ``rating ~ system`` (``options["formulas"]``), so its "clmm" section fits ``ordinal::clm``
   instead of the crossed-random-effects CLMM (which is the slow part).
2. **GLMM overhead of the R bridge**: ``analysis.stats.models.fit_binomial_glmm(frame, "y ~
   system + (1|rater) + (1|item)")`` (engine "auto", as the pipeline calls it: ``lme4::glmer``
   in the ``Rscript`` worker) against the same model fitted by R alone: ``lme4::glmer(...,
   family = binomial)`` on a data.frame already in R (sent once, untimed), timed inside R with
   ``system.time()``. The last row is the part of the bridge's fit spent in glmer and its
   summaries inside R (``ModelFit.extra["r_seconds"]``); the rest of the wall time of the same
   fit is the bridge's overhead (Python preparing factors and writing the CSV frame, R reading
   it, the pipe round trip, JSON both ways), printed per fit (median over the rounds), with the
   cost of an empty request and of sending the frame alone. Target: at most 1.3x.
3. **Krippendorff's alpha** from a tidy table of ``--alpha-judgments`` (1,000,000) nominal
   yes/no ratings: 1,000 raters x 1,250 units with 20 % of the cells missing (exactly
   1,000,000 rated), string rater and unit keys as the pipeline passes them, timed with
   ``analysis.stats.agreement.krippendorff_alpha(df, "nominal")`` (validation, integer coding
   and the coincidence matrix included; no raters x units table) against the reference
   ``krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")`` on the ready
   1,000 x 1,250 float matrix. The package is GPL: a dev-only dependency
   (requirements-dev.txt), never imported by the product; without it the reference is
   skipped. The two values must agree to 1e-12. Also timed: the same call with the vectorised
   percentile bootstrap (B = 2,000 over units), and the ICCs of a complete 2,000 x 5 design
   (ANOVA path) against ``pingouin.intraclass_corr`` (also dev-only). Target: at most 2x.

``--repeat N`` (3) runs measurements 2 and 3 N times (interleaved) and keeps the best time of each;
the whole analysis runs once. ``--profile`` also runs ``krippendorff_alpha`` and
``fit_binomial_glmm`` once under cProfile.

Run: ``.venv/bin/python bench/analysis.py [--no-clmm --skip-pipeline --repeat 2 --profile]``.
A quick look at a small study: ``--raters 100 --items 200 --ratings-per-item 50`` (10,000
binary judgments) ``--skip-pipeline --alpha-judgments 20000 --alpha-raters 100
--alpha-units 400``. No Django, no database; R with lme4, ordinal and jsonlite must be available
(as for the app).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# project's `analysis` package: put the project root first instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

SEED = 20261121
SYSTEMS = ("sys-a", "sys-b")
GLMM_FORMULA = "y ~ system + (1|rater) + (1|item)"
# Simulation parameters (see the module docstring).
BINARY = {"intercept": 1.0, "system": -0.5, "sd_rater": 0.8, "sd_item": 1.2}
LIKERT = {"system": -0.4, "sd_rater": 0.7, "sd_item": 1.0,
          "thresholds": (-2.5, -1.0, 0.5, 2.0)}
CRITERIA = [
    {"key": "meaning", "kind": "binary", "scale_points": None, "options": ["yes", "no"]},
    {"key": "fluency", "kind": "likert", "scale_points": 5, "options": []},
]


@dataclass
class Timing:
    operation: str
    count: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else float("inf")


def timed(function: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def print_load(label: str, ticks: tuple[int, int] | None, wall: float, cpu: float) -> None:
    """How busy the machine was since `ticks`, and how much of it was this process."""
    after = machine_cpu_ticks()
    if ticks is None or after is None or after[1] <= ticks[1]:
        return
    busy = (after[0] - ticks[0]) / (after[1] - ticks[1])
    own = cpu / (wall * (os.cpu_count() or 1))
    others = max(0.0, busy - own)
    print(f"load:       {label}: all cores {busy:.0%} busy, this process (Python + R) {own:.0%}, "
          f"others {others:.0%}" + ("  (NOT IDLE: figures are low and noisy)"
                                    if others > 0.1 else ""))


# --- the simulated study ------------------------------------------------------------------


def design(raters: int, items: int, per_item: int) -> tuple[np.ndarray, np.ndarray]:
    """(rater, item) index arrays: item i rated by `per_item` consecutive raters (mod raters)
    starting at i * raters // items."""
    if per_item > raters:
        raise ValueError("--ratings-per-item cannot exceed --raters")
    item = np.repeat(np.arange(items), per_item)
    start = item * raters // items
    rater = (start + np.tile(np.arange(per_item), items)) % raters
    return rater, item


def simulate(raters: int, items: int, per_item: int, seed: int) -> pd.DataFrame:
    """The tidy judgments table of `analyse` (one row per judgment and criterion)."""
    rng = np.random.default_rng(seed)
    rater, item = design(raters, items, per_item)
    system = (item + rater) % 2
    n = len(rater)
    # binary: GLMM
    u = rng.normal(0, BINARY["sd_rater"], raters)
    v = rng.normal(0, BINARY["sd_item"], items)
    eta = BINARY["intercept"] + BINARY["system"] * system + u[rater] + v[item]
    yes = rng.random(n) < 1 / (1 + np.exp(-eta))
    # Likert: cumulative logit
    u2 = rng.normal(0, LIKERT["sd_rater"], raters)
    v2 = rng.normal(0, LIKERT["sd_item"], items)
    latent = LIKERT["system"] * system + u2[rater] + v2[item] + rng.logistic(0, 1, n)
    rating = 1 + (latent[:, None] > np.array(LIKERT["thresholds"])[None, :]).sum(axis=1)
    seconds = np.round(rng.lognormal(np.log(12), 0.5, n), 1)

    rater_names = np.array([f"rater-{j:03d}" for j in range(raters)], dtype=object)
    item_names = np.array([f"item-{i:04d}" for i in range(items)], dtype=object)
    common = {
        "rater": rater_names[rater],
        "rater_kind": "crowd",
        "is_human": True,
        "output": item * len(SYSTEMS) + system + 1,
        "output_b": np.nan,
        "item": item_names[item],
        "system": np.array(SYSTEMS, dtype=object)[system],
        "system_b": None,
    }
    binary = pd.DataFrame({**common, "criterion": "meaning", "criterion_kind": "binary",
                           "value": np.where(yes, "yes", "no").astype(object),
                           "numeric": yes.astype(float), "seconds": seconds})
    likert = pd.DataFrame({**common, "criterion": "fluency", "criterion_kind": "likert",
                           "value": rating.astype(str).astype(object),
                           "numeric": rating.astype(float), "seconds": seconds})
    return pd.concat([binary, likert], ignore_index=True)


def glmm_frame(judgments: pd.DataFrame) -> pd.DataFrame:
    """The binary criterion as the pipeline hands it to the model: y, system, rater, item."""
    rows = judgments[judgments["criterion"] == "meaning"]
    return pd.DataFrame({"y": rows["numeric"].to_numpy(), "system": rows["system"].to_numpy(),
                         "rater": rows["rater"].to_numpy(), "item": rows["item"].to_numpy()})


def alpha_table(raters: int, units: int, n_rated: int, seed: int
                ) -> tuple[pd.DataFrame, np.ndarray]:
    """Tidy nominal yes/no ratings (exactly `n_rated` of raters x units cells) and the same
    data as the raters x units matrix (0/1, NaN where missing)."""
    if n_rated > raters * units:
        raise ValueError("more judgments than rater x unit cells")
    rng = np.random.default_rng(seed + 1)
    cells = np.sort(rng.choice(raters * units, size=n_rated, replace=False))
    rater, unit = np.divmod(cells, units)
    # Units differ in how clearly "yes" they are; raters agree moderately.
    p_unit = rng.beta(1.2, 0.8, units)
    yes = rng.random(n_rated) < p_unit[unit]
    order = rng.permutation(n_rated)  # tidy tables come in no particular order
    rater, unit, yes = rater[order], unit[order], yes[order]
    frame = pd.DataFrame({
        "unit": np.array([f"output-{k:05d}" for k in range(units)], dtype=object)[unit],
        "rater": np.array([f"rater-{j:04d}" for j in range(raters)], dtype=object)[rater],
        "value": np.where(yes, "yes", "no").astype(object),
    })
    matrix = np.full((raters, units), np.nan)
    # The package's matrix codes categories as the tidy function does: sorted ("no" < "yes").
    matrix[rater, unit] = yes.astype(float)
    return frame, matrix


# --- R directly ---------------------------------------------------------------------------

# Both run in the bridge's R worker; the frame stays in R's global environment between them.
_R_KEEP_FRAME = r"""
function(d) { assign(".evalstudy_bench_frame", d, envir = globalenv()); nrow(d) }
"""
_R_FIT = r"""
function() {
  d <- get(".evalstudy_bench_frame", envir = globalenv())
  t <- system.time(fit <- lme4::glmer(y ~ system + (1|rater) + (1|item), data = d,
                                      family = stats::binomial))
  list(elapsed = unname(t[["elapsed"]]), fixef = unname(lme4::fixef(fit)),
       loglik = as.numeric(stats::logLik(fit)))
}
"""


class DirectR:
    """lme4::glmer on a data.frame sent to R beforehand (untimed); the fit timed in R."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.send()

    def send(self) -> None:
        from analysis.stats import rbridge

        data, levels = rbridge.make_factors(self.frame, ["system", "rater", "item"],
                                            levels={"system": list(SYSTEMS)})
        rbridge.r_call(_R_KEEP_FRAME, rbridge.RFrame(data.astype({"y": int}), levels=levels))

    def fit(self) -> tuple[float, list[float], float]:
        """(seconds inside R, fixed effects, log-likelihood)."""
        from analysis.stats import rbridge

        try:
            out = rbridge.r_call(_R_FIT)
        except rbridge.RError:  # the worker was restarted (its global environment is new)
            self.send()
            out = rbridge.r_call(_R_FIT)
        return float(out["elapsed"][0]), [float(x) for x in out["fixef"]], float(out["loglik"][0])


# --- report -------------------------------------------------------------------------------


def dev_version(package: str) -> str:
    """The version of a dev-only reference package, or why it is absent (a production
    install has neither krippendorff nor pingouin: they are GPL)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed (pip install -r requirements-dev.txt)"


def print_environment(args: argparse.Namespace) -> None:
    from analysis.stats import rbridge

    versions = rbridge.r_versions()
    print(f"machine:    {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"libraries:  R {versions.get('R')}, lme4 {versions.get('lme4')}, ordinal "
          f"{versions.get('ordinal')}, jsonlite {versions.get('jsonlite')} "
          f"({versions.get('bridge')}), pandas {versions.get('pandas')}, numpy {np.__version__}, "
          f"references (dev-only, GPL): krippendorff {dev_version('krippendorff')}, pingouin "
          f"{dev_version('pingouin')}")
    print(f"parameters: raters={args.raters} items={args.items} "
          f"ratings_per_item={args.ratings_per_item} clmm={not args.no_clmm} "
          f"alpha_judgments={args.alpha_judgments:,} ({args.alpha_raters} raters x "
          f"{args.alpha_units} units) repeat={args.repeat} seed={args.seed}")


def print_table(title: str, timings: list[Timing], unit: str, reference: str | None) -> None:
    base = next((t for t in timings if t.operation == reference), None)
    header = "x ref" if base else ""
    print(f"\n{title}\n{'operation':<44} {unit:>10} {'seconds':>9} {unit + '/s':>13} "
          f"{header:>10}")
    for t in timings:
        ratio = f"{t.seconds / base.seconds:>10.2f}" if base else ""
        print(f"{t.operation:<44} {t.count:>10,} {t.seconds:>9.3f} {t.rate:>13,.0f} {ratio}")


def run_pipeline(judgments: pd.DataFrame, no_clmm: bool) -> None:
    from analysis.stats.pipeline import analyse

    options: dict = {}
    if no_clmm:
        options["formulas"] = {"fluency": "rating ~ system"}
    ticks, cpu = machine_cpu_ticks(), time.process_time()
    seconds, result = timed(lambda: analyse(judgments, CRITERIA, None, options))
    print_load("during the whole analysis", ticks, seconds, time.process_time() - cpu)
    n = len(judgments)
    timings = [Timing("analyse() (both criteria)", n, seconds)]
    for criterion in result["criteria"]:
        sections = criterion.get("_seconds", {})
        timings.append(Timing(f"  {criterion['key']} ({criterion['kind']})",
                              criterion["n_judgments"], sum(sections.values())))
        timings += [Timing(f"    {name}", criterion["n_judgments"], s)
                    for name, s in sections.items()]
    print_table("1. the whole analysis (analysis.stats.pipeline.analyse; x ref: share of the "
                "total)", timings, "judgments", "analyse() (both criteria)")
    print(f"analyse() reports {result['seconds']:.3f} s; warnings: "
          f"{result['warnings'] or 'none'}")
    for criterion in result["criteria"]:
        model = criterion.get("glmm") or criterion.get("clmm") or {}
        if "coefficients" in model:
            coefs = ", ".join(f"{c['term']} {c['estimate']:.3f}" for c in model["coefficients"])
            effects = ", ".join(f"{k} {v:.3f}" for k, v in
                                model.get("extra", {}).get("random_effects_sd", {}).items())
            print(f"            {criterion['key']}: {model['engine'].split(' via ')[0]}: "
                  f"{coefs}" + (f"; random-effect SDs {effects}" if effects else ""))
        elif "error" in model:
            print(f"            {criterion['key']}: model error {model['error']}")
        agreement = criterion.get("agreement", {})
        alpha = agreement.get("krippendorff_alpha") if isinstance(agreement, dict) else None
        if alpha:
            print(f"            {criterion['key']}: Krippendorff's alpha {alpha['value']:.3f} "
                  f"[{alpha['ci_low']:.3f}, {alpha['ci_high']:.3f}]")
    print(f"truth:      binary system B {BINARY['system']}, SDs rater {BINARY['sd_rater']} "
          f"item {BINARY['sd_item']}; Likert system B {LIKERT['system']}, SDs rater "
          f"{LIKERT['sd_rater']} item {LIKERT['sd_item']}")


def run_glmm(frame: pd.DataFrame, repeat: int) -> None:
    from analysis.stats.models import fit_binomial_glmm

    direct = DirectR(frame)  # data in R beforehand, untimed
    reference = "glmer in R (system.time)"
    auto = "fit_binomial_glmm (auto: R via Rscript)"
    r_side = "  of which glmer + summaries in R"
    best: dict[str, float] = {}
    fits: dict[str, object] = {}
    rounds: list[str] = []
    ratios: list[float] = []
    overheads: list[float] = []
    for _ in range(repeat):
        seconds_in_r, fixef, loglik = direct.fit()
        fits["R"] = (fixef, loglik)
        current = {reference: seconds_in_r}
        current[auto], fits[auto] = timed(lambda: fit_binomial_glmm(frame, GLMM_FORMULA))
        current[r_side] = fits[auto].extra["r_seconds"]
        for label, seconds in current.items():
            best[label] = min(best.get(label, seconds), seconds)
        ratios.append(current[auto] / current[reference])
        overheads.append(current[auto] - current[r_side])
        rounds.append(f"R {current[reference]:.3f} s, bridge {current[auto]:.3f} s "
                      f"({current[auto] / current[reference]:.2f}x), of which glmer + "
                      f"summaries {current[r_side]:.3f} s: overhead "
                      f"{current[auto] - current[r_side]:.3f} s")
    n = len(frame)
    timings = [Timing(label, n, best[label]) for label in (reference, auto, r_side)]
    print_table("2. binomial GLMM y ~ system + (1|rater) + (1|item), best of "
                f"{repeat} (x ref: time / glmer's time in R)", timings, "judgments", reference)
    for k, line in enumerate(rounds, 1):
        print(f"round {k}:    {line}")
    ratio = best[auto] / best[reference]
    verdict = "met" if ratio <= 1.3 else "NOT met"
    print(f"overhead:   fit_binomial_glmm (as the pipeline calls it) / glmer in R: {ratio:.2f} "
          f"(best of each; target <= 1.3: {verdict}); median of the rounds' ratios "
          f"{float(np.median(ratios)):.2f}")
    print(f"bridge:     per fit, wall time minus glmer + summaries in R: median "
          f"{float(np.median(overheads)) * 1000:.0f} ms (min {min(overheads) * 1000:.0f}, max "
          f"{max(overheads) * 1000:.0f})")
    print_bridge_costs(frame, repeat)
    fixef, loglik = fits["R"]
    fit = fits[auto]
    ours = [c.estimate for c in fit.coefficients]
    diff = max(abs(a - b) for a, b in zip(ours, fixef, strict=True))
    print(f"check:      {auto}: max |fixef diff| vs R {diff:.1e}, loglik "
          f"{fit.extra.get('loglik', float('nan')):.2f} vs {loglik:.2f}, "
          f"converged {fit.converged}")


def print_bridge_costs(frame: pd.DataFrame, repeat: int) -> None:
    """What the bridge's overhead is made of: an empty request, and this frame sent alone."""
    from analysis.stats import rbridge

    data, levels = rbridge.make_factors(frame, ["system", "rater", "item"])
    rframe = rbridge.RFrame(data, levels=levels)
    empty = min(timed(lambda: rbridge.r_call("function() 1L"))[0] for _ in range(20 * repeat))
    send = [timed(lambda: rbridge.r_request("function(d) nrow(d)", rframe)) for _ in range(repeat)]
    best_send = min(send, key=lambda t: t[0])
    print(f"            an empty request {empty * 1000:.1f} ms; sending this frame ({len(frame):,}"
          f" rows, {frame.shape[1]} columns) {best_send[0] * 1000:.0f} ms, of which R "
          f"{best_send[1].elapsed * 1000:.0f} ms (read.csv, factors)")


def run_alpha(args: argparse.Namespace) -> None:
    from analysis.stats.agreement import krippendorff_alpha

    try:
        import krippendorff  # GPL reference: dev-only
    except ImportError:
        krippendorff = None
    (seconds, (frame, matrix)) = timed(lambda: alpha_table(
        args.alpha_raters, args.alpha_units, args.alpha_judgments, args.seed))
    print(f"\nalpha data: {len(frame):,} tidy judgments ({args.alpha_raters:,} raters x "
          f"{args.alpha_units:,} units, {1 - len(frame) / matrix.size:.0%} missing), built in "
          f"{seconds:.2f} s (untimed)")
    best: dict[str, float] = {}
    values: dict[str, float] = {}
    package = "krippendorff.alpha (ready matrix)"
    ours = "krippendorff_alpha (tidy table)"
    boot = "  + bootstrap CI (B=2000, units)"
    for _ in range(args.repeat):
        if krippendorff is not None:
            seconds, value = timed(lambda: krippendorff.alpha(
                reliability_data=matrix, level_of_measurement="nominal"))
            best[package] = min(best.get(package, 1e9), seconds)
            values[package] = float(value)
        seconds, estimate = timed(lambda: krippendorff_alpha(frame, "nominal"))
        best[ours] = min(best.get(ours, 1e9), seconds)
        values[ours] = estimate.value
    seconds, with_ci = timed(lambda: krippendorff_alpha(frame, "nominal", n_boot=2000, seed=1))
    best[boot] = seconds
    n = len(frame)
    reference = package if krippendorff is not None else None
    print_table(f"3. Krippendorff's alpha (nominal), best of {args.repeat} (x ref: time / the "
                "package's time)", [Timing(label, n, best[label]) for label in
                                    (package, ours, boot) if label in best], "judgments",
                reference)
    print(f"bootstrap:  alpha {with_ci.value:.6f} [{with_ci.ci_low:.6f}, {with_ci.ci_high:.6f}] "
          f"({with_ci.ci_method})")
    if krippendorff is None:
        print("reference:  krippendorff (GPL, dev-only) not installed: comparison skipped")
    else:
        ratio = best[ours] / best[package]
        verdict = "met" if ratio <= 2 else "NOT met"
        difference = abs(values[ours] - values[package])
        print(f"ratio:      tidy / package: {ratio:.2f} (target <= 2: {verdict}); alpha "
              f"{values[ours]:.6f} vs {values[package]:.6f} "
              f"({'agree' if difference <= 1e-12 else 'DIFFERENT'} to {difference:.1e})")
    print_alpha_steps(frame, best.get(package))
    run_icc_reference(args.seed)
    if args.profile:
        profile("krippendorff_alpha on the tidy table", lambda: krippendorff_alpha(
            frame, "nominal"), args.profile_top)


def print_alpha_steps(frame: pd.DataFrame, package_seconds: float | None) -> None:
    """Where krippendorff_alpha's time goes: its steps replayed one by one (same calls), and
    the least any tidy-table route must do (factorize the three columns)."""
    from analysis.stats.agreement.alpha import _alpha_point, _pairable
    from analysis.stats.agreement.base import _validated

    steps: list[tuple[str, float]] = []

    def step(name: str, function: Callable[[], object]) -> object:
        seconds, result = timed(function)
        steps.append((name, seconds))
        return result

    rated, unit, units, _, _ = step("validate (factorize, duplicates)",
                                    lambda: _validated(frame))
    data, _ = step("code values, keep pairable units", lambda: _pairable(
        rated, unit, units, "nominal", None))
    step("alpha from within-unit matches", lambda: _alpha_point(data, "nominal"))

    def floor() -> None:
        pd.factorize(frame["rater"])
        pd.factorize(frame["unit"])
        pd.factorize(frame["value"], sort=True)

    floor_seconds, _ = timed(floor)
    total = sum(seconds for _, seconds in steps)
    scale = package_seconds or float("nan")
    print(f"steps of krippendorff_alpha, replayed one by one ({total:.3f} s in all; "
          "x ref: time / the package's time):")
    for name, seconds in steps:
        print(f"    {name:<40} {seconds:>9.3f} s {seconds / scale:>8.2f}")
    print(f"    {'floor: 3x pd.factorize':<40} {floor_seconds:>9.3f} s "
          f"{floor_seconds / scale:>8.2f}   (the least a tidy-table route does)")


def run_icc_reference(seed: int) -> None:
    """Our ICCs (two-way ANOVA path) against pingouin's on a complete 2,000 units x 5 raters
    design: same six values and CIs, and the time of each."""
    from analysis.stats.agreement import icc

    try:
        import pingouin  # GPL reference: dev-only
    except ImportError:
        print("icc:        pingouin (GPL, dev-only) not installed: reference skipped")
        return
    rng = np.random.default_rng(seed + 2)
    units, raters = 2000, 5
    values = (rng.normal(0, 1, (units, 1)) + rng.normal(0, 0.4, (1, raters))
              + rng.normal(0, 0.8, (units, raters)))
    frame = pd.DataFrame({"unit": np.repeat(np.arange(units), raters),
                          "rater": np.tile(np.arange(raters), units), "value": values.ravel()})
    ours_seconds, ours = timed(lambda: icc(frame))
    saved = dict(pingouin.options)
    pingouin.options.update({"round": None, "round.column.CI95": None})
    try:
        theirs_seconds, theirs = timed(lambda: pingouin.intraclass_corr(
            frame, targets="unit", raters="rater", ratings="value"))
    finally:
        pingouin.options.clear()
        pingouin.options.update(saved)
    difference = max(
        max(abs(est.value - row["ICC"]), abs(est.ci_low - row["CI95"][0]),
            abs(est.ci_high - row["CI95"][1]))
        for est, (_, row) in zip(ours.values(), theirs.iterrows(), strict=True))
    print(f"icc:        {units:,} x {raters} complete: ours {ours_seconds:.3f} s, pingouin "
          f"{theirs_seconds:.3f} s; six ICCs and CIs agree to {difference:.1e}; ICC2 "
          f"{ours['ICC2'].value:.4f} [{ours['ICC2'].ci_low:.4f}, {ours['ICC2'].ci_high:.4f}]")


def profile(label: str, function: Callable[[], object], top: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(function)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print(f"\ncProfile of {label}, by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)
    print("by own time:")
    stats.sort_stats("tottime").print_stats(top)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raters", type=int, default=200)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--ratings-per-item", type=int, default=50)
    parser.add_argument("--no-clmm", action="store_true",
                        help="fit the Likert criterion with ordinal::clm instead of the CLMM")
    parser.add_argument("--skip-pipeline", action="store_true",
                        help="only the GLMM and alpha comparisons")
    parser.add_argument("--alpha-judgments", type=int, default=1_000_000)
    parser.add_argument("--alpha-raters", type=int, default=1000)
    parser.add_argument("--alpha-units", type=int, default=1250)
    parser.add_argument("--repeat", type=int, default=3,
                        help="best of N for the GLMM and alpha comparisons")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile krippendorff_alpha and fit_binomial_glmm once")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)
    if min(args.raters, args.items, args.ratings_per_item, args.repeat) < 1:
        parser.error("--raters, --items, --ratings-per-item and --repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from analysis.stats import rbridge

    started = time.perf_counter()
    if not rbridge.r_available():
        sys.exit(f"R is not available: {rbridge.r_unavailable_reason()}")
    print_environment(args)
    print(f"R start-up: {time.perf_counter() - started:.2f} s (untimed below)")
    seconds, judgments = timed(lambda: simulate(args.raters, args.items, args.ratings_per_item,
                                                args.seed))
    binary = judgments[judgments["criterion"] == "meaning"]
    per_rater = binary.groupby("rater").size()
    per_output = binary.groupby("output").size()
    print(f"study:      {len(judgments):,} judgments ({len(binary):,} binary + "
          f"{len(judgments) - len(binary):,} Likert), {binary['rater'].nunique()} raters x "
          f"{binary['item'].nunique()} items x {len(SYSTEMS)} systems; items per rater "
          f"{per_rater.min()}-{per_rater.max()}, raters per item {args.ratings_per_item}, "
          f"raters per output {per_output.min()}-{per_output.max()}; "
          f"yes {binary['numeric'].mean():.1%}; simulated in {seconds:.2f} s (untimed)")

    if not args.skip_pipeline:
        run_pipeline(judgments, args.no_clmm)
    frame = glmm_frame(judgments)
    run_glmm(frame, args.repeat)
    if args.profile:
        from analysis.stats.models import fit_binomial_glmm

        profile("fit_binomial_glmm (auto)", lambda: fit_binomial_glmm(frame, GLMM_FORMULA),
                args.profile_top)
    run_alpha(args)


if __name__ == "__main__":
    main()
