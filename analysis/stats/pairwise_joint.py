"""Preference and absolute level of pairwise answers, fitted jointly (no Django here).

A pairwise criterion may offer, besides "A" and "B", "tie" and the two absolute answers "both
good" and "both bad" (`evalstudy.criteria`). Counting "both bad" as a tie throws away what the
rater said about the pair's level; counting it as missing throws away that neither output was
preferred. This model keeps both:

Each system s has a quality theta_s on one log-odds scale (the first system, or `reference`, is
fixed at 0). A rater first says whether one output is preferred:

- Davidson's (1970) Bradley-Terry model with ties, with pi = exp(theta):
  P(A) = pi_a / D,  P(B) = pi_b / D,  P(no preference) = nu * sqrt(pi_a * pi_b) / D,
  D = pi_a + pi_b + nu * sqrt(pi_a * pi_b). With a position term (Davidson and Beaver 1977),
  pi_a is multiplied by exp(position): > 0 means the output shown as A is chosen more often than
  the systems' qualities explain.

and when there is none, says where the pair stands:

- a cumulative logit on the pair's mean quality m = (theta_a + theta_b) / 2:
  P(both bad | no pref) = logistic(c1 - beta * m),
  P(both bad or tie | no pref) = logistic(c2 - beta * m),  c1 < c2;
  without a "tie" answer, one cut point (both bad | both good). beta > 0: pairs of better
  systems are more often "both good".

The two parts share theta. "A"/"B" enter only the preference part; "tie", "both good" and "both
bad" enter the preference part as no preference, and the level part as the middle, upper and
lower level. Without "both" answers the model is Davidson's (the level part is empty).

Maximum likelihood (scipy BFGS with the analytic gradient); standard errors from the observed
information (the Hessian, by central differences of the analytic gradient); Wald intervals for
theta contrasts, log nu (nu's interval is its exponential), beta and the cut points. Answers
are treated as independent: a rater random effect is not modelled (each rater's answers are
counted as if from different people), so intervals are too narrow where raters differ much.

Identifiability is checked, not assumed: the systems must be connected by comparisons; nu needs
at least one no-preference answer (else it is fixed at 0: plain Bradley-Terry); the level part
needs every level answered at least once (else it is left out) and beta needs no-preference
answers on at least two pairs of different mean quality, i.e. three systems (else it is fixed
at 0 and the cut points describe the pooled level shares).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from evalstudy.criteria import BOTH_BAD, BOTH_GOOD, NO_PREFERENCE, TIE

A, B = "A", "B"
ANSWERS = (A, B, TIE, BOTH_GOOD, BOTH_BAD)

_PREFERENCE_ROLE = {
    A: "A preferred: P(A) = pi_A / D",
    B: "B preferred: P(B) = pi_B / D",
    TIE: "no preference: P = nu sqrt(pi_A pi_B) / D",
    BOTH_GOOD: "no preference: P = nu sqrt(pi_A pi_B) / D",
    BOTH_BAD: "no preference: P = nu sqrt(pi_A pi_B) / D",
}


def answer_roles(offered: Sequence[str], levels: Sequence[str]) -> dict[str, dict[str, str]]:
    """How each answer enters the model: its preference term and its level (the report's
    table). `levels`: the level answers modelled, lowest first (empty: no level part)."""
    roles = {}
    for answer in (a for a in ANSWERS if a in offered):
        if answer in (A, B):
            level = "none (a preference says nothing of the pair's level)"
        elif not levels:
            level = "not modelled (no level part)"
        elif answer == levels[0]:
            level = ("both below the lower cut point" if len(levels) == 3
                     else "both below the cut point")
        elif answer == levels[-1]:
            level = ("both above the upper cut point" if len(levels) == 3
                     else "both above the cut point")
        else:
            level = "middle: between the two cut points"
        roles[answer] = {"preference": _PREFERENCE_ROLE[answer], "level": level}
    return roles


@dataclass
class Param:
    """One fitted parameter with its Wald interval (None where it was fixed, not estimated)."""

    name: str
    estimate: float
    se: float | None
    ci_low: float | None
    ci_high: float | None
    note: str = ""


@dataclass
class JointFit:
    """The joint fit of one pairwise criterion; see the module docstring."""

    systems: list[str]
    reference: str
    levels: list[str]  # the level answers modelled, lowest first ([] without a level part)
    n: int
    counts: dict[str, int]
    theta: list[Param]
    contrasts: list[Param]  # theta_s - theta_t for every pair of systems
    nu: Param | None
    position: Param | None
    beta: Param | None
    cuts: list[Param]
    log_likelihood: float
    converged: bool
    conf_level: float
    roles: dict[str, dict[str, str]]
    warnings: list[str] = field(default_factory=list)
    pair_shares: list[dict[str, Any]] = field(default_factory=list)
    method: str = ""
    #: "estimated", or "not identified": the information matrix is singular or the fit
    #: diverged, and no estimate is given (theta, contrasts, cut points empty; nu, position
    #: and beta None); `not_identified_because` says why. Counts and pair shares remain.
    status: str = "estimated"
    not_identified_because: list[str] = field(default_factory=list)


@dataclass
class _Layout:
    """Where each parameter sits in the vector the optimiser sees, and which are free."""

    n_theta: int
    position: bool
    nu: bool
    n_cuts: int  # 0 (no level part), 1 or 2
    beta: bool

    @property
    def size(self) -> int:
        return self.n_theta + self.position + self.nu + self.n_cuts + self.beta

    def split(self, x: np.ndarray) -> tuple[np.ndarray, float, float, np.ndarray, float]:
        """(theta of the non-reference systems, position, log nu, cut points, beta); fixed
        parameters read as 0, log nu as -inf. The second cut point is stored as the log of its
        distance above the first, which keeps them ordered."""
        i = self.n_theta
        theta = x[:i]
        position = float(x[i]) if self.position else 0.0
        i += self.position
        log_nu = float(x[i]) if self.nu else -math.inf
        i += self.nu
        raw = x[i:i + self.n_cuts]
        cuts = raw.copy()
        if self.n_cuts == 2:
            cuts[1] = raw[0] + math.exp(raw[1])
        i += self.n_cuts
        beta = float(x[i]) if self.beta else 0.0
        return theta, position, log_nu, cuts, beta


class _Data:
    """Answers aggregated to cells (system A, system B, answer) with their counts."""

    def __init__(self, a: np.ndarray, b: np.ndarray, answer: np.ndarray, weight: np.ndarray,
                 n_systems: int, levels: Sequence[str]):
        self.a, self.b, self.w = a, b, weight
        self.is_a = answer == A
        self.is_b = answer == B
        self.nopref = np.isin(answer, NO_PREFERENCE)
        # Level index of each no-preference cell (0 lowest), -1 for A/B cells.
        self.level = np.array([levels.index(v) if v in levels else -1 for v in answer],
                              dtype=int)
        # Design rows: +1 for the system shown as A, -1 for B, with the reference's column
        # (system 0) dropped; and the pair's mean quality (+1/2 each).
        full = np.zeros((len(a), n_systems))
        full[np.arange(len(a)), a] += 1.0
        full[np.arange(len(a)), b] -= 1.0
        self.x_diff = full[:, 1:]
        mean = np.zeros((len(a), n_systems))
        mean[np.arange(len(a)), a] += 0.5
        mean[np.arange(len(a)), b] += 0.5
        self.x_mean = mean[:, 1:]


def _negloglik(x: np.ndarray, layout: _Layout, data: _Data) -> tuple[float, np.ndarray]:
    """-log L and its gradient."""
    theta, position, log_nu, cuts, beta = layout.split(x)
    u = data.x_diff @ theta + position
    # Preference part in u and log nu: P(A) = e^{u/2}/D, P(B) = e^{-u/2}/D, P(N) = nu/D.
    terms = np.stack([u / 2, -u / 2, np.full_like(u, log_nu)])
    log_d = special.logsumexp(terms, axis=0)
    p_a, p_b, p_n = np.exp(terms - log_d)
    w = data.w
    # Without a free nu there are no no-preference answers (nu is then fixed at 0).
    chosen = np.where(data.is_a, u / 2, np.where(data.is_b, -u / 2, log_nu if layout.nu else 0.0))
    ll = float(np.sum(w * (chosen - log_d)))
    d_u = np.where(data.is_a, 0.5, np.where(data.is_b, -0.5, 0.0)) - (p_a - p_b) / 2
    d_lognu = np.where(data.nopref, 1.0, 0.0) - p_n
    d_m = np.zeros_like(u)
    grad_cuts = np.zeros(layout.n_cuts)
    grad_beta = 0.0
    if layout.n_cuts:
        m = data.x_mean @ theta
        levelled = data.level >= 0
        k = data.level[levelled]
        bounds = np.concatenate([[-np.inf], cuts, [np.inf]])
        eta_hi = bounds[k + 1] - beta * m[levelled]
        eta_lo = bounds[k] - beta * m[levelled]
        f_hi, f_lo = special.expit(eta_hi), special.expit(eta_lo)
        prob = np.clip(f_hi - f_lo, 1e-300, None)
        wl = w[levelled]
        ll += float(np.sum(wl * np.log(prob)))
        dens_hi = np.where(np.isfinite(eta_hi), f_hi * (1 - f_hi), 0.0) / prob
        dens_lo = np.where(np.isfinite(eta_lo), f_lo * (1 - f_lo), 0.0) / prob
        # d log P / d eta_hi = dens_hi, d / d eta_lo = -dens_lo; eta = c - beta * m.
        for j in range(layout.n_cuts):
            grad_cuts[j] = float(np.sum(wl * (np.where(k == j, dens_hi, 0.0)
                                              - np.where(k == j + 1, dens_lo, 0.0))))
        d_eta = dens_hi - dens_lo  # with respect to a shift of both etas
        d_m[levelled] = -beta * d_eta
        grad_beta = float(np.sum(wl * (-m[levelled]) * d_eta))
    grad = [data.x_diff.T @ (w * d_u) + data.x_mean.T @ (w * d_m)]
    if layout.position:
        grad.append(np.array([np.sum(w * d_u)]))
    if layout.nu:
        grad.append(np.array([np.sum(w * d_lognu)]))
    if layout.n_cuts:
        if layout.n_cuts == 2:  # chain rule for c2 = c1 + exp(r)
            spread = math.exp(x[layout.n_theta + layout.position + layout.nu + 1])
            grad_cuts = np.array([grad_cuts[0] + grad_cuts[1], grad_cuts[1] * spread])
        grad.append(grad_cuts)
    if layout.beta:
        grad.append(np.array([grad_beta]))
    return -ll, -np.concatenate(grad)


def _hessian(x: np.ndarray, layout: _Layout, data: _Data) -> np.ndarray:
    """The observed information: central differences of the analytic gradient."""
    n = len(x)
    hess = np.zeros((n, n))
    for i in range(n):
        step = 1e-5 * max(1.0, abs(x[i]))
        up, down = x.copy(), x.copy()
        up[i] += step
        down[i] -= step
        hess[:, i] = (_negloglik(up, layout, data)[1] - _negloglik(down, layout, data)[1]) / (
            2 * step)
    return (hess + hess.T) / 2


def _connected(n_systems: int, a: np.ndarray, b: np.ndarray) -> bool:
    parent = list(range(n_systems))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(a, b, strict=True):
        parent[root(int(i))] = root(int(j))
    return len({root(i) for i in range(n_systems)}) == 1


def _exp(value: float | None) -> float | None:
    """exp, with an unbounded estimate's interval reading as infinite (stored as None)."""
    return None if value is None else math.exp(min(value, 700.0))


