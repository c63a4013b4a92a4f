"""What the report shows says what the data say: stored values with their labels, readable
term names, no NaN/NaT, no library chatter (the report issue's "tables and plots" defects)."""

from __future__ import annotations

import pandas as pd

from analysis.stats.pipeline import analyse_criterion
from analysis.templatetags.analysis_tags import readable_term


def _severity_rows() -> pd.DataFrame:
    values = ["0", "0", "1", "2", "2", "2", "0", "1"]
    return pd.DataFrame({
        "rater": ["a", "b", "a", "b", "a", "b", "c", "c"], "is_human": True,
        "output": [1, 1, 2, 2, 3, 3, 1, 2], "item": ["i1", "i1", "i2", "i2", "i3", "i3", "i1",
                                                      "i2"],
        "system": ["s1", "s1", "s2", "s2", "s1", "s1", "s1", "s2"], "system_b": None,
        "value": values, "numeric": [float(v) for v in values], "seconds": 1.0,
    })


def test_severity_levels_are_the_stored_values_with_the_criterions_labels():
    """Before: the severity plot renumbered LATTE's 0/1/2 (0 = fully preserved) as 3/2/1 and
    titled it '3 = fully preserved'."""
    labels = ["Keeps the meaning", "Small slips", "Says something else"]
    result = analyse_criterion(_severity_rows(), {"key": "sev", "kind": "severity",
                                                  "labels": labels}, {"engine": "statsmodels"},
                               [])
    rows = {(r["system"], r["severity"]): r for r in result["severity_levels"]}
    assert rows[("s1", 0)]["n"] == 3 and rows[("s1", 0)]["label"] == "Keeps the meaning"
    assert rows[("s1", 2)]["n"] == 2 and rows[("s1", 2)]["label"] == "Says something else"
    assert {r["severity"] for r in result["severity_levels"]} == {0, 1, 2}
    defaults = analyse_criterion(_severity_rows(), {"key": "sev", "kind": "severity"},
                                 {"engine": "statsmodels"}, [])
    assert {r["label"] for r in defaults["severity_levels"]} >= {"Meaning fully preserved"}


def test_coefficient_names_read_as_factor_and_level():
    levels = {"system": ["asr-small", "asr-medium"], "temp": ["cold", "warm"],
              "contact": ["no", "yes"]}
    assert readable_term("systemasr-medium", levels) == "system: asr-medium"
    assert readable_term("tempwarm:contactyes", levels) == "temp: warm × contact: yes"
    assert readable_term("age", levels) == "age"  # a numeric covariate stays as it is


def test_a_proportion_of_zero_or_one_lies_inside_its_wilson_interval():
    """Before: 0 of 12 gave a lower limit of 2.8e-17 above the estimate, a negative error bar
    and a report that failed to render."""
    from analysis.stats.descriptives import wilson_ci

    for count, n in ((0, 12), (12, 12), (0, 1), (7, 7)):
        low, high = wilson_ci(count, n)
        assert low <= count / n <= high and low >= 0.0 and high <= 1.0
    assert wilson_ci(0, 12)[0] == 0.0 and wilson_ci(12, 12)[1] == 1.0


def _text(block) -> str:
    parts = [block.title, *block.paragraphs, *block.warnings]
    for table in block.tables:
        parts += [" | ".join(row) for row in table.rows] + table.notes + table.warnings
    return "\n".join(parts)


def test_a_proportional_odds_check_that_returned_na_says_so_and_why():
    """Before: "Proportional-odds check (ordinal::nominal_test): system: B: LRT -, p -" and
    JSON `proportional_odds_violations: []`, which reads "no violation"."""
    from analysis.report.criteria import _model_block

    fit = {"formula": "rating ~ system", "engine": "R ordinal::clm", "n_obs": 40,
           "coefficients": [{"term": "systemB", "estimate": 0.4, "se": 0.3, "ci_low": -0.2,
                             "ci_high": 1.0, "p_value": 0.2}],
           "warnings": ["proportional-odds check (nominal_test) could not be computed for "
                        "'system': the model with it nominal did not converge"],
           "extra": {"levels": {"system": ["A", "B"]},
                     "nominal_test": [{"term": "<none>", "lrt": None, "p_value": None},
                                      {"term": "system", "lrt": None, "p_value": None,
                                       "tested": False, "reason": "did not converge"}],
                     "nominal_test_status": {"status": "not computed", "tested": [],
                                             "untested": [{"term": "system",
                                                           "reason": "did not converge"}],
                                             "reason": "system: did not converge"},
                     "proportional_odds_violations": None}}
    text = _text(_model_block("Cumulative link model", fit))
    assert "LRT –, p –" not in text and "LRT -, p -" not in text
    assert "Proportional-odds check (ordinal::nominal_test): not computed (system: did not " \
           "converge)." in text
    assert "could not be computed for 'system'" in text
    fit["extra"]["nominal_test"][1].update(tested=True, lrt=5.1, p_value=0.024)
    fit["extra"]["nominal_test_status"] = {"status": "computed", "tested": ["system"],
                                           "untested": [], "reason": None}
    assert "system: LRT 5.10, p 0.024" in _text(_model_block("Cumulative link model", fit))


