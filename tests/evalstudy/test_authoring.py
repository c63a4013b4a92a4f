"""Authoring a study in the admin without JSON: structured fields (round trip, errors by row),
criteria refused at save (admin and API), open problems as a list, the repeated attention
check warning, and the items grid (paste, errors by row and column, atomic, audited, scoped)."""

from __future__ import annotations

import pytest
from django import forms
from django.test import Client
from django.urls import reverse

from evalstudy import criteria as rules
from evalstudy.admin.widgets import (
    KEY_VALUE,
    LABELS,
    LINES,
    StructuredField,
    text_value,
    value_text,
)
from evalstudy.models import AttentionCheck, AuditEvent, Criterion, Item, Output, Study
from evalstudy.services import study_warnings
from tests.factories import UserFactory, make_study, token_client

pytestmark = pytest.mark.django_db


# --- structured fields ------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "value"), [
    (KEY_VALUE, {"speaker": "S01", "severity": 2, "age": 7.5, "ok": True, "none": None,
                 "code": "2", "blank": "", "padded": " x ", "list": [1, "a"], "eq": "a = b",
                 "quote": '"q"', "lines": "a\nb"}),
    (KEY_VALUE, {}),
    (LINES, ["fluent", "halting", "3", 3, "null", "a = b"]),
    (LABELS, {"1": "poor", "3": "fair", "5": "excellent"}),
    (LABELS, ["Meaning fully preserved", "Minor = small errors", "Meaning lost"]),
    (LABELS, {"0": "nonsense", "100": "perfect"}),
])
def test_structured_fields_round_trip_exactly(kind, value):
    field = StructuredField(kind)
    assert field.clean(field.prepare_value(value)) == value


def test_a_value_reads_as_json_when_it_is_json_else_as_text():
    assert text_value("2") == 2 and text_value('"2"') == "2" and text_value("yes") == "yes"
    assert value_text("2") == '"2"' and value_text(2) == "2" and value_text("yes") == "yes"


@pytest.mark.parametrize(("kind", "text", "expected"), [
    (KEY_VALUE, "speaker = S01\nno equals sign\n = x\nspeaker = S02",
     ["row 2: write key = value (no '=' in 'no equals sign')",
      "row 3: the key before '=' is empty",
      "row 4: key 'speaker' appears twice (first on row 1)"]),
    (LABELS, "1 = poor\nfair\n5 = excellent", ["row 2: write point = label"]),
])
def test_bad_rows_are_named(kind, text, expected):
    with pytest.raises(forms.ValidationError) as caught:
        StructuredField(kind).clean(text)
    messages = caught.value.messages
    assert len(messages) == len(expected)
    for message, start in zip(messages, expected, strict=True):
        assert message.startswith(start)


# --- the admin ------------------------------------------------------------------------------
@pytest.fixture
def owner(db):
    return UserFactory(username="author", is_staff=True, is_superuser=True)


@pytest.fixture
def admin(owner):
    client = Client()
    client.force_login(owner)
    return client


def change_form_data(response) -> dict:
    """The study change page's form as the browser would post it unchanged."""
    data = {}
    forms_ = [response.context["adminform"].form]
    for inline in response.context["inline_admin_formsets"]:
        forms_ += [inline.formset.management_form, *inline.formset.forms]
    for form in forms_:
        for bound in form:
            value = bound.value()
            if isinstance(bound.field.widget, forms.CheckboxInput):
                if value:
                    data[bound.html_name] = "on"
            elif isinstance(value, list | tuple):
                data[bound.html_name] = [str(v) for v in value]
            elif value is not None:
                data[bound.html_name] = str(value)
    return data


