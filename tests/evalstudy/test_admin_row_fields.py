"""The study form's rater labels and identity terms are rows of inputs, not a JSON box
(evalstudy/admin/row_fields.py): rows posted are stored as the JSON the spec and the API store,
a bad row is a field error naming it and nothing is saved, and the page works without
JavaScript (empty rows to fill are always there)."""

from __future__ import annotations

import pytest
from django.forms import modelform_factory
from django.urls import reverse

from evalstudy.admin.studies import StudyAdminForm
from evalstudy.models import Study
from kit.row_fields import BLANK_ROWS
from tests.evalstudy.test_audit import change_form
from tests.factories import make_study

pytestmark = pytest.mark.django_db


def _rows(name: str, rows: list[dict], *, extra_blank: int = 1) -> dict:
    """The post of a row table: each row's inputs and the row count (a ticked box is "on")."""
    data = {f"{name}-rows": str(len(rows) + extra_blank)}
    for index, row in enumerate(rows):
        for column, value in row.items():
            if value is True:
                data[f"{name}-{index}-{column}"] = "on"
            elif value is not False:
                data[f"{name}-{index}-{column}"] = value
    return data


def _form(study, field, data):
    return modelform_factory(Study, form=StudyAdminForm, fields=[field])(data=data,
                                                                         instance=study)


def test_rater_label_rows_are_stored_as_the_spec_stores_them():
    study = make_study(n_items=1, n_systems=1)
    form = _form(study, "rater_labels", _rows("rater_labels", [
        {"key": "output", "text": "  Transcript "}, {"key": "", "text": ""},
        {"key": "submit", "text": "Next"}]))
    assert form.is_valid(), form.errors
    form.save()
    assert Study.objects.get(pk=study.pk).rater_labels == {"output": "Transcript",
                                                            "submit": "Next"}


@pytest.mark.parametrize(("rows", "message"), [
    ([{"key": "", "text": "Transcript"}], "row 1: choose which label 'Transcript' replaces"),
    ([{"key": "output", "text": "  "}], "row 1: write the text raters see for 'output'"),
    ([{"key": "output", "text": "A"}, {"key": "output", "text": "B"}],
     "row 2: 'output' is given twice (first on row 1)"),
    ([{"key": "button", "text": "Go"}], "'button' is not a label raters see"),
])
def test_a_bad_rater_label_row_is_a_field_error_and_nothing_is_saved(rows, message):
    study = make_study(n_items=1, n_systems=1, rater_labels={"done": "Bye"})
    form = _form(study, "rater_labels", _rows("rater_labels", rows))
    assert not form.is_valid()
    assert message in " ".join(form.errors["rater_labels"])
    assert Study.objects.get(pk=study.pk).rater_labels == {"done": "Bye"}


def test_identity_term_rows_store_words_and_phrases():
    study = make_study(n_items=1, n_systems=1)
    form = _form(study, "identity_terms", _rows("identity_terms", [
        {"term": " Nimbus ", "phrase": False}, {"term": "", "phrase": False},
        {"term": "sent from my Nimbus", "phrase": True}]))
    assert form.is_valid(), form.errors
    form.save()
    assert Study.objects.get(pk=study.pk).identity_terms == [
        "Nimbus", {"term": "sent from my Nimbus", "phrase": True}]


@pytest.mark.parametrize(("rows", "message"), [
    ([{"term": "", "phrase": True}], "row 1: write the word or phrase"),
    ([{"term": "Nimbus", "phrase": False}, {"term": "nimbus", "phrase": False}],
     "term 2: 'nimbus' is the same as term 1"),
    ([{"term": "***", "phrase": True}], "no letter or digit"),
])
def test_a_bad_identity_term_row_is_a_field_error_and_nothing_is_saved(rows, message):
    study = make_study(n_items=1, n_systems=1, identity_terms=["Kept"])
    form = _form(study, "identity_terms", _rows("identity_terms", rows))
    assert not form.is_valid()
    assert message in " ".join(form.errors["identity_terms"])
    assert Study.objects.get(pk=study.pk).identity_terms == ["Kept"]


def test_the_study_page_shows_rows_and_empty_rows_without_a_json_box(boss_client):
    study = make_study(n_items=1, n_systems=1, rater_labels={"output": "Transcript"},
                       identity_terms=["Nimbus", {"term": "by Nimbus", "phrase": True}])
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    html = boss_client.get(url).content.decode()
    assert 'name="rater_labels"' not in html and 'name="identity_terms"' not in html
    assert f'name="rater_labels-rows" value="{1 + BLANK_ROWS}"' in html
    assert f'name="identity_terms-rows" value="{2 + BLANK_ROWS}"' in html
    assert 'name="identity_terms-1-phrase" id="id_identity_terms-1-phrase"' in html
    assert 'value="Transcript"' in html and "by Nimbus" in html


def test_filling_an_empty_row_of_the_page_saves_it_and_the_rest_unchanged(boss_client):
    """What a browser without JavaScript posts: the page as rendered, one empty row filled."""
    study = make_study(n_items=1, n_systems=1, rater_labels={"output": "Transcript"},
                       identity_terms=["Nimbus"])
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    assert data["rater_labels-0-key"] == "output" and data["rater_labels-1-key"] == ""
    data.update({"rater_labels-1-key": "submit", "rater_labels-1-text": "Next item",
                 "identity_terms-1-term": "made by Nimbus", "identity_terms-1-phrase": "on"})
    response = boss_client.post(url, data)
    assert response.status_code == 302, response.context["errors"]
    study.refresh_from_db()
    assert study.rater_labels == {"output": "Transcript", "submit": "Next item"}
    assert study.identity_terms == ["Nimbus", {"term": "made by Nimbus", "phrase": True}]


def test_a_refused_row_comes_back_as_typed_with_its_error(boss_client):
    study = make_study(n_items=1, n_systems=1)
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    data.update({"rater_labels-0-key": "", "rater_labels-0-text": "Orphan text"})
    response = boss_client.post(url, data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "row 1: choose which label" in html and 'value="Orphan text"' in html
    assert Study.objects.get(pk=study.pk).rater_labels == {}


def test_a_list_setting_is_typed_as_names_separated_by_commas():
    """A learned proxy's features are metric names: typed `wer, bleu`, not as a JSON list
    (a JSON list is still read); other settings keep their numbers."""
    from django import forms

    from evalstudy.admin.row_fields import settings_field

    class Settings(forms.Form):
        params = settings_field(label="Parameters", help_text="", lists=("features",))

    form = Settings(data=_rows("params", [{"name": "features", "value": "wer, bleu ,"},
                                          {"name": "epochs", "value": "3"}]))
    assert form.is_valid(), form.errors
    assert form.cleaned_data["params"] == {"features": ["wer", "bleu"], "epochs": 3}
    legacy = Settings(data=_rows("params", [{"name": "features", "value": '["wer"]'}]))
    assert legacy.is_valid() and legacy.cleaned_data["params"] == {"features": ["wer"]}
    shown = Settings(initial={"params": {"features": ["wer", "bleu"]}}).as_p()
    assert 'value="wer, bleu"' in shown
