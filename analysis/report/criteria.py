"""One section per criterion: descriptives, models and their contrasts, separation,
preferences, classification, agreement and the human ceiling."""

from __future__ import annotations

from typing import Any

from analysis.report.format import (
    DASH,
    Block,
    Table,
    answer_kind,
    estimate_ci,
    interval,
    kind_families,
    num,
    pair_of,
    proxy_label,
    pval,
    warnings_of,
)
from analysis.report.plots import distribution_plot, proportions_plot, severity_plot
from analysis.report.preference import preference_tables
from analysis.templatetags.analysis_tags import readable_term
from evalstudy.criteria import TUPLE


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
            if "severity_levels" in kind_families(c["kind"]) else 'Positive = "yes".')
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
    # The fit's own label (from the optimiser's code and gradient) where it has one.
    label = (fit.get("extra") or {}).get("convergence") or (
        "" if fit.get("converged", True) else "did not converge")
    block.engine = (f"{fit.get('formula')} · {fit.get('engine')} · n = {fit.get('n_obs')}"
                    + (f" · {label}" if label else ""))
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
            + ". Estimates are "
            + ("differences in score points" if fit.get("family") == "gaussian"
               else "log-odds differences") + " from them.")
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


def _slider_table(c: dict) -> Table | None:
    """Direct assessment per system: raw and per-rater z-scored means (WMT)."""
    summary = c.get("slider")
    if not isinstance(summary, dict) or not summary.get("systems"):
        return None
    lower = summary.get("better") == "lower"
    table = Table(["System", "n", "Outputs", "Raters", "Mean", "95% CI", "z mean", "95% CI",
                   "SD"], numeric=(1, 2, 3, 4, 5, 6, 7, 8),
                  title=("Scores per system (lower is better)" if lower
                         else "Scores per system (direct assessment)"))
    for r in summary["systems"]:
        table.rows.append([str(r.get("system")), str(r.get("n")), str(r.get("n_outputs")),
                           str(r.get("n_raters")), num(r.get("mean"), 1),
                           interval(r.get("ci_low"), r.get("ci_high"), 1),
                           num(r.get("z_mean")), interval(r.get("z_ci_low"), r.get("z_ci_high")),
                           num(r.get("sd"), 1)])
    table.notes.append(
        "Mean: the raw score; z mean: each score standardised by its rater's own mean and SD "
        "(removes lenient and strict raters, as in WMT's direct assessment). Both averaged "
        "first over an output's raters, then over outputs; t intervals over outputs. Sorted "
        + ("by z mean, lowest (best) first." if lower else "by z mean, highest first."))
    table.warnings += [str(w) for w in summary.get("warnings") or []]
    return table


def _mqm_tables(c: dict) -> list[Table]:
    """MQM penalties per system, and errors per judgment by category."""
    mqm = c.get("mqm")
    if not isinstance(mqm, dict) or not mqm.get("systems"):
        return []
    weights = ", ".join(f"{name} {num(w, 1)}" for name, w in (mqm.get("weights") or {}).items())
    scores = Table(["System", "Outputs", "Judgments", "MQM", "95% CI", "Error-free",
                    "Errors per judgment"], numeric=(1, 2, 3, 4, 5, 6),
                   title="MQM scores per system")
    for r in mqm["systems"]:
        scores.rows.append([str(r.get("system")), str(r.get("n_outputs")),
                            str(r.get("n_judgments")), num(r.get("mqm"), 2),
                            interval(r.get("ci_low"), r.get("ci_high"), 2),
                            num(r.get("error_free"), 2), num(r.get("errors_per_judgment"), 2)])
    scores.notes.append(f"{mqm.get('scale')}. Severity weights: {weights}. t intervals over "
                        "outputs.")
    categories = list(mqm.get("categories") or [])
    tables = [scores]
    if categories:
        by_category = Table(["System", *categories], numeric=tuple(range(1, len(categories) + 1)),
                            title="Errors per judgment by category")
        for r in mqm["systems"]:
            counts = r.get("by_category") or {}
            by_category.rows.append([str(r.get("system")),
                                     *[num(counts.get(k, 0.0), 2) for k in categories]])
        tables.append(by_category)
    return tables


