"""'Both good' and 'both bad' as pairwise answers of their own (Criterion.allow_both): the rule
that accepts them, study files, the admin, the rater page (form, keys, translations) and the
rater API, and every plain preference statistic reading them as no preference."""

from __future__ import annotations

import json
import re
import textwrap

import pandas as pd
import pytest
from django.test import Client
from django.urls import reverse

from analysis.stats.models.preference import preference_model
from analysis.stats.pipeline import declared_categories, on_declared_scale
from annotation.models import Judgment
from annotation.preferences import units_from_choices, units_from_votes
from evalstudy import criteria as rules
from evalstudy.importers import spec_to_document
from evalstudy.models import Criterion, Study
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.study import parse_study_spec
from tests.factories import UserFactory, invite, make_study

BOTH = rules.CriterionRule(kind="pairwise", allow_tie=True, allow_both=True)


# --- the rule ---------------------------------------------------------------------------------
def test_the_rule_offers_and_spells_both_answers():
    assert BOTH.choices() == ["A", "B", "tie", "both_good", "both_bad"]
    assert rules.CriterionRule(kind="pairwise", allow_both=True).choices() == [
        "A", "B", "both_good", "both_bad"]
    for raw, canonical in (("both_good", "both_good"), ("Both good", "both_good"),
                           ("BOTH-BAD", "both_bad"), ("both are bad", "both_bad"),
                           (" bothgood ", "both_good"), ("Tie", "tie"), ("a", "A")):
        assert BOTH.normalise(raw) == canonical
    # Without allow_both (or allow_tie) the answers are refused, saying what is allowed.
    with pytest.raises(ValueError, match="'A', 'B', 'tie'"):
        rules.CriterionRule(kind="pairwise", allow_tie=True).normalise("both good")
    with pytest.raises(ValueError):
        rules.CriterionRule(kind="pairwise", allow_both=True).normalise("tie")
    with pytest.raises(ValueError):
        BOTH.normalise("both")


def test_allow_both_is_only_for_pairwise_criteria():
    assert rules.check_rule("pairwise", scale_points=None, labels=None, options=[],
                            allow_both=True) == []
    problems = rules.criterion_problems({"kind": "binary", "allow_both": True})
    assert problems == ["allow_both ('both good' and 'both bad' answers) only applies to "
                        "pairwise criteria, not binary"]


# --- study files --------------------------------------------------------------------------------
SPEC = textwrap.dedent("""\
    study:
      slug: pair
      title: Pairwise study
      design: pairwise
    systems:
      - name: a
      - name: b
    criteria:
      - key: preference
        kind: pairwise
        prompt: Which is better?
        allow_tie: true
        allow_both: true
    items:
      - id: i1
        outputs: {a: x1, b: y1}
    calibration:
      - id: c1
        output_a: good
        output_b: bad
        expected: {preference: both good}
""")


def test_a_study_file_reads_and_writes_allow_both():
    spec = parse_study_spec(SPEC, "pair.yaml")
    assert spec.criteria[0].allow_both is True
    assert spec.calibration[0].expected == {"preference": "both_good"}
    assert spec_to_document(spec)["criteria"][0]["allow_both"] is True
    with pytest.raises(SpecInvalid, match=r"allow_both .* only applies to pairwise"):
        parse_study_spec(SPEC.replace("kind: pairwise", "kind: binary").replace(
            "    allow_tie: true\n", "").replace("expected: {preference: both good}",
                                             "expected: {preference: yes}"), "pair.yaml")


@pytest.mark.django_db
def test_the_admin_shows_allow_both():
    study = make_study(n_items=2, n_systems=2, design="pairwise")
    client = Client()
    client.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    html = client.get(reverse("admin:evalstudy_study_change", args=[study.pk])).content.decode()
    assert 'name="criteria-0-allow_both"' in html


# --- the rater page and API -------------------------------------------------------------------
def _both_study(language: str = "en") -> Study:
    study = make_study(n_items=2, n_systems=2, design="pairwise", status=Study.Status.OPEN,
                       language=language)
    Criterion.objects.filter(study=study).update(allow_tie=True, allow_both=True)
    return study


def _enter(client, rater):
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302


def _slot_id(html: str) -> int:
    return int(re.search(r'/slots/(\d+)/"', html).group(1))