def test_change_page_shows_structured_fields_and_saves_them_unchanged(admin):
    study = make_study(n_items=2, n_systems=2, attention_check_every=3)
    Criterion.objects.filter(study=study, key="usable").update(kind="likert", scale_points=5,
                                                               labels={"1": "no", "5": "yes"})
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    page = admin.get(url)
    html = page.content.decode()
    assert "1 = no\n5 = yes" in html and "severity = &quot;2&quot;" in html
    assert 'data-rows="key_value"' in html
    before = {c.key: (c.labels, c.options) for c in study.criteria.all()}
    response = admin.post(url, change_form_data(page))
    assert response.status_code == 302, response.context["errors"]
    assert {c.key: (c.labels, c.options) for c in study.criteria.all()} == before
    assert AttentionCheck.objects.get(study=study).expected == {"severity": "2"}


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"kind": "likert", "scale_points": ""}, "scale_points", "Likert needs scale_points"),
    ({"kind": "categorical", "options": "only one"}, "options",
     "Categorical needs at least 2 options"),
    ({"kind": "slider", "scale_min": "10", "scale_max": "0"}, "scale_min",
     "A slider's scale_min must be below its scale_max"),
])
def test_admin_refuses_a_bad_criterion_at_save(admin, changes, field, message):
    study = make_study(n_items=2, n_systems=2)
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form_data(admin.get(url))
    index = next(i for i in range(3) if data[f"criteria-{i}-key"] == "usable")
    data.update({f"criteria-{index}-{name}": value for name, value in changes.items()})
    response = admin.post(url, data)
    assert response.status_code == 200
    form = response.context["inline_admin_formsets"][1].formset.forms[index]
    assert any(text.startswith(message) for text in form.errors[field])
    assert Criterion.objects.get(study=study, key="usable").kind == "binary"


def test_api_refuses_a_likert_criterion_without_points(owner):
    make_study(n_items=2, n_systems=2, owner=owner, slug="api-study")
    api = token_client(owner)
    response = api.post(reverse("api-study-criteria", args=["api-study"]),
                        {"key": "fluency", "prompt": "How fluent?", "kind": "likert"},
                        content_type="application/json")
    assert response.status_code == 400
    assert "likert needs scale_points" in str(response.json()["field_errors"])


def test_save_and_open_use_one_rule():
    """What the admin and API refuse is what opening refuses (criteria.criterion_problems)."""
    values = {"kind": "likert", "scale_points": None, "labels": [], "options": []}
    assert rules.criterion_problems(values) == rules.check_rule(
        "likert", scale_points=None, labels=[], options=[])


# --- opening --------------------------------------------------------------------------------
def test_open_problems_are_listed_one_a_line(admin, owner):
    study = make_study(n_items=2, n_systems=2, owner=owner)
    Output.objects.filter(item__external_id="item-000", system__name="sys-1").delete()
    Criterion.objects.filter(study=study, key="usable").update(kind="categorical", options=[])
    response = admin.post(reverse("admin:evalstudy_study_changelist"),
                          {"action": "open_studies", "_selected_action": [study.pk]},
                          follow=True)
    html = response.content.decode()
    assert '<ul class="problem-list"><li>' in html
    assert html.count("</li><li>") >= 1
    api = token_client(owner)
    body = api.post(reverse("api-study-open", args=[study.slug])).json()
    assert len(body["errors"]) >= 2
    assert {e["field"] for e in body["errors"]} == {"study"}
    assert any("categorical needs at least 2 options" in e["message"] for e in body["errors"])


def test_one_attention_check_for_several_slots_is_a_warning(admin):
    study = make_study(n_items=6, n_systems=2, attention_check_every=2)
    warnings = study_warnings(study=study)
    assert len(warnings) == 1 and "same check more than once" in warnings[0]
    response = admin.post(reverse("admin:evalstudy_study_changelist"),
                          {"action": "open_studies", "_selected_action": [study.pk]},
                          follow=True)
    html = response.content.decode()
    assert "opened" in html and "same check more than once" in html
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN  # a warning, not a refusal
    for key in ("attn-2", "attn-3"):
        AttentionCheck.objects.create(study=study, key=key, text="x",
                                      expected={"severity": "2"})
    assert study_warnings(study=study) == []


def test_the_api_opens_a_study_and_says_its_warnings(owner):
    study = make_study(n_items=6, n_systems=2, attention_check_every=2, owner=owner)
    response = token_client(owner).post(reverse("api-study-open", args=[study.slug]))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "open"
    assert len(body["warnings"]) == 1 and "same check more than once" in body["warnings"][0]


# --- the items grid -------------------------------------------------------------------------
def grid_url(study):
    return reverse("admin:evalstudy_study_items_grid", args=[study.pk])


def snapshot(study):
    return (sorted(Item.objects.filter(study=study).values_list("external_id", "reference",
                                                                 "metadata")),
            sorted(Output.objects.filter(item__study=study).values_list("item__external_id",
                                                                         "system__name", "text")))


