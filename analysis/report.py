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
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and workers
import matplotlib.pyplot as plt  # noqa: E402
from django.template.loader import render_to_string  # noqa: E402

from .templatetags.analysis_tags import readable_term  # noqa: E402

FIGSIZE = (6.0, 3.0)
DPI = 150
DASH = "–"
SMALL_CLASS = 10  # fewer positives or negatives than this: an AUC's CI is a rough guide only
SMALL_GROUP = 10  # a deployment row on fewer outputs than this gets a warning


# --- formatting -----------------------------------------------------------------------------
def num(value: Any, digits: int = 3) -> str:
    if value is None or isinstance(value, bool):
        return DASH
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.{digits}f}" if math.isfinite(value) else DASH


def pval(value: Any) -> str:
    if value is None:
        return DASH
    try:
        value = float(value)
    except (TypeError, ValueError):
        return DASH
    if not math.isfinite(value):
        return DASH
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def pct(value: Any, digits: int = 1) -> str:
    return DASH if value is None else num(value, digits)


def interval(low: Any, high: Any, digits: int = 3) -> str:
    """`low – high`, or a dash when either end is missing or the interval has collapsed to a
    point (which says nothing about uncertainty: e.g. DeLong's variance is 0 at AUC 1)."""
    if low is None or high is None:
        return DASH
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError):
        return DASH
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        return DASH
    if high - low < 10 ** -digits:
        return "not estimable"
    return f"{low:.{digits}f} – {high:.{digits}f}"


def estimate_ci(estimate: dict | None) -> str:
    estimate = estimate or {}
    return interval(estimate.get("ci_low"), estimate.get("ci_high"))


def _pair(values: Any) -> tuple[Any, Any]:
    if isinstance(values, list | tuple) and len(values) == 2:
        return values[0], values[1]
    return None, None


# --- the report's building blocks -------------------------------------------------------------
@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    title: str = ""
    numeric: tuple[int, ...] = ()  # column indexes aligned right
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def cell_class(self, index: int) -> str:
        return "num" if index in self.numeric else ""

    @property
    def body(self) -> list[list[tuple[str, str]]]:
        return [[(cell, self.cell_class(i)) for i, cell in enumerate(row)] for row in self.rows]

    @property
    def head(self) -> list[tuple[str, str]]:
        return [(name, self.cell_class(i)) for i, name in enumerate(self.columns)]


@dataclass
class Block:
    """A titled part of a criterion or proxy section: paragraphs, tables, plots, warnings."""

    title: str = ""
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)  # (alt text, base64 PNG)
    warnings: list[str] = field(default_factory=list)
    engine: str = ""


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


# --- plots ----------------------------------------------------------------------------------
def _proportions_plot(rows: Any, title: str) -> str | None:
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


def _distribution_plot(rows: Any, value: str, title: str, labels: dict | None = None
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


def _severity_plot(rows: Any, title: str) -> str | None:
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


def _roc_plot(validity: dict[str, Any]) -> str | None:
    curves = [(p["proxy"], p["auc"]) for p in validity.get("proxies", [])
              if isinstance(p.get("auc"), dict) and p["auc"].get("fpr")]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 4.8))
    for name, auc in curves:
        ax.plot(auc["fpr"], auc["tpr"], label=f"{proxy_label(name)} (AUC "
                f"{num((auc.get('auc') or {}).get('value'), 2)})")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"ROC vs human majority: {validity['criterion']}")
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def _forest_plot(column: str, proxies: list[tuple[str, list[dict]]]) -> str | None:
    """AUC per slice of one field with its CI, one colour per proxy, AUC 0.5 marked. Slices
    with too few cases of a class (see MIN_SLICE_CLASS) are left out of the plot."""
    slices = []
    for _, rows in proxies:
        for row in rows:
            if not row.get("is_overall") and str(row.get("slice")) not in slices:
                slices.append(str(row.get("slice")))
    shown = [(name, {str(r.get("slice")): r for r in rows if _slice_ok(r)})
             for name, rows in proxies]
    slices = [label for label in slices if any(label in rows for _, rows in shown)]
    if not slices:
        return None
    fig, ax = plt.subplots(figsize=(6.0, max(2.4, 0.28 * len(slices) * len(shown) + 1.6)))
    step = 0.7 / max(len(shown), 1)
    colours = plt.cm.tab10.colors
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
    ax.set_title(f"AUC by {_field(column)}", fontsize=9)
    return _png(fig)


def _bland_altman_plot(name: str, ba: dict[str, Any]) -> str | None:
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


# --- names ----------------------------------------------------------------------------------
def proxy_label(name: str) -> str:
    """`rater:latte judge [1a2b3c]` is a proxy rater; other names are metric values."""
    return name.split(":", 1)[1] if name.startswith("rater:") else name


def _field(column: str) -> str:
    return column.split(".", 1)[1] if column.startswith(("item.", "system.")) else column


def _warnings_of(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(w) for w in value.get("warnings") or []]
    return []


# --- criterion sections ---------------------------------------------------------------------
def _descriptives(c: dict) -> Table | None:
    rows = c.get("descriptives")
    if not isinstance(rows, list) or not rows:
        return None
    return Table(["System", "n", "Mean", "Median", "SD", "SEM"], [
        [str(r.get("group")), str(r.get("n")), num(r.get("mean"), 2), num(r.get("median"), 1),
         num(r.get("sd"), 2), num(r.get("sem"), 3)] for r in rows], numeric=(1, 2, 3, 4, 5))


