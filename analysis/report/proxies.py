"""Proxies against humans: the validity tables (AUC, correlations, slices, Williams'
test) and the deployment tables."""

from __future__ import annotations

from typing import Any

from analysis.report.format import (
    DASH,
    MIN_SLICE_CLASS,
    SMALL_CLASS,
    SMALL_GROUP,
    Block,
    Table,
    estimate_ci,
    field_name,
    interval,
    kind_families,
    num,
    pct,
    proxy_label,
    pval,
)
from analysis.report.plots import bland_altman_plot, forest_plot


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
            for slice_row in rows:
                if not slice_row.get("is_overall"):
                    slices.setdefault(str(slice_row.get("slice")), slice_row)
        table = Table(["Slice", "n", "Pos / neg", "Proxy", "AUC", "95% CI", "p (Holm)"],
                      numeric=(1, 2, 4, 5, 6), title=f"AUC by {field_name(column)}")
        for label, first in slices.items():
            counts = [label, str(first.get("n")), f"{first.get('n_pos')} / {first.get('n_neg')}"]
            smaller = min(first.get("n_pos") or 0, first.get("n_neg") or 0)
            if smaller < MIN_SLICE_CLASS:
                reason = "one class" if smaller == 0 else f"too few for an AUC ({smaller})"
                table.rows.append([*counts, reason, "", "", ""])
                continue
            for index, (name, rows) in enumerate(proxies):
                row = next((r for r in rows if str(r.get("slice")) == label), None)
                cells = counts if index == 0 else ["", "", ""]
                if row is None or row.get("auc") is None:
                    table.rows.append([*cells, proxy_label(name), DASH, DASH, DASH])
                else:
                    table.rows.append([
                        *cells, proxy_label(name), num(row["auc"]),
                        interval(row.get("ci_low"), row.get("ci_high")),
                        pval(row.get("p_adjusted"))])
        table.notes.append(
            f"AUC with DeLong 95% CI (unadjusted); p: Mann-Whitney test of AUC = 0.5, Holm-"
            f"adjusted over the slices of one proxy and field. No AUC is given for a slice with "
            f"fewer than {MIN_SLICE_CLASS} outputs in its smaller class (the count is shown).")
        out.append((table, forest_plot(column, proxies)))
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
    group = field_name(str(d.get("group_by") or d.get("group_col") or "group"))
    columns = ["System", group, "n", "WordAcc", "Human n", "Human MP %"]
    columns += [f"{proxy_label(str(p))} %" for p in proxies] + ["Accepted by"]
    table = Table(columns, numeric=tuple(range(2, 6 + len(proxies))), title=title)

    def accepted(row: dict) -> str:
        who = [proxy_label(str(k)).replace("word_acc", "WordAcc") for k, ok in
               (row.get("accept") or {}).items() if ok]
        return ", ".join(who) or "nobody"

    def figures(row: dict) -> list[str]:
        return ([str(row.get("n")), pct(row.get("word_acc")), str(row.get("human_n", DASH)),
                 pct(row.get("human_mp"))]
                + [pct((row.get("proxies") or {}).get(p)) for p in proxies] + [accepted(row)])

    for row in d.get("rows") or []:
        # Rows grouped by system itself have no system apart from their group.
        system = row.get("system")
        table.rows.append(["" if system is None else str(system), str(row.get("group")),
                           *figures(row)])
    for row in d.get("by_system") or []:
        table.rows.append([str(row.get("system", row.get("group"))), "all", *figures(row)])
    with_wer = [row for row in d.get("rows") or [] if row.get("word_acc") is not None]
    short = [row for row in with_wer if row.get("word_acc_n") != row.get("n")]
    word_acc = ("" if not with_wer else "WordAcc uses those with a WER" + (
        f" ({len(short)} rows have outputs without one); " if short else " (all of them); "))
    table.notes.append(f"n: the row's outputs. {word_acc}Human MP % uses those with a human "
                       "majority label (Human n: a tied majority has none); each proxy % "
                       "those it decided.")
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
    def fewest(row: dict) -> int:  # the human % may rest on fewer outputs than the row has
        return min(row.get("n") or 0, row.get("human_n", row.get("n")) or 0)

    small = [row for row in d.get("rows") or [] if fewest(row) < SMALL_GROUP]
    if small:
        table.warnings.append(
            f"{len(small)} of {len(d.get('rows') or [])} rows rest on fewer than {SMALL_GROUP} "
            f"outputs (as few as {min(fewest(row) for row in small)}): one output moves "
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


def validity_view(v: dict, plots: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(v, dict) or "criterion" not in v:
        return None
    if v.get("note") and not v.get("proxies") and "tables" not in v:
        return {"criterion": v["criterion"], "blocks": [Block(
            title=f"Human label: {v['criterion']}", paragraphs=[str(v["note"])])]}
    families = kind_families(v.get("kind"))
    if "pairwise_validity" in families or "graded_validity" in families:
        from analysis.report.votes import graded_validity_view, pairwise_validity_view

        return (pairwise_validity_view if "pairwise_validity" in families
                else graded_validity_view)(v)
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
            image = bland_altman_plot(str(p.get("proxy")), ba)
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
