"""The count kind (evalstudy/criteria/kinds/count.py), end to end through the public paths: a
study file declares it, a rater answers it on the page, bad answers are refused with nothing
stored, and the analysis compares systems on it, fewer being better."""

from __future__ import annotations

import re
import textwrap

import pytest
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.criteria import check_rule, kind_of, rule_of
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.study import parse_study_spec

HX = {"HTTP_HX_REQUEST": "true"}

SPEC = textwrap.dedent("""\
    study:
      slug: errors-heard
      title: Errors heard
    systems:
      - name: small
      - name: large
    criteria:
      - key: errors
        kind: count
        prompt: How many words are wrong?
        scale_min: 0
        scale_max: 20
    items:
      - id: i1
        reference: turn on the light
        outputs: {small: turn of the lights, large: turn on the light}
      - id: i2
        reference: close the door
        outputs: {small: clothes the door, large: close the door}
""")


def test_a_count_reads_whole_numbers_in_its_range_and_refuses_the_rest():
    kind = kind_of("count")
    rule = rule_of({"kind": "count", "scale_min": 0, "scale_max": 20})
    assert [rule.normalise(raw) for raw in (0, "3", 7.0, " 20 ")] == ["0", "3", "7", "20"]
    for bad in ("-1", "21", "2.5", "many", "nan"):
        with pytest.raises(ValueError, match="from 0 to 20"):
            rule.normalise(bad)
    assert kind.numeric(rule, "4") == 4.0 and kind.score == "penalty"
    assert check_rule("count", scale_points=None, labels=None, options=[], scale_min=0,
                      scale_max=None) == [
        "a count needs both scale_min and scale_max, or neither (0 to 100)"]
    assert check_rule("count", scale_points=None, labels=None, options=[], scale_min=-2,
                      scale_max=5) == [
        "a count's scale_min must be at least 0 and below its scale_max, at most 10000"]
    assert check_rule("count", scale_points=5, labels=None, options=[]) == [
        "scale_points only applies to likert criteria, not count"]


def test_a_study_file_declares_a_count_and_a_bad_range_is_located():
    spec = parse_study_spec(SPEC, "errors.yaml")
    assert (spec.criteria[0].kind, spec.criteria[0].scale_max) == ("count", 20)
    with pytest.raises(SpecInvalid) as refused:
        parse_study_spec(SPEC.replace("scale_min: 0", "scale_min: 30"), "errors.yaml")
    assert "errors.yaml" in str(refused.value) and "scale_min" in str(refused.value)


@pytest.fixture
def count_study(db):
    from evalstudy.importers import study_import_spec
    from evalstudy.services import study_open

    study, _outcome = study_import_spec(spec=parse_study_spec(SPEC, "errors.yaml"),
                                        file_name="errors.yaml")
    study_open(study=study)
    study.refresh_from_db()
    return study


def _enter(client: Client, study) -> tuple[str, str, int]:
    from tests.factories import invite

    rater = invite(study)
    assert client.get(reverse("annotation:enter", args=[rater.access_token])).status_code == 302
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    found = re.search(r'<form[^>]*action="(/s/[^"]+/slots/(\d+)/)"', page)
    assert found, page[:400]
    return page, found.group(1), int(found.group(2))


def test_a_rater_types_a_count_and_it_is_stored_with_its_number(count_study):
    client = Client()
    page, action, slot_id = _enter(client, count_study)
    assert 'type="number" name="errors" min="0" max="20"' in page
    response = client.post(action, {"errors": "21"}, **HX)
    assert response.status_code == 400
    assert "give a whole number from 0 to 20" in response.content.decode()
    assert not Judgment.objects.exists()
    client.post(action, {"errors": "2"}, **HX)
    stored = Judgment.objects.get(slot_id=slot_id)
    assert (stored.value, stored.numeric_value) == ("2", 2.0)


def test_the_rater_api_takes_a_count_and_refuses_a_negative_one(count_study):
    from django.utils import timezone

    from evalstudy.models import Enrollment
    from tests.factories import UserFactory, invite

    user = UserFactory()
    invite(count_study, user=user)
    Enrollment.objects.filter(study=count_study).update(consented_at=timezone.now(),
                                                        instructions_seen_at=timezone.now())
    client = Client()
    client.force_login(user)
    step = client.post(f"/api/v1/rater/studies/{count_study.slug}/next/").json()
    assert step["step"] == "rate", step
    slot = step["slot"]["id"]
    url = f"/api/v1/rater/slots/{slot}/judgments/"
    refused = client.post(url, {"answers": {"errors": -1}}, content_type="application/json")
    assert refused.status_code == 400 and "from 0 to 20" in refused.content.decode()
    assert not Judgment.objects.exists()
    answered = client.post(url, {"answers": {"errors": 3}}, content_type="application/json")
    assert answered.status_code in (200, 201), answered.content
    assert Judgment.objects.get(slot_id=slot).numeric_value == 3.0


def test_the_analysis_compares_systems_on_their_counts(count_study):
    from analysis.models import AnalysisRun
    from analysis.services import analysis_run_execute, analysis_run_start
    from annotation.services import judgments_import
    from evalstudy.spec.files import JudgmentRow

    # Three raters; the small system's outputs get more errors counted than the large one's.
    counts = {"small": (3, 4, 2, 5, 3, 4), "large": (0, 1, 0, 0, 1, 0)}
    rows, line = [], 1
    for system, values in counts.items():
        for index, value in enumerate(values):
            line += 1
            rows.append(JudgmentRow(line, f"r{index % 3}", f"i{index // 3 + 1}", system,
                                    "errors", str(value)))
    judgments_import(study=count_study, rows=rows, file_name="counts.csv")
    run = analysis_run_start(study=count_study, options={"pdf": False, "engine": "statsmodels"},
                             enqueue=False)
    run = analysis_run_execute(run)
    assert run.status == AnalysisRun.Status.DONE, run.error
    (criterion,) = [c for c in run.result["criteria"] if c["key"] == "errors"]
    systems = criterion["slider"]["systems"]
    # Fewer errors is better: the large system, with fewer counted, comes first.
    assert [row["system"] for row in systems] == ["large", "small"]
    assert [row["mean"] for row in systems] == [pytest.approx(1 / 3), pytest.approx(3.5)]
    assert "Scores per system (lower is better)" in run.report_html
    assert "lowest (best) first" in run.report_html


def test_a_french_rater_is_asked_how_many_in_french(db):
    from evalstudy.importers import study_import_spec
    from evalstudy.services import study_open

    spec = SPEC.replace("  title: Errors heard\n", "  title: Erreurs\n  language: fr\n")
    study, _outcome = study_import_spec(spec=parse_study_spec(spec, "erreurs.yaml"),
                                        file_name="erreurs.yaml")
    study_open(study=study)
    page, _action, _slot = _enter(Client(), study)
    question = page[page.index('<fieldset class="question" data-key="errors"'):]
    question = question[:question.index("</fieldset>")]
    assert "Combien (de 0 à 20)" in question, question
    assert "0 s'il n'y en a aucun" in question, question
