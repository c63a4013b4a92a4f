"""The report's parts for aggregated judgments (counts of people per answer) and for the
pairwise validity of metrics and proxies against the human majority."""

from __future__ import annotations

from typing import Any

from analysis.report.format import (
    DASH,
    Block,
    Table,
    answer_kind,
    estimate_ci,
    num,
    proxy_label,
)
from analysis.report.preference import preference_tables
from evalstudy.criteria import PAIR

STRATA = (("unanimous", "Unanimous"), ("agreement >= 70%", "≥ 70% agree"), ("all", "All pairs"))
RULES = (("ties_wrong", "majority of everyone, ties count as wrong (the HATS paper's rule)"),
         ("ties_excluded", "majority of everyone, human ties left out, a metric tie counts half"),
         ("ties_wrong_loo", "majority of the others, each vote left out in turn (the ceiling's "
                            "units), ties count as wrong"),
         ("ties_excluded_loo", "majority of the others, each vote left out in turn, human ties "
                               "left out, a metric tie counts half"))
COUNTED_AGREEMENT = (("percent_agreement", "Percent agreement"),
                     ("krippendorff_alpha", "Krippendorff's alpha"),
                     ("gwet_ac1", "Gwet's AC1"), ("fleiss_kappa", "Fleiss' kappa"))


def votes_block(c: dict) -> Block | None:
    """A criterion's aggregated counts: totals, preference shares and model, agreement."""
    votes = c.get("votes")
    if not isinstance(votes, dict):
        return None
    block = Block(title="Aggregated counts (people per answer, no named raters)")
    if votes.get("error"):
        block.warnings.append(str(votes["error"]))
        return block
    per_unit = votes.get("votes_per_unit") or {}
    kind = answer_kind(c.get("kind"))
    pair = kind is not None and kind.shows == PAIR
    unit = "pairs" if pair else "outputs"
    block.paragraphs.append(
        f"{votes.get('n_votes')} votes on {votes.get('n_units')} {unit} "
        f"({per_unit.get('min')} to {per_unit.get('max')} per {unit[:-1]}, median "
        f"{num(per_unit.get('median'), 1)}). {votes.get('note', '')}")
    if pair and votes.get("position_known") is False:
        block.paragraphs.append("The position of the outputs was declared unknown at import: "
                                "A/B is the data's order, not what people saw first.")
    preference = votes.get("preference")
    if isinstance(preference, dict):
        block.tables += preference_tables({"preference": preference})
    agreement = votes.get("agreement")
    if isinstance(agreement, dict):
        table = Table(["Statistic", "Value", "95% CI", "Units"], numeric=(1, 2, 3),
                      title="Agreement among the counted votes")
        for key, label in COUNTED_AGREEMENT:
            e = agreement.get(key)
            if isinstance(e, dict) and "value" in e:
                table.rows.append([label, num(e.get("value")), estimate_ci(e),
                                   str(e.get("n_units", e.get("n", "")))])
        table.notes.append("From each unit's answers only (who gave them is unknown); the "
                           "same statistics as for named raters, without rater pairs.")
        block.tables.append(table)
    return block


