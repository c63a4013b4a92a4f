"""The report's stopping-rule section: an adaptive study's pre-registered plan as registered,
every look the periodic check made under it (`analysis.stopping`), the alpha spent and the
nominal boundary at each look, and the corrected (repeated) CIs and p-values at the last look.

Why the correction: the study was looked at several times and could have stopped at any look,
so a CI or p-value computed as if the final sample size had been fixed in advance would be too
narrow or too small (five looks at the nominal 1.96 reject a true null about 14 % of the time,
not 5 %). Repeated CIs at the spent alpha cover all contrasts at every look simultaneously with
the plan's confidence, whichever look the study stopped at.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

OPTIONS: dict[str, Any] = {}


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    return judgments


OPTIONAL_STOPPING = (
    "Adaptive study: the preference shares, the Bradley-Terry model and the other intervals "
    "and p-values of this report are computed as if the number of judgments had been fixed in "
    "advance, but the data were looked at repeatedly and the pairs were chosen from them: they "
    "are not corrected for optional stopping. Read the repeated CIs and p-values of the section "
    "'Stopping rule (adaptive collection)'.")


def _warn_uncorrected(result: dict[str, Any], criterion: str | None) -> None:
    """The report's warnings and the plan criterion's Bradley-Terry table say that their
    figures are not the plan's (a reader of those tables alone would take them as final)."""
    result.setdefault("warnings", []).append(OPTIONAL_STOPPING)
    for entry in result.get("criteria") or []:
        preference = entry.get("preference") if entry.get("key") == criterion else None
        fit = preference.get("ties_excluded") if isinstance(preference, dict) else None
        if isinstance(fit, dict):
            fit.setdefault("warnings", []).append(OPTIONAL_STOPPING)


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    from scipy.stats import norm

    from analysis.stats import sequential
    from evalstudy.models import StudyPlan
    from evalstudy.services import plan_contrasts, plan_criterion

    plan = StudyPlan.objects.filter(study=study).first()
    if plan is None:
        return None
    checks = list(plan.checks.order_by("look"))
    criterion = plan_criterion(plan)
    contrasts = plan_contrasts(plan)
    data: dict[str, Any] = {
        "plan": {
            "criterion": criterion.key if criterion is not None else None,
            "contrasts": [list(c) for c in contrasts], "listed": bool(plan.contrasts),
            "target_ci_width": plan.target_ci_width, "stop_on_decision": plan.stop_on_decision,
            "alpha": plan.alpha, "spending": plan.spending,
            "spending_label": plan.get_spending_display(), "check_every": plan.check_every,
            "max_looks": plan.max_looks, "max_judgments": plan.max_judgments,
            "registered_at": plan.registered_at.isoformat() if plan.registered_at else None},
        "checks": [{
            "look": c.look, "judgments": c.judgments, "fraction": c.information_fraction,
            "alpha_spent": c.alpha_spent, "boundary": c.boundary,
            "nominal_alpha": c.nominal_alpha, "met": c.met, "reason": c.reason,
            "checked_at": c.checked_at.isoformat()} for c in checks],
        "final": [],
    }
    if study.design == study.Design.ADAPTIVE:
        _warn_uncorrected(result, data["plan"]["criterion"])
    if not checks:
        return data
    last = checks[-1]
    fractions = [c.information_fraction for c in checks]
    m = len(contrasts)
    for entry in last.estimates:
        pair = entry["contrast"]
        zs = []
        for c in checks:
            found = next((e for e in c.estimates if e["contrast"] == pair), None)
            zs.append(found["z"] if found and found.get("z") is not None else 0.0)
        repeated = sequential.repeated_p_value(zs, fractions, plan.alpha / m, plan.spending)
        z = entry.get("z")
        data["final"].append({
            **entry,
            # On the family's scale: the boundaries were computed at alpha / m per contrast.
            "repeated_p": min(1.0, repeated * plan.alpha / (plan.alpha / m)),
            "naive_p": float(2 * norm.sf(abs(z))) if z is not None else None,
            "naive_ci": ([entry["estimate"] - 1.959964 * entry["se"],
                          entry["estimate"] + 1.959964 * entry["se"]]
                         if entry.get("se") is not None else None)})
    return data



