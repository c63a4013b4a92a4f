"""The report's plots (matplotlib on the Agg backend), embedded as base64 PNG."""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any, cast

import matplotlib

matplotlib.use("Agg")  # no display on servers and workers
import matplotlib.pyplot as plt  # noqa: E402

from analysis.report.format import field_name, num, proxy_label, slice_has_both_classes

if TYPE_CHECKING:
    from matplotlib.colors import ListedColormap

FIGSIZE = (6.0, 3.0)
DPI = 150


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def proportions_plot(rows: Any, title: str) -> str | None:
    rows = [r for r in rows if r.get("proportion") is not None] if isinstance(rows, list) else []
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=FIGSIZE)
    names = [str(r.get("group")) for r in rows]
    values = [r["proportion"] for r in rows]
    low = [max(0.0, r["proportion"] - (r.get("ci_low") if r.get("ci_low") is not None
                                       else r["proportion"])) for r in rows]
    high = [max(0.0, (r.get("ci_high") if r.get("ci_high") is not None else r["proportion"])
                - r["proportion"]) for r in rows]
    ax.bar(names, values, yerr=[low, high], capsize=6, color="#4c72b0")
    ax.set_ylim(0, 1)
    ax.set_ylabel("proportion (95% Wilson CI)")
    ax.set_title(title)
    return _png(fig)


def distribution_plot(rows: Any, value: str, title: str, labels: dict | None = None
                       ) -> str | None:
    if not rows or not isinstance(rows, list):
        return None
    systems = sorted({r["system"] for r in rows})
    levels = sorted({r[value] for r in rows})
    totals = {s: sum(r["n"] for r in rows if r["system"] == s) for s in systems}
    fig, ax = plt.subplots(figsize=FIGSIZE)
    left = [0.0] * len(systems)
    colours = plt.cm.RdYlGn([i / max(len(levels) - 1, 1) for i in range(len(levels))])
    for level, colour in zip(levels, colours, strict=True):
        shares = [sum(r["n"] for r in rows if r["system"] == s and r[value] == level)
                  / max(totals[s], 1) for s in systems]
        label = str(level)
        if labels and labels.get(str(level)):
            label = f"{level}: {labels[str(level)]}"
        ax.barh(systems, shares, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of judgments")
    ax.legend(title=value, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title)
    return _png(fig)


SEVERITY_COLOURS = ("#4c9a2a", "#e0b040", "#c44e52")  # preserved, minor errors, lost


def severity_plot(rows: Any, title: str) -> str | None:
    """Share of each severity level per system, levels as stored (0 = fully preserved) and
    named by the criterion's own labels."""
    if not rows or not isinstance(rows, list):
        return None
    systems = sorted({r["system"] for r in rows})
    levels = sorted({(r["severity"], r["label"]) for r in rows})
    totals = {s: sum(r["n"] for r in rows if r["system"] == s) for s in systems}
    fig, (ax, key) = plt.subplots(
        2, 1, figsize=(FIGSIZE[0], 2.2 + 0.45 * len(systems)),
        gridspec_kw={"height_ratios": [0.8 + 0.45 * len(systems), 1.1]})
    left = [0.0] * len(systems)
    for level, label in levels:
        shares = [sum(r["n"] for r in rows if r["system"] == s and r["severity"] == level)
                  / max(totals[s], 1) for s in systems]
        short = label if len(label) <= 70 else label[:68].rstrip() + "…"
        ax.barh(systems, shares, left=left, label=f"{level}: {short}",
                color=SEVERITY_COLOURS[level % len(SEVERITY_COLOURS)])
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of judgments")
    # the legend in an axis of its own below the bars: long labels never overlap the axis
    # label, however many systems there are
    key.axis("off")
    handles, names = ax.get_legend_handles_labels()
    key.legend(handles, names, title="severity (as rated)", fontsize=7, title_fontsize=8,
               loc="upper left", frameon=False, alignment="left")
    ax.set_title(title)
    return _png(fig)


def roc_plot(validity: dict[str, Any]) -> str | None:
    fig = roc_figure(validity)
    return None if fig is None else _png(fig)


ROC_LINESTYLES = ("-", "--", "-.")  # a new style for each round of the 10 default colours


def roc_figure(validity: dict[str, Any]):
    """The ROC curves of a criterion's proxies, the legend below the axes (in them it covered
    the curves once a study had a few metrics), two columns of it."""
    curves = [(p["proxy"], p["auc"]) for p in validity.get("proxies", [])
              if isinstance(p.get("auc"), dict) and p["auc"].get("fpr")]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.8))
    for index, (name, auc) in enumerate(curves):
        ax.plot(auc["fpr"], auc["tpr"], linestyle=ROC_LINESTYLES[index // 10 % 3],
                label=f"{proxy_label(name)} (AUC {num((auc.get('auc') or {}).get('value'), 2)})")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"ROC vs human majority: {validity['criterion']}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15),
              ncol=2 if len(curves) > 3 else 1, frameon=False)
    return fig