def _proportions(c: dict) -> Table | None:
    rows = c.get("proportions")
    if not isinstance(rows, list) or not rows:
        return None
    note = ("Positive = meaning preserved (severity 0 or 1, as in LATTE)."
            if c["kind"] == "severity" else 'Positive = "yes".')
    return Table(["System", "n", "Positive", "Proportion", "95% CI (Wilson)"], [
        [str(r.get("group")), str(r.get("n")), str(r.get("successes")),
         num(r.get("proportion")), interval(r.get("ci_low"), r.get("ci_high"))]
        for r in rows], numeric=(1, 2, 3, 4), notes=[note])


def _model_block(title: str, fit: dict) -> Block:
    block = Block(title=title)
    if not isinstance(fit, dict):
        return block
    if fit.get("error"):
        block.warnings.append(f"Not fitted: {fit['error']}")
        return block
    levels = (fit.get("extra") or {}).get("levels")
    block.engine = (f"{fit.get('formula')} · {fit.get('engine')} · n = {fit.get('n_obs')}"
                    + ("" if fit.get("converged", True) else " · did not converge"))
    table = Table(["Term", "Estimate", "SE", "95% CI", "p"], numeric=(1, 2, 3, 4))
    for co in fit.get("coefficients") or []:
        table.rows.append([readable_term(co.get("term"), levels), num(co.get("estimate")),
                           num(co.get("se")), interval(co.get("ci_low"), co.get("ci_high")),
                           pval(co.get("p_value"))])
    for co in fit.get("thresholds") or []:
        table.rows.append([f"threshold {co.get('term')}", num(co.get("estimate")),
                           num(co.get("se")), interval(co.get("ci_low"), co.get("ci_high")), ""])
    reference = (fit.get("extra") or {}).get("reference") or {}
    if reference:
        table.notes.append("Reference levels: " + ", ".join(
            f"{factor}: {level}" for factor, level in reference.items())
            + ". Estimates are log-odds differences from them.")
    block.tables.append(table)
    effects = fit.get("random_effects") or {}
    if effects:
        block.paragraphs.append("Random-effect variances: " + ", ".join(
            f"{name} {num(value)}" for name, value in effects.items()) + ".")
    extra = fit.get("extra") or {}
    status = extra.get("nominal_test_status")
    rows = [t for t in extra.get("nominal_test") or [] if t.get("term") != "<none>"]
    if rows or isinstance(status, dict):
        # an untested term says so (its reason is among the fit's warnings), never "LRT -, p -"
        tests = "; ".join(
            f"{readable_term(t.get('term'), levels)}: LRT {num(t.get('lrt'), 2)}, p "
            f"{pval(t.get('p_value'))}" if t.get("tested", t.get("p_value") is not None)
            else f"{readable_term(t.get('term'), levels)}: not computed" for t in rows)
        state = (status or {}).get("status", "computed")
        block.paragraphs.append(
            "Proportional-odds check (ordinal::nominal_test): "
            + (tests if tests and state != "not computed" else
               f"not computed ({(status or {}).get('reason') or 'no reason given'})") + ".")
    block.warnings += [str(w) for w in fit.get("warnings") or []]
    return block


def _separation_block(c: dict) -> Block | None:
    """What separation does to this criterion's model: the diagnosis, which fit to read, and
    what each fit is (models.separation_report)."""
    separation = c.get("separation")
    if not isinstance(separation, dict) or not separation.get("detected"):
        return None
    block = Block(title="Separation")
    if separation.get("diagnosis"):
        block.warnings.append(str(separation["diagnosis"]))
    if separation.get("note"):
        block.paragraphs.append(str(separation["note"]).capitalize() + ".")
    table = Table(["Fit", "Estimation", "Engine", "What it is"])
    for key, fit in (separation.get("fits") or {}).items():
        if isinstance(fit, dict):
            name = {"glmm": "Binomial GLMM", "glmm_penalised": "Penalised binomial GLMM",
                    "clmm": "Cumulative link mixed model"}.get(key, key)
            if key == separation.get("read"):
                name += " (read this one)"
            table.rows.append([name, str(fit.get("estimation") or DASH),
                               str(fit.get("engine") or DASH), str(fit.get("role") or DASH)])
    if table.rows:
        block.tables.append(table)
    status = str(separation.get("penalised_fit") or "")
    if status.startswith("failed"):
        block.warnings.append(f"Penalised fit {status}.")
    return block


def _contrasts(c: dict) -> Table | None:
    contrasts = c.get("contrasts")
    if not isinstance(contrasts, dict) or contrasts.get("error"):
        return None
    table = Table(["Contrast", "Estimate", "SE", "95% CI", "p", "p (Holm)"],
                  numeric=(1, 2, 3, 4, 5), title="Pairwise contrasts between systems")
    for k in contrasts.get("contrasts") or []:
        label = f"{k.get('level_a')} – {k.get('level_b')}"
        if not k.get("reliable", True):
            label += " (unreliable)"
        table.rows.append([label, num(k.get("estimate")), num(k.get("se")),
                           interval(k.get("ci_low"), k.get("ci_high")), pval(k.get("p_value")),
                           pval(k.get("p_adjusted"))])
    scale = contrasts.get("scale") or "model scale"
    table.notes.append(f"Wald contrasts on the {scale} scale from the fitted model; p-values "
                       "Holm-adjusted over the pairs.")
    table.warnings += _warnings_of(contrasts)
    for k in contrasts.get("contrasts") or []:
        for flag in k.get("flags") or []:
            table.warnings.append(f"{k.get('level_a')} – {k.get('level_b')}: {flag}")
    return table


