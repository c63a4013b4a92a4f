"""Entry points: the report's context, rendered to HTML by the template and to PDF by
WeasyPrint from that same HTML."""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from analysis.extras import extras_sections
from analysis.report.criteria import criterion_view
from analysis.report.methods import methods_paragraphs, power_block
from analysis.report.plots import roc_plot
from analysis.report.proxies import validity_view


def build_plots(result: dict[str, Any]) -> dict[str, str]:
    """The ROC curves per validity criterion (the other plots are made with their section)."""
    plots: dict[str, str] = {}
    for validity in result.get("validity", []):
        if isinstance(validity, dict) and "criterion" in validity:
            image = roc_plot(validity)
            if image:
                plots[f"roc.{validity['criterion']}"] = image
    return plots


def report_context(*, study: Any, result: dict[str, Any], options: dict[str, Any],
                   filters: list[str]) -> dict[str, Any]:
    plots = build_plots(result)
    return {
        "study": study, "result": result, "options": options, "filters": filters,
        "criteria": [criterion_view(c) for c in result.get("criteria") or []],
        "validity": [view for v in result.get("validity") or []
                     if (view := validity_view(v, plots)) is not None],
        "power": power_block(result.get("power")),
        "sections": extras_sections(result),
        "methods": methods_paragraphs(result, options, filters),
    }


def render_html(*, study: Any, result: dict[str, Any], options: dict[str, Any],
                filters: list[str]) -> str:
    return render_to_string("analysis/report.html", report_context(
        study=study, result=result, options=options, filters=filters))


def render_pdf(html: str) -> bytes:
    from weasyprint import HTML

    return HTML(string=html).write_pdf()
