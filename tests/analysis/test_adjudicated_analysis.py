"""The analysis option `labels`: with "adjudicated" the statistics read an expert's label where
there is one (one row, rater "adjudicator", in place of the raters' judgments of that unit),
the stored judgments stay as they were, and the report says which labels it used, how the
raters' majority agrees with the adjudicated labels, and what the replacement costs."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from analysis.adjudication import adjudication_record
from analysis.extras import adjudication as part
from analysis.selectors import JudgmentFilter, judgments_tidy
from analysis.services import analysis_run_execute, analysis_run_start
from annotation.models import Judgment
from evalstudy.audit import WEB
from tests.analysis.adjudication_data import disagreement_study, output_of
from tests.factories import UserFactory


def _label(study, user, criterion, item, value, *, pair=False):
    a = output_of(study, item, "sys-a")
    b = output_of(study, item, "sys-b") if pair else None
    return adjudication_record(study=study, criterion=study.criteria.get(key=criterion),
                               output=a, output_b=b, value=value, actor=user, source=WEB)


@pytest.fixture
def labelled(db):
    user = UserFactory(username="expert", is_staff=True)
    study = disagreement_study(owner=user)
    _label(study, user, "usable", "i1", "no")
    _label(study, user, "usable", "i2", "no")  # the judge's side, against 3 raters' "yes"
    _label(study, user, "quality", "i1", "2")
    _label(study, user, "preference", "i1", "A", pair=True)  # A: sys-a as given
    return study, user


def test_prepare_replaces_the_raters_judgments_of_adjudicated_units_only(labelled):
    study, _user = labelled
    table = judgments_tidy(study)
    assert part.prepare(study, table, {}) is table  # labels "raters": untouched
    prepared = part.prepare(study, table, {"labels": "adjudicated"})
    usable = prepared[prepared["criterion"] == "usable"]
    i1 = usable[usable["item"] == "i1"]
    assert i1[["rater", "rater_kind", "value"]].values.tolist() == [["adjudicator", "expert", "no"]]
    i2 = usable[usable["item"] == "i2"].sort_values("rater")
    assert i2[["rater", "value"]].values.tolist() == [["adjudicator", "no"], ["judge", "no"]]
    assert not i2[i2["rater"] == "judge"]["is_human"].any()  # proxies stay
    i3 = usable[usable["item"] == "i3"]
    assert sorted(i3["rater"]) == ["judge", "r1", "r2"]
    pair = prepared[(prepared["criterion"] == "preference") & (prepared["item"] == "i1")]
    assert len(pair) == 1
    row = pair.iloc[0]
    # Stored in output-id order; the row's systems follow its outputs.
    a = output_of(study, "i1", "sys-a")
    assert row["system"] == ("sys-a" if row["output"] == a.pk else "sys-b")
    assert row["value"] == ("A" if row["output"] == a.pk else "B")
    assert len(prepared) == len(table) - (2 + 3 + 2 + 2) + 4
    adjudicator = prepared[prepared["rater"] == "adjudicator"]
    assert set(adjudicator["rater_id"]) == {part.ADJUDICATOR_ID}
    assert adjudicator["is_human"].all() and adjudicator["judgment"].isna().all()
    assert Judgment.objects.count() == 20


def test_compute_reports_counts_and_the_raters_majority_agreement(labelled):
    study, _user = labelled
    table = part.prepare(study, judgments_tidy(study), {"labels": "adjudicated"})
    data = part.compute(study, table, {}, {"labels": "adjudicated"})
    by_key = {entry["criterion"]: entry for entry in data["criteria"]}
    # usable: i1 is a 1-1 tie (no majority); i2's majority "yes" differs from the label.
    assert (by_key["usable"]["adjudicated"], by_key["usable"]["with_majority"],
            by_key["usable"]["majority_agrees"], by_key["usable"]["agreement"]) == (2, 1, 0, 0.0)
    assert by_key["quality"]["with_majority"] == 0 and by_key["quality"]["agreement"] is None
    # The pair: r1 chose sys-a, r2 sys-b: no majority either.
    assert by_key["preference"]["adjudicated"] == 1
    assert by_key["usable"]["in_table"] == 2 and by_key["usable"]["raters_left"] == 4
    assert data["labels"] == "adjudicated" and data["warnings"] == []
    section = part.section(data, {})
    text = " ".join(section["blocks"][0]["paragraphs"])
    assert "Labels used: adjudicated" in text and "not adjudicated" in text
    plain = part.section(part.compute(study, judgments_tidy(study), {}, {}), {})
    assert "Labels used: the raters' judgments" in plain["blocks"][0]["paragraphs"][0]


def test_every_unit_adjudicated_leaves_one_rater_and_the_report_says_so(labelled):
    study, user = labelled
    _label(study, user, "usable", "i3", "yes")
    _label(study, user, "usable", "i4", "yes")
    table = part.prepare(study, judgments_tidy(study), {"labels": "adjudicated"})
    data = part.compute(study, table, {}, {"labels": "adjudicated"})
    assert any(w.startswith("usable: every human judgment was replaced") for w in data["warnings"])
    # An analysis restricted to proxies has no human row to replace: the labels go unused,
    # and the report says so.
    proxies_only = judgments_tidy(study, JudgmentFilter(raters="proxy"))
    assert part.prepare(study, proxies_only, {"labels": "adjudicated"}).equals(proxies_only)


def test_the_option_is_checked_before_a_run_exists(labelled):
    study, user = labelled
    with pytest.raises(ValidationError, match="labels: must be one of raters, adjudicated"):
        analysis_run_start(study=study, options={"labels": "gold"}, enqueue=False, actor=user,
                           source=WEB)


def test_a_whole_run_with_adjudicated_labels(labelled):
    study, user = labelled
    before = sorted(Judgment.objects.values_list("id", "value", "revision"))
    runs = {}
    for labels in ("raters", "adjudicated"):
        run = analysis_run_start(study=study, options={"labels": labels, "pdf": False},
                                 enqueue=False, actor=user, source=WEB)
        runs[labels] = analysis_run_execute(run)
        assert runs[labels].status == "done", runs[labels].error
    criteria = {labels: {c["key"]: c for c in run.result["criteria"]}
                for labels, run in runs.items()}
    # usable: 10 human judgments; adjudicated: i1's 2 and i2's 3 became 2 rows.
    assert criteria["raters"]["usable"]["n_judgments"] == 10
    assert criteria["adjudicated"]["usable"]["n_judgments"] == 7
    assert criteria["adjudicated"]["usable"]["n_raters"] == 4  # r1-r3 and the adjudicator
    assert runs["adjudicated"].result["extras"]["adjudication"]["labels"] == "adjudicated"
    assert "Labels used: adjudicated" in runs["adjudicated"].report_html
    assert "Labels used: the raters" in runs["raters"].report_html
    assert "Adjudicated units per criterion" in runs["raters"].report_html
    assert sorted(Judgment.objects.values_list("id", "value", "revision")) == before


def test_the_analysis_page_offers_the_option_and_passes_it_on(labelled):
    from django.test import Client
    from django.urls import reverse

    from analysis.models import AnalysisRun

    study, user = labelled
    client = Client()
    client.force_login(user)
    page = client.get(reverse("analysis:page", args=[study.slug])).content.decode()
    assert '<option value="adjudicated">' in page
    client.post(reverse("analysis:start", args=[study.slug]), {"labels": "adjudicated"})
    assert AnalysisRun.objects.get().options["labels"] == "adjudicated"
    client.post(reverse("analysis:start", args=[study.slug]), {"labels": "made-up"})
    assert AnalysisRun.objects.count() == 1  # refused, with the reason as a message