def _preference(c: dict) -> list[Table]:
    pref = c.get("preference")
    if not isinstance(pref, dict) or pref.get("error"):
        return []
    shares = Table(["System", "Comparisons", "Wins", "Losses", "Ties",
                    "Share, ties excluded (95% CI)", "Share, ties as half (95% CI)"],
                   numeric=(1, 2, 3, 4, 5, 6), title="Preference shares")
    for s in pref.get("shares") or []:
        shares.rows.append([
            str(s.get("system")), str(s.get("n")), str(s.get("wins")), str(s.get("losses")),
            str(s.get("ties")),
            f"{num(s.get('share_ties_excluded'))} ({interval(*_pair(s.get('ci_ties_excluded')))})",
            f"{num(s.get('share_ties_half'))} ({interval(*_pair(s.get('ci_ties_half')))})"])
    tables = [shares]
    fit = pref.get("ties_excluded")
    if isinstance(fit, dict) and fit.get("coefficients"):
        model = Table(["Term", "Estimate", "SE", "95% CI", "p"], numeric=(1, 2, 3, 4),
                      title="Bradley-Terry model with a position term (ties excluded)")
        levels = (fit.get("extra") or {}).get("levels")
        for co in fit["coefficients"]:
            model.rows.append([readable_term(co.get("term"), levels), num(co.get("estimate")),
                               num(co.get("se")), interval(co.get("ci_low"), co.get("ci_high")),
                               pval(co.get("p_value"))])
        model.notes.append(f"{fit.get('formula')} · {fit.get('engine')} · n = "
                           f"{fit.get('n_obs')}. The position term is the log-odds of choosing "
                           "the output shown as A at equal strength.")
        model.warnings += [str(w) for w in fit.get("warnings") or []]
        tables.append(model)
    return tables


def _classification(c: dict) -> Table | None:
    rows = c.get("classification")
    if not isinstance(rows, list) or not rows:
        return None
    return Table(["System", "TP", "FP", "FN", "Precision", "Recall", "F1"], [
        [str(r.get("group")), str(r.get("tp")), str(r.get("fp")), str(r.get("fn")),
         num(r.get("precision")), num(r.get("recall")), num(r.get("f1"))] for r in rows],
        numeric=(1, 2, 3, 4, 5, 6))


AGREEMENT_LABELS = (
    ("percent_agreement", "Percent agreement"),
    ("krippendorff_alpha", "Krippendorff's alpha"),
    ("gwet_ac1", "Gwet's AC1"),
    ("gwet_ac2_quadratic", "Gwet's AC2 (quadratic weights)"),
    ("gwet_ac2_ordinal", "Gwet's AC2 (ordinal weights)"),
    ("fleiss_kappa", "Fleiss' kappa"),
    ("binary_alpha", "Krippendorff's alpha, meaning preserved (yes/no)"),
)


def _short_method(method: Any) -> str:
    """A CI method in a word for the table (the full text goes into a note below it)."""
    text = str(method or "")
    if text.startswith("analytic"):
        return "analytic"
    if "bootstrap" in text:
        return "bootstrap"
    return text[:20]


