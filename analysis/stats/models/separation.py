"""Separation: a factor level whose outcomes are all alike, so that its maximum-likelihood
effect is infinite. Diagnosed on every fit (ordinal and binomial); the analysis option
``separation`` decides when the penalised binomial fit is added, and
:func:`separation_report` says in a report which fit to read."""

from __future__ import annotations

import math
from typing import Any

from analysis.stats.models.base import ModelFit, PreparedData
from analysis.stats.options import SEPARATION_OPTIONS

#: |estimate| (log-odds, or latent logit for ordinal models) or SE from which a coefficient is
#: taken as a sign of separation. An odds ratio of e^10 (about 22,000) is no effect that human
#: judgments show, and an SE of 10 on this scale means a flat likelihood: either way the number
#: is where the optimiser stopped on its way to infinity (glmer stops around 20-30 with SEs in
#: the hundreds, or with tiny SEs when lme4 falls back to an approximate covariance matrix).
SEPARATION_LIMIT = 10.0


def _separated_levels(prep: PreparedData, response_type: str) -> list[dict[str, Any]]:
    """Levels of the fixed-effect factors whose outcomes are all alike: all 0 or all 1
    (binary; all successes or all failures for ``cbind``), all in the lowest or all in the
    highest category (ordinal). Each makes that level's maximum-likelihood effect infinite."""
    resp = prep.response
    data = prep.data
    factors = [t[0] for t in prep.formula.fixed
               if len(t) == 1 and t[0] in prep.factors and t[0] not in resp]
    found: list[dict[str, Any]] = []
    for factor in dict.fromkeys(factors):
        reference = prep.factors[factor][0]
        for level, rows in data.groupby(factor, observed=True, sort=False):
            n = len(rows)
            if response_type == "ordinal":
                categories = prep.factors[resp[0]]
                values = rows[resp[0]].astype(str)
                if (values == categories[-1]).all():
                    outcome = f"all in the highest category ({categories[-1]})"
                elif (values == categories[0]).all():
                    outcome = f"all in the lowest category ({categories[0]})"
                else:
                    continue
            elif len(resp) == 2:
                successes, failures = float(rows[resp[0]].sum()), float(rows[resp[1]].sum())
                n = int(successes + failures)
                if failures == 0:
                    outcome = "all successes"
                elif successes == 0:
                    outcome = "all failures"
                else:
                    continue
            else:
                y = rows[resp[0]].to_numpy(dtype=float)
                if (y == 1).all():
                    outcome = "all 1"
                elif (y == 0).all():
                    outcome = "all 0"
                else:
                    continue
            level = str(level)
            found.append({"factor": factor, "level": level, "n": int(n), "outcome": outcome,
                          "term": None if level == reference else f"{factor}{level}"})
    return found


def diagnose_separation(prep: PreparedData, fit: ModelFit, *, response_type: str,
                         penalised: bool = False) -> None:
    """Sets ``fit.extra["separation"]`` and adds a warning naming what is separated.

    ``extra["separation"]``: ``{"detected", "penalised", "levels": [{"factor", "level",
    "term", "n", "outcome"}], "terms": [{"term", "estimate", "se", "reason"}], "limit",
    "diagnosis", "remedy"}``. ``levels``: factor levels whose outcomes are all alike (see
    :func:`_separated_levels`; ``term`` is None for the reference level, whose separation
    moves the intercept and every coefficient of the factor); ``terms``: coefficients with
    |estimate| or SE >= :data:`SEPARATION_LIMIT` or a non-finite SE. ``detected`` when either
    is non-empty. For a penalised fit (``penalised=True``) separated levels are expected (the
    penalty is there for them): the warning says that their estimates are finite because of
    the prior, and only runaway coefficients would count as a failure of the penalty.
    """
    levels = _separated_levels(prep, response_type)
    terms = []
    for c in fit.coefficients:
        if not math.isfinite(c.se) or not math.isfinite(c.estimate):
            reason = "non-finite estimate or SE"
        elif abs(c.estimate) >= SEPARATION_LIMIT:
            reason = f"|estimate| >= {SEPARATION_LIMIT:g}"
        elif c.se >= SEPARATION_LIMIT:
            reason = f"SE >= {SEPARATION_LIMIT:g}"
        else:
            continue
        terms.append({"term": c.term, "estimate": c.estimate, "se": c.se, "reason": reason})
    detected = bool(levels or terms)
    by_term = {c.term: c for c in fit.coefficients}
    scale = "latent logit" if response_type == "ordinal" else "log-odds"

    def what(level: dict[str, Any]) -> str:
        c = by_term.get(level["term"]) if level["term"] else by_term.get("(Intercept)")
        numbers = f" ({c.estimate:+.3g}, SE {c.se:.3g})" if c is not None else ""
        if level["term"] is None:
            return (f"as the reference level it moves the intercept{numbers} and every "
                    f"{level['factor']} coefficient: none is an estimate")
        return f"{level['term']}{numbers} is not an estimate"

    parts = [f"{lv['factor']} {lv['level']!r}: {lv['n']} outcomes, {lv['outcome']}"
             for lv in levels]
    explained = {lv["term"] for lv in levels}
    runaway = [t for t in terms if t["term"] not in explained]
    diagnosis = remedy = None
    if penalised and levels:
        diagnosis = (
            "separation in the data (" + "; ".join(parts) + "): this penalised fit keeps the "
            "estimates finite, but for the separated levels they reflect the prior as much "
            "as the data: read them as 'large', not as measured sizes")
        if runaway:
            diagnosis += ("; the penalty did not hold for "
                          + ", ".join(f"{t['term']} ({t['reason']})" for t in runaway))
    elif detected:
        lines = [f"{part}: its {scale} effect is infinite under maximum likelihood, so "
                 f"{what(lv)}, and no contrast, odds ratio, CI or p-value involving "
                 f"{lv['level']!r} means anything" for part, lv in zip(parts, levels,
                                                                       strict=True)]
        lines += [f"{t['term']} = {t['estimate']:+.3g} (SE {t['se']:.3g}; {t['reason']}): "
                  "quasi-complete separation or an empty cell" for t in runaway]
        diagnosis = "separation: " + "; ".join(lines)
        remedy = ("report the raw proportions of the separated levels, and the penalised fit "
                  "(analysis option separation='penalised'; models.fit_binomial_penalised)"
                  if response_type != "ordinal" else
                  "report the rating distribution of the separated levels (no penalised "
                  "ordinal model is offered) or merge sparse categories")
        fit.warnings.append(f"{diagnosis}. Remedy: {remedy}")
    if penalised and diagnosis:
        fit.warnings.append(diagnosis)
    fit.extra["separation"] = {
        "detected": detected, "penalised": penalised, "levels": levels, "terms": terms,
        "limit": SEPARATION_LIMIT, "diagnosis": diagnosis, "remedy": remedy,
    }





