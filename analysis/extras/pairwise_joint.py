"""Pairwise answers with their level: the joint model of preference and absolute level
(`analysis.stats.pairwise_joint`) for every pairwise criterion that offers "tie" or "both good"
/ "both bad", fitted on the human judgments the analysis reads.

- `compute`: per such criterion, the fit (qualities per system with Wald intervals, their
  contrasts, the position term, nu, beta and the cut points), how each answer entered the
  model, and the answer counts per pair of systems; an error sentence where the model cannot
  be fitted (fewer than two systems, systems not connected by comparisons); status "not
  identified" and the reasons, without estimates, where the answers do not identify it.
- `section`: those as tables, and a note that the rest of the report (preference shares, the
  Bradley-Terry model, agreement with metrics and proxies) counts "both good" and "both bad"
  as ties.

No options: it reads the table `prepare` of the other parts left (excluded raters, flagged
outputs, adjudicated labels already applied). Aggregated vote counts are not in it (they have
no system per row of the tidy table); raters are not a random effect (see the core).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from evalstudy.criteria import BOTH_BAD, BOTH_GOOD, PAIR, TIE, kind_of
from kit.jsonable import to_jsonable

OPTIONS: dict[str, Any] = {}
TITLE = "Pairwise answers: preference and level"
ANSWER_NAMES = {"A": "A preferred", "B": "B preferred", TIE: "tie", BOTH_GOOD: "both good",
                BOTH_BAD: "both bad"}


def prepare(study: Any, judgments: pd.DataFrame, options: dict[str, Any]) -> pd.DataFrame:
    return judgments


def compute(study: Any, judgments: pd.DataFrame, result: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any] | None:
    criteria = [c for c in study.criteria.order_by("order", "id")
                if kind_of(c.kind).shows == PAIR and (c.allow_tie or c.allow_both)]
    if not criteria:
        return None
    entries = []
    for criterion in criteria:
        entries.append({"key": criterion.key, "prompt": criterion.prompt,
                        "allow_tie": criterion.allow_tie, "allow_both": criterion.allow_both,
                        **_fit(criterion, judgments)})
    return {"criteria": entries}


def _fit(criterion: Any, judgments: pd.DataFrame) -> dict[str, Any]:
    from analysis.stats.pairwise_joint import joint_preference_model

    if judgments.empty:
        return {"error": "no judgments"}
    rows = judgments[(judgments["criterion"] == criterion.key) & judgments["is_human"]
                     & judgments["value"].notna() & judgments["system_b"].notna()]
    if rows.empty:
        return {"error": "no human answers"}
    values = set(rows["value"].astype(str))
    notes = []
    # Answers given while the criterion offered them, before it was changed: read as what
    # they are rather than refused (said in the report).
    allow_tie = criterion.allow_tie or TIE in values
    allow_both = criterion.allow_both or bool({BOTH_GOOD, BOTH_BAD} & values)
    if (allow_tie, allow_both) != (criterion.allow_tie, criterion.allow_both):
        notes.append("some answers are ones the criterion no longer offers (it was changed "
                     "after they were given): they are read as given")
    try:
        fit = joint_preference_model(rows, allow_tie=allow_tie, allow_both=allow_both)
    except ValueError as error:
        return {"error": str(error)}
    return {"fit": to_jsonable(fit), "notes": notes}


# --- section ---------------------------------------------------------------------------------
def _num(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"


def _ci(param: dict[str, Any]) -> str:
    if param.get("ci_low") is None or param.get("ci_high") is None:
        return "–"
    return f"[{_num(param['ci_low'])}, {_num(param['ci_high'])}]"


def _param_row(label: str, param: dict[str, Any] | None) -> list[str] | None:
    if not param:
        return None
    return [label, _num(param.get("estimate")), _num(param.get("se")), _ci(param),
            str(param.get("note") or "")]


def _table(title: str, head: list[str], numeric: tuple[int, ...],
           rows: list[list[str]], notes: list[str] | None = None,
           warnings: list[str] | None = None) -> dict[str, Any]:
    return {"title": title,
            "head": [(name, "num" if i in numeric else "") for i, name in enumerate(head)],
            "body": [[(cell, "num" if i in numeric else "") for i, cell in enumerate(row)]
                     for row in rows],
            "notes": notes or [], "warnings": warnings or []}


def _parameters(fit: dict[str, Any]) -> dict[str, Any]:
    rows = [_param_row(f"quality: {param['name']}", param) for param in fit["theta"]]
    for label, param in (("position (A shown first)", fit.get("position")),
                         ("nu (no-preference propensity)", fit.get("nu")),
                         ("beta (level per unit of mean quality)", fit.get("beta"))):
        if (row := _param_row(label, param)) is not None:
            rows.append(row)
    rows += [_param_row(f"cut point {param['name']}", param) for param in fit.get("cuts") or []]
    level = conf_label(fit)
    return _table("Parameters", ["Parameter", "Estimate", "SE", f"{level} CI", "Note"],
                  (1, 2, 3), [row for row in rows if row is not None],
                  notes=[f"{fit.get('method')}. n = {fit.get('n')} answers, log-likelihood "
                         f"{_num(fit.get('log_likelihood'), 2)}. Qualities are log-odds of "
                         f"preference relative to {fit.get('reference')}; nu's interval is the "
                         "exponential of log nu's."],
                  warnings=[str(w) for w in fit.get("warnings") or []])


def conf_label(fit: dict[str, Any]) -> str:
    return f"{round(100 * float(fit.get('conf_level') or 0.95))}%"


def _contrasts(fit: dict[str, Any]) -> dict[str, Any]:
    rows = [[param["name"], _num(param.get("estimate")), _num(param.get("se")), _ci(param)]
            for param in fit.get("contrasts") or []]
    return _table("Quality contrasts", ["Systems", "Difference", "SE", f"{conf_label(fit)} CI"],
                  (1, 2, 3), rows,
                  notes=["Wald intervals from the observed information, not adjusted for the "
                         "number of pairs; > 0: the first system is preferred."])


def _roles(fit: dict[str, Any]) -> dict[str, Any]:
    counts = fit.get("counts") or {}
    rows = [[ANSWER_NAMES.get(answer, answer), str(counts.get(answer, 0)), role["preference"],
             role["level"]] for answer, role in (fit.get("roles") or {}).items()]
    return _table("How each answer entered the model",
                  ["Answer", "Count", "Preference part (Davidson)", "Level part (cumulative "
                   "logit on the pair's mean quality)"], (1,), rows,
                  notes=["pi = exp(quality), D = pi_A + pi_B + nu sqrt(pi_A pi_B). The level "
                         "part reads only no-preference answers: P(level <= k) = "
                         "logistic(c_k - beta m), m = the mean quality of the pair."])


def _pairs(fit: dict[str, Any], allow_tie: bool, allow_both: bool) -> dict[str, Any]:
    answers = [("first_better", "first better"), ("second_better", "second better")]
    if allow_tie:
        answers.append((TIE, "tie"))
    if allow_both:
        answers += [(BOTH_GOOD, "both good"), (BOTH_BAD, "both bad")]
    rows = []
    for pair in fit.get("pair_shares") or []:
        n = int(pair.get("n") or 0)
        rows.append([f"{pair['first']} vs {pair['second']}", str(n)] + [
            f"{pair.get(key, 0)} ({100 * pair.get(key, 0) / n:.0f}%)" if n else "0"
            for key, _ in answers])
    return _table("Answers per pair of systems",
                  ["Pair", "n"] + [label for _, label in answers],
                  tuple(range(1, len(answers) + 2)), rows,
                  notes=["Counts and shares of each answer, whichever output was shown as A."])


def section(data: Any, result: dict[str, Any]) -> dict[str, Any] | None:
    blocks = []
    for entry in data.get("criteria") or []:
        block: dict[str, Any] = {"title": f"{entry['key']}: {entry.get('prompt', '')}",
                                 "paragraphs": [], "tables": [], "warnings": []}
        if entry.get("error"):
            block["warnings"].append(f"Joint model not fitted: {entry['error']}.")
            blocks.append(block)
            continue
        fit = entry["fit"]
        offered = ["A", "B"] + ([TIE] if entry.get("allow_tie") else []) + (
            [BOTH_GOOD, BOTH_BAD] if entry.get("allow_both") else [])
        block["paragraphs"].append(
            f"Answers offered: {', '.join(ANSWER_NAMES[a] for a in offered)}. "
            + ("Preference and level are fitted jointly: 'both good', 'tie' and 'both bad' "
               "prefer neither output, and say where the pair stands."
               if fit.get("levels") else
               "No level part: this is Davidson's Bradley-Terry model with ties.")
            + " Elsewhere in this report (preference shares, the Bradley-Terry model, agreement "
              "with metrics and proxies) every no-preference answer counts as a tie.")
        block["paragraphs"] += [str(note) for note in entry.get("notes") or []]
        pairs = _pairs(fit, bool(entry.get("allow_tie")), bool(entry.get("allow_both")))
        if fit.get("status") == "not identified":
            # The reason instead of the parameters: numbers of a model the answers do not
            # identify are where the optimiser stopped, not estimates.
            block["warnings"].append(
                "Joint model not identified: "
                + "; ".join(str(why) for why in fit.get("not_identified_because") or [])
                + ". No estimates are given; the answers per pair of systems are what the "
                  "data say.")
            block["tables"] += [_roles(fit), pairs]
        else:
            block["tables"] += [_roles(fit), _parameters(fit), _contrasts(fit), pairs]
        blocks.append(block)
    if not blocks:
        return None
    return {"title": TITLE, "blocks": blocks}

