"""A study's own words for what raters see: the panes, the buttons and the end page, from the
spec, the admin and the API, on the page served by the general path and by the fast loop; the
defaults say nothing about ASR."""

from __future__ import annotations

import re
import textwrap

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from evalstudy.importers import spec_to_document, study_import_spec, study_to_spec
from evalstudy.models import Study
from evalstudy.services import study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.fields import RATER_LABEL_DEFAULTS, rater_labels_clean
from evalstudy.spec.study import parse_study_spec
from tests.factories import UserFactory, invite, make_study, token_client

HX = {"HTTP_HX_REQUEST": "true"}
ANSWERS = {"severity": "0", "usable": "yes"}
NOTES = {"reference": "Original clinical note", "output": "Simplified note",
         "submit": "Save and continue", "previous": "Back", "done": "All notes are rated."}

SPEC = textwrap.dedent("""\
    study:
      slug: notes
      title: Note simplification
      rater_labels:
        reference: Original clinical note
        output: Simplified note
    systems:
      - name: a
    criteria:
      - key: usable
        kind: binary
        prompt: Is it usable?
    items:
      - id: i1
        reference: r1
        outputs: {a: x1}
""")


def test_the_defaults_are_neutral_words():
    words = " ".join(RATER_LABEL_DEFAULTS.values()).lower()
    for asr_word in ("said", "transcript", "speech", "audio", "asr"):
        assert asr_word not in words


@pytest.mark.parametrize(("value", "message"), [
    ({"refrence": "x"}, "'refrence' is not a label raters see; the labels are reference, "),
    ({"output": ""}, "output: blank (leave the label out to keep 'output''s default)"),
    ({"output": "   "}, "output: blank"),
    ({"submit": ["Go"]}, "submit: expected text, got a list"),
    ({"submit": 12}, "submit: expected text, got int"),
    ({"done": "x" * 201}, "done: longer than 200 characters"),
    (["reference"], "expected a mapping of label names to text, got a list"),
])
def test_bad_labels_are_refused_naming_the_label_and_why(value, message):
    with pytest.raises(ValueError) as refused:
        rater_labels_clean(value)
    assert str(refused.value).startswith(message)


def test_a_spec_names_the_labels_and_a_bad_one_is_located():
    spec = parse_study_spec(SPEC, "notes.yaml")
    assert spec.settings["rater_labels"] == {"reference": "Original clinical note",
                                             "output": "Simplified note"}
    bad = SPEC.replace("    output: Simplified note\n", "    outptu: Simplified note\n")
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(bad, "notes.yaml")
    [error] = caught.value.errors
    assert (error.source, error.line, error.path) == ("notes.yaml", 4, "study.rater_labels")
    assert "'outptu' is not a label raters see" in error.message


@pytest.mark.django_db
def test_imported_labels_are_stored_and_exported_again():
    owner = UserFactory()
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "notes.yaml"),
                                 file_name="notes.yaml", owner=owner, actor=owner)
    assert study.rater_labels == {"reference": "Original clinical note",
                                  "output": "Simplified note"}
    assert study.labels["output"] == "Simplified note" and study.labels["submit"] == "Submit"
    document = spec_to_document(study_to_spec(study))
    assert document["study"]["rater_labels"] == study.rater_labels


@pytest.mark.django_db
def test_the_admin_form_refuses_an_unknown_label_and_stores_nothing():
    study = make_study(n_items=2, n_systems=2)
    study.rater_labels = {"button": "Go"}
    with pytest.raises(ValidationError) as refused:
        study.full_clean()
    assert "'button' is not a label raters see" in str(refused.value.message_dict["rater_labels"])
    assert Study.objects.get(pk=study.pk).rater_labels == {}


@pytest.mark.django_db
@pytest.mark.parametrize(("typed", "stored"), [
    ("", {}),  # an emptied box: no labels of the study's own (was a 500: NULL stored)
    ("null", {}),
    ('{"submit": "  Go on  "}', {"submit": "Go on"}),  # stored as the spec would store it
])
def test_the_admin_form_stores_the_cleaned_labels(typed, stored):
    from django.forms import modelform_factory

    from evalstudy.admin.studies import StudyAdminForm

    study = make_study(n_items=1, n_systems=1)
    form = modelform_factory(Study, form=StudyAdminForm, fields=["rater_labels"])(
        data={"rater_labels": typed}, instance=study)
    assert form.is_valid(), form.errors
    form.save()
    assert Study.objects.get(pk=study.pk).rater_labels == stored


