"""Authoring a study in the admin without JSON: structured fields (round trip, errors by row),
criteria refused at save (admin and API), open problems as a list, the repeated attention
check warning, and the items grid (paste, errors by row and column, atomic, audited, scoped)."""

from __future__ import annotations

import json

import pytest
from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile
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
    # Keys that a plain `key = value` row cannot hold: they are written JSON-quoted.
    (KEY_VALUE, {"a=b": 1, " padded ": "x", '"quoted': "y", "": "empty key", "x = y": "z = w",
                 "new\nline": 2}),
    # Characters str.splitlines() breaks at, and a byte-order mark JavaScript's trim() drops.
    (KEY_VALUE, {"a\u2028b": 1, "k": "x\x85y", "\ufeffa": 2, "b\ufeff": "\ufeffv"}),
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


def test_a_quoted_key_is_read_exactly_and_a_plain_one_trimmed():
    field = StructuredField(KEY_VALUE)
    assert field.clean('"a=b" = 1\n  speaker  = S01\n" sp " = "x"') == {
        "a=b": 1, "speaker": "S01", " sp ": "x"}
    assert field.prepare_value({"a=b": "c"}) == '"a=b" = c'


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
def superuser_author(db):
    return UserFactory(username="author", is_staff=True, is_superuser=True)


@pytest.fixture
def admin(superuser_author):
    client = Client()
    client.force_login(superuser_author)
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


def test_api_refuses_a_likert_criterion_without_points(superuser_author):
    make_study(n_items=2, n_systems=2, owner=superuser_author, slug="api-study")
    api = token_client(superuser_author)
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
def test_open_problems_are_listed_one_a_line(admin, superuser_author):
    study = make_study(n_items=2, n_systems=2, owner=superuser_author)
    Output.objects.filter(item__external_id="item-000", system__name="sys-1").delete()
    Criterion.objects.filter(study=study, key="usable").update(kind="categorical", options=[])
    response = admin.post(reverse("admin:evalstudy_study_changelist"),
                          {"action": "open_studies", "_selected_action": [study.pk]},
                          follow=True)
    errors = [m for m in response.context["messages"] if m.level_tag == "error"]
    assert not [m for m in response.context["messages"] if m.level_tag == "success"]
    # A heading, then each problem in an error message of its own (a list inside one message
    # showed the admin's green tick inside the red box), linked to where it is fixed.
    assert str(errors[0]).endswith(f"not done ({len(errors) - 1} problems).")
    assert len(errors) >= 3, [str(m) for m in errors]
    assert any("lacks an output" in str(m) and "items-grid" in str(m) for m in errors[1:])
    assert any("categorical needs at least 2 options" in str(m) and "#criteria-group" in str(m)
               for m in errors[1:])
    assert "problem-list" not in response.content.decode()
    api = token_client(superuser_author)
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


def test_the_api_opens_a_study_and_says_its_warnings(superuser_author):
    study = make_study(n_items=6, n_systems=2, attention_check_every=2, owner=superuser_author)
    response = token_client(superuser_author).post(reverse("api-study-open", args=[study.slug]))
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


def test_pasted_table_is_stored_and_audited(admin, superuser_author):
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
    assert event.actor == superuser_author and event.source == "admin"
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


def test_grid_of_another_owners_study_is_404(superuser_author):
    study = make_study(n_items=2, n_systems=2, owner=superuser_author)
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


def page_post(page) -> dict:
    """A page of the grid as a browser without JavaScript posts it unchanged: a field per
    cell."""
    data = {"col": [c for c, _ in page.context["columns"]], "rows": str(page.context["n_rows"]),
            "first": str(page.context["first"])}
    for row in page.context["rows"]:
        for j, _, value in row["cells"]:
            data[f"c-{row['number']}-{j}"] = value
        if row["original"]:
            data[f"orig-{row['number']}"] = row["original"]
    return data


def n_fields(data: dict) -> int:
    return sum(len(v) if isinstance(v, list) else 1 for v in data.values()) + 2  # csrf, _save


def test_a_long_grid_is_paged_within_the_field_limit_and_saves_a_page(admin, settings):
    # 200 items: one page of every cell was ~1,000 fields, over Django's 1,000 default (the
    # posted form failed with a 400 past about 165 items at 400).
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 400
    study = make_study(n_items=200, n_systems=2)
    page = admin.get(grid_url(study))
    assert page.context["n_pages"] > 1
    html = page.content.decode()
    assert "Next page" in html and "item-199" not in html
    second = admin.get(grid_url(study) + "?page=2")
    data = page_post(second)
    assert n_fields(data) <= settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    first_row = second.context["first"]
    assert first_row > 1 and second.context["rows"][0]["number"] == first_row
    edited = second.context["rows"][0]["cells"][0][2]
    columns = data["col"]
    data[f"c-{first_row}-{columns.index('output:sys-0')}"] = "edited on page 2"
    before = snapshot(study)
    response = admin.post(grid_url(study) + "?page=2", data)
    assert response.status_code == 302 and response.url.endswith("?page=2")
    after = snapshot(study)
    assert Output.objects.get(item__study=study, item__external_id=edited,
                              system__name="sys-0").text == "edited on page 2"
    # Only that cell changed: the other pages' items are untouched.
    assert len(set(after[1]) - set(before[1])) == 1 and after[0] == before[0]


