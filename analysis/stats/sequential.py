"""Group-sequential testing for studies that look at their data more than once.

A study that is checked every n judgments and stops when its answer looks clear gets more than
one chance at a false positive: with five looks at the nominal 1.96, a two-sided test at 0.05
rejects a true null about 14 % of the time (Armitage, McPherson & Rowe 1969). The cure used here
is alpha spending (Lan & DeMets 1983): a spending function alpha*(t) says how much of the
type I error may be used by information fraction t (0 < t <= 1); at each look the nominal
boundary c_k is the z for which the probability of crossing for the first time at look k,
under the null, is alpha*(t_k) - alpha*(t_{k-1}). The joint null distribution of the z
statistics over looks is the canonical one (Jennison & Turnbull 2000, ch. 3): Z_k = S_k /
sqrt(I_k), with independent increments of the score S, so corr(Z_j, Z_k) = sqrt(I_j / I_k).
The crossing probabilities are computed by the standard recursive numerical integration
(Armitage et al. 1969; Jennison & Turnbull ch. 19), on a grid with Simpson's weights.

Repeated confidence intervals (Jennison & Turnbull 1989, ch. 9): estimate +- c_k x SE at every
look. Their coverage holds simultaneously over all looks, so a study may stop when they are
narrow enough (a CI-width target) or exclude zero (a decision) and still report an honest
interval: the optional stopping is paid for by the wider c_k.

Also the classic constant-shape designs (Pocock 1977; O'Brien & Fleming 1979), used to pin the
integration against published boundaries. Everything here is two-sided and symmetric.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy.stats import norm

SPENDING_FUNCTIONS = ("obrien_fleming", "pocock")
_GRID = 401  # points per look on the continuation region (odd, for Simpson's rule)


def spent_alpha(t: float, alpha: float, kind: str) -> float:
    """The type I error a two-sided test may have used by information fraction `t`.

    Each side spends half of `alpha` (a symmetric two-sided test is two one-sided tests at
    alpha / 2, the convention of DeMets & Lan 1994, ldbounds, gsDesign and SAS SEQDESIGN, whose
    published boundaries the tests pin). `obrien_fleming`: Lan-DeMets O'Brien-Fleming type,
    per side 2 - 2 Phi(z_{1 - alpha/4} / sqrt(t)): almost nothing early, nearly all of alpha
    at the end. `pocock`: Lan-DeMets Pocock type, alpha ln(1 + (e - 1) t): spent about evenly.
    Both give 0 at t = 0 and alpha at t >= 1.
    """
    if kind not in SPENDING_FUNCTIONS:
        raise ValueError(f"unknown spending function {kind!r}; expected one of "
                         f"{', '.join(SPENDING_FUNCTIONS)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if kind == "obrien_fleming":
        per_side = 2.0 * norm.sf(norm.ppf(1.0 - alpha / 4.0) / math.sqrt(t))
        return float(2.0 * per_side)
    return float(alpha * math.log(1.0 + (math.e - 1.0) * t))


def _simpson(lo: float, hi: float, n: int = _GRID) -> tuple[np.ndarray, np.ndarray]:
    z = np.linspace(lo, hi, n)
    h = (hi - lo) / (n - 1)
    w = np.full(n, 2.0)
    w[1::2] = 4.0
    w[0] = w[-1] = 1.0
    return z, w * h / 3.0


class _Recursion:
    """The null sub-density of Z_k on the continuation region of looks 1..k (a grid with
    quadrature weights), advanced one look at a time."""

    def __init__(self) -> None:
        self.z: np.ndarray | None = None  # grid of the last look's continuation region
        self.mass: np.ndarray | None = None  # density x weight on that grid
        self.info: float = 0.0

    def cross_probability(self, c: float, info: float) -> float:
        """P(no crossing before, |Z_k| >= c at this look) under the null."""
        if self.z is None:
            return float(2.0 * norm.sf(c))
        sd = math.sqrt(info - self.info)
        shift = self.z * math.sqrt(self.info)
        root = math.sqrt(info)
        upper = norm.sf((c * root - shift) / sd)
        lower = norm.cdf((-c * root - shift) / sd)
        assert self.mass is not None
        return float(np.dot(self.mass, upper + lower))

    def advance(self, c: float, info: float) -> None:
        z, weights = _simpson(-c, c)
        if self.z is None:
            density = norm.pdf(z)
        else:
            assert self.mass is not None
            sd = math.sqrt(info - self.info)
            root = math.sqrt(info)
            kernel = norm.pdf((z[:, None] * root - self.z[None, :] * math.sqrt(self.info))
                              / sd) * root / sd
            density = kernel @ self.mass
        self.z, self.mass, self.info = z, density * weights, info


def _check_fractions(fractions: Sequence[float]) -> list[float]:
    out = [float(t) for t in fractions]
    if not out:
        raise ValueError("at least one look is needed")
    if any(not 0 < t <= 1 for t in out):
        raise ValueError(f"information fractions must be in (0, 1], got {out}")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"information fractions must increase from look to look, got {out}")
    return out


def spending_boundaries(fractions: Sequence[float], alpha: float, kind: str
                        ) -> list[float]:
    """Nominal two-sided z boundaries at looks with these information fractions (increasing,
    in (0, 1]) under a Lan-DeMets spending function. The k-th boundary depends on the first
    k fractions only, so boundaries already used stay fixed when later looks are added. A look
    that may spend nothing new (its increment is below 1e-12) gets an infinite boundary."""
    fractions = _check_fractions(fractions)
    recursion = _Recursion()
    bounds: list[float] = []
    previous = 0.0
    for t in fractions:
        spent = spent_alpha(t, alpha, kind)
        target = spent - previous
        previous = spent
        if target <= 1e-12:
            c = math.inf
            bounds.append(c)
            recursion.advance(8.0, t)  # no stopping: the whole line continues
            continue
        c = optimize.brentq(lambda c, t=t, target=target:
                            recursion.cross_probability(c, t) - target, 0.0, 12.0,
                            xtol=1e-10)
        bounds.append(float(c))
        recursion.advance(c, t)
    return bounds


def classic_boundaries(looks: int, alpha: float, kind: str) -> list[float]:
    """Pocock's constant boundary or O'Brien-Fleming's c sqrt(K / k), for `looks` equally
    spaced looks, the constant chosen so that the total two-sided crossing probability under
    the null is `alpha` (Pocock 1977; O'Brien & Fleming 1979)."""
    if looks < 1:
        raise ValueError("at least one look is needed")
    fractions = [(k + 1) / looks for k in range(looks)]

    def shape(c: float) -> list[float]:
        if kind == "pocock":
            return [c] * looks
        if kind == "obrien_fleming":
            return [c / math.sqrt(t) for t in fractions]
        raise ValueError(f"unknown design {kind!r}")

    def total(c: float) -> float:
        return crossing_probability(fractions, shape(c)) - alpha

    return shape(float(optimize.brentq(total, 0.5, 10.0, xtol=1e-10)))


def crossing_probability(fractions: Sequence[float], bounds: Sequence[float]) -> float:
    """Under the null, the probability that |Z_k| >= bounds[k] at some look."""
    fractions = _check_fractions(fractions)
    recursion = _Recursion()
    total = 0.0
    for t, c in zip(fractions, bounds, strict=True):
        if math.isfinite(c):
            total += recursion.cross_probability(c, t)
        recursion.advance(c if math.isfinite(c) else 8.0, t)
    return total


@dataclass(frozen=True)
class Look:
    """One look of a sequential plan: its information fraction, the alpha spent by then
    (cumulative), and the nominal boundary (z) and two-sided nominal alpha (2 (1 - Phi(c)))
    the look's repeated CIs and tests use."""

    number: int
    fraction: float
    alpha_spent: float
    boundary: float
    nominal_alpha: float


def looks(fractions: Sequence[float], alpha: float, kind: str) -> list[Look]:
    """Every look's spent alpha and nominal boundary (see `spending_boundaries`)."""
    bounds = spending_boundaries(fractions, alpha, kind)
    return [Look(number=k + 1, fraction=float(t), alpha_spent=spent_alpha(t, alpha, kind),
                 boundary=c, nominal_alpha=float(2.0 * norm.sf(c)) if math.isfinite(c) else 0.0)
            for k, (t, c) in enumerate(zip(fractions, bounds, strict=True))]


def observed_fractions(counts: Sequence[int], maximum: int) -> list[float]:
    """Information fractions from judgments counted at each look over the plan's maximum
    (information taken as proportional to judgments), capped at 1, kept strictly increasing:
    a look with no new judgments is not a new look."""
    if maximum <= 0:
        raise ValueError("the maximum number of judgments must be positive")
    out: list[float] = []
    for n in counts:
        t = min(max(int(n), 0) / maximum, 1.0)
        if t <= 0 or (out and t <= out[-1]):
            continue
        out.append(t)
    return out


def repeated_ci(estimate: float, se: float, boundary: float) -> tuple[float, float]:
    """The repeated confidence interval estimate +- boundary x SE."""
    half = boundary * se
    return estimate - half, estimate + half


def repeated_p_value(z_values: Sequence[float], fractions: Sequence[float], alpha: float,
                     kind: str) -> float:
    """The repeated p-value at the last look (Jennison & Turnbull ch. 9.5): the smallest
    alpha for which some look's |z| reaches that look's boundary under the same spending
    function. Capped at 1. Under the null, P(repeated p <= a) <= a at any look, however the
    study decided to stop."""
    zs = [abs(float(z)) for z in z_values]
    fractions = _check_fractions(fractions)
    if len(zs) != len(fractions):
        raise ValueError("one z value per look is needed")

    def crosses(a: float) -> bool:
        bounds = spending_boundaries(fractions, a, kind)
        return any(z >= c for z, c in zip(zs, bounds, strict=True))

    hi = 1.0 - 1e-9
    if not crosses(hi):
        return 1.0
    lo = 1e-12
    if crosses(lo):
        return lo
    for _ in range(40):  # bisection on log scale: alpha from 1e-12 to 1
        mid = math.sqrt(lo * hi)
        if crosses(mid):
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0005:
            break
    return float(hi)
