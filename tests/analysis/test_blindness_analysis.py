"""Judgments of outputs that may reveal their system, in the analysis (analysis.extras.
blindness): flagged and unflagged outputs apart, the comparison with and without them, and
the option that leaves them out of the whole analysis.

The study: systems Orbitalis and Zephyrix, items i1..i6. Zephyrix's outputs on i1..i3 say
"As an AI language model" (flagged); the rest are clean. Three raters. Known answers:
- quality (Likert 1-5): Zephyrix 5 where flagged, 2 where not; Orbitalis 3 everywhere;
- usable (binary): Zephyrix yes where flagged, no where not; Orbitalis yes everywhere;
- preference (pairwise): on i1, i2 Zephyrix is shown as A and chosen, on i3 as B and chosen
  (a flagged output on the B side); on i4..i6 Orbitalis is shown as A and chosen.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from analysis.extras import blindness
from analysis.selectors import judgments_tidy
from analysis.services import analysis_run_execute, analysis_run_start
from annotation.services import judgments_import
from evalstudy.models import Output
from evalstudy.spec.files import JudgmentRow
from tests.factories import CriterionFactory, ItemFactory, StudyFactory, SystemFactory

pytestmark = pytest.mark.django_db
RATERS = ("r1", "r2", "r3")
FLAGGED_ITEMS = ("i1", "i2", "i3")


def leaky_study():
    study = StudyFactory(slug="leaky-analysis")
    systems = {name: SystemFactory(study=study, name=name) for name in ("Orbitalis", "Zephyrix")}
    items = [ItemFactory(study=study, external_id=f"i{n}") for n in range(1, 7)]
    Output.objects.bulk_create(
        Output(item=item, system=system, text=(
            f"As an AI language model, I summarise {item.external_id}."
            if name == "Zephyrix" and item.external_id in FLAGGED_ITEMS
            else f"Summary number {item.external_id} by {name.lower()[:3]}."))
        for item in items for name, system in systems.items())
    CriterionFactory(study=study, key="quality", kind="likert", scale_points=5,
                     order=0)
    CriterionFactory(study=study, key="usable", kind="binary", order=1)
    CriterionFactory(study=study, key="preference", kind="pairwise", order=2)
    answers = []
    for rater in RATERS:
        for n in range(1, 7):
            item, flagged = f"i{n}", f"i{n}" in FLAGGED_ITEMS
            answers += [
                (rater, item, "Zephyrix", "quality", "5" if flagged else "2", ""),
                (rater, item, "Orbitalis", "quality", "3", ""),
                (rater, item, "Zephyrix", "usable", "yes" if flagged else "no", ""),
                (rater, item, "Orbitalis", "usable", "yes", ""),
            ]
            if n in (1, 2):
                answers.append((rater, item, "Zephyrix", "preference", "A", "Orbitalis"))
            elif n == 3:
                answers.append((rater, item, "Orbitalis", "preference", "B", "Zephyrix"))
            else:
                answers.append((rater, item, "Orbitalis", "preference", "A", "Zephyrix"))
    rows = [JudgmentRow(line, rater, item, system, criterion, value, "", system_b)
            for line, (rater, item, system, criterion, value, system_b)
            in enumerate(answers, start=2)]
    judgments_import(study=study, rows=rows, file_name="leaky.csv")
    return study


def by_key(entries, key="system"):
    return {entry[key]: entry for entry in entries}


def test_flagged_and_unflagged_judgments_are_reported_apart():
    study = leaky_study()
    data = blindness.compute(study, judgments_tidy(study), {}, {})
    assert data["audit"]["flagged_outputs"] == 3
    assert (data["flagged_judgments"], data["judgments"]) == (27, 90)
    assert not data["excluded"]
    criteria = by_key(data["criteria"], "criterion")

    quality = criteria["quality"]
    systems = by_key(quality["systems"])
    assert systems["Zephyrix"]["flagged"] == {"n": 9, "value": 5.0}
    assert systems["Zephyrix"]["unflagged"] == {"n": 9, "value": 2.0}
    assert systems["Orbitalis"]["flagged"] == {"n": 0, "value": None}
    assert systems["Orbitalis"]["unflagged"] == {"n": 18, "value": 3.0}
    # The comparison moves from +0.5 to -1.0 once the flagged outputs are left out.
    assert by_key(quality["all"])["Zephyrix"]["difference"] == pytest.approx(0.5)
    assert by_key(quality["unflagged_only"])["Zephyrix"]["difference"] == pytest.approx(-1.0)
    low, high = by_key(quality["unflagged_only"])["Zephyrix"]["ci"]
    assert low <= -1.0 <= high

    usable = criteria["usable"]
    assert by_key(usable["systems"])["Zephyrix"]["flagged"] == {"n": 9, "value": 1.0}
    assert by_key(usable["systems"])["Zephyrix"]["unflagged"] == {"n": 9, "value": 0.0}
    assert by_key(usable["all"])["Zephyrix"]["difference"] == pytest.approx(-0.5)
    assert by_key(usable["unflagged_only"])["Zephyrix"]["difference"] == pytest.approx(-1.0)

    [pair] = criteria["preference"]["pairs"]
    assert (pair["first"], pair["second"], pair["flagged_pairs"]) == ("Orbitalis", "Zephyrix", 9)
    assert (pair["all"]["share"], pair["all"]["decided"]) == (0.5, 18)
    assert (pair["unflagged_only"]["share"], pair["unflagged_only"]["decided"]) == (1.0, 9)


def test_the_section_explains_and_tabulates():
    study = leaky_study()
    data = blindness.compute(study, judgments_tidy(study), {}, {})
    section = blindness.section(data, {})
    block = section["blocks"][0]
    assert section["title"] == "Blindness audit"
    assert "flags 3 of 12 outputs" in block["paragraphs"][0]
    assert "27 of 90 judgments" in block["paragraphs"][0]
    titles = [table["title"] for table in block["tables"]]
    assert titles == ["Outputs flagged per system", "Judgments of flagged and unflagged outputs",
                      "System comparison with and without flagged outputs",
                      "Pairwise preference with and without pairs showing a flagged output"]
    split = [[cell for cell, _ in row] for row in block["tables"][1]["body"]]
    assert ["quality", "mean", "Zephyrix", "5.000", 9, "2.000", 9] in split


def test_a_study_with_nothing_flagged_gets_one_sentence_not_tables_of_dashes():
    study = leaky_study()
    Output.objects.filter(item__study=study).update(text="a plain transcript")
    data = blindness.compute(study, judgments_tidy(study), {}, {})
    block = blindness.section(data, {})["blocks"][0]
    assert block["paragraphs"] == [
        "The blindness audit (re-run on the outputs at analysis time) flags none of the 12 "
        "outputs: no system name or alias, identity term, built-in model or vendor name, or "
        "phrase typical of one system was found, so no judgment is read apart."]
    assert [table["title"] for table in block["tables"]] == ["Outputs flagged per system"]


def test_the_option_drops_judgments_of_flagged_outputs_and_pairs():
    study = leaky_study()
    table = judgments_tidy(study)
    kept = blindness.prepare(study, table, {"exclude_identity_leaks": True})
    assert len(kept) == 90 - 27
    flagged = set(Output.objects.filter(text__startswith="As an AI").values_list("id", flat=True))
    assert not kept["output"].isin(flagged).any()
    assert not kept["output_b"].isin(flagged).any()  # i3's pair showed it as B
    assert set(kept.loc[kept["criterion"] == "preference", "item"]) == {"i4", "i5", "i6"}
    # Without the option, nothing changes.
    assert blindness.prepare(study, table, {}) is table


def test_a_run_with_the_option_leaves_them_out_and_says_so():
    study = leaky_study()
    run = analysis_run_start(study=study, enqueue=False, options={
        "exclude_identity_leaks": True, "pdf": False, "engine": "statsmodels"})
    run = analysis_run_execute(run)
    data = run.result["extras"]["blindness"]
    assert data["excluded"] and data["reread"] and data["flagged_judgments"] == 27
    # This section still shows the flagged judgments, read again.
    quality = by_key(data["criteria"], "criterion")["quality"]
    assert by_key(quality["systems"])["Zephyrix"]["flagged"]["n"] == 9
    assert "were left out of every other section" in run.report_html
    assert "Blindness audit" in run.report_html


def test_the_option_must_be_true_or_false():
    study = leaky_study()
    with pytest.raises(ValidationError, match="exclude_identity_leaks: must be true or false"):
        analysis_run_start(study=study, enqueue=False, options={"exclude_identity_leaks": "yes"})


def test_the_analysis_page_starts_a_run_with_the_option():
    from django.test import Client
    from django.urls import reverse

    from analysis.models import AnalysisRun
    from tests.factories import UserFactory

    study = leaky_study()
    study.owner = UserFactory(is_staff=True)
    study.save()
    client = Client()
    client.force_login(study.owner)
    assert 'name="exclude_identity_leaks"' in client.get(
        reverse("analysis:page", args=[study.slug])).content.decode()
    client.post(reverse("analysis:start", args=[study.slug]),
                {"exclude_identity_leaks": "1", "raters": "all"})
    assert AnalysisRun.objects.get(study=study).options["exclude_identity_leaks"] is True
