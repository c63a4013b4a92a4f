"""Benchmark: judgments an adaptive pairwise study needs against the fixed Latin square, at the
same CI width, and the false-positive rate of its sequential stopping rule.

What is simulated
-----------------
`analysis.stats.adaptive_sim`: K systems with known Bradley-Terry strengths, N items, raters
who each take a seat of `--seat-size` comparisons (each item at most once), a look at every
seat (the plan's check interval): the Bradley-Terry model with a position term is fitted
(the report's preference model, ties excluded), every contrast of the plan gets its repeated
CI at the look's alpha-spending boundary (alpha 0.05 for the family, Bonferroni over the
contrasts, spent by the plan's function over the looks), and the study stops when every
repeated CI is at most `--width` wide. Both designs run under the same plan, seeds and look
schedule:

* fixed: the pairwise Latin square (`evalstudy.design.pairwise`), its cells in order, so every
  run of consecutive judgments is balanced over the ordered pairs;
* adaptive: each seat built by `evalstudy.design.adaptive.allocate_seat` (the code the study's
  seats are built with) at the last look's estimated strengths.

Scenarios
---------
1. main (the target): 10 systems, the plan's contrasts the candidate (strongest) against each of
   the 9 others (a release decision), Pocock-type spending.
2. every pair of 4 systems (strengths 0, 0.3, 0.6, 1.5), O'Brien-Fleming-type spending: where
   every pair is a contrast the balanced design is already close to the best one, and the
   adaptive design gains little; printed so the target is not read as a general promise.
3. the false-positive rate under no effect: 3 equal systems, 10 looks, a width no study
   reaches (every look is a chance to reject), adaptive allocation (its choices depend on the
   data); a rejection is a look where some contrast's repeated CI excludes 0. Beside it, the
   same looks at the fixed-sample z of alpha / contrasts, which optional stopping inflates.
   Then one contrast (2 systems), where the family-wise rate is the sequential test's own.

The last line is ``target adaptive_judgments_vs_fixed: ratio R (goal <= 0.8)``: R = mean
judgments of the adaptive studies over those of the fixed ones in the main scenario, both to
the same repeated-CI width. Run: ``.venv/bin/python bench/adaptive.py [--repetitions 40
--fpr-repetitions 1000 --seed 1]`` (about 1.5 minutes on 2 cores). No database.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.stats.adaptive_sim import (  # noqa: E402
    Scenario,
    compare,
    error_rate,
    simulate,
)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _row(name: str, comparison, seconds: float) -> None:
    for design, outcomes in (("fixed", comparison.fixed), ("adaptive", comparison.adaptive)):
        counts = np.array([o.judgments for o in outcomes])
        met = sum(o.width_met for o in outcomes)
        print(f"  {name:<34} {design:<9} mean {counts.mean():8.1f}  sd {counts.std(ddof=1):7.1f}"
              f"  min {counts.min():6d}  max {counts.max():6d}  width met {met}/{len(outcomes)}")
    print(f"  {'':<34} ratio adaptive/fixed {comparison.ratio:.3f}  ({seconds:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=40)
    parser.add_argument("--fpr-repetitions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seat-size", type=int, default=40)
    parser.add_argument("--width", type=float, default=0.8)
    parser.add_argument("--smoke", action="store_true",
                        help="2 studies per design, 5 for the error rates, no goal (make test)")
    args = parser.parse_args()
    if args.smoke:
        args.repetitions, args.fpr_repetitions = 2, 5

    print(f"load average before: {_load()}  (cpus: {os.cpu_count()})")
    k = 10
    main_strengths = [*np.linspace(0.0, 0.6, k - 1).round(3).tolist(), 0.8]
    main = Scenario(strengths=main_strengths, contrasts=[(k - 1, i) for i in range(k - 1)],
                    items=200, seat_size=args.seat_size, target_width=args.width,
                    max_judgments=8000, spending="pocock")
    every_pair = Scenario(strengths=[0.0, 0.3, 0.6, 1.5], items=200,
                          seat_size=args.seat_size, target_width=args.width,
                          max_judgments=8000, spending="obrien_fleming")
    print(f"judgments to a repeated-CI width of {args.width:g} (log-odds) for every contrast, "
          f"{args.repetitions} studies per design, seats of {args.seat_size}:")
    t0 = time.perf_counter()
    main_result = compare(main, args.repetitions, args.seed)
    _row("candidate vs 9 others (10 systems)", main_result, time.perf_counter() - t0)
    t0 = time.perf_counter()
    pair_result = compare(every_pair, max(args.repetitions // 2, 2), args.seed)
    _row("every pair of 4 systems", pair_result, time.perf_counter() - t0)

    null = Scenario(strengths=[0.0, 0.0, 0.0], items=60, seat_size=20, target_width=0.01,
                    max_judgments=200, spending="pocock")
    t0 = time.perf_counter()
    outcomes = [simulate(null, "adaptive", np.random.default_rng([args.seed, 99, r]))
                for r in range(args.fpr_repetitions)]
    rate, se = error_rate(outcomes)
    naive, naive_se = error_rate(outcomes, naive=True)
    print(f"false positives under no effect (3 equal systems, 10 looks, adaptive, "
          f"{args.fpr_repetitions} studies, {time.perf_counter() - t0:.1f} s):")
    print(f"  repeated CIs at the spent alpha: {rate:.4f} +- {se:.4f} (nominal 0.05, "
          "family-wise; Bonferroni over 3 correlated contrasts makes it conservative)")
    print(f"  fixed-sample z at every look:    {naive:.4f} +- {naive_se:.4f} (what optional "
          "stopping does to an uncorrected test)")
    single = Scenario(strengths=[0.0, 0.0], items=60, seat_size=20, target_width=0.01,
                      max_judgments=200, spending="pocock")
    outcomes = [simulate(single, "adaptive", np.random.default_rng([args.seed, 98, r]))
                for r in range(args.fpr_repetitions)]
    rate, se = error_rate(outcomes)
    naive, naive_se = error_rate(outcomes, naive=True)
    print(f"  one contrast (2 systems), the same looks: {rate:.4f} +- {se:.4f} (nominal 0.05; "
          f"fixed-sample z at every look: {naive:.4f} +- {naive_se:.4f})")
    print(f"load average after: {_load()}")
    if args.smoke:
        print("smoke: tiny sizes, no goal")
        return
    print(f"target adaptive_judgments_vs_fixed: ratio {main_result.ratio:.3f} (goal <= 0.8)")


if __name__ == "__main__":
    main()