def _wald(name: str, estimate: float, se: float | None, z: float, note: str = "") -> Param:
    if se is None or not math.isfinite(se):
        return Param(name, estimate, None, None, None, note)
    return Param(name, estimate, se, estimate - z * se, estimate + z * se, note)


def joint_preference_model(
    df: pd.DataFrame,
    *,
    allow_tie: bool,
    allow_both: bool,
    left: str = "system",
    right: str = "system_b",
    value: str = "value",
    weight: str | None = None,
    reference: str | None = None,
    position: bool = True,
    conf_level: float = 0.95,
) -> JointFit:
    """Fit the joint model to pairwise answers: one row per answer (or per cell with `weight`
    counts), `left` the system shown as A, `right` the one shown as B, `value` one of A, B,
    tie, both_good, both_bad (the canonical spellings). `allow_tie` / `allow_both`: what the
    criterion offers, which decides the level part (not the answers seen). `position=False`
    where A/B is not what people saw first. Raises ValueError on unknown answers or an answer
    the criterion does not offer."""
    for column in (left, right, value) + ((weight,) if weight else ()):
        if column not in df.columns:
            raise ValueError(f"missing column {column!r}")
    data = df.dropna(subset=[left, right, value])
    answers = data[value].astype(str).to_numpy()
    offered = {A, B} | ({TIE} if allow_tie else set()) | (
        {BOTH_GOOD, BOTH_BAD} if allow_both else set())
    unknown = sorted(set(answers) - offered)
    if unknown:
        raise ValueError(f"answers {unknown} are not among those the criterion offers "
                         f"({', '.join(sorted(offered))})")
    left_names = data[left].astype(str).to_numpy()
    right_names = data[right].astype(str).to_numpy()
    if (left_names == right_names).any():
        raise ValueError("a comparison of a system with itself")
    weights = (data[weight].astype(float).to_numpy() if weight
               else np.ones(len(data), dtype=float))
    systems = sorted(set(left_names) | set(right_names))
    if reference is not None:
        if reference not in systems:
            raise ValueError(f"reference {reference!r} is not among the systems compared")
        systems.remove(reference)
        systems.insert(0, reference)
    if len(systems) < 2:
        raise ValueError("fewer than two systems were compared")
    index = {s: i for i, s in enumerate(systems)}
    cells = (pd.DataFrame({"a": [index[s] for s in left_names],
                           "b": [index[s] for s in right_names], "answer": answers,
                           "w": weights})
             .groupby(["a", "b", "answer"], as_index=False)["w"].sum())
    cells = cells[cells["w"] > 0]
    counts = {answer: int(round(cells.loc[cells["answer"] == answer, "w"].sum()))
              for answer in ANSWERS if answer in offered}
    levels = ([BOTH_BAD] + ([TIE] if allow_tie else []) + [BOTH_GOOD]) if allow_both else []
    warnings: list[str] = []
    if not _connected(len(systems), cells["a"].to_numpy(), cells["b"].to_numpy()):
        raise ValueError("the systems are not connected by comparisons: their qualities "
                         "cannot be put on one scale")
    n_nopref = sum(counts.get(v, 0) for v in NO_PREFERENCE)
    nu_free = n_nopref > 0
    if not nu_free and (allow_tie or allow_both):
        warnings.append("no answer said 'no preference': nu is 0 at the maximum (plain "
                        "Bradley-Terry), not estimated")
    if levels and any(counts.get(level, 0) == 0 for level in levels):
        missing = [level for level in levels if counts.get(level, 0) == 0]
        warnings.append(f"no {', '.join(missing)} answers: the level part (cut points, beta) "
                        "cannot be estimated and is left out")
        levels = []
    beta_free = False
    if levels:
        nopref = cells[cells["answer"].isin(NO_PREFERENCE)]
        pairs = {frozenset((int(a), int(b))) for a, b in zip(nopref["a"], nopref["b"],
                                                              strict=True)}
        beta_free = len(pairs) >= 2 and len(systems) >= 3
        if not beta_free:
            warnings.append("beta (how the level follows quality) needs 'no preference' "
                            "answers on at least two pairs of systems (three systems): fixed "
                            "at 0, so the cut points describe the pooled level shares")
    position_free = position and len(cells) > 0
    layout = _Layout(len(systems) - 1, position_free, nu_free, max(len(levels) - 1, 0),
                     beta_free)
    fit_data = _Data(cells["a"].to_numpy(), cells["b"].to_numpy(),
                     cells["answer"].to_numpy(), cells["w"].to_numpy(dtype=float),
                     len(systems), levels)
    start = np.zeros(layout.size)
    if layout.n_cuts:
        start[layout.n_theta + layout.position + layout.nu] = -0.5
    solution = optimize.minimize(_negloglik, start, args=(layout, fit_data), jac=True,
                                 method="BFGS", options={"gtol": 1e-7, "maxiter": 2000})
    x = solution.x
    grad_norm = float(np.max(np.abs(_negloglik(x, layout, fit_data)[1]))) if len(x) else 0.0
    converged = bool(solution.success) or grad_norm < 1e-4
    hess = _hessian(x, layout, fit_data)
    singular = _singular(hess)
    try:
        cov = np.linalg.inv(hess) if not singular else np.full_like(hess, np.nan)
        if not np.all(np.isfinite(cov)) or np.any(np.diag(cov) < 0):
            raise np.linalg.LinAlgError
    except np.linalg.LinAlgError:
        cov = np.full_like(hess, np.nan)
        singular = True
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    theta, position_value, log_nu, cuts, beta = layout.split(x)
    why = _not_identified(layout, systems, levels, x, se, singular, converged, solution)
    fit = JointFit(
        systems=systems, reference=systems[0], levels=levels,
        n=int(round(float(cells["w"].sum()))), counts=counts, theta=[], contrasts=[],
        nu=None, position=None, beta=None, cuts=[], log_likelihood=-float(solution.fun),
        converged=converged, conf_level=conf_level,
        roles=answer_roles(sorted(offered), levels), warnings=warnings,
        pair_shares=_pair_shares(cells, systems, offered),
        method=("Davidson's Bradley-Terry model with ties"
                + (" and a position term" if layout.position else "")
                + (", with a cumulative logit on the pair's mean quality for the level of "
                   "no-preference answers" if levels else "")
                + "; maximum likelihood (BFGS, analytic gradient), Wald intervals from the "
                  "observed information; answers independent (no rater random effect)"))
    if why:
        # Estimates of a model the data do not identify are numbers of the optimiser's
        # stopping point, not of the data (beta = -83123 on 36 answers): none are given.
        fit.status, fit.not_identified_because = "not identified", why
        return fit
    z = float(stats.norm.ppf(0.5 + conf_level / 2))
    full_theta = np.concatenate([[0.0], theta])
    theta_cov = np.zeros((len(systems), len(systems)))
    theta_cov[1:, 1:] = cov[:layout.n_theta, :layout.n_theta]
    theta_params = [Param(systems[0], 0.0, None, None, None, "reference, fixed at 0")] + [
        _wald(systems[i], float(full_theta[i]), float(math.sqrt(max(theta_cov[i, i], 0))), z)
        for i in range(1, len(systems))]
    contrasts = []
    for i in range(len(systems)):
        for j in range(i + 1, len(systems)):
            var = theta_cov[i, i] + theta_cov[j, j] - 2 * theta_cov[i, j]
            contrasts.append(_wald(f"{systems[i]} - {systems[j]}",
                                   float(full_theta[i] - full_theta[j]),
                                   float(math.sqrt(max(var, 0.0))), z))
    at = layout.n_theta
    position_param = None
    if layout.position:
        position_param = _wald("position (A shown first)", position_value, float(se[at]), z)
        at += 1
    nu_param = None
    if layout.nu:
        log_param = _wald("log nu", log_nu, float(se[at]), z)
        nu_value = math.exp(min(log_nu, 700.0))
        nu_param = Param("nu", nu_value, nu_value * float(se[at]),
                         _exp(log_param.ci_low), _exp(log_param.ci_high),
                         "interval: exp of the Wald interval of log nu")
        at += 1
    cut_params: list[Param] = []
    if layout.n_cuts:
        # Cut points on their own scale: c2 = c1 + exp(r), so var(c2) by the delta method.
        jac = np.eye(layout.n_cuts)
        if layout.n_cuts == 2:
            jac[1, 0], jac[1, 1] = 1.0, math.exp(x[at + 1])
        block = cov[at:at + layout.n_cuts, at:at + layout.n_cuts]
        cut_cov = jac @ block @ jac.T
        names = [f"{levels[k]} | {levels[k + 1]}" for k in range(layout.n_cuts)]
        cut_params = [_wald(names[k], float(cuts[k]), float(math.sqrt(max(cut_cov[k, k], 0))),
                            z) for k in range(layout.n_cuts)]
        at += layout.n_cuts
    beta_param = None
    if layout.beta:
        beta_param = _wald("beta (level per unit of mean quality)", beta, float(se[at]), z)
    elif levels:
        beta_param = Param("beta (level per unit of mean quality)", 0.0, None, None, None,
                           "fixed at 0 (not identifiable here)")
    fit.theta, fit.contrasts, fit.nu, fit.position = (theta_params, contrasts, nu_param,
                                                      position_param)
    fit.beta, fit.cuts = beta_param, cut_params
    return fit