@pytest.mark.django_db
def test_the_rater_page_offers_both_answers_with_keys_and_stores_them():
    study = _both_study()
    client = Client()
    rater = invite(study)
    _enter(client, rater)
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    for value, key, label in (("tie", "t", "Tie"), ("both_good", "g", "Both are good"),
                              ("both_bad", "x", "Both are bad")):
        assert re.search(rf'value="{value}" data-shortcut="{key}"', html), value
        assert label in html
    client.post(reverse("annotation:submit", args=[study.slug, _slot_id(html)]),
                {"preference": "A"})  # the calibration slot (its feedback page follows)
    # The next items come from the rating loop's fast path, which builds the questions from
    # the criteria as it reads them in one query: they must offer the both answers too.
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert re.search(r'value="both_bad" data-shortcut="x"', html)
    slot = _slot_id(html)
    response = client.post(reverse("annotation:submit", args=[study.slug, slot]),
                           {"preference": "both_good"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    if "HX-Redirect" not in response.headers:  # the next item, swapped in
        assert re.search(r'value="both_good" data-shortcut="g"', response.content.decode())
    assert Judgment.objects.get(slot_id=slot).value == "both_good"


@pytest.mark.django_db
@pytest.mark.parametrize(("language", "good", "bad"), [
    ("fr", "Les deux sont bons", "Les deux sont mauvais"),
    ("es", "Ambas son buenas", "Ambas son malas")])
def test_the_both_answers_are_translated(language, good, bad):
    study = _both_study(language)
    client = Client()
    _enter(client, invite(study))
    html = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert good in html and bad in html and "Both are good" not in html


@pytest.mark.django_db
def test_the_rater_api_takes_both_answers_and_refuses_them_where_not_offered(fresh_throttles):
    study = _both_study()
    rater = invite(study, external_id="PID-9")
    client = Client(HTTP_AUTHORIZATION=f"Rater {rater.access_token}")

    def submit(answers):
        slot = client.post(reverse("api-rater-next", args=[study.slug])).json()
        return slot, client.post(reverse("api-rater-submit", args=[slot["slot"]["id"]]
                                         if "slot" in slot else [slot["id"]]),
                                 data=json.dumps({"answers": answers}),
                                 content_type="application/json")

    _, response = submit({"preference": "A"})  # the calibration slot
    assert response.status_code in (200, 201), response.content
    slot, response = submit({"preference": "Both bad"})
    assert response.status_code in (200, 201), response.content
    slot_id = slot["slot"]["id"] if "slot" in slot else slot["id"]
    assert Judgment.objects.get(slot_id=slot_id).value == "both_bad"
    Criterion.objects.filter(study=study).update(allow_both=False)
    slot, response = submit({"preference": "both_good"})
    assert response.status_code == 400
    assert response.json()["field_errors"] == {"preference": ["choose one of: A, B, tie"]}


# --- plain preference statistics: both answers are no preference ------------------------------
ANSWERS = pd.DataFrame({
    "output": [1, 1, 2, 1, 1], "output_b": [2, 2, 1, 2, 2], "item": [7] * 5,
    "value": ["A", "both_good", "both_bad", "tie", "B"]})


def test_preference_units_count_both_answers_as_ties():
    units = units_from_choices(ANSWERS)
    assert units[["a", "b", "tie"]].to_dict("records") == [{"a": 1, "b": 1, "tie": 3}]
    votes = pd.DataFrame({"output": [1, 1, 1], "output_b": [2, 2, 2], "item": [7] * 3,
                          "value": ["A", "both_bad", "both_good"], "count": [4, 2, 3]})
    assert units_from_votes(votes)[["a", "b", "tie"]].to_dict("records") == [
        {"a": 4, "b": 0, "tie": 5}]


def test_the_preference_model_reads_both_answers_as_ties_and_says_so():
    frame = pd.DataFrame({"left_system": ["x", "y", "x", "y", "x", "y"] * 4,
                          "right_system": ["y", "x", "y", "x", "y", "x"] * 4,
                          "choice": ["A", "B", "both_good", "both_bad", "tie", "A"] * 4})
    result = preference_model(frame)
    assert result.n_ties == 12
    assert result.extra["ties_by_answer"] == {"tie": 4, "both_good": 4, "both_bad": 4}


def test_agreement_categories_include_both_answers():
    assert declared_categories({"kind": "pairwise", "allow_tie": True, "allow_both": True}) == [
        "A", "B", "tie", "both_good", "both_bad"]
    # A criterion record that does not say so (older runs): the answers seen join the scale
    # rather than being dropped as outside it.
    frame = pd.DataFrame({"value": ["A", "both_bad", "tie"]})
    kept, categories, source, excluded, _ = on_declared_scale(frame, "pairwise", ["A", "B"])
    assert len(kept) == 3 and not excluded
    assert categories == ["A", "B", "tie", "both_bad"]
    assert source == "declared scale (A, B) + 'tie' + 'both_bad' (observed)"
