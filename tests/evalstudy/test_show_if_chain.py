"""`show_if` forms a forward, acyclic chain: a criterion may depend only on an earlier one.

Earlier means earlier in the spec's `criteria` list, and in the database earlier in the
(order, id) ordering that the rater form uses. A condition on a later criterion (a cycle
included) is evaluated before its answer exists, so the question could never be shown; with a
cycle no question is shown at all and an empty post completed a slot. Each way in refuses it:
the spec reader, the admin's criterion inline, the API and `study_open`.
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from evalstudy.models import Assignment, AssignmentSlot, Criterion, Study
from evalstudy.services import assignment_next, study_open, study_validate
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.study import parse_study_spec
from tests.evalstudy.test_audit import change_form
from tests.evalstudy.test_spec import BASE, edit, line_of
from tests.factories import UserFactory, invite, make_study, token_client

CHAIN = edit(BASE, """  - key: comment
    kind: text
    prompt: Anything else?
    required: false
""", """  - key: comment
    kind: text
    prompt: Anything else?
    required: false
    show_if: {criterion: usable, equals: "no"}
""")


def spec_errors(text: str) -> list[str]:
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(text, "spec.yaml")
    return [str(error) for error in caught.value.errors]


# --- the spec reader --------------------------------------------------------------------------
def test_a_condition_on_an_earlier_criterion_is_accepted():
    spec = parse_study_spec(CHAIN, "spec.yaml")
    assert (spec.criteria[2].show_if_criterion, spec.criteria[2].show_if_values) == (
        "usable", ["no"])


def test_a_cycle_is_refused_with_file_line_and_path():
    text = edit(CHAIN, """  - key: usable
    kind: binary
    prompt: Is it usable?
""", """  - key: usable
    kind: binary
    prompt: Is it usable?
    show_if: {criterion: comment, equals: "x"}
""")
    (error,) = spec_errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'key: usable')}: criteria[1].show_if: ")
    assert "'comment'" in error and "earlier" in error


def test_a_condition_on_a_later_criterion_is_refused():
    text = edit(BASE, """  - key: severity
    kind: severity
    prompt: How much meaning is lost?
""", """  - key: severity
    kind: severity
    prompt: How much meaning is lost?
    show_if: {criterion: usable, equals: "yes"}