#: An estimate beyond this on the log-odds scale (P = 1 - 1e-13), or a standard error beyond
#: MAX_SE, is the optimiser walking off to infinity (separation), not a finite maximum.
MAX_ABS_ESTIMATE = 30.0
MAX_SE = 100.0


def _singular(hess: np.ndarray) -> bool:
    """The observed information is singular (or not positive definite): its smallest
    eigenvalue is not positive relative to its largest."""
    if hess.size == 0:
        return False
    if not np.all(np.isfinite(hess)):
        return True
    eigenvalues = np.linalg.eigvalsh(hess)
    return bool(eigenvalues[0] <= 1e-10 * max(abs(eigenvalues[-1]), 1e-300))


def _parameter_names(layout: _Layout, systems: list[str], levels: list[str]) -> list[str]:
    names = [f"quality of {s}" for s in systems[1:]]
    names += ["position"] if layout.position else []
    names += ["log nu"] if layout.nu else []
    names += [f"cut point {levels[k]} | {levels[k + 1]}" for k in range(layout.n_cuts)]
    return names + (["beta"] if layout.beta else [])


def _not_identified(layout: _Layout, systems: list[str], levels: list[str], x: np.ndarray,
                    se: np.ndarray, singular: bool, converged: bool,
                    solution: Any) -> list[str]:
    """Why the data do not identify the model (empty: they do)."""
    names = _parameter_names(layout, systems, levels)
    theta, position, log_nu, cuts, beta = layout.split(x)
    values = [*theta, *([position] if layout.position else []),
              *([log_nu] if layout.nu else []), *cuts, *([beta] if layout.beta else [])]
    why = []
    if not converged:
        why.append(f"the fit did not converge ({solution.message})")
    if singular:
        why.append("the information matrix is singular: some parameters are not determined "
                   "by the answers (a system always or never preferred, or no-preference "
                   "levels that follow the systems' quality perfectly)")
    # Named, not valued: the values are where the optimiser gave up, not estimates.
    runaway = [name for name, value in zip(names, values, strict=True)
               if not math.isfinite(value) or abs(value) > MAX_ABS_ESTIMATE]
    if runaway:
        why.append(f"the fit diverges: {', '.join(runaway)} ran past "
                   f"{MAX_ABS_ESTIMATE:g} on the log-odds scale: the answers separate "
                   "perfectly, so the maximum is at infinity")
    unbounded = [f"{name} (SE {error:.3g})" for name, error in zip(names, se, strict=True)
                 if math.isfinite(error) and error > MAX_SE]
    if unbounded and not runaway:
        why.append(f"standard errors over {MAX_SE:g}: {', '.join(unbounded)}: the answers "
                   "do not bound these parameters")
    return why


def _pair_shares(cells: pd.DataFrame, systems: list[str], offered: set[str]
                 ) -> list[dict[str, Any]]:
    """Answer counts per unordered pair of systems, oriented as (first, second) in `systems`
    order: an A answer with the second shown as A counts for the second."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for a, b, answer, w in cells[["a", "b", "answer", "w"]].itertuples(index=False):
        first, second = (a, b) if a < b else (b, a)
        row = out.setdefault((first, second), {
            "first": systems[first], "second": systems[second], "n": 0,
            **{key: 0 for key in ("first_better", "second_better", TIE, BOTH_GOOD, BOTH_BAD)
               if key in offered or key.endswith("better")}})
        if answer in (A, B):
            chose_first = (answer == A) == (a == first)
            row["first_better" if chose_first else "second_better"] += int(round(w))
        else:
            row[answer] += int(round(w))
        row["n"] += int(round(w))
    return [out[key] for key in sorted(out)]