@pytest.mark.django_db
@pytest.mark.parametrize("typed", ['{"submit": 1e400}', '{"done": 3}', '["submit"]'])
def test_the_admin_form_refuses_labels_that_are_not_text(typed):
    from django.forms import modelform_factory

    from evalstudy.admin.studies import StudyAdminForm

    study = make_study(n_items=1, n_systems=1)
    form = modelform_factory(Study, form=StudyAdminForm, fields=["rater_labels"])(
        data={"rater_labels": typed}, instance=study)
    assert not form.is_valid() and "rater_labels" in form.errors


@pytest.mark.django_db
def test_the_database_refuses_a_language_without_translations():
    from django.db import IntegrityError, transaction

    study = make_study(n_items=1, n_systems=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Study.objects.filter(pk=study.pk).update(language="xx")


@pytest.mark.django_db
def test_the_api_sets_labels_and_refuses_bad_ones_with_the_field_named():
    owner = UserFactory(is_staff=True)
    study = make_study(n_items=2, n_systems=2, owner=owner)
    api = token_client(owner)
    url = reverse("api-study", args=[study.slug])
    refused = api.patch(url, data={"rater_labels": {"output": ""}},
                        content_type="application/json")
    assert refused.status_code == 400
    body = refused.content.decode()
    assert "rater_labels" in body and "output: blank" in body
    study.refresh_from_db()
    assert study.rater_labels == {}
    for bad in ({"submit": 12}, {"submit": None}):
        assert api.patch(url, data={"rater_labels": bad},
                         content_type="application/json").status_code == 400
    changed = api.patch(url, data={"rater_labels": {"output": "  Summary  "}},
                        content_type="application/json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["rater_labels"] == {"output": "Summary"}
    assert Study.objects.get(pk=study.pk).rater_labels == {"output": "Summary"}


def _heading_texts(html: str) -> list[str]:
    return re.findall(r"<h2>([^<]*)</h2>", html)


@pytest.mark.django_db
@pytest.mark.parametrize("fast", [True, False])
def test_raters_see_the_studys_words_on_every_item_and_at_the_end(fast, monkeypatch):
    if not fast:  # the general path serves every page
        monkeypatch.setattr("annotation.loop.fast_path_available", lambda: False)
    study = make_study(n_items=2, n_systems=2, rater_labels=NOTES)
    study_open(study=study)
    rater = invite(study)
    client = Client()
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    seen = []
    for _ in range(10):
        if "<form" not in page:
            break
        seen.append(page)
        assert "Simplified note" in _heading_texts(page)
        assert "What was said" not in page and "<h2>Output</h2>" not in page
        assert "Save and continue" in page
        action = re.search(r'<form[^>]*action="(/s/[^"]+/slots/\d+/)"', page).group(1)
        response = client.post(action, ANSWERS, **HX)
        if response.get("HX-Redirect"):
            page = client.get(reverse("annotation:rate", args=[study.slug]),
                              follow=True).content.decode()
        else:
            page = response.content.decode()
    assert len(seen) == 3  # the practice item, then both items (the second swapped in)
    assert "All notes are rated." in page and "You have finished every item" not in page


@pytest.mark.django_db
def test_a_study_without_labels_shows_the_defaults():
    study = make_study(n_items=1, n_systems=1)
    study_open(study=study)
    client = Client()
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert {"Reference", "Output"} <= set(_heading_texts(page))
    assert "What was said" not in page


@pytest.mark.django_db
def test_the_consent_start_and_continue_buttons_say_what_the_study_says():
    labels = {"consent_agree": "Yes, I take part", "consent_decline": "No, thanks",
              "start": "Begin", "continue": "Next note"}
    study = make_study(n_items=1, n_systems=1, rater_labels=labels, consent_text="Agree?",
                       instructions="Read this.", language="fr")
    study_open(study=study)
    client = Client()
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    consent = client.get(reverse("annotation:consent", args=[study.slug])).content.decode()
    assert "Yes, I take part" in consent and "No, thanks" in consent
    assert "J’accepte" not in consent  # the study's words win over the translated default
    client.post(reverse("annotation:consent", args=[study.slug]), {"consent": "yes"})
    instructions = client.get(reverse("annotation:instructions", args=[study.slug]))
    assert "Begin" in instructions.content.decode()
    client.post(reverse("annotation:instructions", args=[study.slug]))
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    action = re.search(r'<form[^>]*action="(/s/[^"]+/slots/\d+/)"', page).group(1)
    feedback = client.get(client.post(action, ANSWERS, **HX)["HX-Redirect"])
    assert "Next note" in feedback.content.decode()