def test_grid_shows_items_with_an_output_column_per_system(admin):
    study = make_study(n_items=2, n_systems=2)
    Item.objects.filter(study=study).update(metadata={"speaker": "S01", "n": 2})
    html = admin.get(grid_url(study)).content.decode()
    for text in ("Output: sys-0", "Output: sys-1", "meta.speaker", "item-001", "S01"):
        assert text in html


def test_pasted_table_with_an_error_names_row_and_column_and_changes_nothing(admin):
    study = make_study(n_items=2, n_systems=2)
    before = snapshot(study)
    table = ("item\treference\tsys-0\tsys-1\tspeaker\n"
             "item-000\tnew ref\tA\tB\tS01\n"
             "new-item\tref\tA\t\tS02\n")
    response = admin.post(grid_url(study), {"paste": table})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing was saved (1 problem)" in html
    assert "row 2, outputs: no output for system &#x27;sys-1&#x27;" in html
    assert snapshot(study) == before


def test_pasted_table_is_stored_and_audited(admin, owner):
    study = make_study(n_items=2, n_systems=2)
    table = ("item\treference\tsys-0\tsys-1\tspeaker\tseverity\n"
             "item-000\tnew ref\tA0\tB0\tS01\t2\n"
             "new-item\tref\tA1\tB1\tS02\tmild\n")
    response = admin.post(grid_url(study), {"paste": table})
    assert response.status_code == 302
    item = Item.objects.get(study=study, external_id="new-item")
    assert item.metadata == {"speaker": "S02", "severity": "mild"}
    assert Item.objects.get(study=study, external_id="item-000").metadata == {
        "speaker": "S01", "severity": 2}
    assert dict(item.outputs.values_list("system__name", "text")) == {"sys-0": "A1",
                                                                      "sys-1": "B1"}
    event = AuditEvent.objects.filter(study=study, action="import").latest("at")
    assert event.actor == owner and event.source == "admin"
    assert event.changes["file"] == "pasted table"


def test_grid_cells_edit_and_remove_rows(admin):
    study = make_study(n_items=2, n_systems=2)
    page = admin.get(grid_url(study))
    columns = [c for c, _ in page.context["columns"]]
    data = {"col": columns, "rows": str(page.context["n_rows"])}
    for row in page.context["rows"]:
        for j, _, value in row["cells"]:
            data[f"c-{row['number']}-{j}"] = value
        if row["original"]:
            data[f"orig-{row['number']}"] = row["original"]
    data[f"c-1-{columns.index('output:sys-1')}"] = "edited text"
    data["remove-2"] = "on"
    new = 3
    for column, value in (("item", "added"), ("output:sys-0", "x"), ("output:sys-1", "y")):
        data[f"c-{new}-{columns.index(column)}"] = value
    response = admin.post(grid_url(study), data)
    assert response.status_code == 302
    assert sorted(study.items.values_list("external_id", flat=True)) == ["added", "item-000"]
    assert Output.objects.get(item__external_id="item-000", system__name="sys-1").text == (
        "edited text")
    assert AuditEvent.objects.filter(study=study, action="delete").exists()


def test_grid_refuses_an_open_study_and_says_why(admin):
    study = make_study(n_items=2, n_systems=2, status=Study.Status.OPEN)
    before = snapshot(study)
    html = admin.get(grid_url(study)).content.decode()
    assert "its items and outputs are fixed" in html
    admin.post(grid_url(study), {"paste": "item\tsys-0\tsys-1\nz\ta\tb\n"})
    assert snapshot(study) == before


def test_grid_of_another_owners_study_is_404(owner):
    study = make_study(n_items=2, n_systems=2, owner=owner)
    stranger = UserFactory(username="stranger", is_staff=True)
    from django.contrib.auth.models import Permission

    stranger.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="evalstudy"))
    client = Client()
    client.force_login(stranger)
    assert client.get(grid_url(study)).status_code == 404
    assert client.post(grid_url(study), {"paste": "item\tsys-0\tsys-1\nz\ta\tb\n"}
                       ).status_code == 404
    assert not Item.objects.filter(external_id="z").exists()


def test_change_page_links_to_the_grid(admin):
    study = make_study(n_items=1, n_systems=1)
    html = admin.get(reverse("admin:evalstudy_study_change", args=[study.pk])).content.decode()
    assert grid_url(study) in html and "Edit items in a grid" in html
