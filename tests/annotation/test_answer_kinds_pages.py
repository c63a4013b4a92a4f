"""Sliders and error spans on the rater's page, end to end through the views: what the page
carries for them, what is stored, and what is refused with nothing stored."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError as StudyInvalid
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment
from annotation.services import judgments_import
from evalstudy import criteria as rules
from evalstudy.importers import spec_to_document, study_to_spec
from evalstudy.models import CalibrationItem, Criterion, Output, Study
from evalstudy.services import study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import JudgmentRow
from evalstudy.spec.study import parse_study_spec
from tests.factories import invite, make_study

HX = {"HTTP_HX_REQUEST": "true"}


def _da_study(**settings) -> Study:
    """ESA-style: error spans in the output, then a 0-100 score."""
    da_study = make_study(n_items=3, n_systems=2, **settings)
    da_study.criteria.all().delete()
    CalibrationItem.objects.filter(study=da_study).delete()
    Criterion.objects.create(study=da_study, key="errors", kind="span", order=0,
                             prompt="Mark every error", options=["Accuracy", "Fluency"])
    Criterion.objects.create(study=da_study, key="score", kind="slider", order=1,
                             prompt="How good is it overall?",
                             labels={"0": "nonsense", "100": "perfect"})
    study_open(study=da_study)
    da_study.refresh_from_db()
    return da_study


def _enter(client: Client, da_study: Study) -> tuple[str, str, int]:
    rater = invite(da_study)
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302
    page = client.get(reverse("annotation:rate", args=[da_study.slug])).content.decode()
    found = re.search(r'<form[^>]*action="(/s/[^"]+/slots/(\d+)/)"', page)
    assert found, page[:400]
    return page, found.group(1), int(found.group(2))


def _spans(text: str, *spans) -> str:
    return json.dumps({"spans": list(spans), "text_sha256": rules.text_sha256(text)})


def _shown_output(page: str) -> str:
    found = re.search(r'<script id="span-text-output" type="application/json">(.*?)</script>',
                      page, re.S)
    assert found, "the page carries the exact text of the output pane"
    return json.loads(found.group(1))


@pytest.fixture
def da_study(db):
    return _da_study()


def test_the_page_carries_a_slider_and_a_markable_output_with_its_exact_text(da_study):
    page, _, slot_id = _enter(Client(), da_study)
    assert 'type="range" min="0" max="100"' in page and 'data-untouched' in page
    assert 'type="number" name="score"' in page and "0: nonsense" in page
    assert 'data-span-question="errors"' in page and 'data-span-pane="output"' in page
    text = Output.objects.get(slots__pk=slot_id).text
    assert _shown_output(page) == text
    assert f'data-sha256="{rules.text_sha256(text)}"' in page
    assert 'src="/static/js/answers.js"' in page


def test_a_slider_and_spans_are_stored_canonically_with_their_numbers(da_study):
    client = Client()
    page, action, slot_id = _enter(client, da_study)
    text = _shown_output(page)
    word = re.search(r"\S+", text)
    response = client.post(action, {"score": "64", "errors": _spans(
        text, {"start": word.start(), "end": word.end(), "category": "accuracy",
               "severity": "major"})}, **HX)
    # Span answers are read against the slot's text on the general path: it sends the
    # browser on to the next item.
    assert response["HX-Redirect"] == reverse("annotation:rate", args=[da_study.slug])
    stored = {j.criterion.key: j for j in Judgment.objects.filter(slot_id=slot_id)}
    assert (stored["score"].value, stored["score"].numeric_value) == ("64", 64.0)
    spans = json.loads(stored["errors"].value)
    assert spans["spans"] == [{"start": word.start(), "end": word.end(), "side": "output",
                               "category": "Accuracy", "severity": "major"}]
    assert stored["errors"].numeric_value == 5.0  # MQM: one major error


def test_no_errors_is_an_answer_but_an_untouched_slider_is_not(da_study):
    client = Client()
    page, action, slot_id = _enter(client, da_study)
    response = client.post(action, {"score": "", "errors": _spans(_shown_output(page))}, **HX)
    assert response.status_code == 400
    assert "an answer is required" in response.content.decode()
    assert not Judgment.objects.exists()
    response = client.post(action, {"score": "100", "errors": _spans(_shown_output(page))}, **HX)
    assert response.status_code == 200
    assert Judgment.objects.get(slot_id=slot_id, criterion__key="errors").numeric_value == 0.0


@pytest.mark.parametrize("attack", ["other_text", "overlap", "out_of_range", "too_high"])
def test_bad_answers_are_refused_and_nothing_is_stored(da_study, attack):
    client = Client()
    page, action, _ = _enter(client, da_study)
    text = _shown_output(page)
    spans = {"other_text": _spans(text + " edited"),
             "overlap": _spans(text, {"start": 0, "end": 3, "category": "Accuracy",
                                      "severity": "minor"},
                               {"start": 1, "end": 4, "category": "Fluency",
                                "severity": "minor"}),
             "out_of_range": _spans(text, {"start": 0, "end": len(text) + 1,
                                           "category": "Accuracy", "severity": "minor"}),
             "too_high": _spans(text)}[attack]
    score = "101" if attack == "too_high" else "50"
    response = client.post(action, {"score": score, "errors": spans}, **HX)
    assert response.status_code == 400
    body = response.content.decode()
    assert ("give a whole number from 0 to 100" in body if attack == "too_high"
            else "the marked errors could not be saved" in body)
    assert not Judgment.objects.exists()


def test_an_output_edited_after_it_was_shown_refuses_the_old_marking(da_study):
    client = Client()
    page, action, slot_id = _enter(client, da_study)
    text = _shown_output(page)
    Output.objects.filter(slots__pk=slot_id).update(text="a different output")
    response = client.post(action, {"score": "50", "errors": _spans(
        text, {"start": 0, "end": 1, "category": "Accuracy", "severity": "minor"})}, **HX)
    assert response.status_code == 400 and "another text" in response.content.decode()
    assert not Judgment.objects.exists()


def test_span_judgments_import_with_the_digest_added_and_bad_offsets_located(da_study):
    output = Output.objects.filter(item__study=da_study).select_related("item", "system").first()
    row = JudgmentRow(line=2, rater="r1", item=output.item.external_id, system=output.system.name,
                      criterion="errors",
                      value=json.dumps([{"start": 0, "end": 3, "category": "Fluency",
                                         "severity": "critical"}]))
    judgments_import(study=da_study, rows=[row], file_name="spans.csv")
    judgment = Judgment.objects.get(criterion__key="errors")
    assert json.loads(judgment.value)["text_sha256"] == rules.text_sha256(output.text)
    assert judgment.numeric_value == 25.0
    bad = JudgmentRow(line=3, rater="r2", item=output.item.external_id,
                      system=output.system.name, criterion="errors",
                      value=json.dumps([{"start": 0, "end": 999, "category": "Fluency",
                                         "severity": "minor"}]))
    with pytest.raises(SpecInvalid) as error:
        judgments_import(study=da_study, rows=[bad], file_name="spans.csv")
    assert "spans.csv:3: value" in str(error.value) and "offsets" in str(error.value)
    assert Judgment.objects.count() == 1


def test_span_criteria_need_a_one_output_design_and_one_per_study(db):
    pairwise = make_study(n_items=2, n_systems=2, design="pairwise")
    Criterion.objects.create(study=pairwise, key="errors", kind="span", prompt="Errors",
                             options=["Accuracy"], order=5)
    with pytest.raises(StudyInvalid, match="one output at a time"):
        study_open(study=pairwise)
    two = make_study(n_items=2, n_systems=2)
    for key in ("errors", "more"):
        Criterion.objects.create(study=two, key=key, kind="span", prompt="Errors",
                                 options=["Accuracy"], order=5)
    with pytest.raises(StudyInvalid, match="one span criterion"):
        study_open(study=two)


def test_the_spec_reads_and_writes_the_new_kinds(db):
    da_study = _da_study()
    criterion = da_study.criteria.get(key="errors")
    criterion.severity_weights, criterion.span_reference = {"minor": 1, "major": 10}, True
    criterion.save()
    Criterion.objects.filter(study=da_study, key="score").update(scale_min=-50, scale_max=50,
                                                              labels={})
    document = spec_to_document(study_to_spec(da_study))
    by_key = {c["key"]: c for c in document["criteria"]}
    assert by_key["errors"]["severity_weights"] == {"minor": 1, "major": 10}
    assert by_key["errors"]["span_reference"] is True
    assert (by_key["score"]["scale_min"], by_key["score"]["scale_max"]) == (-50, 50)
    spec = parse_study_spec(json.dumps(document), "round.json")
    parsed = {c.key: c for c in spec.criteria}
    assert parsed["errors"].severity_weights == {"minor": 1, "major": 10}
    assert parsed["score"].scale_min == -50
    document["calibration"] = [{"id": "c1", "reference": "x", "output": "y",
                                "expected": {"errors": "[]"}}]
    document["criteria"].append({"key": "again", "kind": "span", "prompt": "More",
                                 "options": ["Style"]})
    with pytest.raises(SpecInvalid) as error:
        parse_study_spec(json.dumps(document), "round.json")
    text = str(error.value)
    assert "expected.errors" in text and "no expected answer" in text
    assert "one span criterion" in text


def test_a_degraded_output_checks_slider_raters_with_a_range(db):
    """Direct assessment's quality control: an attention check whose output is degraded
    expects a low score, "0..30"; a rater who scores it high fails it."""
    from annotation.flow import control_slot_passed
    from annotation.services import judgment_submit
    from evalstudy.models import AttentionCheck
    from evalstudy.services import assignment_next

    da_study = make_study(n_items=4, n_systems=2, attention_check_every=2)
    da_study.criteria.all().delete()
    CalibrationItem.objects.filter(study=da_study).delete()
    Criterion.objects.create(study=da_study, key="score", kind="slider", prompt="How good?")
    AttentionCheck.objects.filter(study=da_study).update(expected={"score": "0..30"})
    study_open(study=da_study)
    careful, careless = invite(da_study), invite(da_study)
    for rater, score in ((careful, "20"), (careless, "85")):
        while (slot := assignment_next(study=da_study, rater=rater)) is not None:
            judgment_submit(rater=rater, slot_id=slot.pk, answers={
                "score": score if slot.kind == "attention" else "60"})
            if slot.kind == "attention":
                slot.refresh_from_db()
                assert control_slot_passed(slot) is (rater == careful)
    with pytest.raises(StudyInvalid, match=r"the range '40..10' is empty"):
        draft = make_study(n_items=2, n_systems=2, attention_check_every=1)
        draft.criteria.all().delete()
        CalibrationItem.objects.filter(study=draft).delete()
        Criterion.objects.create(study=draft, key="score", kind="slider", prompt="?")
        AttentionCheck.objects.filter(study=draft).update(expected={"score": "40..10"})
        study_open(study=draft)
