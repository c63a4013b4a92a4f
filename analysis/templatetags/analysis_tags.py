"""Formatting helpers for the analysis report template."""

import math

from django import template

register = template.Library()

ESTIMATE_LABELS = {
    "percent_agreement": "Percent agreement", "krippendorff_alpha": "Krippendorff's alpha",
    "gwet_ac1": "Gwet's AC1", "fleiss_kappa": "Fleiss' kappa",
    "binary_alpha": "Krippendorff's alpha (binary)",
}
MODEL_LABELS = (("clmm", "Cumulative link mixed model"), ("clm", "Cumulative link model"),
                ("glmm", "Binomial GLMM"))


@register.filter
def num(value, digits=2):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def pval(value):
    if value is None:
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


@register.filter
def pct(value):
    return "–" if value is None else f"{100 * value:.0f}%"


@register.filter
def get(mapping, key):
    return (mapping or {}).get(key) if isinstance(mapping, dict) else None


@register.filter
def split(value):
    return value.split()


@register.filter
def models(criterion):
    return [(label, criterion[key]) for key, label in MODEL_LABELS if key in criterion]


@register.filter
def estimates(agreement):
    rows = [(ESTIMATE_LABELS[key], agreement[key]) for key in ESTIMATE_LABELS
            if isinstance(agreement.get(key), dict) and "value" in agreement[key]]
    for form, estimate in (agreement.get("icc") or {}).items():
        if isinstance(estimate, dict) and "value" in estimate:
            rows.append((form, estimate))
    return rows


def readable_term(term: str, levels: dict | None) -> str:
    """A coefficient's name as a reader says it: R's `systemasr-medium` is
    `system: asr-medium`, `tempwarm:contactyes` is `temp: warm × contact: yes`. Needs the
    fit's factor levels (`extra.levels`); a name it cannot split stays as it is."""
    levels = levels or {}
    parts = []
    for part in str(term).split(":"):
        for factor in sorted(levels, key=len, reverse=True):
            rest = part[len(factor):]
            if part.startswith(factor) and rest in [str(v) for v in levels[factor]]:
                parts.append(f"{factor}: {rest}")
                break
        else:
            parts.append(part)
    return " × ".join(parts)


@register.filter
def term(coefficient_term, fit):
    return readable_term(coefficient_term, ((fit or {}).get("extra") or {}).get("levels"))