def test_the_separation_block_names_the_cause_and_the_fit_to_read():
    from analysis.report.criteria import _separation_block

    separation = {"detected": True, "diagnosis": "separation: system 'C': every judgment is 1",
                  "note": "separation: read 'glmm_penalised' for the system effects; 'glmm' "
                          "is kept to show what maximum likelihood gives",
                  "read": "glmm_penalised", "penalised_fit": "fitted",
                  "fits": {"glmm": {"estimation": "maximum likelihood", "engine": "R glmer",
                                    "role": "the model as specified"},
                           "glmm_penalised": {"estimation": "penalised maximum likelihood",
                                              "engine": "R blme::bglmer", "role": "prior"}}}
    text = _text(_separation_block({"separation": separation}))
    assert "separation: system 'C': every judgment is 1" in text
    assert "Penalised binomial GLMM (read this one) | penalised maximum likelihood" in text
    assert _separation_block({"separation": {"detected": False}}) is None
    separation.update(penalised_fit="failed: blme is not installed", read="glmm")
    assert "Penalised fit failed: blme is not installed." in _text(
        _separation_block({"separation": separation}))


def test_the_power_block_gives_simulations_seed_model_and_failures():
    from analysis.report.methods import power_block

    result = {"power": 0.82, "ci_low": 0.79, "ci_high": 0.85, "n_sim": 500, "seed": 7,
              "test": "glmm", "model": "simulated: binomial GLMM; refitted: lme4::glmer",
              "engine": "R lme4::glmer", "n_failed": 3, "n_singular": 12,
              "failed_policy": "counted as not significant", "elapsed_s": 61.2,
              "design": {"n_raters": 20, "n_items": 60}, "warnings": [],
              "pilot": {"criterion": "usable", "warnings": ["separation: system 'C'"]}}
    text = _text(power_block(result))
    for expected in ("Power | 0.820 (0.790 – 0.850", "Simulations | 500", "Seed | 7",
                     "lme4::glmer", "Refits that failed | 3 of 500 (counted as not "
                     "significant)", "Singular refits | 12", "pilot: separation: system 'C'"):
        assert expected in text, expected
    search = {"target_power": 0.8, "vary": "n_items", "value": 48, "result": result,
              "search": "bisection", "warnings": []}
    assert "Smallest n items reaching power 0.8: 48 (bisection)." in _text(power_block(search))
    assert _text(power_block({"error": "ValueError: no pilot model"})).endswith(
        "ValueError: no pilot model")


def test_deployment_rows_on_a_handful_of_outputs_are_flagged():
    from analysis.report.proxies import _one_deployment

    d = {"group_by": "item.speaker", "proxies": ["rater:judge"],
         "rows": [{"system": "s1", "group": "spk1", "n": 3, "word_acc": 90.0, "human_mp": 66.7,
                   "proxies": {"rater:judge": 100.0}, "accept": {"word_acc": True}},
                  {"system": "s1", "group": "spk2", "n": 25, "word_acc": 95.0,
                   "human_mp": 80.0, "proxies": {"rater:judge": 84.0},
                   "accept": {"human": True}}]}
    table = _one_deployment(d, "Deployment")
    assert any("1 of 2 rows rest on fewer than 10 outputs (as few as 3)" in w
               for w in table.warnings)


def test_judgments_without_timings_have_no_median_time_rather_than_zero():
    """Simulated judgments are served and submitted at once: the report said "Median seconds
    per judgment 0.0", as if raters answered instantly."""
    from analysis.stats.pipeline import analyse

    criterion = {"key": "sev", "kind": "severity"}
    untimed = _severity_rows().assign(seconds=0.0, criterion="sev", rater_kind="expert")
    assert analyse(untimed, [criterion], {"engine": "statsmodels"})["design"][
        "median_seconds"] is None
    timed = untimed.assign(seconds=[0.0, 2.0, 4.0, 6.0, 0.0, 8.0, 10.0, 12.0])
    assert analyse(timed, [criterion], {"engine": "statsmodels"})["design"][
        "median_seconds"] == 7.0
