"""The joint pairwise model in an analysis run (analysis.extras.pairwise_joint): a study whose
pairwise criterion offers "tie", "both good" and "both bad", answered by simulated raters with
known qualities, analysed end to end; the report shows the parameters, how each answer entered
the model and the answers per pair, and the rest of the report says how "both" answers were
counted. The report is also rendered to PDF and PNG (var/test-artifacts/reports/
pairwise-joint.*) for a person to look at.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from scipy.special import expit

from analysis.extras import pairwise_joint
from analysis.models import AnalysisRun
from analysis.selectors import judgments_tidy
from analysis.services import analysis_run_execute, analysis_run_start
from annotation.services import judgments_import
from evalstudy.models import Output
from evalstudy.spec.files import JudgmentRow
from tests.analysis.test_report_render import NEVER, _render, _visible_text
from tests.factories import CriterionFactory, ItemFactory, StudyFactory, SystemFactory

pytestmark = pytest.mark.django_db
QUALITY = {"alpha": 0.0, "bravo": 0.8, "charlie": -0.6, "delta": 1.4}
N_RATERS, N_ITEMS = 20, 40


def both_study(*, allow_tie: bool = True, allow_both: bool = True, seed: int = 5):
    """Every rater answers every item once, on a random pair of systems in a random order,
    from the joint model with these qualities, nu = 1, beta = 2 and cut points -0.4, 0.8."""
    study = StudyFactory(slug=f"both-{int(allow_tie)}{int(allow_both)}", design="pairwise")
    names = list(QUALITY)
    systems = {name: SystemFactory(study=study, name=name) for name in names}
    items = [ItemFactory(study=study, external_id=f"i{n}") for n in range(N_ITEMS)]
    Output.objects.bulk_create(Output(item=item, system=system, text=f"output {k} on {item.pk}")
                               for item in items for k, system in enumerate(systems.values()))
    CriterionFactory(study=study, key="better", kind="pairwise",
                     allow_tie=allow_tie, allow_both=allow_both, order=0)
    rng = np.random.default_rng(seed)
    rows, line = [], 2
    for rater in range(N_RATERS):
        for item in range(N_ITEMS):
            a, b = rng.choice(len(names), size=2, replace=False)
            qa, qb = QUALITY[names[a]], QUALITY[names[b]]
            pa, pb, tie = np.exp(qa / 2 - qb / 2), np.exp(qb / 2 - qa / 2), 1.0
            draw = rng.random() * (pa + pb + tie)
            if draw < pa:
                value = "A"
            elif draw < pa + pb:
                value = "B"
            else:
                level = rng.random()
                m = (qa + qb) / 2
                value = ("both_bad" if level < expit(-0.4 - 2 * m) else
                         "tie" if level < expit(0.8 - 2 * m) else "both_good")
                if not allow_both:
                    value = "tie"
                elif not allow_tie and value == "tie":
                    value = "both_good"
            rows.append(JudgmentRow(line, f"r{rater}", f"i{item}", names[a], "better", value,
                                    "", names[b]))
            line += 1
    judgments_import(study=study, rows=rows, file_name="both.csv")
    return study


def test_the_joint_fit_recovers_the_qualities_and_the_level():
    study = both_study()
    data = pairwise_joint.compute(study, judgments_tidy(study), {}, {})
    (entry,) = data["criteria"]
    fit = entry["fit"]
    assert entry["allow_both"] and fit["n"] == N_RATERS * N_ITEMS
    assert sum(fit["counts"].values()) == fit["n"] and fit["counts"]["both_good"] > 0
    theta = {p["name"]: p for p in fit["theta"]}
    for name, truth in QUALITY.items():
        if name != "alpha":
            assert theta[name]["ci_low"] - 0.1 < truth < theta[name]["ci_high"] + 0.1, name
    assert fit["beta"]["ci_low"] > 0.5  # better pairs are more often "both good"
    assert fit["levels"] == ["both_bad", "tie", "both_good"]


def test_the_report_says_how_each_answer_entered_the_model():
    study = both_study()
    run = _render(study, "pairwise-joint", {"pdf": True})
    assert run.status == AnalysisRun.Status.DONE, run.error
    stored = run.result["extras"]["pairwise_joint"]["criteria"][0]
    assert stored["fit"]["roles"]["both_bad"]["level"] == "both below the lower cut point"
    text = html.unescape(_visible_text(run.report_html))
    for word in NEVER:
        assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), word
    for heading in ("Pairwise answers: preference and level", "How each answer entered the "
                    "model", "Answers per pair of systems", "Quality contrasts",
                    "beta (level per unit of mean quality)", "cut point both_bad | tie"):
        assert heading in text, heading
    counts = stored["fit"]["counts"]
    assert re.search(rf"both good\s+{counts['both_good']}\s+no preference", text)
    # The criterion's own preference block counts "both" answers as ties, and says so.
    assert (f"{counts['tie']} tie, {counts['both_good']} both good, {counts['both_bad']} both "
            "bad") in text
    assert bytes(run.report_pdf).startswith(b"%PDF")


def test_without_both_answers_the_section_is_davidsons_model():
    study = both_study(allow_both=False)
    run = analysis_run_execute(analysis_run_start(study=study, options={}, enqueue=False))
    assert run.status == AnalysisRun.Status.DONE, run.error
    fit = run.result["extras"]["pairwise_joint"]["criteria"][0]["fit"]
    assert fit["levels"] == [] and fit["beta"] is None and fit["cuts"] == []
    text = html.unescape(_visible_text(run.report_html))
    assert "Davidson's Bradley-Terry model with ties" in text
    assert "Ties here are every answer" not in text  # no "both" answers to explain


def test_a_criterion_without_tie_or_both_gets_no_section():
    study = StudyFactory(slug="plain-ab")
    CriterionFactory(study=study, key="better", kind="pairwise", order=0)
    assert pairwise_joint.compute(study, judgments_tidy(study), {}, {}) is None
    assert pairwise_joint.section({"criteria": []}, {}) is None


def test_a_model_the_answers_do_not_identify_shows_why_and_no_estimates():
    """36 answers whose no-preference levels follow the systems' quality perfectly (issue 30:
    beta -83123 and cut points 5153 / 5154 were printed as estimates): the section says the
    model is not identified and why, with the answers per pair and no parameter table."""
    study = StudyFactory(slug="both-separated", design="pairwise")
    systems = {name: SystemFactory(study=study, name=name) for name in ("hi", "mid", "lo")}
    items = [ItemFactory(study=study, external_id=f"i{n}") for n in range(36)]
    Output.objects.bulk_create(Output(item=item, system=system, text=f"{system.name} {item.pk}")
                               for item in items for system in systems.values())
    CriterionFactory(study=study, key="better", kind="pairwise", allow_tie=True,
                     allow_both=True, order=0)
    answers = [("hi", "mid", "A", 4), ("mid", "hi", "B", 3), ("hi", "mid", "both_good", 3),
               ("mid", "lo", "A", 4), ("lo", "mid", "B", 3), ("mid", "lo", "both_bad", 3),
               ("hi", "lo", "A", 4), ("lo", "hi", "B", 3), ("hi", "lo", "tie", 3),
               ("mid", "hi", "A", 2), ("lo", "mid", "A", 2), ("lo", "hi", "A", 2)]
    flat = [(a, b, v) for a, b, v, n in answers for _ in range(n)]
    rows = [JudgmentRow(line + 2, f"r{line % 6}", f"i{line}", a, "better", v, "", b)
            for line, (a, b, v) in enumerate(flat)]
    judgments_import(study=study, rows=rows, file_name="separated.csv")
    run = _render(study, "pairwise-joint-not-identified", {"pdf": True})
    fit = run.result["extras"]["pairwise_joint"]["criteria"][0]["fit"]
    assert fit["status"] == "not identified" and fit["beta"] is None and fit["cuts"] == []
    text = html.unescape(_visible_text(run.report_html))
    joint = text[text.rindex("Pairwise answers: preference and level"):]  # not the contents
    joint = joint[:joint.index("Blindness audit")]
    assert "Joint model not identified: " in joint and "the fit diverges" in joint
    assert "Answers per pair of systems" in joint
    assert "Quality contrasts" not in joint and "Estimate" not in joint
    assert "1693" not in text  # beta's runaway value, once printed as its estimate
