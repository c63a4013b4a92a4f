"""The analysis report: plots (matplotlib, embedded as PNG) and HTML/PDF from one template.

The PDF is WeasyPrint's rendering of the same HTML, so the two never disagree.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and workers
import matplotlib.pyplot as plt  # noqa: E402
from django.template.loader import render_to_string  # noqa: E402

FIGSIZE = (6.4, 3.6)
DPI = 150


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _proportions_plot(section: dict[str, Any], title: str) -> str | None:
    rows = section if isinstance(section, list) else None
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=FIGSIZE)
    rows = [r for r in rows if r.get("proportion") is not None]
    if not rows:
        plt.close(fig)
        return None
    names = [str(r.get("group")) for r in rows]
    values = [r["proportion"] for r in rows]
    low = [r["proportion"] - (r.get("ci_low") or r["proportion"]) for r in rows]
    high = [(r.get("ci_high") or r["proportion"]) - r["proportion"] for r in rows]
    ax.bar(names, values, yerr=[low, high], capsize=6, color="#4c72b0")
    ax.set_ylim(0, 1)
    ax.set_ylabel("proportion (95% Wilson CI)")
    ax.set_title(title)
    return _png(fig)


def _distribution_plot(rows: list[dict[str, Any]] | None, value: str, title: str) -> str | None:
    if not rows or not isinstance(rows, list):
        return None
    systems = sorted({r["system"] for r in rows})
    levels = sorted({r[value] for r in rows})
    totals = {s: sum(r["n"] for r in rows if r["system"] == s) for s in systems}
    fig, ax = plt.subplots(figsize=FIGSIZE)
    bottom = [0.0] * len(systems)
    colours = plt.cm.RdYlGn([i / max(len(levels) - 1, 1) for i in range(len(levels))])
    for level, colour in zip(levels, colours, strict=True):
        shares = [sum(r["n"] for r in rows if r["system"] == s and r[value] == level)
                  / max(totals[s], 1) for s in systems]
        ax.barh(systems, shares, left=bottom, color=colour, label=str(level))
        bottom = [b + v for b, v in zip(bottom, shares, strict=True)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of judgments")
    ax.legend(title=value, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title)
    return _png(fig)


def _roc_plot(validity: dict[str, Any]) -> str | None:
    curves = [(p["proxy"], p["auc"]) for p in validity.get("proxies", [])
              if isinstance(p.get("auc"), dict) and p["auc"].get("fpr")]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.8))
    for name, auc in curves:
        ax.plot(auc["fpr"], auc["tpr"], label=f"{name} (AUC {auc['auc']['value']:.2f})")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"ROC vs human majority: {validity['criterion']}")
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def _bland_altman_plot(name: str, ba: dict[str, Any]) -> str | None:
    means, diffs = ba.get("means"), ba.get("differences")
    if not means or not diffs:
        return None
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.scatter(means, diffs, s=10, alpha=0.6)
    for line, style in ((ba["bias"], "-"), (ba["lower"], "--"), (ba["upper"], "--")):
        ax.axhline(line["value"], color="#c44e52", linestyle=style)
    ax.set_xlabel("mean of proxy and human share")
    ax.set_ylabel("proxy - human share")
    ax.set_title(f"Bland-Altman: {name}")
    return _png(fig)


def build_plots(result: dict[str, Any]) -> dict[str, str]:
    plots: dict[str, str] = {}
    for criterion in result.get("criteria", []):
        key = criterion["key"]
        candidates = {
            f"{key}.proportions": lambda c=criterion: _proportions_plot(
                c.get("proportions"), f"{c['key']}: proportion positive per system"),
            f"{key}.distribution": lambda c=criterion: _distribution_plot(
                c.get("distribution"), "rating" if c["kind"] == "likert" else "value",
                f"{c['key']}: distribution per system"),
            f"{key}.severity": lambda c=criterion: _distribution_plot(
                c.get("severity_levels"), "rating",
                f"{c['key']}: severity (3 = fully preserved) per system"),
        }
        for name, make in candidates.items():
            image = make()
            if image:
                plots[name] = image
    for validity in result.get("validity", []):
        if not isinstance(validity, dict) or "criterion" not in validity:
            continue
        image = _roc_plot(validity)
        if image:
            plots[f"roc.{validity['criterion']}"] = image
        for proxy in validity.get("proxies", []):
            ba = proxy.get("bland_altman")
            if isinstance(ba, dict):
                image = _bland_altman_plot(proxy["proxy"], ba)
                if image:
                    plots[f"ba.{validity['criterion']}.{proxy['proxy']}"] = image
    return plots


def render_html(*, study: Any, result: dict[str, Any], options: dict[str, Any],
                filters: list[str]) -> str:
    return render_to_string("analysis/report.html", {
        "study": study, "result": result, "plots": build_plots(result), "options": options,
        "filters": filters,
    })


def render_pdf(html: str) -> bytes:
    from weasyprint import HTML

    return HTML(string=html).write_pdf()
