"""The stopping rule of an adaptive study, checked by beat (`analysis.stopping_checks`).

Each check is one look of the study's pre-registered plan: the plan's pairwise criterion's
human judgments (excluded raters left out) are fitted with the report's preference model
(`analysis.stats.models.preference_model`: Bradley-Terry with a position term, ties excluded,
model-based SEs), each contrast gets its z and its repeated CI at the look's alpha-spending
boundary (`analysis.stats.sequential`), computed for the information fractions actually
observed (judgments at each look over the plan's maximum; the last look spends what is left),
and the look is stored with the strengths the next seats are built from
(`evalstudy.services.adaptive.stopping_check_record`), which closes the study when the rule is met.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from evalstudy.models import Enrollment, Rater, StoppingCheck, Study, StudyPlan
from evalstudy.services import plan_contrasts, plan_criterion, stopping_check_record

from .stats import sequential


def _judgments(plan: StudyPlan) -> pd.DataFrame:
    from annotation.models import Judgment

    criterion = plan_criterion(plan)
    if criterion is None:
        return pd.DataFrame(columns=["left_system", "right_system", "choice", "rater"])
    excluded = Enrollment.objects.filter(study=plan.study, excluded_at__isnull=False)
    rows = (Judgment.objects
            .filter(slot__assignment__study=plan.study, slot__kind="target", criterion=criterion,
                    rater__kind__in=Rater.HUMAN_KINDS, slot__output_b__isnull=False)
            .exclude(rater__in=excluded.values("rater"))
            .values_list("slot__output__system__name", "slot__output_b__system__name", "value",
                         "rater_id"))
    return pd.DataFrame.from_records(list(rows), columns=["left_system", "right_system",
                                                          "choice", "rater"])


def _fit(frame: pd.DataFrame, systems: list[str]) -> tuple[dict[str, float], np.ndarray] | None:
    """Strengths by system (reference 0) and their covariance (systems order), or None when the
    model cannot be estimated yet."""
    from .stats.models import preference_model

    decided = frame[frame["choice"].astype(str).str.lower().isin(["a", "b"])]
    if decided.empty or set(decided["left_system"]) | set(decided["right_system"]) != set(systems):
        return None
    result = preference_model(decided, reference=systems[0])
    fit = result.ties_excluded
    if fit is None or not fit.converged:
        return None
    terms = fit.extra["vcov"]["terms"]
    matrix = np.asarray(fit.extra["vcov"]["matrix"], dtype=float)
    position = {term: i for i, term in enumerate(terms)}
    levels = fit.extra["levels"]["system"]
    strengths = {levels[0]: 0.0}
    strengths.update({c.term[len("system"):]: c.estimate for c in fit.coefficients
                      if c.term.startswith("system")})
    covariance = np.zeros((len(systems), len(systems)))
    for i, a in enumerate(systems):
        for j, b in enumerate(systems):
            ta, tb = f"system{a}", f"system{b}"
            if ta in position and tb in position:
                covariance[i, j] = matrix[position[ta], position[tb]]
    return strengths, covariance


def stopping_check_run(*, study: Study, force: bool = False) -> StoppingCheck | None:
    """Make the next look of `study`'s plan when `check_every` new judgments have come in (or
    `force`), store it, and close the study when the rule is met. None when no look is due or
    the model cannot be estimated yet (such a look tests nothing, so spends no alpha)."""
    plan = StudyPlan.objects.select_related("study").filter(study=study).first()
    if plan is None or plan.registered_at is None or study.status != Study.Status.OPEN:
        return None
    previous = list(plan.checks.order_by("look"))
    frame = _judgments(plan)
    n = len(frame)
    last_n = previous[-1].judgments if previous else 0
    if n <= last_n or (n - last_n < plan.check_every and not force
                       and n < plan.max_judgments):
        return None
    systems = sorted(plan.study.systems.values_list("name", flat=True))
    fitted = _fit(frame, systems)
    final = len(previous) + 1 >= plan.max_looks or n >= plan.max_judgments
    if fitted is None and not final:
        return None
    contrasts = plan_contrasts(plan)
    per_contrast_alpha = plan.alpha / len(contrasts)
    fractions = [c.information_fraction for c in previous]
    fraction = 1.0 if final else min(n / plan.max_judgments, 1.0)
    if fractions and fraction <= fractions[-1]:
        fraction = 1.0 if final else fractions[-1]
        if not final:
            return None
    look = sequential.looks([*fractions, fraction], per_contrast_alpha, plan.spending)[-1]
    estimates = []
    if fitted is not None:
        strengths, covariance = fitted
        index = {s: i for i, s in enumerate(systems)}
        for a, b in contrasts:
            u = np.zeros(len(systems))
            u[index[a]] += 1.0
            u[index[b]] -= 1.0
            estimate = float(u @ np.array([strengths[s] for s in systems]))
            se = math.sqrt(max(float(u @ covariance @ u), 0.0))
            low, high = sequential.repeated_ci(estimate, se, look.boundary)
            estimates.append({
                "contrast": [a, b], "estimate": estimate, "se": se,
                "z": estimate / se if se > 0 else None,
                "rci": [low, high] if math.isfinite(look.boundary) else None,
                "width": high - low if math.isfinite(look.boundary) else None,
                "decided": bool(se > 0 and abs(estimate / se) >= look.boundary)})
    met, reason = _rule(plan, estimates, final)
    return stopping_check_record(plan=plan, strengths=fitted[0] if fitted else None, fields={
        "look": look.number, "judgments": n, "information_fraction": look.fraction,
        "alpha_spent": look.alpha_spent,
        "boundary": look.boundary if math.isfinite(look.boundary) else None,
        "nominal_alpha": look.nominal_alpha, "estimates": estimates, "met": met,
        "reason": reason})


def _rule(plan: StudyPlan, estimates: list[dict[str, Any]], final: bool) -> tuple[bool, str]:
    if estimates and plan.target_ci_width is not None and all(
            e["width"] is not None and e["width"] <= plan.target_ci_width for e in estimates):
        return True, f"every contrast's repeated CI is at most {plan.target_ci_width:g} wide"
    if estimates and plan.stop_on_decision and all(e["decided"] for e in estimates):
        return True, "every contrast is decided (its repeated CI excludes 0)"
    if final:
        return True, "the plan's last look (maximum looks or judgments reached)"
    return False, ""


def stopping_checks_due() -> int:
    """One look for every open adaptive study that is due one; returns how many were made."""
    made = 0
    for study in Study.objects.filter(status=Study.Status.OPEN, design=Study.Design.ADAPTIVE,
                                      plan__registered_at__isnull=False):
        if stopping_check_run(study=study) is not None:
            made += 1
    return made
