"""The analysis option `power`: checked before a run, and run with a pilot criterion's fit
from the same analysis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .designs import TESTS, DesignSearch, PowerResult, Progress, pilot_model
from .pilots import pilot_from_fit
from .search import power_binary, power_likert, smallest_design

# --------------------------------------------------------------------------------------------
# the analysis option `power`

#: Keys of the analysis option ``power``: the arguments of :func:`smallest_design` (with
#: ``target_power``) or of :func:`power_binary` / :func:`power_likert` (without), plus
#: ``pilot``: the key of a binary, severity or Likert criterion of the study whose fitted model
#: in this analysis is the pilot (variance components, intercept or thresholds).
OPTION_KEYS = frozenset({
    "target_power", "vary", "lo", "hi", "start", "criterion", "n_sim_per_step", "resolution",
    "n_raters", "n_items", "ratings_per_output", "effect", "rater_sd", "item_sd", "baseline",
    "thresholds", "alpha", "n_sim", "seed", "test", "conf_level", "chunk_size", "cores",
    "pilot",
})
_SEARCH_KEYS = ("vary", "lo", "hi", "start", "criterion", "n_sim_per_step", "resolution")
#: Most simulations an analysis run may ask for (a refit each: bounded time on the worker).
MAX_OPTION_SIMULATIONS = 20_000


def check_option(spec: Any, criteria: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The analysis option ``power`` checked before a run exists (ValueError saying what is
    wrong); returns it as a dict. The numbers are checked again when the run computes it."""
    if not isinstance(spec, Mapping):
        raise ValueError("power must be an object of power-analysis settings")
    unknown = set(spec) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown power settings {sorted(unknown)}; known: "
                         f"{sorted(OPTION_KEYS)}")
    if "effect" not in spec:
        raise ValueError("power needs 'effect' (the B - A difference on the model's scale)")
    search = [k for k in _SEARCH_KEYS if k in spec]
    if search and "target_power" not in spec:
        raise ValueError(f"power settings {search} belong to the design search: give "
                         "'target_power' too")
    if spec.get("test") is not None and spec["test"] not in TESTS:
        raise ValueError(f"power test must be one of {', '.join(TESTS)}")
    for name in ("n_sim", "n_sim_per_step", "chunk_size", "cores"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ValueError(f"power {name} must be a positive integer")
    if int(spec.get("n_sim") or 1000) > MAX_OPTION_SIMULATIONS:
        raise ValueError(f"power n_sim must be at most {MAX_OPTION_SIMULATIONS}")
    if "pilot" in spec:
        kinds = {str(c["key"]): c["kind"] for c in criteria}
        if pilot_model(kinds.get(str(spec["pilot"]))) is None:
            raise ValueError("power pilot must name a binary, severity or likert criterion "
                             "of the study (its fitted model is the pilot)")
    return dict(spec)


def run_option(spec: Mapping[str, Any], criteria_results: Sequence[Mapping[str, Any]] = (),
               progress: Progress | None = None) -> PowerResult | DesignSearch:
    """The analysis option ``power``: :func:`smallest_design` when it has ``target_power``,
    else one design's power. With ``pilot`` (a criterion key), that criterion's fit in this
    analysis (``criteria_results``: the pipeline's JSON entries) gives the variance components
    and the intercept or thresholds that the option does not set itself, and the result
    records it with its warnings (``PowerResult.pilot``)."""
    spec = dict(check_option(spec, [{"key": c.get("key"), "kind": c.get("kind")}
                                    for c in criteria_results]))
    key = spec.pop("pilot", None)
    if key is not None:
        entry = next((c for c in criteria_results if str(c.get("key")) == str(key)), None)
        fit = None if entry is None else entry.get(pilot_model(entry.get("kind")) or "glmm")
        if not isinstance(fit, Mapping) or "error" in fit:
            why = (fit or {}).get("error") if isinstance(fit, Mapping) else "no model was fitted"
            raise ValueError(f"power pilot {key!r}: no pilot model ({why})")
        params, pilot = pilot_from_fit(fit)
        pilot["criterion"] = str(key)
        for name, value in params.items():
            spec.setdefault(name, value)
        spec["pilot"] = pilot
    if "target_power" in spec:
        return smallest_design(spec.pop("target_power"), progress=progress, **spec)
    fn = power_likert if "thresholds" in spec else power_binary
    return fn(progress=progress, **spec)