def pairwise_validity_view(v: dict) -> dict[str, Any]:
    """Metrics and proxies against the human majority of each pair, by agreement stratum,
    under both tie rules, beside the ceiling of one person against the others."""
    key = v["criterion"]
    block = Block(title=f"Pairwise preference: {key} (which output most people preferred; "
                        f"{v.get('n_units')} pairs)")
    if v.get("note"):
        block.paragraphs.append(str(v["note"]))
        return {"criterion": key, "blocks": [block]}
    strata = v.get("strata") or {}
    sources = v.get("sources") or {}
    block.paragraphs.append(
        f"{v.get('n_votes')} human votes ({sources.get('named raters', 0)} from named raters, "
        f"{sources.get('counted votes', 0)} counted); {v.get('n_human_ties')} pairs with a "
        "human tie. Pairs per stratum: " + ", ".join(
            f"{label.lower()} {strata.get(name, 0)}" for name, label in STRATA) + ".")
    for rule, described in RULES:
        rows = sorted(v.get("tables", {}).get(rule) or [],
                      key=lambda r: (r["kind"] == "ceiling",
                                     -((r.get("all") or {}).get("accuracy") or 0.0)))
        table = Table(["Metric or proxy", *(label for _, label in STRATA), "Metric ties (all)"],
                      numeric=(1, 2, 3, 4), title=f"Agreement with the majority: {described}")
        for row in rows:
            name = proxy_label(str(row["proxy"]))
            if row.get("higher_is_better") is False:
                name += " (lower = better)"
            if row["kind"] == "ceiling":
                name = f"Human ceiling: {name}"
            cells = []
            for stratum, _ in STRATA:
                cell = row.get(stratum) or {}
                accuracy, ci = cell.get("accuracy"), cell.get("ci")
                cells.append(DASH if accuracy is None else
                             f"{100 * accuracy:.1f}% ({_ci(ci)}, n={cell.get('n')})")
            ties = (row.get("all") or {}).get("metric_ties")
            table.rows.append([name, *cells, DASH if row["kind"] == "ceiling" else str(ties)])
        table.notes.append(str(v.get("method", "")))
        block.tables.append(table)
    block.paragraphs.append(
        "Compare a metric with the human ceiling in the last two tables only: there both are "
        "scored against the majority of the other people of each pair, with each vote left "
        "out in turn (against the majority of everyone, a 4-3 pair leaves one person's "
        "others tied at 3-3, which no metric faces). The first two tables are the published "
        "figure's definition.")
    block.warnings += [
        "The ceiling in the unanimous stratum is 100% by construction (everyone agrees); "
        "compare proxies with it in the other strata."] if strata.get("unanimous") else []
    return {"criterion": key, "blocks": [block]}


def _ci(ci: Any) -> str:
    if not ci or ci[0] is None:
        return DASH
    return f"{100 * ci[0]:.1f}–{100 * ci[1]:.1f}"


def graded_validity_view(v: dict) -> dict[str, Any]:
    """Metrics and proxies against the mean human score of each output (Likert, slider)."""
    key = v["criterion"]
    block = Block(title=f"Human score: {key} (mean of the human scores per output; "
                        f"{v.get('n_outputs')} outputs)")
    if v.get("note"):
        block.paragraphs.append(str(v["note"]))
    table = Table(["Metric or proxy", "Outputs", "Pearson (95% CI)", "Spearman (95% CI)",
                   "Kendall (95% CI)", "Ordinal model: per SD (95% CI)"],
                  numeric=(1, 2, 3, 4, 5), title="Association with the human score")
    for p in v.get("proxies") or []:
        name = proxy_label(str(p.get("proxy")))
        if p.get("higher_is_better") is False:
            name += " (lower = better)"
        found = p.get("correlations") if isinstance(p.get("correlations"), dict) else {}
        cells = [f"{num((found.get(c) or {}).get('value'))} ({estimate_ci(found.get(c) or {})})"
                 if found.get(c) else DASH for c in ("pearson", "spearman", "kendall")]
        ordinal = p.get("ordinal") if isinstance(p.get("ordinal"), dict) else {}
        ci = ordinal.get("ci") or (None, None)
        cells.append(f"{num(ordinal.get('estimate'))} ({num(ci[0])} – {num(ci[1])})"
                     if ordinal.get("estimate") is not None else DASH)
        table.rows.append([name, str(p.get("n_outputs", "")), *cells])
        if p.get("note"):
            table.warnings.append(f"{name}: {p['note']}")
        if ordinal.get("error"):
            table.warnings.append(f"{name}: ordinal model not fitted: {ordinal['error']}")
    ceiling = v.get("ceiling") or {}
    if ceiling.get("raters"):
        table.rows.append([f"Human ceiling: one rater vs the others ({ceiling['raters']} "
                           "raters)", DASH, num(ceiling.get("pearson")),
                           num(ceiling.get("spearman")), DASH, DASH])
        table.notes.append(f"Ceiling: {ceiling.get('method')}.")
    table.notes.append("Correlations with the mean human score per output, 95% percentile "
                       "bootstrap CIs over outputs (B=1000). Ordinal model (Likert): every "
                       "human rating ~ the metric standardised, a cumulative link (logit) "
                       "model; the coefficient is the change in log-odds of a higher rating "
                       "per standard deviation of the metric (negative for a lower-is-better "
                       "metric that works).")
    block.tables.append(table)
    return {"criterion": key, "blocks": [block]}