def _span_agreement_block(c: dict) -> Block | None:
    found = c.get("span_agreement")
    if not isinstance(found, dict):
        return None
    block = Block(title="Agreement on where the errors are")
    if found.get("error") or found.get("note"):
        block.paragraphs.append(str(found.get("error") or found.get("note")))
        return block
    table = Table(["Statistic", "Value", "95% CI"], numeric=(1, 2))
    for key, label in (("alpha_marked", "Krippendorff's alpha, characters marked or not"),
                       ("alpha_category", "Krippendorff's alpha, category or none")):
        e = found.get(key)
        if isinstance(e, dict):
            table.rows.append([label, num(e.get("value")), estimate_ci(e)])
            table.warnings += [f"{label}: {w}" for w in warnings_of(e)]
    table.rows.append(["Character-level F1 between raters", num(found.get("char_f1")), DASH])
    table.notes.append(
        f"{found.get('method')}. {found.get('n_characters')} characters of "
        f"{found.get('n_outputs')} outputs marked by {found.get('n_raters')} raters; "
        f"{found.get('n_pairs')} rater pairs, {found.get('pairs_both_error_free')} of them "
        "marking no error at all. Alpha CIs: percentile bootstrap over items.")
    table.warnings += [str(w) for w in found.get("warnings") or []]
    block.tables.append(table)
    return block


def _ranking_tables(c: dict) -> list[Table]:
    """Rankings: mean ranks, and the Plackett-Luce worths with their intervals."""
    tables = []
    ranks = c.get("ranks")
    if isinstance(ranks, list) and ranks:
        table = Table(["System", "Times ranked", "Mean rank", "Ranked first", "Ranked last"],
                      numeric=(1, 2, 3, 4), title="Ranks per system")
        for r in ranks:
            table.rows.append([str(r.get("system")), str(r.get("n")), num(r.get("mean_rank"), 2),
                               num(r.get("first"), 2), num(r.get("last"), 2)])
        table.notes.append("Rank 1 is the best. Shares of the rankings each system was in.")
        tables.append(table)
    fit = c.get("plackett_luce")
    if isinstance(fit, dict) and fit.get("systems"):
        table = Table(["System", "Log-worth", "SE", "95% CI", "p", "Chance of ranking first"],
                      numeric=(1, 2, 3, 4, 5), title="Plackett-Luce model")
        for r in fit["systems"]:
            name = str(r.get("system")) + (" (reference)" if r.get("reference") else "")
            table.rows.append([name, num(r.get("log_worth")), num(r.get("se")),
                               interval(r.get("ci_low"), r.get("ci_high")),
                               pval(r.get("p_value")), num(r.get("worth_share"), 3)])
        table.notes.append(
            f"{fit.get('method')}, on {fit.get('n_rankings')} rankings. Log-worths are "
            f"differences from {fit.get('reference')} (0); the chance of ranking first is "
            "each system's worth as a share of all systems' worths.")
        table.warnings += [str(w) for w in fit.get("warnings") or []]
        tables.append(table)
    elif isinstance(fit, dict) and fit.get("error"):
        tables.append(Table(["Plackett-Luce model"], warnings=[f"Not fitted: {fit['error']}"]))
    return tables


def _best_worst_table(c: dict) -> Table | None:
    found = c.get("best_worst")
    if not isinstance(found, dict) or not found.get("systems"):
        return None
    table = Table(["System", "Shown", "Best", "Worst", "Score", "95% CI"],
                  numeric=(1, 2, 3, 4, 5), title="Best-worst scores per system")
    for r in found["systems"]:
        table.rows.append([str(r.get("system")), str(r.get("shown")), str(r.get("best")),
                           str(r.get("worst")), num(r.get("score")),
                           interval(r.get("ci_low"), r.get("ci_high"))])
    boot = found.get("bootstrap") or {}
    table.notes.append(f"Score: (times best - times worst) / times shown, from -1 (always worst) "
                       f"to 1 (always best), on {found.get('n_judgments')} judgments of "
                       f"{found.get('n_items')} items; percentile bootstrap over items "
                       f"(B = {boot.get('n_boot')}, seed {boot.get('seed')}).")
    return table


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
    table.warnings += warnings_of(contrasts)
    for k in contrasts.get("contrasts") or []:
        for flag in k.get("flags") or []:
            table.warnings.append(f"{k.get('level_a')} – {k.get('level_b')}: {flag}")
    return table


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
        table.warnings += [f"{label}: {w}" for w in warnings_of(e)]
    icc = agreement.get("icc") or {}
    for form, e in icc.items() if isinstance(icc, dict) else ():
        if isinstance(e, dict) and "value" in e:
            table.rows.append([form, "interval", num(e.get("value")), estimate_ci(e),
                               str(e.get("n_units", e.get("n", ""))), str(e.get("n_raters", "")),
                               _short_method(e.get("ci_method"))])
            if e.get("ci_method"):
                methods.setdefault(_short_method(e["ci_method"]), str(e["ci_method"]))
            table.warnings += [f"{form}: {w}" for w in warnings_of(e)]
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
                       interval(*pair_of(ceiling.get("kappa_ci"))),
                       num(ceiling.get("mean_percent_agreement")),
                       interval(*pair_of(ceiling.get("percent_agreement_ci"))), ""])
    for p in ceiling.get("proxies") or []:
        gap = p.get("kappa_minus_ceiling")
        table.rows.append([proxy_label(str(p.get("rater"))), num(p.get("kappa")),
                           interval(*pair_of(p.get("kappa_ci"))), num(p.get("percent_agreement")),
                           interval(*pair_of(p.get("percent_agreement_ci"))),
                           f"{num(gap)} ({interval(*pair_of(p.get('kappa_minus_ceiling_ci')))})"
                           if gap is not None else DASH])
    weights = ceiling.get("weights")
    table.notes.append(
        f"Kappa{' with ' + str(weights) + ' weights' if weights else ''} against the majority "
        f"of the other human raters on {ceiling.get('n_units', '')} outputs "
        f"({ceiling.get('n_humans', len(ceiling['humans']))} humans); proxies are scored "
        "against the majority of all humans on the same outputs. "
        + (f"CIs: {ceiling['ci_method']}." if ceiling.get("ci_method") else ""))
    for p in ceiling.get("proxies") or []:
        if p.get("n_excluded"):
            table.notes.append(
                f"{proxy_label(str(p.get('rater')))} is scored on held-out outputs only: "
                f"{p['n_excluded']} left out ({p.get('excluded_because') or 'excluded'}).")
    table.warnings += [str(w) for w in ceiling.get("warnings") or []]
    block.tables.append(table)
    return block


