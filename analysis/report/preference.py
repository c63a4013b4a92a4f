"""The report's tables of a choice between two outputs: preference shares and the
Bradley-Terry model, for the raters' answers (`criteria`) and for counted votes (`votes`)."""

from __future__ import annotations

from analysis.report.format import Table, interval, num, pair_of, pval
from analysis.templatetags.analysis_tags import readable_term


def preference_tables(c: dict) -> list[Table]:
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
            f"{num(s.get('share_ties_excluded'))} "
            f"({interval(*pair_of(s.get('ci_ties_excluded')))})",
            f"{num(s.get('share_ties_half'))} ({interval(*pair_of(s.get('ci_ties_half')))})"])
    tables = [shares]
    extra = pref.get("extra") or {}
    if by_answer := extra.get("ties_by_answer"):
        shares.notes.append(
            "Ties here are every answer that preferred neither output: "
            f"{by_answer.get('tie', 0)} tie, {by_answer.get('both_good', 0)} both good, "
            f"{by_answer.get('both_bad', 0)} both bad. Shares, the Bradley-Terry model and "
            "agreement with metrics and proxies read 'both good' and 'both bad' as ties; the "
            "section 'Pairwise answers: preference and level' fits their level too.")
    if extra.get("not_estimable"):
        shares.warnings.append(f"Bradley-Terry model not fitted: {extra['not_estimable']}")
    position = extra.get("position_known", True) is not False
    fit = pref.get("ties_excluded")
    if isinstance(fit, dict) and fit.get("coefficients"):
        model = Table(["Term", "Estimate", "SE", "95% CI", "p"], numeric=(1, 2, 3, 4),
                      title="Bradley-Terry model with a position term (ties excluded)"
                      if position else "Bradley-Terry model, no position term (ties excluded)")
        levels = (fit.get("extra") or {}).get("levels")
        for co in fit["coefficients"]:
            model.rows.append([readable_term(co.get("term"), levels), num(co.get("estimate")),
                               num(co.get("se")), interval(co.get("ci_low"), co.get("ci_high")),
                               pval(co.get("p_value"))])
        model.notes.append(f"{fit.get('formula')} · {fit.get('engine')} · n = "
                           f"{fit.get('n_obs')}. " + (
                               "The position term is the log-odds of choosing the output "
                               "shown as A at equal strength." if position else
                               "A/B is the data's order, not what people saw first: no "
                               "position effect can be estimated."))
        model.warnings += [str(w) for w in fit.get("warnings") or []]
        tables.append(model)
    return tables
