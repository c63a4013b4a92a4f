"""The power block and the Methods section, which describes only the analyses that ran."""

from __future__ import annotations

from typing import Any

from analysis.report.format import Block, Table, answer_kind, interval, kind_families, num


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


def power_block(power: Any) -> Block | None:
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


def methods_paragraphs(result: dict, options: dict, filters: list[str]) -> list[str]:
    """The Methods section: what ran, and nothing that did not."""
    criteria = result.get("criteria") or []
    # What ran: the analysis families of the criteria's kinds, and whether any kind's answers
    # are ordered points.
    families = {name for c in criteria for name in kind_families(c.get("kind"))}
    ordered = any(kind is not None and kind.level == "ordinal"
                  for kind in (answer_kind(c.get("kind")) for c in criteria))
    engines: dict[str, str] = {}
    for c in result.get("criteria") or []:
        for key in ("clmm", "clm", "glmm", "glmm_penalised", "lmm"):
            fit = c.get(key)
            if isinstance(fit, dict) and fit.get("engine"):
                engines[key] = fit["engine"]
    # what the filters did, as run (calibration items may have been included on request)
    paragraphs = ["Judgments analysed: " + "; ".join(filters) + ". Attention-check slots are "
                  "never analysed as items."]
    if "ordinal" in families:
        paragraphs.append(
            "Likert criteria: per-system descriptives; a cumulative link mixed model (logit) "
            "with random intercepts for rater and item "
            f"({engines.get('clmm', 'engine named in its table')}); a cumulative link model "
            "without random effects with the proportional-odds check (ordinal::nominal_test).")
    if "binomial" in families:
        paragraphs.append(
            "Binary criteria (and 3-point severity read as meaning preserved = levels 0 and 1, "
            "as in LATTE): proportions with Wilson 95% intervals and a binomial GLMM (logit) "
            "with random intercepts for rater and item "
            f"({engines.get('glmm', 'engine named in its table')}).")
    if "slider" in families:
        paragraphs.append(
            "Slider criteria (direct assessment): per-system raw means and means of per-rater "
            "z-scores (each score standardised by its rater's mean and SD, as in WMT), each "
            "averaged over an output's raters and then over outputs, with t intervals; a "
            "linear mixed model with random intercepts for rater and item "
            f"({engines.get('lmm', 'engine named in its table')}); agreement as Krippendorff's "
            "alpha at the interval level and ICCs.")
    if "ranks" in families:
        paragraphs.append(
            "Ranking criteria: mean ranks, and the Plackett-Luce model fitted by maximum "
            "likelihood (the rank-ordered logit; it agrees with R's survival::clogit on the "
            "exploded rankings), log-worths with Wald intervals from the observed information.")
    if "best_worst" in families:
        paragraphs.append(
            "Best-worst criteria: counting scores (times best - times worst) / times shown, "
            "with percentile bootstrap intervals over items.")
    if "spans" in families:
        paragraphs.append(
            "Span criteria (MQM, ESA): each output's MQM penalty is the sum of its marked "
            "errors' severity weights, averaged over its raters and then over a system's "
            "outputs (lower is better), with t intervals; errors per judgment by category. "
            "Agreement on where errors are: Krippendorff's alpha over characters (each "
            "character a unit, marked or not, and by category) with a bootstrap over items, "
            "and character-level F1 between raters.")
    if any(isinstance(c.get("contrasts"), dict) and not c["contrasts"].get("error")
           for c in result.get("criteria") or []):
        paragraphs.append("More than two systems: pairwise Wald contrasts from the fitted model "
                          "with Holm-adjusted p-values; a contrast inherits its model's "
                          "warnings.")
    if "preference" in families:
        paragraphs.append(
            "Pairwise criteria: preference shares with Wilson intervals (ties excluded, and "
            "ties counted as half), and a Bradley-Terry logistic regression with a position term"
            " (the log-odds of choosing the output shown as A), with cluster-robust standard "
            "errors by rater. Counted votes (aggregated judgments) enter the same model as "
            "frequency weights with model-based standard errors, without the position term "
            "when the import declared the position unknown. Metrics and proxies are compared "
            "with the majority of each pair under two tie rules, beside the leave-one-vote-out "
            "agreement of one person with the others (the table's note says how). For rater "
            "agreement a pair is one unit whichever way round it was shown, each answer read "
            "in one orientation (A and B swapped where the pair was shown reversed).")
    boots = set()
    for c in result.get("criteria") or []:
        agreement = c.get("agreement")
        if isinstance(agreement, dict) and isinstance(agreement.get("bootstrap"), dict):
            b = agreement["bootstrap"]
            boots.add((b.get("n_boot"), b.get("seed"), b.get("cluster")))
    if any(isinstance(c.get("agreement"), dict) and not c["agreement"].get("note")
           and "agreement" in kind_families(c.get("kind")) for c in criteria):
        text = ("Agreement among human raters on each criterion's declared scale: percent "
                "agreement, Gwet's AC1"
                + (" (AC2 for ordered scales)" if ordered else "")
                + " and Fleiss' kappa in Gwet's missing-data formulation with Gwet's analytic "
                "variances, Krippendorff's alpha at the criterion's level of measurement, "
                "Cohen's kappa for rater pairs, "
                + ("ICCs (variance components of the crossed random-effects model where the "
                   "design is incomplete), " if "ordinal" in families else "")
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
            "probabilities; deployment decisions per speaker within system (WordAcc = 100 - "
            "min(WER, 100) with the speaker's corpus WER, as in LATTE), each proxy deciding "
            "at its own threshold."
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