def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    from analysis.report.format import num, table_dict

    plan = data["plan"]
    registered = plan["registered_at"] or "not yet (the study has not opened)"
    targets = []
    if plan["target_ci_width"] is not None:
        targets.append(f"every contrast's repeated CI at most {plan['target_ci_width']:g} wide "
                       "(log-odds)")
    if plan["stop_on_decision"]:
        targets.append("every contrast decided (its repeated CI excludes 0)")
    contrasts = ", ".join(f"{a} − {b}" for a, b in plan["contrasts"])
    paragraphs = [
        f"Pre-registered plan, registered {registered}: criterion {plan['criterion']}; "
        f"contrasts {contrasts}{'' if plan['listed'] else ' (every pair)'}; model: "
        "Bradley-Terry with a position term, ties excluded; stop when "
        f"{' or '.join(targets)}, or at look {plan['max_looks']} or "
        f"{plan['max_judgments']:,} judgments at the latest; a look every "
        f"{plan['check_every']:,} judgments.",
        f"Correction for optional stopping: alpha {plan['alpha']:g} for the family of "
        f"{len(plan['contrasts'])} contrast(s), split equally over them (Bonferroni), each "
        f"share spent over the looks by the {plan['spending_label']} spending function "
        "(Lan-DeMets), with each look's boundary computed for the information fraction "
        "actually observed (judgments at the look over the plan's maximum; the last look "
        "spends what is left). The study was looked at repeatedly and could have stopped at "
        "any look, so an interval or p-value computed as if its size had been fixed in "
        "advance would be too narrow or too small (five looks at the nominal 1.96 reject a "
        "true null about 14 % of the time, not 5 %). The repeated CIs below hold at every "
        "look at once with the plan's confidence, whichever look the study stopped at; the "
        "repeated p-value is the smallest alpha at which the plan would have rejected at some "
        "look. The uncorrected figures are shown beside them for comparison only."]
    checks = data["checks"]
    if not checks:
        paragraphs.append("No look has been made yet.")
        return {"title": "Stopping rule (adaptive collection)",
                "blocks": [{"title": "", "paragraphs": paragraphs, "tables": []}]}
    look_rows = [[c["look"], c["judgments"], num(c["fraction"]), num(c["alpha_spent"], 5),
                  num(c["boundary"]), num(c["nominal_alpha"], 5),
                  f"met: {c['reason']}" if c["met"] else "not met", c["checked_at"][:19]]
                 for c in checks]
    final_rows = [[f"{e['contrast'][0]} − {e['contrast'][1]}", num(e["estimate"]),
                   num(e["se"]),
                   f"[{num(e['rci'][0])}, {num(e['rci'][1])}]" if e.get("rci") else "–",
                   num(e["repeated_p"], 4),
                   f"[{num(e['naive_ci'][0])}, {num(e['naive_ci'][1])}]"
                   if e.get("naive_ci") else "–", num(e["naive_p"], 4)]
                  for e in data["final"]]
    tables = [
        table_dict("Every look made", [
            ("Look", "num"), ("Judgments", "num"), ("Information fraction", "num"),
            ("Alpha spent (per contrast)", "num"), ("Boundary |z|", "num"),
            ("Nominal alpha", "num"), ("Rule", ""), ("Checked (UTC)", "")], look_rows),
        table_dict(f"Contrasts at the last look (look {checks[-1]['look']})", [
            ("Contrast", ""), ("Estimate (log-odds)", "num"), ("SE", "num"),
            ("Repeated CI", "num"), ("Repeated p (family)", "num"),
            ("Uncorrected 95% CI", "num"), ("Uncorrected p", "num")], final_rows)]
    return {"title": "Stopping rule (adaptive collection)",
            "blocks": [{"title": "", "paragraphs": paragraphs, "tables": tables}]}
