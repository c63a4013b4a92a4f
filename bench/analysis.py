"""Benchmark: the statistics' speed, each against a reference measured in the same run.

The output ends with one line per target, in this form (ratio = our time / the reference's):

    target large_analysis_vs_60s: ratio R (goal <= 1.0)
    target glmm_vs_r: ratio R (goal <= 1.1)
    target crowd_analysis_vs_60s: ratio R (goal <= 1.0)
    target alpha_vs_pivot_package: ratio R (goal <= 0.5)

The machine's load (``os.getloadavg()``, and how busy all cores were while a measurement ran)
is printed with every measurement: on a shared machine the figures are low and noisy, so run it
on an idle one for figures to quote. No Django, no database; R with lme4, ordinal and jsonlite
must be available (as for the app).

What is measured
----------------
1. **The whole analysis of a large rated study** (target ``large_analysis_vs_60s`` <= 1.0,
   seconds / 60; ``--skip-pipeline`` leaves it out):
   ``analysis.stats.pipeline.analyse(judgments, criteria, metrics)`` on a simulated
   study of ``--raters`` x ``--items`` (200 x 1,000) with two systems and three criteria,
   ``meaning`` (binary yes/no), ``fluency`` (Likert 1-5) and ``preference`` (pairwise).
   Item ``i`` is rated by the ``--ratings-per-item`` (50) consecutive raters (mod raters)
   starting at ``i * raters // items`` (a connected, balanced overlap: each rater rates 250
   items) and a rater sees item ``i`` from system ``(i + rater) % 2``: 50,000 binary + 50,000
   Likert rows, with the columns ``analysis.selectors.judgments_tidy`` gives (rater names and
   integer ``rater_id``, integer output ids). Simulation (seeded): ``logit P(yes) = 1.0 - 0.5
   [system B] + u_rater + v_item``, SDs 0.8 and 1.2; Likert from a cumulative logit, latent
   ``-0.4 [system B] + u' + v' + logistic noise`` cut at (-2.5, -1, 0.5, 2), SDs 0.7 and 1.0.
   Beside them: ``--pairwise-per-item`` (10) raters compare each item's two outputs (10,000
   judgments, the side at random, ties allowed), one LLM judge answers yes/no on all 2,000
   outputs, and three headline metrics (WER, CER, BERTScore F1) score every output, so the
   "metrics and proxies vs humans" steps run as in a real study (112,000 judgments in all).
   Printed: the total and each section's own seconds (``_seconds``). ``--no-clmm`` fits the
   Likert criterion with ``ordinal::clm`` (formula ``rating ~ system``) instead of the CLMM.
2. **GLMM through the R bridge vs glmer in R** (target ``glmm_vs_r`` <= 1.1, the worst of
   the sizes): at each of ``--glmm-sizes`` (5,000, 10,000, 50,000 and 100,000 binary
   judgments: 200 raters, 50 ratings per item, size / 50 items, simulated as above),
   ``analysis.stats.models.fit_binomial_glmm(frame, "y ~ system + (1|rater) + (1|item)")``
   as the pipeline calls it (engine "auto": ``lme4::glmer`` in the ``Rscript`` worker), wall
   time, against R doing the same work on a data.frame already in R (sent beforehand,
   untimed): ``lme4::glmer(...)`` and the same summaries the bridge returns
   (``evalstudy_glmer_summary``: coefficients, SEs, p-values, vcov, variance components,
   log-likelihood, AIC, convergence messages, singular fit), timed inside R with
   ``proc.time()``. glmer alone is printed too. Each round fits both (which goes first
   alternates); the best of each over ``--glmm-repeat`` (5) rounds is compared, and small
   sizes get more rounds (``--glmm-repeat`` x 20,000 / size, up to 10 x ``--glmm-repeat``)
   since a 0.5 s fit is more at the mercy of the machine. The
   overhead (wall time minus R's own time for the fit and summaries: preparing the factors,
   writing the frame, R reading it, the pipe, JSON) is printed per size. Estimates must
   equal R's.
3. **A crowd study end to end** (target ``crowd_analysis_vs_60s`` <= 1.0, seconds / 60):
   ``analyse()`` on ``--crowd-raters`` (7,150) crowd raters who each give one pairwise
   judgment on one of ``--crowd-items`` (1,000) items (two systems, the side each is shown on
   at random, ties allowed): 7,150 judgments and 25.6 million rater pairs, none of which
   shares the 5 units a Cohen's kappa needs. ``--crowd-kind binary`` or ``likert`` gives each
   rater one output to judge instead. The R worker is started beforehand (its start-up is
   printed apart); the figure is ``analyse()`` itself, every section included.
4. **Krippendorff's alpha on a tidy table** (target ``alpha_vs_pivot_package`` <= 0.5): a
   table of ``--alpha-judgments`` (1,000,000) nominal ratings, ``--alpha-raters`` (1,000) x
   ``--alpha-units`` (1,250) with 20 % of the cells missing, rows shuffled, integer rater and
   unit keys as ``judgments_tidy`` gives them (``rater_id``, output ids) and values coded 0/1
   (no = 0, yes = 1: numbers, so that the reference needs no recoding):
   ``analysis.stats.agreement.krippendorff_alpha(df, "nominal")`` against the route a user
   would take with the same table, ``df.pivot(index="rater", columns="unit",
   values="value")`` then ``krippendorff.alpha(reliability_data=..., level_of_measurement=
   "nominal")``, both timed whole. The two values must agree to 1e-12. Also printed: the
   package alone on the ready matrix, the call with its vectorised bootstrap CI (B = 2,000),
   and where the function's time goes (cProfile of one real call, by callee). The
   ``krippendorff`` package is GPL: a dev-only dependency (requirements-dev.txt), never
   imported by the product; without it the target's ratio is ``nan``. Then our ICCs against
   ``pingouin.intraclass_corr`` on a complete 2,000 x 5 design (also dev-only).

Running it
----------
``.venv/bin/python bench/analysis.py`` runs everything (about 8 minutes on 2 shared cores,
most of it glmer at 50,000 and 100,000 judgments and the Likert CLMM). A quick look (about a
minute): ``--skip-pipeline --glmm-sizes 2000,5000 --crowd-raters 2000 --crowd-items 300
--alpha-judgments 100000 --alpha-raters 200 --alpha-units 625``.

Options: ``--raters``, ``--items``, ``--ratings-per-item`` (section 1's study);
``--pairwise-per-item``; ``--no-clmm``; ``--skip-pipeline``; ``--glmm-sizes``
(comma-separated judgment counts) and
``--glmm-raters`` (200), ``--glmm-repeat N`` (5: best of N rounds); ``--crowd-raters``,
``--crowd-items``, ``--crowd-kind``; ``--alpha-judgments``, ``--alpha-raters``,
``--alpha-units``; ``--repeat N`` (3: best of N for section 4); ``--seed``; ``--profile``
(cProfile ``fit_binomial_glmm`` at the largest size, ``krippendorff_alpha`` and the crowd
analysis once) and ``--profile-top``.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import platform
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
GLMM_SIZES = (5_000, 10_000, 50_000, 100_000)
GLMM_RATINGS_PER_ITEM = 50
# Rounds of the GLMM comparison: at least --repeat, more for small (short, noisy) fits.
GLMM_ROUND_JUDGMENTS = 20_000
# Simulation parameters (see the module docstring).
BINARY = {"intercept": 1.0, "system": -0.5, "sd_rater": 0.8, "sd_item": 1.2}
LIKERT = {"system": -0.4, "sd_rater": 0.7, "sd_item": 1.0,
          "thresholds": (-2.5, -1.0, 0.5, 2.0)}
PAIRWISE = {"system": 0.4, "sd_item": 0.8, "tie": 0.1}
CRITERIA = [
    {"key": "meaning", "kind": "binary", "scale_points": None, "options": ["yes", "no"]},
    {"key": "fluency", "kind": "likert", "scale_points": 5, "options": []},
]
PREFERENCE = {"key": "preference", "kind": "pairwise", "scale_points": None, "options": [],
              "allow_tie": True}
# Section 1's headline metrics, one value per output (lower WER/CER, higher BERTScore is better).
LARGE_METRICS = ("wer", "cer", "bertscore_f")
CROWD_CRITERIA = {
    "pairwise": {"key": "preference", "kind": "pairwise", "scale_points": None,
                 "options": [], "allow_tie": True},
    "binary": CRITERIA[0],
    "likert": CRITERIA[1],
}
# The goals of the targets (the issue's), as the last lines print them.
GOALS = {"large_analysis_vs_60s": "1.0", "glmm_vs_r": "1.1", "crowd_analysis_vs_60s": "1.0",
         "alpha_vs_pivot_package": "0.5"}
ALPHA_TOLERANCE = 1e-12


@dataclass
class Timing:
    operation: str
    count: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else float("inf")


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


# --- the machine's load -------------------------------------------------------------------


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unavailable"
    return (f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min) on "
            f"{os.cpu_count()} CPUs")


class Load:
    """How busy the machine was while a measurement ran, and how much of it was this process
    and its R worker (whose CPU time shows in neither process_time nor children until it
    exits: the machine's ticks are what counts)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __enter__(self) -> Load:
        self.ticks = machine_cpu_ticks()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.perf_counter() - self.wall
        after = machine_cpu_ticks()
        text = f"load:       {self.label}: {load_average()}"
        if self.ticks is not None and after is not None and after[1] > self.ticks[1]:
            busy = (after[0] - self.ticks[0]) / (after[1] - self.ticks[1])
            text += f"; all cores {busy:.0%} busy over {wall:.0f} s"
            if busy * (os.cpu_count() or 1) > 1.2:  # more than this bench's one busy core
                text += " (NOT IDLE: other processes ran; figures are low and noisy)"
        print(text)


# --- the simulated studies ----------------------------------------------------------------


def design(raters: int, items: int, per_item: int) -> tuple[np.ndarray, np.ndarray]:
    """(rater, item) index arrays: item i rated by `per_item` consecutive raters (mod raters)
    starting at i * raters // items."""
    if per_item > raters:
        raise ValueError("--ratings-per-item cannot exceed --raters")
    item = np.repeat(np.arange(items), per_item)
    start = item * raters // items
    rater = (start + np.tile(np.arange(per_item), items)) % raters
    return rater, item


def _names(prefix: str, count: int, width: int) -> np.ndarray:
    return np.array([f"{prefix}-{k:0{width}d}" for k in range(count)], dtype=object)


def simulate(raters: int, items: int, per_item: int, seed: int) -> pd.DataFrame:
    """The tidy judgments table of `analyse` (one row per judgment and criterion)."""
    rng = np.random.default_rng(seed)
    rater, item = design(raters, items, per_item)
    system = (item + rater) % 2
    n = len(rater)
    u = rng.normal(0, BINARY["sd_rater"], raters)
    v = rng.normal(0, BINARY["sd_item"], items)
    eta = BINARY["intercept"] + BINARY["system"] * system + u[rater] + v[item]
    yes = rng.random(n) < 1 / (1 + np.exp(-eta))
    u2 = rng.normal(0, LIKERT["sd_rater"], raters)
    v2 = rng.normal(0, LIKERT["sd_item"], items)
    latent = LIKERT["system"] * system + u2[rater] + v2[item] + rng.logistic(0, 1, n)
    rating = 1 + (latent[:, None] > np.array(LIKERT["thresholds"])[None, :]).sum(axis=1)
    seconds = np.round(rng.lognormal(np.log(12), 0.5, n), 1)
    common = {
        "rater": _names("rater", raters, 3)[rater],
        "rater_id": rater.astype(np.int64) + 1,
        "rater_kind": "crowd",
        "is_human": True,
        "output": item * len(SYSTEMS) + system + 1,
        "output_b": np.nan,
        "item": _names("item", items, 4)[item],
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


def simulate_large(raters: int, items: int, per_item: int, pairwise_per_item: int,
                   seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Section 1's study: `simulate`'s yes/no and Likert judgments, a pairwise criterion on
    each item's two outputs by `pairwise_per_item` raters (the side at random, P(tie) 0.1),
    one LLM judge answering yes/no on every output (from the outputs' true quality, with its
    own noise), and the metrics table (one row per output, `LARGE_METRICS`, each a noisy
    function of the same quality)."""
    judgments = simulate(raters, items, per_item, seed)
    rng = np.random.default_rng(seed + 1)
    rater, item = design(raters, items, pairwise_per_item)
    n = len(rater)
    left = rng.integers(0, 2, n)  # the system shown as A
    v = rng.normal(0, PAIRWISE["sd_item"], items)
    b_wins = rng.random(n) < 1 / (1 + np.exp(-(PAIRWISE["system"] + v[item])))
    value = np.where(np.where(left == 1, b_wins, ~b_wins), "A", "B").astype(object)
    value[rng.random(n) < PAIRWISE["tie"]] = "tie"
    pairwise = pd.DataFrame({
        "rater": _names("rater", raters, 3)[rater], "rater_id": rater.astype(np.int64) + 1,
        "rater_kind": "crowd", "is_human": True,
        "output": item * len(SYSTEMS) + left + 1, "output_b": item * len(SYSTEMS) + 1 - left + 1,
        "item": _names("item", items, 4)[item],
        "system": np.array(SYSTEMS, dtype=object)[left],
        "system_b": np.array(SYSTEMS, dtype=object)[1 - left],
        "criterion": PREFERENCE["key"], "criterion_kind": "pairwise", "value": value,
        "numeric": np.nan, "seconds": np.round(rng.lognormal(np.log(12), 0.5, n), 1)})
    outputs = np.arange(items * len(SYSTEMS))
    out_item, out_system = outputs // len(SYSTEMS), outputs % len(SYSTEMS)
    quality = (BINARY["intercept"] + BINARY["system"] * out_system
               + rng.normal(0, BINARY["sd_item"], items)[out_item])
    noisy = quality + rng.normal(0, 1, len(outputs))
    says_yes = rng.random(len(outputs)) < 1 / (1 + np.exp(-noisy))
    judge = pd.DataFrame({
        "rater": "judge-1", "rater_id": np.int64(raters + 1), "rater_kind": "llm",
        "is_human": False, "output": outputs + 1, "output_b": np.nan,
        "item": _names("item", items, 4)[out_item],
        "system": np.array(SYSTEMS, dtype=object)[out_system], "system_b": None,
        "criterion": "meaning", "criterion_kind": "binary",
        "value": np.where(says_yes, "yes", "no").astype(object),
        "numeric": says_yes.astype(float), "seconds": np.nan})
    wer = np.clip(0.3 - 0.1 * quality + rng.normal(0, 0.08, len(outputs)), 0, None)
    metrics = pd.DataFrame({
        "output": outputs + 1, "item": _names("item", items, 4)[out_item],
        "system": np.array(SYSTEMS, dtype=object)[out_system], "wer": wer,
        "cer": np.clip(wer * 0.6 + rng.normal(0, 0.03, len(outputs)), 0, None),
        "bertscore_f": np.clip(0.9 - 0.3 * wer + rng.normal(0, 0.02, len(outputs)), 0, 1)})
    return pd.concat([judgments, pairwise, judge], ignore_index=True), metrics


def simulate_crowd(raters: int, items: int, kind: str, seed: int) -> pd.DataFrame:
    """A crowd study: each rater gives one judgment, on one item (items in turn, shuffled).

    Pairwise: the item's two outputs (sys-a, sys-b), the side each is shown on at random;
    P(tie) 0.1, else P(sys-b chosen) = logistic(0.4 + v_item). Binary and Likert: one output
    of the item, values as in `simulate`."""
    rng = np.random.default_rng(seed + 3)
    item = rng.permutation(np.resize(np.arange(items), raters))
    rater = np.arange(raters)
    system = rng.integers(0, 2, raters)  # pairwise: the system shown as A (left)
    v = rng.normal(0, PAIRWISE["sd_item"], items)
    common = {
        "rater": _names("crowd", raters, 5),
        "rater_id": rater.astype(np.int64) + 1,
        "rater_kind": "crowd",
        "is_human": True,
        "output": item * 2 + system + 1,
        "item": _names("item", items, 4)[item],
        "system": np.array(SYSTEMS, dtype=object)[system],
        "seconds": np.round(rng.lognormal(np.log(12), 0.5, raters), 1),
    }
    if kind == "pairwise":
        b_wins = rng.random(raters) < 1 / (1 + np.exp(-(PAIRWISE["system"] + v[item])))
        left_wins = np.where(system == 1, b_wins, ~b_wins)
        value = np.where(left_wins, "A", "B").astype(object)
        value[rng.random(raters) < PAIRWISE["tie"]] = "tie"
        extra = {"output_b": item * 2 + (1 - system) + 1,
                 "system_b": np.array(SYSTEMS, dtype=object)[1 - system],
                 "numeric": np.nan}
    elif kind == "binary":
        eta = BINARY["intercept"] + BINARY["system"] * system + v[item]
        yes = rng.random(raters) < 1 / (1 + np.exp(-eta))
        value = np.where(yes, "yes", "no").astype(object)
        extra = {"output_b": np.nan, "system_b": None, "numeric": yes.astype(float)}
    else:
        latent = LIKERT["system"] * system + v[item] + rng.logistic(0, 1, raters)
        rating = 1 + (latent[:, None] > np.array(LIKERT["thresholds"])[None, :]).sum(axis=1)
        value = rating.astype(str).astype(object)
        extra = {"output_b": np.nan, "system_b": None, "numeric": rating.astype(float)}
    criterion = CROWD_CRITERIA[kind]
    return pd.DataFrame({**common, **extra, "criterion": criterion["key"],
                         "criterion_kind": kind, "value": value})


def glmm_frame(judgments: pd.DataFrame) -> pd.DataFrame:
    """The binary criterion as the pipeline hands it to the model: y, system, rater, item."""
    rows = judgments[judgments["criterion"] == "meaning"]
    return pd.DataFrame({"y": rows["numeric"].to_numpy(), "system": rows["system"].to_numpy(),
                         "rater": rows["rater"].to_numpy(), "item": rows["item"].to_numpy()})


def alpha_table(raters: int, units: int, n_rated: int, seed: int) -> pd.DataFrame:
    """Tidy nominal ratings (exactly `n_rated` of raters x units cells, rows shuffled) with
    integer keys as `judgments_tidy` gives them (rater ids, output ids) and 0/1 values."""
    if n_rated > raters * units:
        raise ValueError("more judgments than rater x unit cells")
    rng = np.random.default_rng(seed + 1)
    cells = np.sort(rng.choice(raters * units, size=n_rated, replace=False))
    rater, unit = np.divmod(cells, units)
    # Units differ in how clearly "yes" they are; raters agree moderately.
    p_unit = rng.beta(1.2, 0.8, units)
    yes = rng.random(n_rated) < p_unit[unit]
    order = rng.permutation(n_rated)  # tidy tables come in no particular order
    return pd.DataFrame({"unit": unit[order].astype(np.int64) + 100_001,
                         "rater": rater[order].astype(np.int64) + 1,
                         "value": yes[order].astype(np.int64)})


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
          f"Python {platform.python_version()}; {load_average()}")
    print(f"libraries:  R {versions.get('R')}, lme4 {versions.get('lme4')}, ordinal "
          f"{versions.get('ordinal')}, jsonlite {versions.get('jsonlite')} "
          f"({versions.get('bridge')}), pandas {versions.get('pandas')}, numpy {np.__version__}, "
          f"references (dev-only, GPL): krippendorff {dev_version('krippendorff')}, pingouin "
          f"{dev_version('pingouin')}")
    print(f"parameters: study {args.raters} raters x {args.items} items, "
          f"{args.ratings_per_item} per item, clmm={not args.no_clmm}, "
          f"pipeline={not args.skip_pipeline}; glmm sizes {args.glmm_sizes} "
          f"({args.glmm_raters} raters); crowd {args.crowd_raters} raters x "
          f"{args.crowd_items} items ({args.crowd_kind}); alpha {args.alpha_judgments:,} "
          f"({args.alpha_raters} raters x {args.alpha_units} units); repeat={args.repeat} "
          f"seed={args.seed}")


def print_table(title: str, timings: list[Timing], unit: str, reference: str | None) -> None:
    base = next((t for t in timings if t.operation == reference), None)
    header = "x ref" if base else ""
    print(f"\n{title}\n{'operation':<48} {unit:>10} {'seconds':>9} {unit + '/s':>13} "
          f"{header:>8}")
    for t in timings:
        ratio = f"{t.seconds / base.seconds:>8.3f}" if base else ""
        print(f"{t.operation:<48} {t.count:>10,} {t.seconds:>9.3f} {t.rate:>13,.0f} {ratio}")


def print_sections(result: dict[str, Any], total: float, n: int, title: str) -> None:
    timings = [Timing("analyse()", n, total)]
    for criterion in result["criteria"]:
        sections = criterion.get("_seconds", {})
        timings.append(Timing(f"  {criterion['key']} ({criterion['kind']})",
                              criterion["n_judgments"], sum(sections.values())))
        timings += [Timing(f"    {name}", criterion["n_judgments"], s)
                    for name, s in sections.items()]
    print_table(title, timings, "judgments", "analyse()")
    if result["warnings"]:
        print(f"warnings:   {result['warnings']}")


# --- 1. the whole analysis ----------------------------------------------------------------


def run_pipeline(judgments: pd.DataFrame, metrics: pd.DataFrame, no_clmm: bool) -> float:
    from analysis.stats.pipeline import analyse

    options: dict = {}
    if no_clmm:
        options["formulas"] = {"fluency": "rating ~ system"}
    with Load("during the whole analysis"):
        seconds, result = timed(lambda: analyse(judgments, [*CRITERIA, PREFERENCE], metrics,
                                                options))
    print_sections(result, seconds, len(judgments), "1. the whole analysis "
                   "(analysis.stats.pipeline.analyse; x ref: share of the total)")
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
    print(f"truth:      binary system B {BINARY['system']}, SDs rater {BINARY['sd_rater']} "
          f"item {BINARY['sd_item']}; Likert system B {LIKERT['system']}, SDs rater "
          f"{LIKERT['sd_rater']} item {LIKERT['sd_item']}")
    return seconds


# --- 2. the GLMM against R ----------------------------------------------------------------

# Both run in the bridge's R worker; the frame stays in R's global environment between them.
_R_KEEP_FRAME = r"""
function(d) { assign(".evalstudy_bench_frame", d, envir = globalenv()); nrow(d) }
"""
# glmer and the summaries the bridge's fit returns (evalstudy_glmer_summary, models.R), timed
# apart; "code" requests see the functions of analysis/stats/r/*.R.
_R_FIT = r"""
function() {
  d <- get(".evalstudy_bench_frame", envir = globalenv())
  started <- proc.time()[["elapsed"]]
  fit <- lme4::glmer(y ~ system + (1|rater) + (1|item), data = d, family = stats::binomial)
  fitted <- proc.time()[["elapsed"]]
  s <- evalstudy_glmer_summary(fit)
  list(glmer = fitted - started, summaries = proc.time()[["elapsed"]] - fitted,
       fixef = s$est, loglik = s$loglik)
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

    def fit(self) -> dict[str, Any]:
        """{"glmer", "summaries": seconds inside R, "fixef", "loglik"}."""
        from analysis.stats import rbridge

        try:
            out = rbridge.r_call(_R_FIT)
        except rbridge.RError:  # the worker was restarted (its global environment is new)
            self.send()
            out = rbridge.r_call(_R_FIT)
        return {"glmer": float(out["glmer"][0]), "summaries": float(out["summaries"][0]),
                "fixef": [float(x) for x in out["fixef"]], "loglik": float(out["loglik"][0])}


def glmm_rounds(size: int, repeat: int) -> int:
    """--repeat rounds, more for small sizes (up to 10x): the same time per size, roughly."""
    return max(repeat, min(math.ceil(repeat * GLMM_ROUND_JUDGMENTS / size), 10 * repeat))


def run_glmm_size(size: int, raters: int, repeat: int, seed: int) -> dict[str, Any]:
    """Best-of-rounds timings of the bridge's fit and of R's at one size."""
    from analysis.stats.models import fit_binomial_glmm

    per_item = min(GLMM_RATINGS_PER_ITEM, raters)
    items = max(1, round(size / per_item))
    frame = glmm_frame(simulate(raters, items, per_item, seed))
    direct = DirectR(frame)
    best = {"glmer": math.inf, "r": math.inf, "bridge": math.inf}
    overheads: list[float] = []
    r_out: dict[str, Any] = {}
    fit: Any = None
    for round_no in range(glmm_rounds(len(frame), repeat)):
        # Alternate which goes first, so that neither always follows the other's garbage.
        for which in (("r", "bridge") if round_no % 2 == 0 else ("bridge", "r")):
            if which == "r":
                r_out = direct.fit()
                best["glmer"] = min(best["glmer"], r_out["glmer"])
                best["r"] = min(best["r"], r_out["glmer"] + r_out["summaries"])
            else:
                seconds, fit = timed(lambda: fit_binomial_glmm(frame, GLMM_FORMULA))
                best["bridge"] = min(best["bridge"], seconds)
                overheads.append(seconds - fit.extra["r_seconds"])
    ours = [c.estimate for c in fit.coefficients]
    return {"n": len(frame), "items": items, "rounds": len(overheads), **best,
            "overhead": float(np.median(overheads)),
            "fixef_diff": max(abs(a - b) for a, b in zip(ours, r_out["fixef"], strict=True)),
            "loglik_diff": abs(fit.extra["loglik"] - r_out["loglik"]),
            "converged": fit.converged, "frame": frame}


def run_glmm(args: argparse.Namespace) -> float:
    """Section 2; returns the worst ratio (the target's)."""
    print(f"\n2. binomial GLMM {GLMM_FORMULA}: fit_binomial_glmm (auto: R via Rscript) vs "
          "R alone on a frame already in R (glmer + the same summaries, proc.time)")
    print(f"{'judgments':>10} {'items':>6} {'rounds':>6} {'glmer':>8} {'+summ.':>8} "
          f"{'bridge':>8} {'x R':>7} {'x glmer':>8} {'overhead':>9} {'|fixef diff|':>13}")
    worst = 0.0
    results = []
    with Load("during the GLMM comparison"):
        for size in args.glmm_sizes:
            out = run_glmm_size(size, args.glmm_raters, args.glmm_repeat, args.seed)
            results.append(out)
            ratio = out["bridge"] / out["r"]
            worst = max(worst, ratio)
            print(f"{out['n']:>10,} {out['items']:>6} {out['rounds']:>6} {out['glmer']:>8.3f} "
                  f"{out['r']:>8.3f} {out['bridge']:>8.3f} {ratio:>7.3f} "
                  f"{out['bridge'] / out['glmer']:>8.3f} {out['overhead'] * 1000:>7.0f}ms "
                  f"{out['fixef_diff']:>13.1e}", flush=True)
            if out["loglik_diff"] > 1e-8 or not out["converged"]:
                print(f"            CHECK: loglik differs by {out['loglik_diff']:.2e}, "
                      f"converged {out['converged']}")
    print("            seconds are the best of the rounds; x R = bridge / (glmer + summaries "
          "in R); overhead = median over rounds of the bridge's wall time minus R's own time "
          "for the fit and summaries")
    print_bridge_costs(results[-1]["frame"])
    if args.profile:
        from analysis.stats.models import fit_binomial_glmm

        frame = results[-1]["frame"]
        profile(f"fit_binomial_glmm at {len(frame):,} judgments",
                lambda: fit_binomial_glmm(frame, GLMM_FORMULA), args.profile_top)
    return worst


def print_bridge_costs(frame: pd.DataFrame) -> None:
    """What the bridge's overhead is made of: an empty request, and this frame sent alone."""
    from analysis.stats import rbridge

    data, levels = rbridge.make_factors(frame, ["system", "rater", "item"])
    rframe = rbridge.RFrame(data, levels=levels)
    empty = min(timed(lambda: rbridge.r_call("function() 1L"))[0] for _ in range(20))
    prepare = min(timed(lambda: rbridge.make_factors(frame, ["system", "rater", "item"]))[0]
                  for _ in range(3))
    send = [timed(lambda: rbridge.r_request("function(d) nrow(d)", rframe)) for _ in range(3)]
    best_send = min(send, key=lambda t: t[0])
    print(f"bridge:     at {len(frame):,} rows: an empty request {empty * 1000:.1f} ms; factors "
          f"{prepare * 1000:.0f} ms; sending the frame {best_send[0] * 1000:.0f} ms, of which "
          f"R {best_send[1].elapsed * 1000:.0f} ms (readBin, factors)")


# --- 3. a crowd study ---------------------------------------------------------------------


def run_crowd(args: argparse.Namespace) -> float:
    """Section 3; returns analyse()'s seconds."""
    from analysis.stats.pipeline import analyse

    judgments = simulate_crowd(args.crowd_raters, args.crowd_items, args.crowd_kind, args.seed)
    criterion = CROWD_CRITERIA[args.crowd_kind]
    pairs = args.crowd_raters * (args.crowd_raters - 1) // 2
    per_item = judgments.groupby("item").size()
    print(f"\ncrowd:      {len(judgments):,} {args.crowd_kind} judgments, "
          f"{judgments['rater'].nunique():,} raters (one judgment each) x "
          f"{judgments['item'].nunique():,} items ({per_item.min()}-{per_item.max()} "
          f"judgments per item), {pairs:,} rater pairs")
    with Load("during the crowd analysis"):
        seconds, result = timed(lambda: analyse(judgments, [criterion], None, {}))
    print_sections(result, seconds, len(judgments), "3. a crowd study end to end "
                   "(analyse(); x ref: share of the total)")
    agreement = result["criteria"][0].get("agreement") or {}
    cohen = agreement.get("cohen_pairs") if isinstance(agreement, dict) else None
    if cohen:
        print(f"pairs:      {cohen['n_pairs']:,} rater pairs share >= "
              f"{cohen['min_shared_units']} units (kappa computed for {cohen['n_computed']}); "
              f"left out: {cohen['excluded']}")
    elif agreement:
        print(f"agreement:  {agreement.get('note') or agreement.get('error')}")
    if args.profile:
        profile("the crowd analysis", lambda: analyse(judgments, [criterion], None, {}),
                args.profile_top)
    return seconds


# --- 4. Krippendorff's alpha --------------------------------------------------------------


def run_alpha(args: argparse.Namespace) -> float:
    """Section 4; returns our time / the pivot + package route's (nan without the package)."""
    from analysis.stats.agreement import krippendorff_alpha

    try:
        import krippendorff  # GPL reference: dev-only
    except ImportError:
        krippendorff = None
    seconds, frame = timed(lambda: alpha_table(
        args.alpha_raters, args.alpha_units, args.alpha_judgments, args.seed))
    cells = args.alpha_raters * args.alpha_units
    print(f"\nalpha data: {len(frame):,} tidy judgments ({args.alpha_raters:,} raters x "
          f"{args.alpha_units:,} units, {1 - len(frame) / cells:.0%} missing, integer keys, "
          f"0/1 values), built in {seconds:.2f} s (untimed)")

    def pivot() -> np.ndarray:
        wide = frame.pivot(index="rater", columns="unit", values="value")
        return wide.to_numpy(dtype=float)

    best: dict[str, float] = {}
    values: dict[str, float] = {}
    reference = "df.pivot + krippendorff.alpha"
    ours = "krippendorff_alpha (tidy table)"
    package = "  krippendorff.alpha alone (ready matrix)"
    boot = "krippendorff_alpha + bootstrap CI (B=2000)"
    matrix = pivot() if krippendorff is not None else None
    with Load("during the alpha comparison"):
        for _ in range(args.repeat):
            if krippendorff is not None:
                seconds, value = timed(lambda: krippendorff.alpha(
                    reliability_data=pivot(), level_of_measurement="nominal"))
                best[reference] = min(best.get(reference, math.inf), seconds)
                values[reference] = float(value)
                seconds, _ = timed(lambda: krippendorff.alpha(
                    reliability_data=matrix, level_of_measurement="nominal"))
                best[package] = min(best.get(package, math.inf), seconds)
            seconds, estimate = timed(lambda: krippendorff_alpha(frame, "nominal"))
            best[ours] = min(best.get(ours, math.inf), seconds)
            values[ours] = estimate.value
        seconds, with_ci = timed(lambda: krippendorff_alpha(frame, "nominal", n_boot=2000,
                                                            seed=1))
        best[boot] = seconds
    labels = [reference, package, ours, boot]
    print_table(f"4. Krippendorff's alpha (nominal), best of {args.repeat} (x ref: time / "
                "pivot + package)", [Timing(label, len(frame), best[label])
                                     for label in labels if label in best], "judgments",
                reference if krippendorff is not None else None)
    print(f"bootstrap:  alpha {with_ci.value:.6f} [{with_ci.ci_low:.6f}, {with_ci.ci_high:.6f}] "
          f"({with_ci.ci_method})")
    ratio = math.nan
    if krippendorff is None:
        print("reference:  krippendorff (GPL, dev-only) not installed: comparison skipped")
    else:
        ratio = best[ours] / best[reference]
        difference = abs(values[ours] - values[reference])
        agree = math.isclose(values[ours], values[reference], rel_tol=0.0,
                             abs_tol=ALPHA_TOLERANCE)
        print(f"values:     alpha {values[ours]!r} vs the package's {values[reference]!r}: "
              f"{'agree' if agree else 'DIFFERENT'} to {ALPHA_TOLERANCE:g} "
              f"(|difference| {difference:.1e})")
    print_alpha_time(frame)
    run_icc_reference(args.seed)
    if args.profile:
        profile("krippendorff_alpha on the tidy table",
                lambda: krippendorff_alpha(frame, "nominal"), args.profile_top)
    return ratio


def print_alpha_time(frame: pd.DataFrame) -> None:
    """Where one real call of krippendorff_alpha spends its time: cProfile's cumulative time
    of each function it calls (the profiler adds its own overhead to the total)."""
    from analysis.stats.agreement import alpha as alpha_module

    profiler = cProfile.Profile()
    profiler.runcall(alpha_module.krippendorff_alpha, frame, "nominal")
    stats = pstats.Stats(profiler)
    entry = next(key for key in stats.stats  # type: ignore[attr-defined]
                 if key[2] == "krippendorff_alpha" and key[0].endswith("alpha.py"))
    total = stats.stats[entry][3]  # type: ignore[attr-defined]
    callees = [(key, value) for key, value in stats.stats.items()  # type: ignore[attr-defined]
               if entry in value[4]]
    callees.sort(key=lambda item: -item[1][4][entry][3])
    print(f"where the time goes, cProfile of one call ({total:.3f} s under the profiler):")
    for (path, line, name), value in callees[:8]:
        seconds = value[4][entry][3]
        if seconds < 0.01 * total:
            break
        print(f"    {Path(path).name}:{line} {name:<28} {seconds:>8.3f} s {seconds / total:>6.0%}")


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


# --- main ---------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < GLMM_RATINGS_PER_ITEM:
        raise argparse.ArgumentTypeError(
            f"comma-separated judgment counts, each at least {GLMM_RATINGS_PER_ITEM}")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--raters", type=int, default=200)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--ratings-per-item", type=int, default=50)
    parser.add_argument("--pairwise-per-item", type=int, default=10,
                        help="section 1: raters comparing each item's two outputs")
    parser.add_argument("--no-clmm", action="store_true",
                        help="fit the Likert criterion with ordinal::clm instead of the CLMM")
    parser.add_argument("--skip-pipeline", action="store_true",
                        help="leave out section 1 (the whole analysis of a rated study)")
    parser.add_argument("--glmm-sizes", type=parse_sizes, default=list(GLMM_SIZES),
                        help="judgment counts of the GLMM comparison (default "
                             f"{','.join(str(s) for s in GLMM_SIZES)})")
    parser.add_argument("--glmm-raters", type=int, default=200)
    parser.add_argument("--glmm-repeat", type=int, default=5,
                        help="best of N rounds of the GLMM comparison (more for small sizes)")
    parser.add_argument("--crowd-raters", type=int, default=7150)
    parser.add_argument("--crowd-items", type=int, default=1000)
    parser.add_argument("--crowd-kind", choices=sorted(CROWD_CRITERIA), default="pairwise")
    parser.add_argument("--alpha-judgments", type=int, default=1_000_000)
    parser.add_argument("--alpha-raters", type=int, default=1000)
    parser.add_argument("--alpha-units", type=int, default=1250)
    parser.add_argument("--repeat", type=int, default=3,
                        help="best of N for the alpha comparison")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile fit_binomial_glmm, the crowd analysis and "
                             "krippendorff_alpha once")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--smoke", action="store_true",
                        help="no section 1, tiny GLMM, crowd and alpha runs, no goal (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        # Section 1 on a tiny study (every section of the analysis still runs).
        args.raters, args.items, args.ratings_per_item, args.pairwise_per_item = 20, 40, 5, 3
        args.glmm_sizes, args.glmm_raters, args.glmm_repeat = [400], 20, 1
        args.crowd_raters, args.crowd_items = 300, 40
        args.alpha_judgments, args.alpha_raters, args.alpha_units, args.repeat = 3000, 40, 100, 1
    if min(args.raters, args.items, args.ratings_per_item, args.repeat, args.glmm_raters,
           args.glmm_repeat, args.crowd_raters, args.crowd_items) < 1:
        parser.error("counts and --repeat must be at least 1")
    if args.crowd_raters < 2:
        parser.error("--crowd-raters must be at least 2")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from analysis.stats import rbridge

    started = time.perf_counter()
    if not rbridge.r_available():
        sys.exit(f"R is not available: {rbridge.r_unavailable_reason()}")
    print_environment(args)
    print(f"R start-up: {time.perf_counter() - started:.2f} s (untimed below)")
    ratios: dict[str, float] = {"large_analysis_vs_60s": math.nan}
    if not args.skip_pipeline:
        seconds, (judgments, metrics) = timed(lambda: simulate_large(
            args.raters, args.items, args.ratings_per_item, args.pairwise_per_item, args.seed))
        binary = judgments[(judgments["criterion"] == "meaning") & judgments["is_human"]]
        counts = judgments.groupby("criterion").size()
        print(f"study:      {len(judgments):,} judgments ({counts['meaning']:,} yes/no, of which "
              f"{int((~judgments['is_human']).sum()):,} by the LLM judge, "
              f"{counts['fluency']:,} Likert, {counts['preference']:,} pairwise), "
              f"{binary['rater'].nunique()} raters x {binary['item'].nunique()} items x "
              f"{len(SYSTEMS)} systems, {len(LARGE_METRICS)} metrics on {len(metrics):,} "
              f"outputs; yes {binary['numeric'].mean():.1%}; simulated in {seconds:.2f} s "
              "(untimed)")
        ratios["large_analysis_vs_60s"] = run_pipeline(judgments, metrics, args.no_clmm) / 60.0
    ratios["glmm_vs_r"] = run_glmm(args)
    ratios["crowd_analysis_vs_60s"] = run_crowd(args) / 60.0
    ratios["alpha_vs_pivot_package"] = run_alpha(args)
    print(f"\nload:       at the end: {load_average()}; whole bench "
          f"{time.perf_counter() - started:.0f} s")
    if args.smoke:
        print("smoke: tiny sizes, no goal")
        return
    for name, goal in GOALS.items():
        print(f"target {name}: ratio {ratios[name]:.3f} (goal <= {goal})")


if __name__ == "__main__":
    main()