def criterion_view(c: dict) -> dict[str, Any]:
    from analysis.report.votes import votes_block

    blocks: list[Block] = []
    summary = Block()
    counted = votes_block(c)
    if not c.get("n_judgments"):
        summary.paragraphs.append("No answers of named raters." if counted else
                                  "No human answers.")
        return {"key": c["key"], "kind": c["kind"],
                "blocks": [summary, *([counted] if counted else [])], "answered": None}
    kind = answer_kind(c["kind"])
    families = kind_families(c["kind"])
    if "counted" in families:
        summary.paragraphs.append(
            f"{c.get('answered', 0)} answers by {c.get('n_raters')} raters on "
            f"{c.get('n_outputs')} outputs (free text is counted, not modelled).")
        return {"key": c["key"], "kind": c["kind"], "blocks": [summary], "answered": None}
    if kind is not None and kind.shows == TUPLE:
        summary.paragraphs.append(
            f"{c.get('n_judgments')} human judgments by {c.get('n_raters')} raters, each "
            f"{kind.task_phrase} several outputs of one of {c.get('n_items')} items.")
    else:
        summary.paragraphs.append(
            f"{c.get('n_judgments')} human judgments by {c.get('n_raters')} raters on "
            f"{c.get('n_outputs')} {kind.unit_noun if kind is not None else 'outputs'}.")
    for table in (_descriptives(c), _proportions(c), _classification(c), _slider_table(c)):
        if table is not None:
            summary.tables.append(table)
    summary.tables += _mqm_tables(c)
    summary.tables += _ranking_tables(c)
    best_worst = _best_worst_table(c)
    if best_worst is not None:
        summary.tables.append(best_worst)
    summary.tables += preference_tables(c)
    for key, make in (("proportions", lambda: proportions_plot(
            c.get("proportions"), f"{c['key']}: proportion positive per system")),
            ("distribution", lambda: distribution_plot(
                c.get("distribution"), "rating" if "ordinal" in families else "value",
                f"{c['key']}: distribution per system", c.get("labels_by_value"))),
            ("severity", lambda: severity_plot(c.get("severity_levels"),
                                                f"{c['key']}: severity per system"))):
        image = make()
        if image:
            summary.plots.append((f"{c['key']} {key} plot", image))
    blocks.append(summary)
    for key, title in (("clmm", "Cumulative link mixed model"),
                       ("clm", "Cumulative link model (no random effects)"),
                       ("glmm", "Binomial GLMM"), ("glmm_penalised", "Penalised binomial GLMM"),
                       ("lmm", "Linear mixed model")):
        if key in c:
            blocks.append(_model_block(title, c[key]))
    separation = _separation_block(c)
    if separation:
        blocks.append(separation)
    contrasts = _contrasts(c)
    if contrasts is not None:
        blocks.append(Block(title=contrasts.title, tables=[contrasts]))
    for block_of in (_agreement_block, _ceiling_block, _span_agreement_block):
        block = block_of(c)
        if block is not None:
            blocks.append(block)
    if counted is not None:
        blocks.append(counted)
    return {"key": c["key"], "kind": c["kind"], "blocks": blocks,
            "answered": c.get("answered")}
