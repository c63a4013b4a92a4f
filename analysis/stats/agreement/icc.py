"""Intraclass correlations (Shrout & Fleiss): ANOVA on complete designs, REML variance
components otherwise, never outside their range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import optimize, sparse
from scipy import stats as sps
from scipy.linalg import cho_factor, cho_solve
from scipy.sparse.linalg import splu
from threadpoolctl import threadpool_limits

from analysis.stats.agreement.base import (
    CONFLEV,
    N_BOOT_ICC,
    Agreement,
    missing_counts,
    ratings_frame,
)
from analysis.stats.agreement.bootstrap import percentile_interval

# Shrout & Fleiss (1979) names, in their Table 4 order, with McGraw & Wong (1996) descriptions.
ICC_FORMS: tuple[tuple[str, str], ...] = (
    ("ICC1", "ICC(1,1): one-way random effects, absolute agreement, single rater"),
    ("ICC2", "ICC(2,1) = ICC(A,1): two-way random effects, absolute agreement, single rater"),
    ("ICC3", "ICC(3,1) = ICC(C,1): two-way mixed effects, consistency, single rater"),
    ("ICC1k", "ICC(1,k): one-way random effects, absolute agreement, mean of k raters"),
    ("ICC2k", "ICC(2,k) = ICC(A,k): two-way random effects, absolute agreement, mean of k raters"),
    ("ICC3k", "ICC(3,k) = ICC(C,k): two-way mixed effects, consistency, mean of k raters"),
)


@dataclass
class VarianceComponents:
    """REML estimates of y = mu + item + rater + e with crossed random item and rater effects
    (lme4: `lmer(y ~ 1 + (1|item) + (1|rater))`), or of the one-way y = mu + item + e
    (`lmer(y ~ 1 + (1|item))`, `rater` None). Variances, not SDs. `reml_criterion` is -2 times
    the restricted log-likelihood (lme4's "REML criterion at convergence")."""

    intercept: float
    item: float
    rater: float | None
    residual: float
    reml_criterion: float
    n: int
    n_items: int
    n_raters: int | None
    converged: bool
    message: str = ""


class _REML:
    """Profiled REML for one or two crossed random intercepts on integer codes.

    Parameters are the variance ratios gamma = sigma2_b / sigma2 >= 0: the criterion is even
    in the relative SD theta = sqrt(gamma), so in theta its gradient vanishes at 0 and a
    gradient optimiser stops on the boundary (it did, at rater variance 0 where lme4 finds
    0.0041); in gamma the boundary is an ordinary bound. The criterion needs log|A| and
    quadratic forms in A^-1, A = Lambda Z'Z Lambda + I (Bates et al. 2015, lme4). Z'Z has a
    diagonal block per factor; the factor with more levels is eliminated (diagonal) and the
    Schur complement on the other one is dense of its size, so a fit on 100,000 ratings of
    2,000 outputs by 200 raters factorises 200 x 200 matrices. The cross-product term
    N' diag(1 / (1 + gamma d)) N is a sum over the distinct counts d of precomputed N_d' N_d
    where that fits in memory. y enters only through its sums per level, its total and its
    sum of squares, so the parametric bootstrap refits from those.
    """

    _MAX_PRECOMPUTED = 30_000_000  # floats held by the N_d' N_d blocks
    # The Schur complement is factorised sparse (SuperLU on its pattern) when it has at least
    # this many rows and at most this share of non-zeros. In crowd designs (each rater a few
    # units) N'N is nearly diagonal, and a dense factorisation of a few thousand rows on
    # every evaluation of the criterion (36,000 in the parametric bootstrap) cost minutes
    # and memory growing with the square of the levels; small or well-connected designs
    # keep the dense Cholesky factorisation (and its exact results).
    _SPARSE_MIN_LEVELS = 400
    _SPARSE_MAX_DENSITY = 0.05

    def __init__(self, item: np.ndarray, n_items: int, rater: np.ndarray | None,
                 n_raters: int) -> None:
        self.n = int(item.size)
        self.crossed = rater is not None
        self.swap = bool(self.crossed and n_raters > n_items)
        first, second = item, rater
        if rater is not None and self.swap:
            first, second = rater, item
        self.first, self.second = first, second
        self.l1 = n_raters if self.swap else n_items
        self.d1 = np.bincount(first, minlength=self.l1).astype(float)
        self.blocks: list[tuple[float, np.ndarray]] | None = None
        self.sparse_schur = False
        if second is not None:  # crossed
            self.l2 = n_items if self.swap else n_raters
            self.d2 = np.bincount(second, minlength=self.l2).astype(float)
            self.cross = sparse.csr_matrix((np.ones(self.n), (first, second)),
                                           shape=(self.l1, self.l2))
            self.cross_t = self.cross.T.tocsr()
            distinct = np.unique(self.d1[self.d1 > 0])
            self.schur_pattern: _SchurPattern | None = None
            if self.l2 >= self._SPARSE_MIN_LEVELS:
                pattern = (self.cross_t @ self.cross).nnz
                self.sparse_schur = pattern <= self._SPARSE_MAX_DENSITY * self.l2 * self.l2
                if self.sparse_schur and distinct.size * pattern <= self._MAX_PRECOMPUTED:
                    self.schur_pattern = _SchurPattern(self.cross, self.d1, distinct, self.l2)
            if (not self.sparse_schur
                    and distinct.size * self.l2 * self.l2 <= self._MAX_PRECOMPUTED):
                self.blocks = []
                for count in distinct:
                    rows = self.cross[np.flatnonzero(self.d1 == count)]
                    self.blocks.append((float(count), (rows.T @ rows).toarray()))

    def sums(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float, float]:
        by_first = np.bincount(self.first, weights=y, minlength=self.l1)
        by_second = (np.bincount(self.second, weights=y, minlength=self.l2)
                     if self.second is not None else None)
        return by_first, by_second, float(y.sum()), float(y @ y)

    def _order(self, gamma: np.ndarray) -> tuple[float, float]:
        """(gamma of the eliminated factor, gamma of the dense one) from (item, rater)."""
        if not self.crossed:
            return float(gamma[0]), 0.0
        g = (float(gamma[1]), float(gamma[0])) if self.swap else (float(gamma[0]),
                                                                  float(gamma[1]))
        return g

    def criterion(self, gamma: np.ndarray, sums: tuple) -> tuple[float, float, float]:
        """(-2 restricted log-likelihood, intercept, sigma^2) at variance ratios `gamma`."""
        g1, g2 = self._order(np.maximum(gamma, 0.0))
        t1, t2 = np.sqrt(g1), np.sqrt(g2)
        y1, y2, sy, syy = sums
        p = 1 + g1 * self.d1
        rhs1 = np.column_stack([t1 * y1, t1 * self.d1])
        logdet = float(np.sum(np.log(p)))
        if self.crossed:
            c = t1 * t2
            rhs2 = np.column_stack([t2 * y2, t2 * self.d2])
            reduced = rhs2 - c * (self.cross_t @ (rhs1 / p[:, None]))
            if self.sparse_schur:
                factored = self._sparse_factor(g1, g2, p)
                if factored is None:
                    return float("inf"), float("nan"), float("nan")
                lu, logdet_schur = factored
                logdet += logdet_schur
                s2 = lu.solve(reduced)
            else:
                if self.blocks is not None:
                    schur = np.zeros((self.l2, self.l2))
                    for count, block in self.blocks:
                        schur -= (g1 * g2 / (1 + g1 * count)) * block
                else:
                    scaled = self.cross.multiply((1 / p)[:, None]).tocsr()
                    schur = -(g1 * g2) * (self.cross_t @ scaled).toarray()
                schur[np.diag_indices_from(schur)] += 1 + g2 * self.d2
                try:
                    factor = cho_factor(schur, lower=True, check_finite=False)
                except np.linalg.LinAlgError:
                    return float("inf"), float("nan"), float("nan")
                logdet += 2 * float(np.sum(np.log(np.diag(factor[0]))))
                s2 = cho_solve(factor, reduced, check_finite=False)
            s1 = (rhs1 - c * (self.cross @ s2)) / p[:, None]
            quad = rhs1.T @ s1 + rhs2.T @ s2
        else:
            quad = rhs1.T @ (rhs1 / p[:, None])
        yhy = syy - quad[0, 0]
        xhy = sy - quad[1, 0]
        xhx = self.n - quad[1, 1]
        if xhx <= 0:
            return float("inf"), float("nan"), float("nan")
        beta = xhy / xhx
        sigma2 = (yhy - beta * xhy) / (self.n - 1)
        if not sigma2 > 0:
            return float("inf"), float("nan"), float("nan")
        value = logdet + np.log(xhx) + (self.n - 1) * (1 + np.log(2 * np.pi * sigma2))
        return float(value), float(beta), float(sigma2)

    def _sparse_factor(self, g1: float, g2: float, p: np.ndarray) -> tuple[Any, float] | None:
        """SuperLU factors of the sparse Schur complement I + g2 D2 - g1 g2 N' P^-1 N and its
        log-determinant; None when it is not positive definite. Symmetric mode with the
        diagonal as pivots (the matrix is symmetric positive definite): U's diagonal is
        that of the LDL' factorisation under a symmetric permutation, so the determinant
        is its product."""
        if self.schur_pattern is not None and self.schur_pattern.diagonal_only:
            # Every level of the eliminated factor has one unit (a crowd rater who rated
            # one item): the complement is diagonal, nothing to factorise.
            diagonal = self.schur_pattern.values(g1, g2, self.d2)
            if not np.all(diagonal > 0):
                return None
            return _Diagonal(diagonal), float(np.sum(np.log(diagonal)))
        if self.schur_pattern is not None:
            schur = self.schur_pattern.matrix(g1, g2, self.d2)
        else:
            scaled = self.cross.multiply((1 / p)[:, None]).tocsr()
            schur = (sparse.diags(1 + g2 * self.d2)
                     - (g1 * g2) * (self.cross_t @ scaled)).tocsc()
        try:
            lu = splu(schur, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                      options={"SymmetricMode": True})
        except RuntimeError:  # exactly singular
            return None
        diagonal = lu.U.diagonal()
        if not np.all(diagonal > 0):
            return None
        return lu, float(np.sum(np.log(diagonal)))

    def fit(self, sums: tuple, start: np.ndarray | None = None
            ) -> tuple[np.ndarray, float, float, float, bool]:
        """Minimise over gamma >= 0 (boundary fits allowed, as lme4). Returns (gamma,
        criterion, intercept, sigma^2, converged). Without `start` (the point estimate) a
        quasi-Newton search from gamma = 1 is polished by Newton steps; with one (bootstrap
        refits, warm-started at the estimate) Newton steps alone."""
        size = 2 if self.crossed else 1

        def objective(g: np.ndarray) -> float:
            return self.criterion(g, sums)[0]

        warm = start
        if start is None:
            first = optimize.minimize(objective, np.ones(size), method="L-BFGS-B",
                                      bounds=[(0.0, None)] * size)
            start = np.maximum(first.x, 0.0)
        # Bootstrap refits stop at a relative step of 1e-6 in gamma (ICCs to ~6 digits).
        gamma, converged = _newton_nonnegative(objective, np.asarray(start, float),
                                               xtol=1e-9 if warm is None else 1e-6)
        best = self.criterion(gamma, sums)
        return gamma, best[0], best[1], best[2], converged


class _SchurPattern:
    """The sparse Schur complement's fixed pattern and the values of its parts on it, so that
    each evaluation of the criterion only combines vectors: I + g2 D2 - g1 g2 sum_d
    N_d' N_d / (1 + g1 d), over the distinct counts d of the eliminated factor's levels
    (building the sparse matrices anew cost 1.4 ms an evaluation, more than factorising)."""

    def __init__(self, cross: sparse.csr_matrix, d1: np.ndarray, distinct: np.ndarray,
                 size: int) -> None:
        pattern = (cross.T @ cross + sparse.identity(size, format="csr")).tocsc()
        pattern.sum_duplicates()
        pattern.sort_indices()
        self.indices, self.indptr, self.size = pattern.indices, pattern.indptr, size
        columns = np.repeat(np.arange(size), np.diff(pattern.indptr))
        keys = columns.astype(np.int64) * size + pattern.indices  # sorted: CSC order
        self.counts = distinct
        self.parts = np.zeros((distinct.size, keys.size))
        for k, count in enumerate(distinct):
            rows = cross[np.flatnonzero(d1 == count)]
            block = (rows.T @ rows).tocoo()
            place = np.searchsorted(keys, block.col.astype(np.int64) * size + block.row)
            np.add.at(self.parts[k], place, block.data)
        self.diagonal = np.searchsorted(keys, np.arange(size, dtype=np.int64) * (size + 1))
        self.diagonal_only = keys.size == size

    def values(self, g1: float, g2: float, d2: np.ndarray) -> np.ndarray:
        """The complement's non-zeros, in the pattern's (CSC) order."""
        data = -(g1 * g2) * ((1 / (1 + g1 * self.counts)) @ self.parts)
        data[self.diagonal] += 1 + g2 * d2
        return data

    def matrix(self, g1: float, g2: float, d2: np.ndarray) -> sparse.csc_matrix:
        return sparse.csc_matrix((self.values(g1, g2, d2), self.indices, self.indptr),
                                 shape=(self.size, self.size))


class _Diagonal:
    """A diagonal matrix's solve, shaped as SuperLU's."""

    def __init__(self, diagonal: np.ndarray) -> None:
        self.diagonal = diagonal

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return rhs / self.diagonal[:, None]


def _newton_nonnegative(f: Callable[[np.ndarray], float], x0: np.ndarray, *,
                        max_iter: int = 60, tol: float = 1e-11, xtol: float = 1e-9
                        ) -> tuple[np.ndarray, bool]:
    """Projected Newton for a smooth f of one or two variables on x >= 0, with
    finite-difference derivatives (one-sided at the bound) and an Armijo backtracking line
    search; coordinates at the bound with a positive gradient stay there (KKT). Written out
    because scipy.optimize.minimize costs ~20 ms of overhead per call, and the parametric
    bootstrap calls it a thousand times."""
    x = np.maximum(x0, 0.0)
    fx = f(x)
    dim = x.size
    eye = np.eye(dim)
    for _ in range(max_iter):
        h = 1e-4 * np.maximum(x, 1e-2)
        grad = np.empty(dim)
        hess = np.empty((dim, dim))
        plus = np.empty(dim)
        for j in range(dim):
            plus[j] = f(x + h[j] * eye[j])
            if x[j] >= h[j]:
                minus = f(x - h[j] * eye[j])
                grad[j] = (plus[j] - minus) / (2 * h[j])
                hess[j, j] = (plus[j] - 2 * fx + minus) / h[j] ** 2
            else:
                twice = f(x + 2 * h[j] * eye[j])
                grad[j] = (-3 * fx + 4 * plus[j] - twice) / (2 * h[j])
                hess[j, j] = (fx - 2 * plus[j] + twice) / h[j] ** 2
        for i in range(dim):
            for j in range(i + 1, dim):
                both = f(x + h[i] * eye[i] + h[j] * eye[j])
                hess[i, j] = hess[j, i] = (both - plus[i] - plus[j] + fx) / (h[i] * h[j])
        free = ~((x <= 0) & (grad > 0))
        if not free.any():
            return x, True
        direction = np.zeros(dim)
        sub = hess[np.ix_(free, free)]
        try:
            if np.all(np.linalg.eigvalsh(sub) > 0):
                direction[free] = -np.linalg.solve(sub, grad[free])
            else:
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:  # not convex here: a scaled gradient step
            direction[free] = -grad[free] / np.maximum(np.abs(np.diag(sub)), 1e-8)
        slope = float(grad @ direction)
        if np.max(np.abs(direction) / (1 + np.abs(x))) < xtol:
            trial = np.maximum(x + direction, 0.0)
            f_trial = f(trial)
            return (trial, True) if f_trial <= fx else (x, True)
        step = 1.0
        for _ in range(40):
            trial = np.maximum(x + step * direction, 0.0)
            f_trial = f(trial)
            if f_trial <= fx + 1e-4 * step * min(slope, 0.0):
                break
            step /= 2
        else:
            return x, abs(slope) < 1e-6
        moved = np.max(np.abs(trial - x) / (1 + np.abs(x)))
        gain = fx - f_trial
        x, fx = trial, f_trial
        if gain <= tol * (1 + abs(fx)) and moved < 1e-7:
            return x, True
    return x, False


def variance_components(
    df: pd.DataFrame, *, crossed: bool = True
) -> VarianceComponents:
    """REML variance components of the ratings (`value`) with random `unit` (the rated
    object: lme4's item) and, if `crossed`, random `rater` intercepts. Any incomplete design
    works (Latin squares, crowds); only connectedness limits what can be separated."""
    rated = ratings_frame(df, numeric=True)
    item, items = pd.factorize(rated["unit"])
    rater, raters = pd.factorize(rated["rater"])
    model = _REML(item, len(items), rater if crossed else None, len(raters))
    with threadpool_limits(1):  # small dense factorisations: threads only add overhead
        gamma, value, beta, sigma2, converged = model.fit(
            model.sums(rated["value"].to_numpy(float)))
    return VarianceComponents(
        intercept=beta, item=float(gamma[0] * sigma2),
        rater=float(gamma[1] * sigma2) if crossed else None, residual=sigma2,
        reml_criterion=value, n=model.n, n_items=len(items),
        n_raters=len(raters) if crossed else None, converged=converged,
    )


def _iccs_from_components(item: float, rater: float, residual: float, item_1: float,
                          within_1: float, k: float) -> dict[str, float]:
    """The six forms from variance components: crossed (item, rater, residual) for ICC2/3,
    one-way (item_1, within_1) for ICC1; k raters for the averaged forms."""
    def ratio(top: float, bottom: float) -> float:
        return top / bottom if bottom > 0 else float("nan")

    return {
        "ICC1": ratio(item_1, item_1 + within_1),
        "ICC2": ratio(item, item + rater + residual),
        "ICC3": ratio(item, item + residual),
        "ICC1k": ratio(item_1, item_1 + within_1 / k),
        "ICC2k": ratio(item, item + (rater + residual) / k),
        "ICC3k": ratio(item, item + residual / k),
    }


def _guard_icc(result: Agreement) -> Agreement:
    """Never report an ICC outside [-1, 1], a CI outside it or a CI with low > high.

    ANOVA estimates on few units can leave the range (ICC2k = 2.33, ICC1k = -26.4 were
    printed from 2 units): such a value is withheld (None) with a warning giving the raw
    number, an impossible CI is withheld, a CI bound beyond the range is clipped, and a
    negative estimate (between-unit variance estimated below zero) is flagged.
    """
    value = result.value
    if not np.isfinite(value) or value < -1 - 1e-9 or value > 1 + 1e-9:
        result.warnings.append(
            f"estimate {value:.4g} outside [-1, 1]: withheld (the design cannot support this "
            f"ICC; {result.n} units)")
        result.value, result.ci_low, result.ci_high = float("nan"), None, None
        return result
    if value < 0:
        result.warnings.append(
            "negative estimate: the between-unit variance is estimated below zero (read as no "
            "reliability)")
    low, high = result.ci_low, result.ci_high
    if low is not None and high is not None:
        if not (np.isfinite(low) and np.isfinite(high)) or low > high:
            result.warnings.append(f"CI [{low:.4g}, {high:.4g}] is not an interval: withheld")
            result.ci_low, result.ci_high = None, None
        elif low < -1 or high > 1:
            result.warnings.append(f"CI [{low:.4g}, {high:.4g}] clipped to [-1, 1]")
            result.ci_low, result.ci_high = max(low, -1.0), min(high, 1.0)
    return result


def _anova_icc(matrix: np.ndarray, conflev: float) -> dict[str, dict]:
    """Shrout & Fleiss (1979) / McGraw & Wong (1996) ICCs, F tests and CIs on a complete
    units x raters matrix (the formulas of R irr::icc and pingouin.intraclass_corr)."""
    n, k = matrix.shape
    grand = matrix.mean()
    ss_rows = k * float(np.sum((matrix.mean(axis=1) - grand) ** 2))
    ss_cols = n * float(np.sum((matrix.mean(axis=0) - grand) ** 2))
    ss_err = float(np.sum((matrix - grand) ** 2)) - ss_rows - ss_cols
    msb = ss_rows / (n - 1)
    msj = ss_cols / (k - 1)
    mse = ss_err / ((n - 1) * (k - 1))
    msw = (ss_cols + ss_err) / (n * (k - 1))
    alpha = 1 - conflev
    df1, df1w, df2e = n - 1, n * (k - 1), (n - 1) * (k - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = msb / msw
        f3 = msb / mse
        icc1 = (msb - msw) / (msb + (k - 1) * msw)
        icc2 = (msb - mse) / (msb + (k - 1) * mse + k * (msj - mse) / n)
        icc3 = (msb - mse) / (msb + (k - 1) * mse)
        f1l = f1 / sps.f.ppf(1 - alpha / 2, df1, df1w)
        f1u = f1 * sps.f.ppf(1 - alpha / 2, df1w, df1)
        f3l = f3 / sps.f.ppf(1 - alpha / 2, df1, df2e)
        f3u = f3 * sps.f.ppf(1 - alpha / 2, df2e, df1)
        # ICC(A,1): Satterthwaite's df for the denominator mean square (McGraw & Wong 1996).
        fj = msj / mse
        vn = df2e * (k * icc2 * fj + n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        vd = df1 * k**2 * icc2**2 * fj**2 + (
            n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        v = vn / vd
        f2u = sps.f.ppf(1 - alpha / 2, df1, v)
        f2l = sps.f.ppf(1 - alpha / 2, v, df1)
        l2 = n * (msb - f2u * mse) / (f2u * (k * msj + (k * n - k - n) * mse) + n * msb)
        u2 = n * (f2l * msb - mse) / (k * msj + (k * n - k - n) * mse + n * f2l * msb)
    p1 = float(sps.f.sf(f1, df1, df1w))
    p3 = float(sps.f.sf(f3, df1, df2e))
    return {
        "ICC1": {"value": icc1, "ci": ((f1l - 1) / (f1l + k - 1), (f1u - 1) / (f1u + k - 1)),
                 "F": f1, "df1": df1, "df2": df1w, "p": p1},
        "ICC2": {"value": icc2, "ci": (l2, u2), "F": f3, "df1": df1, "df2": df2e, "p": p3,
                 "satterthwaite_df": v},
        "ICC3": {"value": icc3, "ci": ((f3l - 1) / (f3l + k - 1), (f3u - 1) / (f3u + k - 1)),
                 "F": f3, "df1": df1, "df2": df2e, "p": p3},
        "ICC1k": {"value": (msb - msw) / msb, "ci": (1 - 1 / f1l, 1 - 1 / f1u),
                  "F": f1, "df1": df1, "df2": df1w, "p": p1},
        "ICC2k": {"value": (msb - mse) / (msb + (msj - mse) / n),
                  "ci": (l2 * k / (1 + l2 * (k - 1)), u2 * k / (1 + u2 * (k - 1))),
                  "F": f3, "df1": df1, "df2": df2e, "p": p3, "satterthwaite_df": v},
        "ICC3k": {"value": (msb - mse) / msb, "ci": (1 - 1 / f3l, 1 - 1 / f3u),
                  "F": f3, "df1": df1, "df2": df2e, "p": p3},
    }


IccMethod = Literal["auto", "reml", "listwise"]


def icc(
    df: pd.DataFrame,
    *,
    raters: Sequence | None = None,
    method: IccMethod = "auto",
    n_boot: int = N_BOOT_ICC,
    seed: int = 0,
    conflev: float = CONFLEV,
) -> dict[str, Agreement]:
    """The six Shrout & Fleiss (1979) intraclass correlations with 95% CIs.

    Returns {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"} -> Agreement. Values must be
    numeric. `raters` first restricts the table to those raters (default: all).

    - Complete designs (every unit rated by every rater; `method="auto"`): the two-way ANOVA
      of Shrout & Fleiss with McGraw & Wong's (1996) F-based CIs (as R irr::icc); `p_value`
      and `details` F, df1, df2 are the F test of ICC = 0.
    - Incomplete designs (`"auto"` or `"reml"`; Latin squares and crowd work, where few or no
      units have every rater): variance components of the crossed random-effects model
      y = mu + unit + rater + e by REML (lme4's `lmer(y ~ 1 + (1|item) + (1|rater))`) on all
      ratings; ICC1 from the one-way model y = mu + unit + e. ICC2 = s2_unit / (s2_unit +
      s2_rater + s2_e), ICC3 = s2_unit / (s2_unit + s2_e), ICC1 = s2_unit' / (s2_unit' + s2_w);
      the averaged forms use k = the harmonic mean of ratings per unit. CIs: percentile
      parametric bootstrap (`n_boot` simulations from the fitted model on the same design,
      refitted by REML; `seed`).
    - `"listwise"`: the old behaviour, ANOVA on the units rated by every rater, with the
      number of units dropped reported and warned about.

    Every result carries n_units/n_raters/n_ratings, what was excluded and warnings; an
    estimate outside [-1, 1] or a CI with low > high is never returned (see `_guard_icc`).
    Raises `ValueError` when there are fewer than 2 units with >= 2 ratings or 2 raters.
    """
    if method not in ("auto", "reml", "listwise"):
        raise ValueError(f"method must be 'auto', 'reml' or 'listwise', not {method!r}")
    rated = ratings_frame(df, numeric=True)
    excluded = missing_counts(df)
    if raters is not None:
        keep = rated["rater"].isin(list(raters))
        if (~keep).sum():
            excluded["ratings_of_other_raters"] = int((~keep).sum())
        rated = rated[keep]
    units = rated["unit"].nunique()
    n_raters = rated["rater"].nunique()
    complete = len(rated) == units * n_raters
    if method == "listwise" or (method == "auto" and complete):
        return _icc_anova(rated, excluded, conflev, listwise=not complete)
    return _icc_reml(rated, excluded, n_boot=n_boot, seed=seed, conflev=conflev)


def _icc_anova(rated: pd.DataFrame, excluded: dict[str, int], conflev: float,
               listwise: bool) -> dict[str, Agreement]:
    unit_index, units = pd.factorize(rated["unit"])
    rater_index, raters = pd.factorize(rated["rater"])
    matrix = np.full((len(units), len(raters)), np.nan)
    matrix[unit_index, rater_index] = rated["value"].to_numpy(float)
    complete_rows = ~np.isnan(matrix).any(axis=1)
    matrix = matrix[complete_rows]
    dropped = int((~complete_rows).sum())
    if matrix.shape[0] < 2 or matrix.shape[1] < 2:
        raise ValueError(
            f"ICC needs >= 2 units rated by all of >= 2 raters; have {matrix.shape[0]} "
            f"complete units and {matrix.shape[1]} raters ({dropped} incomplete units dropped)"
        )
    excluded = dict(excluded)
    notes = []
    if dropped:
        excluded["units_dropped_incomplete"] = dropped
        notes.append(f"listwise deletion: {dropped} of {len(units)} units lack a rating from "
                     f"some of the {len(raters)} raters and were dropped")
    if matrix.shape[0] < 5:
        notes.append(f"only {matrix.shape[0]} units: the ANOVA estimates are unstable")
    forms = _anova_icc(matrix, conflev)
    result: dict[str, Agreement] = {}
    for name, description in ICC_FORMS:
        form = forms[name]
        details = {"F": float(form["F"]), "df1": float(form["df1"]), "df2": float(form["df2"]),
                   "raters": float(matrix.shape[1]), "units_dropped": float(dropped)}
        if "satterthwaite_df" in form:
            details["satterthwaite_df"] = float(form["satterthwaite_df"])
        result[name] = _guard_icc(Agreement(
            value=float(form["value"]),
            ci_low=float(form["ci"][0]), ci_high=float(form["ci"][1]),
            n=int(matrix.shape[0]),
            method=f"{description}; two-way ANOVA, {conflev:.0%} F-based CI (McGraw & Wong)",
            p_value=float(form["p"]), details=details,
            ci_method="analytic (F distribution; Satterthwaite df for ICC(A,.))",
            n_units=int(matrix.shape[0]), n_raters=int(matrix.shape[1]),
            n_ratings=int(matrix.size), excluded=dict(excluded), warnings=list(notes),
        ))
    return result


def _icc_reml(rated: pd.DataFrame, excluded: dict[str, int], *, n_boot: int, seed: int,
              conflev: float) -> dict[str, Agreement]:
    # Hundreds of small dense Cholesky factorisations: one BLAS thread is several times
    # faster than two on a busy machine (thread start-up dominates at 200 x 200).
    with threadpool_limits(1):
        return _icc_reml_fits(rated, excluded, n_boot=n_boot, seed=seed, conflev=conflev)


def _icc_reml_fits(rated: pd.DataFrame, excluded: dict[str, int], *, n_boot: int, seed: int,
                   conflev: float) -> dict[str, Agreement]:
    item, items = pd.factorize(rated["unit"])
    rater, raters = pd.factorize(rated["rater"])
    per_unit = np.bincount(item, minlength=len(items))
    if (per_unit >= 2).sum() < 2 or len(raters) < 2:
        raise ValueError(
            f"ICC needs >= 2 units with >= 2 ratings and >= 2 raters; have "
            f"{int((per_unit >= 2).sum())} such units and {len(raters)} raters")
    y = rated["value"].to_numpy(float)
    crossed = _REML(item, len(items), rater, len(raters))
    oneway = _REML(item, len(items), None, 0)
    k = float(len(per_unit) / np.sum(1.0 / per_unit))  # harmonic mean of ratings per unit

    def components(sums_c: tuple, sums_1: tuple, start_c=None, start_1=None):
        th_c, crit, beta, s2, ok_c = crossed.fit(sums_c, start_c)
        th_1, _, _, s2_1, ok_1 = oneway.fit(sums_1, start_1)
        values = _iccs_from_components(th_c[0] * s2, th_c[1] * s2, s2, th_1[0] * s2_1, s2_1, k)
        return values, (th_c, crit, beta, s2, ok_c), (th_1, s2_1, ok_1)

    point, fit_c, fit_1 = components(crossed.sums(y), oneway.sums(y))
    th_c, crit, beta, s2, ok_c = fit_c
    s2_item, s2_rater = th_c[0] * s2, th_c[1] * s2
    notes = []
    if not (ok_c and fit_1[2]):
        notes.append("REML optimiser reported non-convergence")
    if th_c[0] < 1e-8:
        notes.append("singular fit: the unit variance is estimated at 0, so every ICC is 0")
    if (per_unit >= 2).sum() < 10:
        notes.append(f"only {int((per_unit >= 2).sum())} units with >= 2 ratings: the "
                     "variance components are imprecise")
    single = int((per_unit == 1).sum())
    if single:
        notes.append(f"{single} units have a single rating (kept: they inform the rater and "
                     "residual variances)")
    # Parametric bootstrap: simulate the fitted model on the same design, refit both models.
    rng = np.random.default_rng(seed)
    sd = np.sqrt([s2_item, s2_rater, s2])
    replicates = {name: np.empty(n_boot) for name, _ in ICC_FORMS}
    failed = 0
    for b in range(n_boot):
        y_star = (beta + sd[0] * rng.standard_normal(len(items))[item]
                  + sd[1] * rng.standard_normal(len(raters))[rater]
                  + sd[2] * rng.standard_normal(y.size))
        try:
            values, _fit_b, _ = components(crossed.sums(y_star), oneway.sums(y_star),
                                          th_c, fit_1[0])
        except (ValueError, np.linalg.LinAlgError):
            values, failed = dict.fromkeys(replicates, float("nan")), failed + 1
        for name in replicates:
            replicates[name][b] = values[name]
    if failed:
        notes.append(f"{failed} of {n_boot} bootstrap refits failed (skipped)")
    details_common = {
        "var_unit": float(s2_item), "var_rater": float(s2_rater), "var_residual": float(s2),
        "var_unit_oneway": float(fit_1[0][0] * fit_1[1]), "var_within_oneway":
        float(fit_1[1]), "intercept": float(beta), "reml_criterion": float(crit),
        "k": k, "raters": float(len(raters)), "units_dropped": 0.0,
        "n_boot": float(n_boot),
    }
    result: dict[str, Agreement] = {}
    for name, description in ICC_FORMS:
        low, high, _invalid = percentile_interval(replicates[name], conflev)
        result[name] = _guard_icc(Agreement(
            value=float(point[name]), ci_low=low, ci_high=high, n=len(items),
            method=f"{description}; REML variance components of the crossed random-effects "
            f"model (incomplete design), {conflev:.0%} parametric bootstrap CI"
            + (f"; k = {k:.2f} (harmonic mean)" if name.endswith("k") else ""),
            details=dict(details_common),
            se=float(np.std(replicates[name][np.isfinite(replicates[name])], ddof=1))
            if np.isfinite(replicates[name]).sum() >= 2 else None,
            ci_method=f"parametric bootstrap (B={n_boot}, seed={seed}, REML refits)",
            n_units=len(items), n_raters=len(raters), n_ratings=int(y.size),
            excluded=dict(excluded), warnings=list(notes), n_boot=n_boot, seed=seed,
        ))
    return result