def test_errors_on_a_later_page_name_the_studys_row_number(admin, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 400
    study = make_study(n_items=120, n_systems=2)
    second = admin.get(grid_url(study) + "?page=2")
    data = page_post(second)
    row = second.context["first"] + 1
    data[f"c-{row}-{data['col'].index('output:sys-1')}"] = ""
    response = admin.post(grid_url(study) + "?page=2", data)
    assert response.status_code == 200
    assert f"row {row}, outputs: no output for system" in response.content.decode()


def test_too_many_rows_are_refused_not_cut(admin):
    study = make_study(n_items=2, n_systems=2)
    before = snapshot(study)
    response = admin.post(grid_url(study), {"col": ["item", "output:sys-0", "output:sys-1"],
                                            "rows": "5001", "c-1-0": "new", "c-1-1": "a",
                                            "c-1-2": "b"})
    assert response.status_code == 200
    assert "5001 rows were posted; at most 5000" in response.content.decode()
    assert snapshot(study) == before


def test_cells_posted_as_one_json_field(admin):
    # What static/js/admin_widgets.js posts: the form's cells in one field.
    study = make_study(n_items=2, n_systems=2)
    page = admin.get(grid_url(study))
    data = page_post(page)
    cells = {key: value for key, value in data.items() if key.startswith(("c-", "orig-"))}
    cells[f"c-1-{data['col'].index('output:sys-1')}"] = "via json"
    response = admin.post(grid_url(study), {"col": data["col"], "rows": data["rows"],
                                            "first": "1", "cells": json.dumps(cells)})
    assert response.status_code == 302
    assert Output.objects.get(item__study=study, item__external_id="item-000",
                              system__name="sys-1").text == "via json"
    bad = admin.post(grid_url(study), {"col": data["col"], "rows": "1", "cells": "[1, 2]"})
    assert "cells: not a JSON object" in bad.content.decode()


@pytest.mark.parametrize(("name", "size", "message"), [
    ("items.csv", 2000, "is over the upload limit"),
    ("items.txt", 10, "expected a file ending in .csv, .jsonl"),
])
def test_grid_upload_is_refused_by_size_and_name_before_it_is_read(admin, settings, name, size,
                                                                   message):
    settings.EVALSTUDY_UPLOAD_MAX_BYTES = 1000
    study = make_study(n_items=2, n_systems=2)
    before = snapshot(study)
    body = ("item,system,output\n" + "x,sys-0,y\n" * (size // 10)).encode()[:size]
    upload = SimpleUploadedFile(name, body, content_type="text/csv")
    response = admin.post(grid_url(study), {"file": upload})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert snapshot(study) == before


def test_a_new_row_with_the_id_of_an_item_on_another_page_is_refused(admin, settings):
    """Before, typing page 1's first item id into a blank row of page 2 replaced that item's
    reference, context, metadata and outputs without a word."""
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 400
    study = make_study(n_items=120, n_systems=2)
    before = snapshot(study)
    second = admin.get(grid_url(study) + "?page=2")
    data = page_post(second)
    blank = next(row["number"] for row in second.context["rows"] if not row["original"])
    for column, value in (("item", "item-000"), ("reference", "OVERWRITTEN"),
                          ("output:sys-0", "x"), ("output:sys-1", "y")):
        data[f"c-{blank}-{data['col'].index(column)}"] = value
    response = admin.post(grid_url(study) + "?page=2", data)
    assert response.status_code == 200
    assert (f"row {blank}, item: item &#x27;item-000&#x27; already exists on another page"
            in response.content.decode())
    assert snapshot(study) == before


def test_a_forged_first_row_is_refused(admin):
    study = make_study(n_items=2, n_systems=2)
    before = snapshot(study)
    response = admin.post(grid_url(study), {"col": ["item", "output:sys-0", "output:sys-1"],
                                            "first": "2000000000", "rows": "1",
                                            "c-2000000000-0": "z", "c-2000000000-1": "a",
                                            "c-2000000000-2": "b"})
    assert response.status_code == 200
    assert "the first row is 2000000000, but the study has 2 items" in (
        response.content.decode())
    assert snapshot(study) == before


def test_every_page_fits_the_field_limit_and_a_failed_post_does_not_grow(admin, settings):
    """Pages were sized from the first 100 items' columns (a later page with more metadata
    keys posted 1,793 fields, a 400), and each failed save added 3 blank rows."""
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 400
    study = make_study(n_items=200, n_systems=2)
    for item in Item.objects.filter(study=study).order_by("id")[100:]:
        item.metadata = {f"key{k}": k for k in range(8)}
        item.save(update_fields=["metadata"])
    for page_number in range(1, admin.get(grid_url(study)).context["n_pages"] + 1):
        page = admin.get(f"{grid_url(study)}?page={page_number}")
        assert n_fields(page_post(page)) <= 400, page_number
    page = admin.get(f"{grid_url(study)}?page=2")
    data = page_post(page)
    data[f"c-{page.context['first']}-{data['col'].index('output:sys-1')}"] = ""  # an error
    for _ in range(3):
        again = admin.post(f"{grid_url(study)}?page=2", data)
        assert again.status_code == 200 and "Nothing was saved" in again.content.decode()
        data = page_post(again)
        assert n_fields(data) <= 400
    assert again.context["n_rows"] == page.context["n_rows"]
