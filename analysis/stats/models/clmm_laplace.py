"""A cumulative link mixed model with random intercepts, fitted in this process by the same
Laplace approximation as R's ``ordinal::clmm`` (no Django, no R).

Why it exists: ``ordinal::clmm`` solves the inner problem (the random effects' modes) with
general sparse-matrix code and differentiates the outer likelihood numerically, so 50,000
Likert ratings of 200 raters x 1,000 items took 132-160 s on a quiet 2-core machine, most of
a 100,000-judgment analysis. The model here is the same: ``logit P(Y <= k) = alpha_k - eta``,
``eta = X beta + sum_g sigma_g u_g[group_g]``, ``u ~ N(0, I)``, and the same objective,

    -log L(theta) ~= -sum_i log p_i(u_hat) + |u_hat|^2 / 2 + log det H(u_hat) / 2

(``u_hat`` the mode of the integrand, ``H`` its negative Hessian in ``u``). What is faster is
the arithmetic: ``H`` has one diagonal block per grouping factor and dense cross blocks, so the
largest factor is eliminated through its diagonal and only the Schur complement of the others
(e.g. 200 x 200 for raters beside 1,000 items) is factored; each outer evaluation starts the
inner Newton from the last modes. The estimates equal ``clmm``'s within its own convergence
tolerance and the log-likelihood is at least as high (tests/analysis/stats/test_clmm_laplace.py
pins both on the wine data of Christensen's tutorial and on crossed raters and items).

Supported: random intercepts only (``(1|g)``, ``(1|g1:g2)``), any number of grouping factors,
the logit link. :func:`supported` says why not otherwise; the caller then uses R."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

#: The cross block between the largest grouping factor and the others is held dense: above
#: this many cells (8 bytes each) the engine declines and R fits the model.
MAX_CROSS_CELLS = 40_000_000
#: Inner Newton: stop when the largest |gradient| in the random effects is below this.
INNER_TOLERANCE = 1e-10
#: Outer BFGS: stop when the largest |gradient| of -log L is below this (clmm stops near
#: 1e-3 to 1e-2 on the same data: this optimum is at least as close).
OUTER_TOLERANCE = 1e-6
#: Steps of the central differences for the gradient and the Hessian of -log L.
GRADIENT_STEP = 1e-5
HESSIAN_STEP = 1e-3


@dataclass(frozen=True)
class LaplaceData:
    """The model's numbers: ``y`` category codes 0..K-1, ``X`` the fixed-effects design
    without intercept (n x p), ``groups`` one integer code array per grouping factor."""

    y: np.ndarray
    n_categories: int
    X: np.ndarray
    groups: tuple[np.ndarray, ...]
    group_sizes: tuple[int, ...]


@dataclass
class LaplaceFit:
    alpha: np.ndarray
    beta: np.ndarray
    sigma: np.ndarray
    loglik: float
    vcov: np.ndarray  # over (alpha, beta, log sigma), from the numerical Hessian of -log L
    hessian: np.ndarray
    gradient: np.ndarray
    converged: bool
    message: str
    iterations: int
    evaluations: int
    modes: list[np.ndarray] = field(default_factory=list)

    @property
    def n_parameters(self) -> int:
        return len(self.alpha) + len(self.beta) + len(self.sigma)


def supported(random_terms: Sequence[tuple[Sequence[str], Sequence[str]]], link: str,
              group_sizes: Sequence[int]) -> str | None:
    """None when this engine fits the model, else why not (in words)."""
    if link != "logit":
        return f"the {link} link (only logit here)"
    for effects, group in random_terms:
        if tuple(effects) != ("1",):
            return f"a random slope ({' + '.join(effects)}|{':'.join(group)})"
    if not group_sizes:
        return "no random-effect term"
    sizes = sorted(group_sizes)
    if sum(sizes[:-1]) * sizes[-1] > MAX_CROSS_CELLS:
        return "grouping factors too large for a dense cross block"
    return None


class _Objective:
    """-log L(theta) by the Laplace approximation, with the modes kept between calls."""

    def __init__(self, data: LaplaceData):
        self.data = data
        self.n_alpha = data.n_categories - 1
        self.p = data.X.shape[1]
        self.G = len(data.groups)
        # The largest factor is eliminated through its diagonal block.
        self.big = int(np.argmax(data.group_sizes))
        self.small = [g for g in range(self.G) if g != self.big]
        self.modes = [np.zeros(n) for n in data.group_sizes]
        self.evaluations = 0
        n_big = data.group_sizes[self.big]
        self.pair_codes = {
            (g, h): data.groups[g] * data.group_sizes[h] + data.groups[h]
            for g in range(self.G) for h in range(self.G) if g != h
        }
        self.offsets = np.cumsum([0] + [data.group_sizes[g] for g in self.small])
        self.n_big = n_big

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = self.n_alpha, self.n_alpha + self.p
        return theta[:a], theta[a:b], np.exp(theta[b:])

    def _rows(self, alpha: np.ndarray, eta: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """log p_i, d log p_i / d eta and w_i = -d^2 log p_i / d eta^2 (None: alpha not
        increasing, no probability)."""
        from scipy.special import expit

        if self.n_alpha > 1 and np.any(np.diff(alpha) <= 0):
            return None
        bounds = np.concatenate(([-np.inf], alpha, [np.inf]))
        y = self.data.y
        a1 = bounds[y + 1] - eta
        a0 = bounds[y] - eta
        F1, F0 = expit(a1), expit(a0)
        # The difference of the upper tails where both CDFs are near 1 (no cancellation).
        prob = np.where(a0 > 0, expit(-a0) - expit(-a1), F1 - F0)
        if np.any(prob <= 0):
            return None
        f1, f0 = F1 * (1 - F1), F0 * (1 - F0)
        d1, d0 = f1 * (1 - 2 * F1), f0 * (1 - 2 * F0)
        g = (f0 - f1) / prob
        w = g * g - (d1 - d0) / prob
        return np.log(prob), g, w

    def _eta(self, beta: np.ndarray, sigma: np.ndarray, modes: list[np.ndarray]) -> np.ndarray:
        eta = self.data.X @ beta if self.p else np.zeros(len(self.data.y))
        for g, codes in enumerate(self.data.groups):
            eta = eta + sigma[g] * modes[g][codes]
        return eta

    def _blocks(self, sigma: np.ndarray, w: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """H's diagonal for the big factor, the small factors' block and the cross block."""
        d = self.data
        big = self.big
        D = sigma[big] ** 2 * np.bincount(d.groups[big], w, d.group_sizes[big]) + 1.0
        if not self.small:
            return D, None, None
        q = int(self.offsets[-1])
        A = np.zeros((q, q))
        C = np.zeros((q, self.n_big))
        for i, g in enumerate(self.small):
            lo, hi = self.offsets[i], self.offsets[i + 1]
            n_g = d.group_sizes[g]
            A[np.arange(lo, hi), np.arange(lo, hi)] = (
                sigma[g] ** 2 * np.bincount(d.groups[g], w, n_g) + 1.0)
            C[lo:hi] = sigma[g] * sigma[big] * np.bincount(
                self.pair_codes[(g, big)], w, n_g * self.n_big).reshape(n_g, self.n_big)
            for j, h in enumerate(self.small):
                if h <= g:
                    continue
                n_h = d.group_sizes[h]
                cross = sigma[g] * sigma[h] * np.bincount(
                    self.pair_codes[(g, h)], w, n_g * n_h).reshape(n_g, n_h)
                lo2, hi2 = self.offsets[j], self.offsets[j + 1]
                A[lo:hi, lo2:hi2] = cross
                A[lo2:hi2, lo:hi] = cross.T
        return D, A, C

    def _factor(self, sigma: np.ndarray, w: np.ndarray):
        """A solver for H x = r and log det H."""
        from scipy.linalg import cho_factor, cho_solve

        D, A, C = self._blocks(sigma, w)
        if A is None or C is None:
            return (lambda r: [r[0] / D]), float(np.sum(np.log(D)))
        CD = C / D
        S = A - CD @ C.T
        chol = cho_factor(S, lower=True, check_finite=False)
        logdet = float(np.sum(np.log(D)) + 2 * np.sum(np.log(np.diag(chol[0]))))

        def solve(parts: list[np.ndarray]) -> list[np.ndarray]:
            r_small = np.concatenate([parts[g] for g in self.small])
            r_big = parts[self.big]
            x_small = cho_solve(chol, r_small - CD @ r_big, check_finite=False)
            x_big = (r_big - C.T @ x_small) / D
            out: list[np.ndarray] = [np.empty(0)] * self.G
            out[self.big] = x_big
            for i, g in enumerate(self.small):
                out[g] = x_small[self.offsets[i]:self.offsets[i + 1]]
            return out

        return solve, logdet

    def _gradient_u(self, sigma: np.ndarray, g_rows: np.ndarray,
                    modes: list[np.ndarray]) -> list[np.ndarray]:
        d = self.data
        return [sigma[k] * np.bincount(d.groups[k], g_rows, d.group_sizes[k]) - modes[k]
                for k in range(self.G)]

    def __call__(self, theta: np.ndarray) -> float:
        self.evaluations += 1
        alpha, beta, sigma = self.split(np.asarray(theta, dtype=float))
        if not np.all(np.isfinite(sigma)):
            return math.inf
        modes = [m.copy() for m in self.modes]
        step = [np.zeros_like(m) for m in modes]
        h_value = -math.inf
        logdet = 0.0
        for _ in range(100):
            rows = self._rows(alpha, self._eta(beta, sigma, modes))
            if rows is None:
                return math.inf
            logp, g_rows, w = rows
            h_new = float(np.sum(logp) - 0.5 * sum(np.dot(m, m) for m in modes))
            if h_new < h_value - 1e-12 * abs(h_value):
                # The Newton step went too far: halve it (h is concave, so this ends).
                step = [s / 2 for s in step]
                modes = [m - s for m, s in zip(modes, step, strict=True)]
                continue
            h_value = h_new
            grad = self._gradient_u(sigma, g_rows, modes)
            solve, logdet = self._factor(sigma, w)
            if max(float(np.max(np.abs(x))) for x in grad) < INNER_TOLERANCE:
                break
            step = solve(grad)
            modes = [m + s for m, s in zip(modes, step, strict=True)]
        self.modes = modes
        return -h_value + 0.5 * logdet

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=float)
        out = np.empty_like(theta)
        for k in range(len(theta)):
            step = np.zeros_like(theta)
            step[k] = GRADIENT_STEP
            out[k] = (self(theta + step) - self(theta - step)) / (2 * GRADIENT_STEP)
        return out

    def hessian(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=float)
        n = len(theta)
        h = HESSIAN_STEP
        f0 = self(theta)
        H = np.empty((n, n))
        unit = np.eye(n) * h
        for j in range(n):
            H[j, j] = (self(theta + unit[j]) - 2 * f0 + self(theta - unit[j])) / h ** 2
            for k in range(j):
                H[j, k] = H[k, j] = (
                    self(theta + unit[j] + unit[k]) - self(theta + unit[j] - unit[k])
                    - self(theta - unit[j] + unit[k]) + self(theta - unit[j] - unit[k])
                ) / (4 * h ** 2)
        return H


def _to_free(theta: np.ndarray, n_alpha: int) -> np.ndarray:
    """(alpha_1, log gaps of alpha, beta, log sigma): alpha stays increasing while optimised."""
    alpha = theta[:n_alpha]
    return np.concatenate(([alpha[0]], np.log(np.diff(alpha)), theta[n_alpha:]))


def _from_free(free: np.ndarray, n_alpha: int) -> np.ndarray:
    alpha = np.cumsum(np.concatenate(([free[0]], np.exp(free[1:n_alpha]))))
    return np.concatenate((alpha, free[n_alpha:]))


def fit_laplace(data: LaplaceData, progress: Callable[[int], None] | None = None
                ) -> LaplaceFit:
    """The maximum of the Laplace likelihood by BFGS over (alpha in increasing form, beta,
    log sigma), then the Hessian of -log L over (alpha, beta, log sigma) for the SEs.
    `progress(iteration)` is called after each BFGS iteration."""
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the matrices are small (200 x 200 for 200 raters), and BLAS threads
    # fighting for two busy cores made each evaluation 3x slower.
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit(data, progress)


def _fit(data: LaplaceData, progress: Callable[[int], None] | None) -> LaplaceFit:
    from scipy.optimize import minimize

    n_alpha = data.n_categories - 1
    counts = np.bincount(data.y, minlength=data.n_categories).astype(float)
    cumulative = np.cumsum(counts)[:-1] / counts.sum()
    cumulative = np.clip(cumulative, 1e-3, 1 - 1e-3)
    alpha0 = np.log(cumulative / (1 - cumulative))
    alpha0 = np.maximum.accumulate(alpha0 + np.arange(n_alpha) * 1e-3)
    theta0 = np.concatenate((alpha0, np.zeros(data.X.shape[1]),
                             np.full(len(data.groups), math.log(0.5))))
    objective = _Objective(data)

    def free_value(free: np.ndarray) -> float:
        return objective(_from_free(free, n_alpha))

    def free_gradient(free: np.ndarray) -> np.ndarray:
        free = np.asarray(free, dtype=float)
        out = np.empty_like(free)
        for k in range(len(free)):
            step = np.zeros_like(free)
            step[k] = GRADIENT_STEP
            out[k] = (free_value(free + step) - free_value(free - step)) / (2 * GRADIENT_STEP)
        return out

    iterations = 0

    def callback(_: np.ndarray) -> None:
        nonlocal iterations
        iterations += 1
        if progress is not None:
            progress(iterations)

    result = minimize(free_value, _to_free(theta0, n_alpha), jac=free_gradient, method="BFGS",
                      callback=callback, options={"gtol": OUTER_TOLERANCE, "maxiter": 500})
    theta = _from_free(np.asarray(result.x, dtype=float), n_alpha)
    value = objective(theta)
    gradient = objective.gradient(theta)
    hessian = objective.hessian(theta)
    try:
        vcov = np.linalg.inv(hessian)
    except np.linalg.LinAlgError:
        vcov = np.full_like(hessian, np.nan)
    alpha, beta, sigma = objective.split(theta)
    # BFGS may stop on precision loss with the gradient already at its floor: judged by
    # the gradient, as for R's fits (models/convergence.py).
    return LaplaceFit(alpha=alpha, beta=beta, sigma=sigma, loglik=-value, vcov=vcov,
                      hessian=hessian, gradient=gradient, converged=bool(result.success),
                      message=str(result.message), iterations=iterations,
                      evaluations=objective.evaluations, modes=objective.modes)