""")
    (error,) = spec_errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'key: severity')}: criteria[0].show_if:")
    assert "'usable'" in error and "comes after" in error


def test_a_three_criterion_cycle_names_the_criterion_that_looks_forward():
    text = edit(BASE, "    prompt: How much meaning is lost?\n",
                "    prompt: How much meaning is lost?\n"
                "    show_if: {criterion: comment, equals: x}\n")
    text = edit(text, "    prompt: Is it usable?\n",
                "    prompt: Is it usable?\n    show_if: {criterion: severity, equals: 1}\n")
    text = edit(text, "    required: false\n",
                "    required: false\n    show_if: {criterion: usable, equals: 'no'}\n")
    (error,) = spec_errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'key: severity')}: criteria[0].show_if:")


@pytest.mark.parametrize("parent", ["comment", "nothing"])
def test_self_and_unknown_parents_are_still_refused(parent):
    text = edit(CHAIN, "show_if: {criterion: usable,", f"show_if: {{criterion: {parent},")
    (error,) = spec_errors(text)
    assert f"spec.yaml:{line_of(text, 'key: comment')}: criteria[2].show_if: " in error
    assert repr(parent) in error


# --- the database: study_open -----------------------------------------------------------------
def _make_cyclic(study: Study) -> None:
    """severity <- note and note <- severity, and usable <- severity: no question is shown
    before another is answered, so none ever is. Written to the rows directly (as a script or
    a data migration could), so only the services stand in its way."""
    severity = study.criteria.get(key="severity")
    note = study.criteria.get(key="note")
    assert note.show_if_criterion_id == severity.pk  # make_study's chain: note after severity
    severity.show_if_criterion, severity.show_if_values = note, ["x"]
    severity.save()
    study.criteria.filter(key="usable").update(show_if_criterion=severity, show_if_values=["0"])


def test_study_open_refuses_a_cycle_and_builds_nothing(db):
    study = make_study()
    _make_cyclic(study)
    problems = study_validate(study=study)
    assert any("'severity'" in p and "'note'" in p and "earlier" in p for p in problems), problems
    with pytest.raises(ValidationError):
        study_open(study=study)
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT
    assert not Assignment.objects.filter(study=study).exists()


def test_study_open_refuses_a_parent_ordered_after_its_dependent(db):
    study = make_study()
    Criterion.objects.filter(study=study, key="severity").update(order=5)  # after note (2)
    problems = study_validate(study=study)
    assert any("'note'" in p and "'severity'" in p for p in problems), problems
    with pytest.raises(ValidationError):
        study_open(study=study)


def test_equal_order_falls_back_on_creation_order(db):
    study = make_study()
    study.criteria.update(order=0)  # severity was created before note: still earlier
    assert study_validate(study=study) == []


def test_an_empty_post_cannot_complete_a_slot_when_criteria_became_cyclic(db):
    """Defence in depth: a study opened valid whose criteria were made cyclic afterwards."""
    study = make_study(status=Study.Status.OPEN)
    rater = invite(study)
    slot = assignment_next(study=study, rater=rater)
    _make_cyclic(study)
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    client.post(reverse("annotation:submit", args=[study.slug, slot.pk]), {})
    slot = AssignmentSlot.objects.get(pk=slot.pk)
    assert slot.completed_at is None
    assert not slot.judgments.exists()


# --- the admin: the criterion inline of the study page ----------------------------------------
def _criterion_prefix(data: dict, key: str) -> str:
    field = next(k for k, v in data.items()
                 if k.startswith("criteria-") and k.endswith("-key") and v == key)
    return field.removesuffix("-key")


def test_admin_criterion_inline_refuses_a_cycle(boss_client):
    study = make_study()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    severity = _criterion_prefix(data, "severity")
    note = study.criteria.get(key="note")
    data[f"{severity}-show_if_criterion"] = str(note.pk)
    data[f"{severity}-show_if_values"] = '["x"]'
    response = boss_client.post(url, data)
    assert response.status_code == 200  # the form again, with the error
    html = response.content.decode().replace("&#x27;", "'")
    assert "errornote" in html
    assert "'severity'" in html and "earlier" in html
    assert study.criteria.get(key="severity").show_if_criterion is None


def test_admin_criterion_inline_refuses_reordering_a_parent_after_its_dependent(boss_client):
    study = make_study()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    data[f"{_criterion_prefix(data, 'severity')}-order"] = "7"
    response = boss_client.post(url, data)
    assert response.status_code == 200
    assert "comes after" in response.content.decode()
    assert study.criteria.get(key="severity").order == 0


def test_admin_criterion_inline_accepts_a_forward_chain(boss_client):
    study = make_study()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    data[f"{_criterion_prefix(data, 'usable')}-show_if_criterion"] = str(
        study.criteria.get(key="severity").pk)
    data[f"{_criterion_prefix(data, 'usable')}-show_if_values"] = '["0", "1"]'
    response = boss_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert study.criteria.get(key="usable").show_if_criterion.key == "severity"


# --- the API: POST criteria -------------------------------------------------------------------
def test_api_refuses_a_condition_on_a_criterion_ordered_after_the_new_one(db):
    owner = UserFactory(username="owner", is_staff=True)
    study = make_study(owner=owner, slug="draft")
    Criterion.objects.filter(study=study, key="usable").update(order=9)
    api = token_client(owner)
    url = reverse("api-study-criteria", args=[study.slug])
    body = {"key": "why", "prompt": "Why?", "kind": "text", "required": False, "order": 3,
            "show_if_criterion": "usable", "show_if_values": ["no"]}
    response = api.post(url, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert "show_if_criterion" in response.json()["field_errors"]
    assert not study.criteria.filter(key="why").exists()
    body["order"] = 9  # same order: created later, so after 'usable'
    response = api.post(url, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
