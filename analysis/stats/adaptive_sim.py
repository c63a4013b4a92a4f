"""Simulated pairwise studies: adaptive allocation against the fixed balanced design, under a
group-sequential stopping rule.

A study has K systems with known Bradley-Terry strengths, N items, and raters who each take a
seat of `seat_size` comparisons (each item at most once). Every `seat_size` judgments the plan
looks: the Bradley-Terry model with a position term is fitted (`bt_fit`, the model of
`analysis.stats.models.preference_model`, ties excluded, model-based SEs), each contrast gets
its repeated CI at the look's alpha-spending boundary (`analysis.stats.sequential`), and the
study stops when every contrast's repeated CI is at most `target_width` wide (or at
`max_judgments`). The fixed design serves the cells of the pairwise Latin square
(`evalstudy.design.pairwise`: consecutive items cycle through every ordered pair) in order; the
adaptive one builds each seat with `evalstudy.design.adaptive.allocate_seat` from the last
look's strengths. Under no effect, "a false positive" is a look at which some contrast's
repeated CI excludes 0: the family-wise error of the sequential test, which the plan keeps at
alpha by splitting it over the contrasts (Bonferroni) and spending each share over the looks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis.stats import sequential
from evalstudy.design import pairwise
from evalstudy.design.adaptive import Tally, all_pairs, allocate_seat
from evalstudy.design.builders import TargetCell


@dataclass
class BTFit:
    """Strengths (reference: the first system, 0), their covariance (reference row and column
    0), and the position (A) effect; `ok` False when the model is not estimable yet (a
    system never compared, separation)."""

    strengths: np.ndarray
    covariance: np.ndarray
    position: float
    ok: bool


def bt_fit(k: int, a: np.ndarray, b: np.ndarray, wins_a: np.ndarray, n: np.ndarray,
           *, max_iter: int = 50) -> BTFit:
    """Maximum-likelihood Bradley-Terry with a position term from binomial counts: rows of
    (system index shown as A, as B, wins of A, comparisons). P(A wins) = logit^-1(position +
    beta_A - beta_B), beta_0 = 0. Newton-Raphson on the aggregated rows (what a GLM on one row
    per judgment computes, in microseconds)."""
    x = np.zeros((len(a), k))
    x[:, 0] = 1.0  # the position term takes column 0; the reference strength is 0
    rows = np.arange(len(a))
    x[rows[a > 0], a[a > 0]] += 1.0
    x[rows[b > 0], b[b > 0]] -= 1.0
    theta = np.zeros(k)
    failed = BTFit(np.zeros(k), np.full((k, k), np.inf), 0.0, False)
    for _ in range(max_iter):
        eta = x @ theta
        p = 1.0 / (1.0 + np.exp(-eta))
        w = n * p * (1.0 - p)
        hessian = x.T @ (x * w[:, None])
        if np.linalg.matrix_rank(hessian) < k:
            return failed
        step = np.linalg.solve(hessian, x.T @ (wins_a - n * p))
        theta = theta + step
        if np.max(np.abs(theta)) > 15:
            return failed  # separation: an estimate runs off to infinity
        if np.max(np.abs(step)) < 1e-10:
            break
    covariance = np.linalg.inv(hessian)
    strengths = theta.copy()
    strengths[0] = 0.0
    cov = covariance.copy()
    cov[0, :] = 0.0
    cov[:, 0] = 0.0
    return BTFit(strengths, cov, float(theta[0]), True)


def contrast_estimates(fit: BTFit, contrasts: Sequence[tuple[int, int]]
                       ) -> list[tuple[float, float]]:
    """(estimate, SE) of beta_i - beta_j for each contrast (i, j)."""
    out = []
    for i, j in contrasts:
        u = np.zeros(len(fit.strengths))
        u[i] += 1.0
        u[j] -= 1.0
        out.append((float(u @ fit.strengths), math.sqrt(max(float(u @ fit.covariance @ u),
                                                            0.0))))
    return out


@dataclass
class Scenario:
    """A simulated study and its pre-registered plan."""

    strengths: Sequence[float]
    items: int = 200
    seat_size: int = 40  # judgments per rater, and the plan's look interval
    target_width: float = 0.8  # of every contrast's repeated CI, on the log-odds scale
    alpha: float = 0.05  # family-wise, split over the contrasts
    spending: str = "obrien_fleming"
    max_judgments: int = 6000
    contrasts: Sequence[tuple[int, int]] | None = None  # None: every pair
    _bounds: list[float] = field(default_factory=list, repr=False)

    def pairs(self) -> list[tuple[int, int]]:
        k = len(self.strengths)
        return list(self.contrasts) if self.contrasts else [
            (i, j) for i in range(k) for j in range(i + 1, k)]

    def boundaries(self) -> list[float]:
        """Every look's boundary (looks at every seat_size judgments up to the maximum)."""
        if not self._bounds:
            counts = list(range(self.seat_size, self.max_judgments + 1, self.seat_size))
            fractions = sequential.observed_fractions(counts, self.max_judgments)
            self._bounds = sequential.spending_boundaries(
                fractions, self.alpha / len(self.pairs()), self.spending)
        return self._bounds