def _agreement_block(c: dict) -> Block | None:
    agreement = c.get("agreement")
    if not isinstance(agreement, dict):
        return None
    block = Block(title="Agreement among human raters")
    if agreement.get("error"):
        block.warnings.append(str(agreement["error"]))
        return block
    if agreement.get("note"):
        block.paragraphs.append(str(agreement["note"]))
        return block
    table = Table(["Statistic", "Level", "Value", "95% CI", "Units", "Raters", "CI"],
                  numeric=(2, 3, 4, 5))
    methods: dict[str, str] = {}
    for key, label in AGREEMENT_LABELS:
        e = agreement.get(key)
        if not isinstance(e, dict) or "value" not in e:
            continue
        level = e.get("level") or (agreement.get("level") if "alpha" in key else "")
        table.rows.append([label, level or "", num(e.get("value")), estimate_ci(e),
                           str(e.get("n_units", e.get("n", ""))), str(e.get("n_raters", "")),
                           _short_method(e.get("ci_method"))])
        if e.get("ci_method"):
            methods.setdefault(_short_method(e["ci_method"]), str(e["ci_method"]))
        table.warnings += [f"{label}: {w}" for w in _warnings_of(e)]
    icc = agreement.get("icc") or {}
    for form, e in icc.items() if isinstance(icc, dict) else ():
        if isinstance(e, dict) and "value" in e:
            table.rows.append([form, "interval", num(e.get("value")), estimate_ci(e),
                               str(e.get("n_units", e.get("n", ""))), str(e.get("n_raters", "")),
                               _short_method(e.get("ci_method"))])
            if e.get("ci_method"):
                methods.setdefault(_short_method(e["ci_method"]), str(e["ci_method"]))
            table.warnings += [f"{form}: {w}" for w in _warnings_of(e)]
    if isinstance(icc, dict) and icc.get("note"):
        table.warnings.append(f"ICC: {icc['note']}")
        table.warnings += [f"ICC: {w}" for w in icc.get("warnings") or []]
    for short, full in methods.items():
        table.notes.append(f"CI {short}: {full}.")
    categories = agreement.get("categories")
    if categories:
        table.notes.append(f"Categories: {', '.join(str(x) for x in categories)} "
                           f"({agreement.get('categories_from') or 'declared scale'}).")
    table.notes.append(
        f"{agreement.get('n_ratings', '')} ratings on {agreement.get('n_units', '')} outputs by "
        f"{agreement.get('n_raters', '')} human raters.")
    excluded = {k: v for k, v in (agreement.get("excluded") or {}).items() if v}
    if excluded:
        table.notes.append("Excluded: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                                     for k, v in excluded.items()) + ".")
    table.warnings += [str(w) for w in agreement.get("warnings") or []]
    block.tables.append(table)
    pairs = agreement.get("cohen_pairs") or {}
    if pairs.get("n_pairs"):
        means = pairs.get("mean_estimates") or {}
        text = "; ".join(f"{name} {num(e.get('value'))} ({estimate_ci(e)})"
                         for name, e in means.items() if isinstance(e, dict))
        if not text:
            text = ", ".join(f"{name} {num(v)}" for name, v in (pairs.get("mean") or {}).items())
        block.paragraphs.append(
            f"Cohen's kappa, mean over {pairs.get('n_computed')} of {pairs.get('n_pairs')} pairs "
            f"of human raters sharing at least {pairs.get('min_shared_units')} outputs: {text}.")
        block.warnings += [str(w) for w in pairs.get("warnings") or []]
    return block


def _ceiling_block(c: dict) -> Block | None:
    ceiling = c.get("ceiling")
    if not isinstance(ceiling, dict) or not ceiling.get("humans"):
        if isinstance(ceiling, dict) and ceiling.get("note"):
            return Block(title="Human ceiling", paragraphs=[str(ceiling["note"])])
        return None
    block = Block(title="Human ceiling: each rater against the majority of the other humans")
    table = Table(["Rater", "Kappa", "95% CI", "Agreement", "95% CI", "Gap to ceiling (95% CI)"],
                  numeric=(1, 2, 3, 4, 5))
    table.rows.append(["Humans (mean, leave one out)", num(ceiling.get("mean_kappa")),
                       interval(*_pair(ceiling.get("kappa_ci"))),
                       num(ceiling.get("mean_percent_agreement")),
                       interval(*_pair(ceiling.get("percent_agreement_ci"))), ""])
    for p in ceiling.get("proxies") or []:
        gap = p.get("kappa_minus_ceiling")
        table.rows.append([proxy_label(str(p.get("rater"))), num(p.get("kappa")),
                           interval(*_pair(p.get("kappa_ci"))), num(p.get("percent_agreement")),
                           interval(*_pair(p.get("percent_agreement_ci"))),
                           f"{num(gap)} ({interval(*_pair(p.get('kappa_minus_ceiling_ci')))})"
                           if gap is not None else DASH])
    weights = ceiling.get("weights")
    table.notes.append(
        f"Kappa{' with ' + str(weights) + ' weights' if weights else ''} against the majority "
        f"of the other human raters on {ceiling.get('n_units', '')} outputs "
        f"({ceiling.get('n_humans', len(ceiling['humans']))} humans); proxies are scored "
        "against the majority of all humans on the same outputs. "
        + (f"CIs: {ceiling['ci_method']}." if ceiling.get("ci_method") else ""))
    table.warnings += [str(w) for w in ceiling.get("warnings") or []]
    block.tables.append(table)
    return block


def _criterion_view(c: dict) -> dict[str, Any]:
    blocks: list[Block] = []
    summary = Block()
    if not c.get("n_judgments"):
        summary.paragraphs.append("No human answers.")
        return {"key": c["key"], "kind": c["kind"], "blocks": [summary], "answered": None}
    if c["kind"] == "text":
        summary.paragraphs.append(
            f"{c.get('answered', 0)} answers by {c.get('n_raters')} raters on "
            f"{c.get('n_outputs')} outputs (free text is counted, not modelled).")
        return {"key": c["key"], "kind": c["kind"], "blocks": [summary], "answered": None}
    summary.paragraphs.append(
        f"{c.get('n_judgments')} human judgments by {c.get('n_raters')} raters on "
        f"{c.get('n_outputs')} {'output pairs' if c['kind'] == 'pairwise' else 'outputs'}.")
    for table in (_descriptives(c), _proportions(c), _classification(c)):
        if table is not None:
            summary.tables.append(table)
    summary.tables += _preference(c)
    for key, make in (("proportions", lambda: _proportions_plot(
            c.get("proportions"), f"{c['key']}: proportion positive per system")),
            ("distribution", lambda: _distribution_plot(
                c.get("distribution"), "rating" if c["kind"] == "likert" else "value",
                f"{c['key']}: distribution per system", c.get("labels_by_value"))),
            ("severity", lambda: _severity_plot(c.get("severity_levels"),
                                                f"{c['key']}: severity per system"))):
        image = make()
        if image:
            summary.plots.append((f"{c['key']} {key} plot", image))
    blocks.append(summary)
    for key, title in (("clmm", "Cumulative link mixed model"),
                       ("clm", "Cumulative link model (no random effects)"),
                       ("glmm", "Binomial GLMM"), ("glmm_penalised", "Penalised binomial GLMM")):
        if key in c:
            blocks.append(_model_block(title, c[key]))
    separation = _separation_block(c)
    if separation:
        blocks.append(separation)
    contrasts = _contrasts(c)
    if contrasts is not None:
        blocks.append(Block(title=contrasts.title, tables=[contrasts]))
    for make in (_agreement_block, _ceiling_block):
        block = make(c)
        if block is not None:
            blocks.append(block)
    return {"key": c["key"], "kind": c["kind"], "blocks": blocks,
            "answered": c.get("answered")}


# --- proxies against humans -------------------------------------------------------------------
def _proxy_table(v: dict) -> Table:
    table = Table(["Proxy", "Outputs", "AUC", "95% CI (DeLong)", "Pos / neg",
                   "AUC per rating (95% CI)", "Spearman", "Pearson", "Kendall"],
                  numeric=(1, 2, 3, 4, 5, 6, 7, 8))
    for p in v.get("proxies") or []:
        name = proxy_label(str(p.get("proxy")))
        if not p.get("higher_is_positive", True):
            name += " (lower = better)"
        evaluated = p.get("evaluated_on") or {}
        auc = p.get("auc") if isinstance(p.get("auc"), dict) else {}
        estimate = auc.get("auc") if isinstance(auc.get("auc"), dict) else None
        per_rating = (p.get("auc_per_rating") or {}).get("auc") if isinstance(
            p.get("auc_per_rating"), dict) else None
        correlations = p.get("correlations") if isinstance(p.get("correlations"), dict) else {}
        outputs = str(evaluated.get("n_outputs", ""))
        if evaluated.get("n_excluded"):
            outputs += f" ({evaluated['n_excluded']} left out)"
        if estimate is None:
            table.rows.append([name, outputs, DASH, DASH, DASH, DASH, DASH, DASH, DASH])
            if p.get("note") or auc.get("error"):
                table.warnings.append(f"{name}: {p.get('note') or auc.get('error')}")
            continue
        n_pos, n_neg = auc.get("n_pos"), auc.get("n_neg")
        table.rows.append([
            name, outputs, num(estimate.get("value")), estimate_ci(estimate),
            f"{n_pos} / {n_neg}",
            f"{num(per_rating.get('value'))} ({estimate_ci(per_rating)})" if per_rating else DASH,
            num((correlations.get("spearman") or {}).get("value")),
            num((correlations.get("pearson") or {}).get("value")),
            num((correlations.get("kendall") or {}).get("value"))])
        if n_pos is not None and n_neg is not None and min(n_pos, n_neg) < SMALL_CLASS:
            table.warnings.append(
                f"{name}: only {min(n_pos, n_neg)} outputs in the smaller class "
                f"({n_pos} preserved, {n_neg} not): the AUC and its CI are a rough guide only.")
        if evaluated.get("n_excluded"):
            table.notes.append(f"{name}: scored on {evaluated.get('n_outputs')} outputs; "
                               f"{evaluated['n_excluded']} left out because "
                               f"{evaluated.get('excluded_because')}.")
    table.notes.append("Outputs: those with a human majority label (an even split between "
                       "raters gives none) and a score from the proxy. "
                       "AUC against the human majority label per output; "
                       "correlations with the share of humans judging the meaning preserved. "
                       "'not estimable': a CI that collapses to a point (perfect separation).")
    return table


MIN_SLICE_CLASS = 5  # an AUC on fewer positives or negatives than this is not shown


def _slice_ok(row: dict) -> bool:
    return (row.get("auc") is not None and min(row.get("n_pos") or 0, row.get("n_neg") or 0)
            >= MIN_SLICE_CLASS)


def _slice_tables(v: dict) -> list[tuple[Table, str | None]]:
    """One table (and forest plot) per field, a row per slice and proxy with its AUC, CI and
    Holm-adjusted p. A slice with fewer than MIN_SLICE_CLASS outputs in its smaller class gets
    one row saying so instead of an AUC per proxy (an AUC on 2 negatives is noise)."""
    fields: dict[str, list[tuple[str, list[dict]]]] = {}
    for p in v.get("proxies") or []:
        for column, rows in (p.get("by_slice") or {}).items():
            if isinstance(rows, list) and rows:
                fields.setdefault(column, []).append((str(p.get("proxy")), rows))
    out = []
    for column, proxies in fields.items():
        slices: dict[str, dict] = {}
        for _, rows in proxies:
            for row in rows:
                if not row.get("is_overall"):
                    slices.setdefault(str(row.get("slice")), row)
        table = Table(["Slice", "n", "Pos / neg", "Proxy", "AUC", "95% CI", "p (Holm)"],
                      numeric=(1, 2, 4, 5, 6), title=f"AUC by {_field(column)}")
        for label, first in slices.items():
            counts = [label, str(first.get("n")), f"{first.get('n_pos')} / {first.get('n_neg')}"]
            smaller = min(first.get("n_pos") or 0, first.get("n_neg") or 0)
            if smaller < MIN_SLICE_CLASS:
                reason = "one class" if smaller == 0 else f"too few for an AUC ({smaller})"
                table.rows.append(counts + [reason, "", "", ""])
                continue
            for index, (name, rows) in enumerate(proxies):
                row = next((r for r in rows if str(r.get("slice")) == label), None)
                cells = counts if index == 0 else ["", "", ""]
                if row is None or row.get("auc") is None:
                    table.rows.append(cells + [proxy_label(name), DASH, DASH, DASH])
                else:
                    table.rows.append(cells + [
                        proxy_label(name), num(row["auc"]),
                        interval(row.get("ci_low"), row.get("ci_high")),
                        pval(row.get("p_adjusted"))])
        table.notes.append(
            f"AUC with DeLong 95% CI (unadjusted); p: Mann-Whitney test of AUC = 0.5, Holm-"
            f"adjusted over the slices of one proxy and field. No AUC is given for a slice with "
            f"fewer than {MIN_SLICE_CLASS} outputs in its smaller class (the count is shown).")
        out.append((table, _forest_plot(column, proxies)))
    return out


def _williams_table(v: dict) -> Table | None:
    rows = v.get("williams")
    skipped = v.get("williams_skipped") or []
    if not isinstance(rows, list) or (not rows and not skipped):
        return None
    table = Table(["Proxy A", "r A", "Proxy B", "r B", "r AB", "n", "t", "p", "p (Holm)"],
                  numeric=(1, 3, 4, 5, 6, 7, 8),
                  title="Williams' test: do two proxies agree equally with the humans?")
    for w in rows:
        test = w.get("test") or {}

        def named(name, sign):
            label = proxy_label(str(name))
            return f"−{label}" if sign == -1 else label

        table.rows.append([named(w.get("proxy_a"), w.get("sign_a")), num(w.get("r_a"), 2),
                           named(w.get("proxy_b"), w.get("sign_b")), num(w.get("r_b"), 2),
                           num(w.get("r_ab"), 2), str(w.get("n")), num(test.get("statistic"), 2),
                           pval(test.get("p_value")), pval(w.get("p_adjusted"))])
    table.notes.append("Pearson r with the share of humans judging the meaning preserved. "
                       "Lower-is-better scores (WER, CER, SD, H_eval) are negated first (−), so "
                       "a larger r always means closer to the humans. Holm over the tests of "
                       "this criterion.")
    for w in skipped:
        table.warnings.append(f"{proxy_label(str(w.get('proxy_a')))} vs "
                              f"{proxy_label(str(w.get('proxy_b')))}: {w.get('note')}")
    return table


def _deployment_tables(v: dict) -> list[Table]:
    deployment = v.get("deployment")
    if not isinstance(deployment, dict) or deployment.get("error") or not deployment.get("rows"):
        return []
    tables = [_one_deployment(deployment, "Deployment decisions (as in LATTE, Table 5)")]
    for held in deployment.get("held_out_tables") or []:
        tables.append(_one_deployment(held, "Deployment decisions on held-out outputs"))
    return tables


def _one_deployment(d: dict, title: str) -> Table:
    proxies = d.get("proxies") or []
    group = _field(str(d.get("group_by") or d.get("group_col") or "group"))
    columns = ["System", group, "n", "WordAcc", "Human MP %"]
    columns += [f"{proxy_label(str(p))} %" for p in proxies] + ["Accepted by"]
    table = Table(columns, numeric=tuple(range(2, 5 + len(proxies))), title=title)

    def accepted(row: dict) -> str:
        who = [proxy_label(str(k)).replace("word_acc", "WordAcc") for k, ok in
               (row.get("accept") or {}).items() if ok]
        return ", ".join(who) or "nobody"

    for row in d.get("rows") or []:
        table.rows.append([str(row.get("system", "")), str(row.get("group")), str(row.get("n")),
                           pct(row.get("word_acc")), pct(row.get("human_mp"))]
                          + [pct((row.get("proxies") or {}).get(p)) for p in proxies]
                          + [accepted(row)])
    for row in d.get("by_system") or []:
        table.rows.append([str(row.get("system", row.get("group"))), "all", str(row.get("n")),
                           pct(row.get("word_acc")), pct(row.get("human_mp"))]
                          + [pct((row.get("proxies") or {}).get(p)) for p in proxies]
                          + [accepted(row)])
    deciders = d.get("deciders") or []
    rules = "; ".join(f"{proxy_label(str(x.get('decider')))}: {x.get('rule')}" for x in deciders
                      if x.get("rule"))
    if rules:
        table.notes.append(f"Decisions: {rules}.")
    if d.get("method"):
        table.notes.append(str(d["method"]))
    def share(value: Any) -> str:
        return num(100 * value, 0) if value is not None else DASH

    agreements = "; ".join(
        f"{proxy_label(str(a.get('decider'))).replace('word_acc', 'WordAcc')} agrees with the "
        f"human decision on {share(a.get('accuracy'))}% of {a.get('n_groups', '')} rows "
        f"(kappa {num(a.get('kappa'), 2)})" for a in d.get("agreement") or [])
    if agreements:
        table.notes.append(agreements + ".")
    small = [row for row in d.get("rows") or [] if (row.get("n") or 0) < SMALL_GROUP]
    if small:
        table.warnings.append(
            f"{len(small)} of {len(d.get('rows') or [])} rows rest on fewer than {SMALL_GROUP} "
            f"outputs (as few as {min(row.get('n') or 0 for row in small)}): one output moves "
            "their percentages by 10 points or more, so their accept/reject decisions are "
            "fragile. The per-system rows ('all') rest on more.")
    if d.get("n_excluded"):
        table.notes.append(f"{d.get('n_outputs')} outputs; {d['n_excluded']} left out because "
                           f"{d.get('excluded_because')}.")
    reasons: dict[str, list[str]] = {}
    for left in d.get("left_out") or []:
        reasons.setdefault(str(left.get("reason")), []).append(proxy_label(str(left.get("proxy"))))
    for reason, names in reasons.items():
        table.notes.append(f"Not deciders: {', '.join(names)} ({reason}).")
    return table


def _validity_view(v: dict, plots: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(v, dict) or "criterion" not in v:
        return None
    block = Block(title=f"Human label: {v['criterion']} (majority of human raters per output; "
                        f"{v.get('n_outputs')} outputs)")
    roc = plots.get(f"roc.{v['criterion']}")
    if roc:
        block.plots.append(("ROC curves", roc))
    block.tables.append(_proxy_table(v))
    blocks = [block]
    for table, image in _slice_tables(v):
        blocks.append(Block(title=table.title, tables=[table],
                            plots=[(table.title, image)] if image else []))
    for p in v.get("proxies") or []:
        ba = p.get("bland_altman")
        if isinstance(ba, dict) and not ba.get("error") and ba.get("bias"):
            image = _bland_altman_plot(str(p.get("proxy")), ba)
            blocks.append(Block(
                title=f"Bland-Altman: {proxy_label(str(p.get('proxy')))}",
                paragraphs=[f"Bias {num(ba['bias'].get('value'))} "
                            f"({estimate_ci(ba['bias'])}); limits of agreement "
                            f"{num(ba['lower'].get('value'))} to {num(ba['upper'].get('value'))}."],
                plots=[("Bland-Altman plot", image)] if image else []))
    williams = _williams_table(v)
    if williams is not None:
        blocks.append(Block(title=williams.title, tables=[williams]))
    deployment = _deployment_tables(v)
    if deployment:
        blocks.append(Block(title="Deployment decisions", tables=deployment))
    return {"criterion": v["criterion"], "blocks": blocks}


# --- power and methods ------------------------------------------------------------------------
def _power_rows(result: dict) -> list[list[str]]:
    rows = [["Power", f"{num(result.get('power'))} "
                      f"({interval(result.get('ci_low'), result.get('ci_high'))}, "
                      f"{result.get('ci_method') or 'Wilson'})"]]
    for key, label in (("n_sim", "Simulations"), ("seed", "Seed"),
                       ("model", "Model simulated and refitted"), ("engine", "Engine")):
        if result.get(key) not in (None, ""):
            rows.append([label, str(result[key])])
    if result.get("test") in ("glmm", "clmm"):
        rows.append(["Refits that failed", f"{result.get('n_failed', 0)} of "
                     f"{result.get('n_sim')} ({result.get('failed_policy') or 'not significant'})"])
        rows.append(["Singular refits", str(result.get("n_singular", 0))])
    design = result.get("design") or {}
    if design:
        rows.append(["Design", ", ".join(f"{k.replace('_', ' ')} {v}"
                                         for k, v in design.items())])
    pilot = result.get("pilot")
    if isinstance(pilot, dict):
        rows.append(["Variance components from", ", ".join(
            f"{k} {v}" for k, v in pilot.items() if k not in ("warnings",)
            and not isinstance(v, (dict, list)))])
    if result.get("elapsed_s") is not None:
        rows.append(["Time", f"{num(result.get('elapsed_s'), 1)} s"])
    return rows


def _power_block(power: Any) -> Block | None:
    """One design's power (PowerResult) or a design search (DesignSearch) with its chosen
    design's power."""
    if not isinstance(power, dict):
        return None
    block = Block(title="Power")
    if power.get("error"):
        block.warnings.append(str(power["error"]))
        return block
    if "target_power" in power:
        found = power.get("value")
        block.paragraphs.append(
            f"Smallest {str(power.get('vary')).replace('_', ' ')} reaching power "
            f"{power.get('target_power')}: {found if found is not None else 'none in range'}"
            + (f" ({power['search']})" if power.get("search") else "") + ".")
        result = power.get("result") if isinstance(power.get("result"), dict) else None
        block.warnings += [str(w) for w in power.get("warnings") or []]
    else:
        result = power
    if result:
        block.tables.append(Table(["", ""], _power_rows(result)))
        block.warnings += [str(w) for w in result.get("warnings") or []]
        pilot = result.get("pilot")
        if isinstance(pilot, dict):
            block.warnings += [f"pilot: {w}" for w in pilot.get("warnings") or []]
    return block


def _methods(result: dict, options: dict, filters: list[str]) -> list[str]:
    """The Methods section: what ran, and nothing that did not."""
    kinds = {c.get("kind") for c in result.get("criteria") or []}
    engines: dict[str, str] = {}
    for c in result.get("criteria") or []:
        for key in ("clmm", "clm", "glmm", "glmm_penalised"):
            fit = c.get(key)
            if isinstance(fit, dict) and fit.get("engine"):
                engines[key] = fit["engine"]
    # what the filters did, as run (calibration items may have been included on request)
    paragraphs = ["Judgments analysed: " + "; ".join(filters) + ". Attention-check slots are "
                  "never analysed as items."]
    if "likert" in kinds:
        paragraphs.append(
            "Likert criteria: per-system descriptives; a cumulative link mixed model (logit) "
            "with random intercepts for rater and item "
            f"({engines.get('clmm', 'engine named in its table')}); a cumulative link model "
            "without random effects with the proportional-odds check (ordinal::nominal_test).")
    if kinds & {"binary", "severity"}:
        paragraphs.append(
            "Binary criteria (and 3-point severity read as meaning preserved = levels 0 and 1, "
            "as in LATTE): proportions with Wilson 95% intervals and a binomial GLMM (logit) "
            "with random intercepts for rater and item "
            f"({engines.get('glmm', 'engine named in its table')}).")
    if any(isinstance(c.get("contrasts"), dict) and not c["contrasts"].get("error")
           for c in result.get("criteria") or []):
        paragraphs.append("More than two systems: pairwise Wald contrasts from the fitted model "
                          "with Holm-adjusted p-values; a contrast inherits its model's "
                          "warnings.")
    if "pairwise" in kinds:
        paragraphs.append(
            "Pairwise criteria: preference shares with Wilson intervals (ties excluded, and "
            "ties counted as half), and a Bradley-Terry logistic regression with a position term"
            " (the log-odds of choosing the output shown as A), with cluster-robust standard "
            "errors by rater.")
    boots = set()
    for c in result.get("criteria") or []:
        agreement = c.get("agreement")
        if isinstance(agreement, dict) and isinstance(agreement.get("bootstrap"), dict):
            b = agreement["bootstrap"]
            boots.add((b.get("n_boot"), b.get("seed"), b.get("cluster")))
    if any(isinstance(c.get("agreement"), dict) and not c["agreement"].get("note")
           for c in result.get("criteria") or []):
        text = ("Agreement among human raters on each criterion's declared scale: percent "
                "agreement, Gwet's AC1"
                + (" (AC2 for ordered scales)" if kinds & {"likert", "severity"} else "")
                + " and Fleiss' kappa in Gwet's missing-data formulation with Gwet's analytic "
                "variances, Krippendorff's alpha at the criterion's level of measurement, "
                "Cohen's kappa for rater pairs, "
                + ("ICCs (variance components of the crossed random-effects model where the "
                   "design is incomplete), " if "likert" in kinds else "")
                + "and the human ceiling (each human against the majority of the others).")
        if boots:
            text += " Bootstrap CIs: " + "; ".join(
                f"B = {n}, seed {seed}, resampling {cluster or 'unit'}s"
                for n, seed, cluster in sorted(boots, key=str)) + "."
        paragraphs.append(text)
    held_out = any((p.get("evaluated_on") or {}).get("excluded_because")
                   for v in result.get("validity") or [] if isinstance(v, dict)
                   for p in v.get("proxies") or [])
    if result.get("validity"):
        paragraphs.append(
            "Proxies against humans: AUC-ROC against the human majority label with DeLong 95% "
            "CIs, overall and per slice of item metadata and system (Holm-adjusted tests of "
            "AUC = 0.5 across slices); Pearson, Spearman and Kendall correlations with the "
            "share of humans judging positive (bootstrap CIs); Williams' test between proxies "
            "after aligning their directions (Holm-adjusted); Bland-Altman for proxy "
            "probabilities; deployment decisions per speaker within system, each proxy "
            "deciding at its own threshold."
            + (" A trained proxy is scored only on outputs it did not see in training or "
               "threshold choice (each proxy's row says how many were left out)."
               if held_out else ""))
    if isinstance(result.get("power"), dict) and not result["power"].get("error"):
        paragraphs.append("Power by simulation from, and refitting of, the model the study is "
                          "analysed with; the number of simulations and the seed are given "
                          "with the result.")
    engine = result.get("engines") or {}
    versions = ", ".join(f"{k} {v}" for k, v in (engine.get("versions") or {}).items())
    paragraphs.append(f"Software: R {'available' if engine.get('r_available') else 'not used'}"
                      + (f" ({engine.get('r_unavailable_reason')})"
                         if engine.get("r_unavailable_reason") else "")
                      + (f"; {versions}" if versions else "") + ".")
    if options.get("formula"):
        paragraphs.append(f"Model formula requested: {options['formula']}.")
    return paragraphs


# --- entry points -----------------------------------------------------------------------------
def build_plots(result: dict[str, Any]) -> dict[str, str]:
    """The ROC curves per validity criterion (the other plots are made with their section)."""
    plots: dict[str, str] = {}
    for validity in result.get("validity", []):
        if isinstance(validity, dict) and "criterion" in validity:
            image = _roc_plot(validity)
            if image:
                plots[f"roc.{validity['criterion']}"] = image
    return plots


def report_context(*, study: Any, result: dict[str, Any], options: dict[str, Any],
                   filters: list[str]) -> dict[str, Any]:
    plots = build_plots(result)
    return {
        "study": study, "result": result, "options": options, "filters": filters,
        "criteria": [_criterion_view(c) for c in result.get("criteria") or []],
        "validity": [view for v in result.get("validity") or []
                     if (view := _validity_view(v, plots)) is not None],
        "power": _power_block(result.get("power")),
        "methods": _methods(result, options, filters),
    }


def render_html(*, study: Any, result: dict[str, Any], options: dict[str, Any],
                filters: list[str]) -> str:
    return render_to_string("analysis/report.html", report_context(
        study=study, result=result, options=options, filters=filters))


def render_pdf(html: str) -> bytes:
    from weasyprint import HTML

    return HTML(string=html).write_pdf()
