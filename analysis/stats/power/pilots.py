"""A pilot study's fit as the simulations' parameters: its random-effect SDs, intercept or
thresholds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# --------------------------------------------------------------------------------------------
# pilots


def _field(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a ModelFit (or Coefficient) or of its JSON form (a dict)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def sds_from_fit(fit: Any, rater: str = "rater", item: str = "item") -> dict[str, float]:
    """``rater_sd``, ``item_sd`` and ``baseline`` (the intercept) from a pilot
    :class:`~analysis.stats.models.ModelFit` of ``fit_binomial_glmm`` or its JSON form (0 for
    an absent random effect)."""
    re_ = _field(fit, "random_effects") or {}
    out = {
        "rater_sd": math.sqrt(max(float(re_.get(rater) or 0.0), 0.0)),
        "item_sd": math.sqrt(max(float(re_.get(item) or 0.0), 0.0)),
    }
    for c in _field(fit, "coefficients") or []:
        if _field(c, "term") == "(Intercept)":
            out["baseline"] = float(_field(c, "estimate"))
    return out


def pilot_from_fit(fit: Any, rater: str = "rater", item: str = "item"
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Design parameters from a pilot's fit and where they came from.

    Returns ``(params, pilot)``: ``params`` holds ``rater_sd``, ``item_sd`` and ``baseline``
    (binomial GLMM) or ``thresholds`` (CLMM), to pass to :func:`power_binary` /
    :func:`power_likert`; ``pilot`` = ``{"engine", "formula", "n_obs", "random_effects",
    "converged", "warnings", "fallback"}`` for the result (``PowerResult.pilot``): numbers
    derived from a fit carry its warnings (a singular pilot fit's zero variance, say, makes
    the power optimistic). A fallback fit (no random effects estimated) gives SDs of 0 and
    says so in ``warnings``.
    """
    params: dict[str, Any] = sds_from_fit(fit, rater, item)
    thresholds = _field(fit, "thresholds") or []
    if thresholds:
        params.pop("baseline", None)
        params["thresholds"] = [float(_field(t, "estimate")) for t in thresholds]
    extra = _field(fit, "extra") or {}
    warnings = list(_field(fit, "warnings") or [])
    if extra.get("fallback"):
        warnings.append("the pilot fit estimated no random effects (fallback engine): the "
                        "simulated rater and item SDs are 0, which overstates power")
    for name in (rater, item):
        if name not in (_field(fit, "random_effects") or {}):
            warnings.append(f"the pilot fit has no {name!r} random effect: its SD is taken as 0, "
                            "which overstates power if that variance exists")
    converged = bool(_field(fit, "converged", True))
    if not converged:
        warnings.append("the pilot fit did not converge: its variance components are suspect")
    pilot = {
        "engine": _field(fit, "engine"), "formula": _field(fit, "formula"),
        "n_obs": _field(fit, "n_obs"),
        "random_effects": dict(_field(fit, "random_effects") or {}),
        "converged": converged, "warnings": warnings,
        "fallback": bool(extra.get("fallback", False)),
    }
    return params, pilot