@dataclass
class Outcome:
    judgments: int
    width_met: bool
    rejected: bool  # some look's repeated CI excluded 0 for some contrast
    naive_rejected: bool  # the same at the fixed-sample z of alpha / contrasts, every look


def simulate(scenario: Scenario, design: str, rng: np.random.Generator) -> Outcome:
    """Run one study with `design` "fixed" or "adaptive" until its plan stops it."""
    k = len(scenario.strengths)
    names = [f"s{i}" for i in range(k)]
    index = {name: i for i, name in enumerate(names)}
    items = [f"i{i}" for i in range(scenario.items)]
    truth = np.asarray(scenario.strengths, dtype=float)
    contrasts = scenario.pairs()
    named = [(names[i], names[j]) for i, j in contrasts]
    bounds = scenario.boundaries()
    naive = _naive_z(scenario.alpha / len(contrasts))
    wins = np.zeros((k, k))
    shown = np.zeros((k, k))
    stream = _fixed_stream(items, names) if design == "fixed" else None
    tally = Tally.of(())
    strengths = dict.fromkeys(names, 0.0)
    judgments, rejected, naive_rejected = 0, False, False
    for look, boundary in enumerate(bounds):
        if stream is not None:
            cells = [next(stream) for _ in range(scenario.seat_size)]
        else:
            cells = allocate_seat(items=items, systems=names, strengths=strengths,
                                  contrasts=named, assigned=(), size=scenario.seat_size,
                                  tally=tally)
        for cell in cells:
            i, j = index[cell.system], index[str(cell.system_b)]
            p = 1.0 / (1.0 + math.exp(-(truth[i] - truth[j])))
            wins[i, j] += rng.random() < p
            shown[i, j] += 1
        judgments += len(cells)
        a, b = np.nonzero(shown)
        fit = bt_fit(k, a, b, wins[a, b], shown[a, b])
        if not fit.ok:
            continue
        strengths = {name: float(fit.strengths[i]) for i, name in enumerate(names)}
        estimates = contrast_estimates(fit, contrasts)
        rejected = rejected or any(abs(e) >= boundary * se for e, se in estimates)
        naive_rejected = naive_rejected or any(abs(e) >= naive * se for e, se in estimates)
        if all(2 * boundary * se <= scenario.target_width for _, se in estimates):
            return Outcome(judgments, True, rejected, naive_rejected)
        del look
    return Outcome(judgments, False, rejected, naive_rejected)


def _naive_z(alpha: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2))


def _fixed_stream(items: list[str], systems: list[str]) -> Iterator[TargetCell]:
    """The fixed pairwise Latin square's cells, list after list, in item order: every run of
    consecutive cells is balanced over the ordered pairs."""
    lists = pairwise(items, systems)
    while True:
        for cells in lists:
            yield from cells


@dataclass
class Comparison:
    """Many simulated studies of one scenario under both designs."""

    fixed: list[Outcome]
    adaptive: list[Outcome]

    @staticmethod
    def mean_judgments(outcomes: Sequence[Outcome]) -> float:
        return float(np.mean([o.judgments for o in outcomes]))

    @property
    def ratio(self) -> float:
        return self.mean_judgments(self.adaptive) / self.mean_judgments(self.fixed)


def compare(scenario: Scenario, repetitions: int, seed: int) -> Comparison:
    """Both designs on the same seeds, `repetitions` studies each."""
    fixed, adaptive = [], []
    for r in range(repetitions):
        fixed.append(simulate(scenario, "fixed", np.random.default_rng([seed, r, 0])))
        adaptive.append(simulate(scenario, "adaptive", np.random.default_rng([seed, r, 1])))
    return Comparison(fixed, adaptive)


def error_rate(outcomes: Sequence[Outcome], naive: bool = False) -> tuple[float, float]:
    """The share of studies with a false positive and its Monte Carlo standard error."""
    hits = [o.naive_rejected if naive else o.rejected for o in outcomes]
    rate = float(np.mean(hits))
    return rate, math.sqrt(rate * (1 - rate) / len(hits))


__all__ = ["BTFit", "Comparison", "Outcome", "Scenario", "TargetCell", "all_pairs", "bt_fit",
           "compare", "contrast_estimates", "error_rate", "simulate"]