def forest_plot(column: str, proxies: list[tuple[str, list[dict]]]) -> str | None:
    """AUC per slice of one field with its CI, one colour per proxy, AUC 0.5 marked. Slices
    with too few cases of a class (see MIN_SLICE_CLASS) are left out of the plot."""
    slices = []
    for _, proxy_rows in proxies:
        for slice_row in proxy_rows:
            if not slice_row.get("is_overall") and str(slice_row.get("slice")) not in slices:
                slices.append(str(slice_row.get("slice")))
    shown = [(name, {str(r.get("slice")): r for r in rows if slice_has_both_classes(r)})
             for name, rows in proxies]
    slices = [label for label in slices if any(label in rows for _, rows in shown)]
    if not slices:
        return None
    fig, ax = plt.subplots(figsize=(6.0, max(2.4, 0.28 * len(slices) * len(shown) + 1.6)))
    step = 0.7 / max(len(shown), 1)
    # tab10 is a ListedColormap of ten RGB tuples; matplotlib types it as any Colormap, and
    # a ListedColormap's colours as any array-like.
    colours = cast("list[tuple[float, float, float]]",
                   cast("ListedColormap", plt.cm.tab10).colors)
    for index, (name, rows) in enumerate(shown):
        for y, label in enumerate(reversed(slices)):
            row = rows.get(label)
            if row is None:
                continue
            offset = y + 0.35 - step * (index + 0.5)
            low, high = row.get("ci_low"), row.get("ci_high")
            if low is not None and high is not None and high > low:
                ax.plot([low, high], [offset, offset], color=colours[index % 10], linewidth=1)
            ax.plot([row["auc"]], [offset], "o", color=colours[index % 10], markersize=3.5,
                    label=proxy_label(name) if y == 0 or label not in rows else None)
    handles = [plt.Line2D([], [], color=colours[i % 10], marker="o", linestyle="",
                          label=proxy_label(name)) for i, (name, _) in enumerate(shown)]
    ax.legend(handles=handles, fontsize=7, loc="upper center", ncol=3,
              bbox_to_anchor=(0.5, -0.22))
    ax.set_yticks(range(len(slices)))
    ax.set_yticklabels(list(reversed(slices)), fontsize=7)
    ax.axvline(0.5, color="grey", linestyle=":")
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("AUC with 95% CI (unadjusted)", fontsize=8)
    ax.set_title(f"AUC by {field_name(column)}", fontsize=9)
    return _png(fig)


def bland_altman_plot(name: str, ba: dict[str, Any]) -> str | None:
    means, diffs = ba.get("means"), ba.get("differences")
    if not means or not diffs:
        return None
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.scatter(means, diffs, s=10, alpha=0.6)
    for line, style in ((ba["bias"], "-"), (ba["lower"], "--"), (ba["upper"], "--")):
        ax.axhline(line["value"], color="#c44e52", linestyle=style)
    ax.set_xlabel("mean of proxy P(yes) and human share")
    ax.set_ylabel("proxy - human share")
    ax.set_title(f"Bland-Altman: {proxy_label(name)}")
    return _png(fig)
