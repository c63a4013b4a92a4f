"""The analysis report: plots (matplotlib, embedded as PNG) and HTML/PDF from one template.

The PDF is WeasyPrint's rendering of the same HTML, so the two never disagree.

What the report prints is decided here, in Python, from the analysis result (JSON): every
table is a `Table` of ready-formatted cells, with its notes and the warnings that belong to its
numbers, so the template only lays them out. The rules a reader relies on:
- a number is shown with its confidence interval wherever the result has one, and a degenerate
  interval (lower = upper, e.g. DeLong's at AUC 1) is not shown as if it were one;
- warnings of a fit or a statistic stand next to the numbers derived from it;
- missing values are a dash, never "nan" or "None";
- model terms read as "factor: level", values as stored with the criterion's labels;
- the Methods section describes only the analyses that ran, with their engines, versions,
  seeds and bootstrap sizes.

Modules: `format` (cells, `Table`, `Block`, names), `plots`, `criteria` (criterion sections),
`proxies` (proxies against humans), `methods` (power and Methods), `render` (the entry
points, exported here). The template is templates/analysis/report.html.
"""

from __future__ import annotations

from analysis.report.render import build_plots, render_html, render_pdf, report_context

__all__ = ["build_plots", "render_html", "render_pdf", "report_context"]