def wants_penalised(fit: ModelFit, option: str = "auto") -> bool:
    """Whether the analysis option ``separation`` asks for a penalised refit of ``fit``."""
    if option not in SEPARATION_OPTIONS:
        raise ValueError(f"separation must be one of {', '.join(SEPARATION_OPTIONS)}")
    detected = bool((fit.extra.get("separation") or {}).get("detected"))
    return fit.family == "binomial" and (option == "penalised"
                                         or (option == "auto" and detected))


def separation_report(fit: ModelFit, *, option: str = "auto", key: str = "glmm",
                      penalised: ModelFit | None = None, penalised_key: str | None = None,
                      penalised_error: str | None = None) -> dict[str, Any]:
    """What a report says about separation for one criterion, and which fit is which.

    ``{"option", "detected", "diagnosis", "levels", "terms", "fits": {key: {"estimation",
    "engine", "role"}, ...}, "read", "penalised_fit", "note"}``: ``fits`` describes the
    maximum-likelihood fit (``key``) and, when there is one, the penalised fit
    (``penalised_key``); ``read`` names the fit to read for the system effects (the penalised
    one when there is separation and it was fitted); ``penalised_fit`` is ``"fitted"``,
    ``"not requested"``, ``"not offered for ordinal models"`` or ``"failed: <why>"``.
    """
    sep = fit.extra.get("separation") or {}
    detected = bool(sep.get("detected"))
    fits: dict[str, Any] = {key: {
        "estimation": fit.extra.get("estimation", "maximum likelihood"), "engine": fit.engine,
        "role": ("the model as specified, by maximum likelihood"
                 + (": separated levels have infinite estimates, so its numbers for them "
                    "(and every contrast, flagged) are not estimates" if detected else "")),
    }}
    if penalised is not None and penalised_key:
        fits[penalised_key] = {
            "estimation": penalised.extra.get("estimation"), "engine": penalised.engine,
            "penalty": penalised.extra.get("penalty"),
            "role": ("the same model with a weakly informative prior on the fixed effects: "
                     "finite estimates, shrunk towards 0; sizes for separated levels "
                     "reflect the prior"),
        }
    if penalised is not None:
        status = "fitted"
    elif penalised_error:
        status = f"failed: {penalised_error}"
    elif fit.family != "binomial":
        status = "not offered for ordinal models"
    else:
        status = "not requested"
    read = penalised_key if (penalised is not None and detected) else key
    if not detected:
        note = "no separation detected"
    elif penalised is not None:
        note = (f"separation: read {penalised_key!r} for the system effects; {key!r} is "
                "kept to show what maximum likelihood gives")
    else:
        note = (f"separation: {key!r}'s numbers for the separated levels are not estimates; "
                + ("no penalised fit: " + status if status != "not requested" else
                   "set the analysis option separation='penalised' or 'auto' for a "
                   "penalised fit"))
    return {
        "option": option, "detected": detected, "diagnosis": sep.get("diagnosis"),
        "levels": sep.get("levels", []), "terms": sep.get("terms", []), "fits": fits,
        "read": read, "penalised_fit": status, "note": note,
    }
