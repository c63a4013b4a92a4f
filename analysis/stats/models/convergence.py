"""Did a fit converge? Read from the optimiser's own return code and gradient (no Django).

R's optimisers say in words how they stopped, and the words mislead: nlminb's "relative
convergence (4)" is a success (code 0) that reads like a caveat. So the label comes from the
numbers: the return code, the largest absolute gradient of the (negative) log-likelihood at
the estimate, and the gradient scaled by the Hessian (lme4's check: the Newton step, in the
estimates' own units; it does not grow with the number of observations as the raw gradient
does). A fit converged when the code is 0, every SE is finite and either gradient is within
lme4's tolerance (`GRADIENT_TOLERANCE`, `lme4::.makeCC("warning", tol = 2e-3)`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: lme4's default tolerance for its gradient check (`lmerControl(check.conv.grad)`).
GRADIENT_TOLERANCE = 2e-3


@dataclass(frozen=True)
class Convergence:
    converged: bool
    label: str  # "converged (relative convergence, max |gradient| 0.0021)" or "did not ..."


def judge_convergence(*, code: int | None, message: str, max_gradient: float,
                      scaled_gradient: float | None, finite_se: bool) -> Convergence:
    """`code`: the optimiser's return code (0 = success: nlminb's `convergence`, clm's
    `convergence$code`, lme4's `optinfo$conv$opt`); `message`: its words, only shown;
    `max_gradient`: max |gradient| at the estimate; `scaled_gradient`: lme4's scaled gradient
    (max of min(|H^-1/2 g|, |g|); None where the Hessian could not be factored)."""
    words = re.sub(r"\s*\(\d+\)\s*$", "", (message or "").strip())
    gradient = f"max |gradient| {max_gradient:.2g}"
    small = [g for g in (max_gradient, scaled_gradient)
             if g is not None and math.isfinite(g) and g < GRADIENT_TOLERANCE]
    if code != 0:
        return Convergence(False, f"did not converge (code {code}: {words or 'no message'}; "
                                  f"{gradient})")
    if not small:
        scaled = ("" if scaled_gradient is None or not math.isfinite(scaled_gradient)
                  else f", scaled {scaled_gradient:.2g}")
        return Convergence(False, f"did not converge ({words or 'code 0'}, but {gradient}"
                                  f"{scaled} is over the tolerance {GRADIENT_TOLERANCE:g})")
    if not finite_se:
        return Convergence(False, f"did not converge ({words or 'code 0'}, {gradient}, but a "
                                  "standard error is not finite)")
    return Convergence(True, f"converged ({words or 'code 0'}, {gradient})")
