"""Specs and uploads that cannot hurt: bounded size, nesting, node and row counts, settings and
design sizes, and no character the database or the parser chokes on.

Each bad input must be refused with the usual `file:line: reason` (a 400 from the API, a
message in the admin, a CommandError from the commands) and leave nothing stored; none may
reach a traceback (500), Python's recursion limit or PostgreSQL's refusal of NUL characters.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.urls import reverse

from evalstudy.models import Assignment, AssignmentSlot, Criterion, Item, Output, Study
from evalstudy.services import study_open, study_validate
from evalstudy.spec import load as spec_load
from evalstudy.spec import study as spec_study
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_items_file
from evalstudy.spec.limits import SpecLimits
from evalstudy.spec.study import parse_study_spec
from tests.evalstudy.test_audit import change_form
from tests.evalstudy.test_spec import BASE, edit, line_of
from tests.factories import UserFactory, make_study, token_client

DEEP = 50_000


@pytest.fixture(params=["libyaml", "python"])
def loader(request, monkeypatch):
    """Every YAML test runs with libyaml's parser (when installed) and with PyYAML's own."""
    if request.param == "libyaml" and not __import__("yaml").__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml")
    monkeypatch.setattr(spec_load, "USE_LIBYAML", request.param == "libyaml")
    return request.param


def errors(text: str, source: str = "spec.yaml", **limits) -> list[str]:
    kwargs = {}
    if limits:
        kwargs["limits"] = SpecLimits(**limits)
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(text, source, **kwargs)
    return [str(error) for error in caught.value.errors]


def with_metadata(value: str) -> str:
    """BASE with item i1's metadata written as `value` (on one line, after its reference)."""
    return edit(BASE, "    reference: r1\n", f"    reference: r1\n    metadata: {value}\n")


# --- characters -------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "code"), [
    ("\x07", "U+0007"), ("\x1b", "U+001B"), ("\x7f", "U+007F"), ("\ufffe", "U+FFFE"),
])
@pytest.mark.parametrize("quoted", [False, True])
def test_non_printable_characters_in_the_file_are_located(loader, raw, code, quoted):
    value = f'"bell{raw}"' if quoted else f"bell{raw}"
    text = edit(BASE, "    reference: r2\n", f"    reference: {value}\n")
    (error,) = errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'reference: ' + value)}: ")
    assert code in error and "column" in error


@pytest.mark.parametrize(("escape", "code"), [
    ("\\0", "U+0000"), ("\\x01", "U+0001"), ("\\u0000", "U+0000"), ("\\e", "U+001B"),
    ("\\U0000001f", "U+001F"),
])
def test_control_characters_from_yaml_escapes_are_refused(loader, escape, code):
    text = edit(BASE, "    reference: r2\n", f'    reference: "r{escape}2"\n')
    (error,) = errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'reference: ' + chr(34))}: ")
    assert code in error


def test_tab_newline_and_carriage_return_escapes_are_text(loader):
    text = edit(BASE, "    reference: r2\n", '    reference: "a\\tb\\nc\\rd"\n')
    assert parse_study_spec(text, "spec.yaml").items[1].reference == "a\tb\nc\rd"


@pytest.mark.parametrize("where", ["value", "key", "metadata"])
def test_control_characters_from_json_escapes_are_refused(loader, where):
    document = {"study": {"slug": "j", "title": "J"}, "systems": [{"name": "a"}],
                "criteria": [{"key": "ok", "kind": "binary", "prompt": "OK?"}],
                "items": [{"id": "i1", "outputs": {"a": "fine"}}]}
    if where == "value":
        document["items"][0]["outputs"]["a"] = "nul\u0000here"
    elif where == "key":
        document["items"][0]["metadata"] = {"bad\u0000key": 1}
    else:
        document["items"][0]["metadata"] = {"speaker": ["S1", "x\u0000"]}
    text = json.dumps(document, indent=2)
    assert "\\u0000" in text
    problems = errors(text, "spec.json")
    assert problems and all("U+0000" in p for p in problems)
    assert problems[0].startswith(f"spec.json:{line_of(text, 'u0000')}: ")


# --- nesting, nodes, aliases ------------------------------------------------------------------
@pytest.mark.parametrize("brackets", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused_with_its_line_not_a_recursion_error(loader, brackets):
    opening, closing = brackets
    text = with_metadata("{deep: " + opening * DEEP + "x" + closing * DEEP + "}")
    (error,) = errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'deep:')}: ")
    assert "nested deeper than" in error


def test_deep_json_nesting_is_refused_on_the_line_it_goes_too_deep(loader):
    depth = SpecLimits().max_depth
    text = '{"items": [\n' + "[\n" * DEEP + "]\n" * DEEP + "]}\n"
    (error,) = errors(text, "spec.json")
    # Line 1 opens levels 1 and 2; line n opens level n + 1.
    assert error.startswith(f"spec.json:{depth}: ") and f"deeper than {depth}" in error


def test_nesting_up_to_the_limit_is_accepted(loader):
    depth = SpecLimits().max_depth
    # study mapping (1) > items (2) > item (3) > metadata (4) > lists.
    fits = depth - 4
    text = with_metadata("{deep: " + "[" * fits + "x" + "]" * fits + "}")
    assert parse_study_spec(text, "spec.yaml").items[0].metadata["deep"]
    text = with_metadata("{deep: " + "[" * (fits + 1) + "x" + "]" * (fits + 1) + "}")
    assert "nested deeper than" in errors(text)[0]


def test_more_nodes_than_the_limit_are_refused_on_their_line(loader):
    text = with_metadata("{many: [" + ", ".join(["1"] * 500) + "]}")
    (error,) = errors(text, max_nodes=400)
    assert error.startswith(f"spec.yaml:{line_of(text, 'many:')}: ")
    assert "400" in error and "nodes" in error
    assert parse_study_spec(text, "spec.yaml").items[0].metadata["many"] == [1] * 500


def test_an_alias_bomb_counts_every_node_it_repeats(loader):
    """'Billion laughs': nine levels of ten aliases each would expand to 10**9 strings."""
    lines = ['    metadata:', '      l0: &l0 ["lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"      l{level}: &l{level} [{refs}]")
    text = edit(BASE, "    reference: r1\n", "    reference: r1\n" + "\n".join(lines) + "\n")
    (error,) = errors(text)
    assert "nodes" in error and "alias" in error


def test_an_alias_inside_the_node_it_names_is_refused(loader):
    text = with_metadata("&loop {again: *loop}")
    (error,) = errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, 'metadata:')}: ") and "alias" in error


def test_an_alias_chain_cannot_nest_deeper_than_the_limit(loader):
    lines = ["    metadata:", "      m0: &m0 [x]"]
    for level in range(1, 40):
        lines.append(f"      m{level}: &m{level} [*m{level - 1}]")
    text = edit(BASE, "    reference: r1\n", "    reference: r1\n" + "\n".join(lines) + "\n")
    (error,) = errors(text)
    assert "nested deeper than" in error


def test_ordinary_aliases_still_work(loader):
    text = with_metadata("&speaker {speaker: S1, age: 70}")
    text = edit(text, "    reference: r2\n", "    reference: r2\n    metadata: *speaker\n")
    spec = parse_study_spec(text, "spec.yaml")
    assert spec.items[0].metadata == spec.items[1].metadata == {"speaker": "S1", "age": 70}


# --- values a JSON field or an integer column cannot hold -------------------------------------
@pytest.mark.parametrize(("value", "reason"), [
    (".nan", "finite"), ("-.inf", "finite"), ("!!set {a, b}", "set"),
    ("!!binary aGVsbG8=", "bytes"), ("1" * 5000, "digits"), ("2024-02-30", "day"),
])
def test_metadata_the_database_cannot_store_is_refused_on_its_line(loader, value, reason):
    text = with_metadata(f"{{bad: {value}}}")
    problems = errors(text)
    assert problems[0].startswith(f"spec.yaml:{line_of(text, 'metadata:')}: "), problems
    assert reason in problems[0]


# --- size -------------------------------------------------------------------------------------
def test_a_spec_over_the_byte_limit_is_refused_unparsed(monkeypatch):
    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a spec that is over the limit")

    monkeypatch.setattr(spec_study, "load_document", no_parse)
    (error,) = errors(BASE + "# " + "\u00e9" * 300 + "\n", max_bytes=len(BASE) + 400)
    assert "EVALSTUDY_SPEC_MAX_BYTES" in error and f"{len(BASE) + 400:,}" in error


# --- counts and settings ----------------------------------------------------------------------
@pytest.mark.parametrize(("limit", "section"), [
    ("max_items", "items"), ("max_systems", "systems"), ("max_criteria", "criteria"),
])
def test_sections_longer_than_their_limit_are_refused(limit, section):
    (error,) = errors(BASE, **{limit: 1})
    assert error.startswith(f"spec.yaml:{line_of(BASE, section + ':')}: {section}: ")
    assert "at most 1" in error and f"EVALSTUDY_{limit.upper()}" in error


@pytest.mark.parametrize(("setting", "value", "reason"), [
    ("ratings_per_output", 1_000_000_000, "at most 100"),
    ("lease_minutes", 10**12, "at most 10080"),
    ("items_per_rater", 10**12, "at most 100000"),
    ("attention_check_every", 10**12, "at most 100000"),
    ("attention_fail_limit", 10**12, "at most 100000"),
])
def test_study_settings_have_upper_bounds(setting, value, reason):
    text = edit(BASE, "  title: Tiny study\n", f"  title: Tiny study\n  {setting}: {value}\n")
    (error,) = errors(text)
    assert error.startswith(f"spec.yaml:{line_of(text, setting)}: study.{setting}: ")
    assert reason in error


# --- item files -------------------------------------------------------------------------------
def test_jsonl_control_characters_are_refused_on_their_line():
    text = ('{"id": "i1", "outputs": {"a": "fine"}}\n'
            '{"id": "i2", "outputs": {"a": "nul\\u0000"}}\n'
            '{"id": "i3", "metadata": {"k": ["\\u0007"]}, "outputs": {"a": "x"}}\n')
    with pytest.raises(SpecInvalid) as caught:
        parse_items_file(text, "items.jsonl", "jsonl")
    problems = [str(e) for e in caught.value.errors]
    assert [p.split(":")[1] for p in problems] == ["2", "3"], problems
    assert "U+0000" in problems[0] and "U+0007" in problems[1]


@pytest.mark.parametrize(("line", "reason"), [
    ('{"id": "i1", "metadata": {"deep": ' + "[" * DEEP + "]" * DEEP + '}, "outputs": {}}',
     "nested deeper than"),
    ('{"id": "i1", "metadata": {"x": NaN}, "outputs": {}}', "NaN"),
    ('{"id": "i1", "metadata": {"x": ' + "9" * 5000 + '}, "outputs": {}}', "digits"),
])
def test_jsonl_lines_that_would_crash_are_refused(line, reason):
    text = '{"id": "i0", "outputs": {}}\n' + line + "\n"
    with pytest.raises(SpecInvalid) as caught:
        parse_items_file(text, "items.jsonl", "jsonl")
    (error,) = caught.value.errors
    assert error.line == 2 and reason in error.message, error


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_item_files_with_more_items_than_the_limit_are_refused(fmt):
    if fmt == "csv":
        text = "item,system,output\n" + "".join(f"i{n},a,x\n" for n in range(5))
    else:
        text = "".join(json.dumps({"id": f"i{n}", "outputs": {"a": "x"}}) + "\n"
                       for n in range(5))
    with pytest.raises(SpecInvalid) as caught:
        parse_items_file(text, f"items.{fmt}", fmt,
                         limits=SpecLimits(max_items=3))
    (error,) = caught.value.errors
    assert error.line == (5 if fmt == "csv" else 4)
    assert "EVALSTUDY_MAX_ITEMS" in error.message


# --- through the doors: admin, API, command ---------------------------------------------------
BAD_SPECS = {
    "control.yaml": (edit(BASE, "    reference: r2\n", '    reference: "r\\0"\n'),
                     "U+0000", line_of(BASE, "reference: r2")),
    "bell.yaml": (edit(BASE, "    reference: r2\n", "    reference: r\x07\n"),
                  "U+0007", line_of(BASE, "reference: r2")),
    "deep.yaml": (with_metadata("{deep: " + "[" * DEEP + "]" * DEEP + "}"),
                  "nested deeper than", line_of(BASE, "reference: r1") + 1),
    "nul.json": ('{"study": {"slug": "nul", "title": "N\\u0000"}}', "U+0000", 1),
}


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_admin_spec_import_locates_the_problem_and_stores_nothing(boss_client, name):
    text, reason, line = BAD_SPECS[name]
    response = boss_client.post(reverse("admin:evalstudy_study_import_spec"),
                          {"file": SimpleUploadedFile(name, text.encode())}, follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing was imported" in html and f"{name}:{line}: " in html and reason in html
    assert not Study.objects.exists()


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_api_spec_import_answers_400_with_the_line_and_stores_nothing(db, name):
    text, reason, line = BAD_SPECS[name]
    api = token_client(UserFactory(username="researcher", is_staff=True))
    upload = io.BytesIO(text.encode())
    upload.name = name
    response = api.post(reverse("api-study-import"), data={"file": upload})
    assert response.status_code == 400, response.content[:500]
    (error,) = response.json()["errors"]
    assert (error["source"], error["row"]) == (name, line) and reason in error["message"]
    assert not Study.objects.exists()


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_import_study_command_locates_the_problem_and_stores_nothing(db, tmp_path, name):
    text, reason, line = BAD_SPECS[name]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CommandError) as caught:
        call_command("import_study", str(path))
    assert f"{path}:{line}: " in str(caught.value) and reason in str(caught.value)
    assert not Study.objects.exists()


@override_settings(EVALSTUDY_SPEC_MAX_BYTES=200)
def test_specs_over_the_byte_limit_are_refused_before_parsing(boss_client, tmp_path, monkeypatch):
    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a spec that is over the limit")

    monkeypatch.setattr(spec_study, "load_document", no_parse)
    response = boss_client.post(reverse("admin:evalstudy_study_import_spec"),
                          {"file": SimpleUploadedFile("big.yaml", BASE.encode())}, follow=True)
    assert "EVALSTUDY_SPEC_MAX_BYTES" in response.content.decode()

    api = token_client(UserFactory(username="researcher", is_staff=True))
    for body in ({"data": BASE, "content_type": "application/yaml"},
                 {"data": {"file": SimpleUploadedFile("big.yaml", BASE.encode())}}):
        response = api.post(reverse("api-study-import"), **body)
        assert response.status_code == 400, response.content[:500]
        (error,) = response.json()["errors"]
        assert "EVALSTUDY_SPEC_MAX_BYTES" in error["message"] and "200" in error["message"]

    path = tmp_path / "big.yaml"
    path.write_text(BASE, encoding="utf-8")
    with pytest.raises(CommandError, match="EVALSTUDY_SPEC_MAX_BYTES"):
        call_command("import_study", str(path))
    assert not Study.objects.exists()


# --- API: settings, bulk counts, characters ---------------------------------------------------
def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(("field", "value"), [
    ("ratings_per_output", 1_000_000_000), ("lease_minutes", 2_000_000_000),
    ("items_per_rater", 2_000_000_000), ("attention_check_every", 2_000_000_000),
])
def test_api_patch_and_create_refuse_settings_over_their_bounds(api, draft, field, value):
    url = reverse("api-study", args=[draft.slug])
    response = api.patch(url, data=json.dumps({field: value}), content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()["field_errors"]
    draft.refresh_from_db()
    assert getattr(draft, field) != value
    response = post_json(api, reverse("api-studies"), {"slug": "new", "title": "N", field: value})
    assert response.status_code == 400 and field in response.json()["field_errors"]


@override_settings(EVALSTUDY_MAX_RATINGS_PER_OUTPUT=5)
def test_api_patch_bound_follows_the_setting(api, draft):
    url = reverse("api-study", args=[draft.slug])
    ok = api.patch(url, data=json.dumps({"ratings_per_output": 5}),
                   content_type="application/json")
    assert ok.status_code == 200
    refused = api.patch(url, data=json.dumps({"ratings_per_output": 6}),
                        content_type="application/json")
    assert refused.status_code == 400
    assert "EVALSTUDY_MAX_RATINGS_PER_OUTPUT" in json.dumps(refused.json())


@override_settings(EVALSTUDY_MAX_ITEMS=4)
def test_api_bulk_items_respect_the_item_limit(api, draft):
    url = reverse("api-study-items", args=[draft.slug])
    five = [{"id": f"n{k}", "outputs": {"sys-0": "a", "sys-1": "b"}} for k in range(5)]
    response = post_json(api, url, five)
    assert response.status_code == 400 and "EVALSTUDY_MAX_ITEMS" in json.dumps(response.json())
    # 3 in the study + 2 new = 5: over the limit for the study as a whole.
    response = post_json(api, url, five[:2])
    assert response.status_code == 400 and "EVALSTUDY_MAX_ITEMS" in json.dumps(response.json())
    assert Item.objects.filter(study=draft).count() == 3
    assert post_json(api, url, five[:1]).status_code == 201


@override_settings(EVALSTUDY_MAX_ITEMS=2)
def test_api_bulk_outputs_respect_the_row_limit(api, draft):
    url = reverse("api-study-outputs", args=[draft.slug])
    rows = [{"item": f"item-00{k}", "system": "sys-0", "text": "t"} for k in range(3)]
    response = post_json(api, url, rows)
    assert response.status_code == 400 and "EVALSTUDY_MAX_ITEMS" in json.dumps(response.json())
    csv_body = "item,system,output\n" + "".join(f"item-00{k},sys-0,t\n" for k in range(3))
    response = api.post(url, data=csv_body, content_type="text/csv")
    assert response.status_code == 400 and "EVALSTUDY_MAX_ITEMS" in json.dumps(response.json())


def test_api_bulk_bodies_with_nul_characters_answer_400(api, draft):
    before = sorted(Output.objects.filter(item__study=draft).values_list("id", "text"))
    items = reverse("api-study-items", args=[draft.slug])
    response = post_json(api, items, [{"id": "n1", "metadata": {"k": "a\u0000"},
                                       "outputs": {"sys-0": "a", "sys-1": "b"}}])
    assert response.status_code == 400, response.content[:300]
    assert "U+0000" in json.dumps(response.json())
    jsonl = '{"id": "n2", "outputs": {"sys-0": "a\\u0000", "sys-1": "b"}}\n'
    response = api.post(items, data=jsonl, content_type="application/x-ndjson")
    assert response.status_code == 400 and response.json()["errors"][0]["row"] == 1
    outputs = reverse("api-study-outputs", args=[draft.slug])
    response = post_json(api, outputs, [{"item": "item-000", "system": "sys-0",
                                         "text": "nul\u0000"}])
    assert response.status_code == 400, response.content[:300]
    assert sorted(Output.objects.filter(item__study=draft).values_list("id", "text")) == before
    assert not Item.objects.filter(study=draft, external_id__in=["n1", "n2"]).exists()


def test_api_criteria_refuse_control_characters_in_json_fields(api, draft):
    url = reverse("api-study-criteria", args=[draft.slug])
    body = {"key": "extra", "prompt": "P?", "kind": "categorical", "options": ["a", "b\u0000"]}
    response = post_json(api, url, body)
    assert response.status_code == 400, response.content[:300]
    assert "options" in response.json()["field_errors"]
    assert not draft.criteria.filter(key="extra").exists()


@override_settings(EVALSTUDY_MAX_CRITERIA=3)
def test_api_criteria_respect_the_limit(api, draft):
    url = reverse("api-study-criteria", args=[draft.slug])
    body = {"key": "extra", "prompt": "P?", "kind": "categorical", "options": ["a", "b"]}
    response = post_json(api, url, body)
    assert response.status_code == 400
    assert "EVALSTUDY_MAX_CRITERIA" in json.dumps(response.json())
    assert draft.criteria.count() == 3  # make_study's three


def test_api_items_body_nested_too_deep_answers_400(api, draft):
    url = reverse("api-study-items", args=[draft.slug])
    body = ('[{"id": "n1", "metadata": {"d": ' + "[" * DEEP + "]" * DEEP
            + '}, "outputs": {"sys-0": "a", "sys-1": "b"}}]')
    response = api.post(url, data=body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]


# --- the admin's study form -------------------------------------------------------------------
def test_admin_study_form_bounds_the_design_settings(boss_client):
    study = make_study()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    data.update(ratings_per_output="1000000000", lease_minutes="999999999")
    response = boss_client.post(url, data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "EVALSTUDY_MAX_RATINGS_PER_OUTPUT" in html and "at most 10080" in html
    study.refresh_from_db()
    assert study.ratings_per_output == 1


@override_settings(EVALSTUDY_MAX_CRITERIA=3)
def test_admin_criterion_inline_respects_the_criteria_limit(boss_client):
    study = make_study()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form(boss_client, url)
    data.update({"criteria-3-key": "extra", "criteria-3-kind": "binary", "criteria-3-order": "9",
                 "criteria-3-prompt": "More?", "criteria-3-required": "on",
                 "criteria-3-labels": "[]", "criteria-3-options": "[]",
                 "criteria-3-show_if_values": "[]", "criteria-3-study": str(study.pk),
                 "criteria-TOTAL_FORMS": "4"})
    response = boss_client.post(url, data)
    assert response.status_code == 200 and "EVALSTUDY_MAX_CRITERIA" in response.content.decode()
    assert study.criteria.count() == 3


# --- study_validate: counts and the size of the design ----------------------------------------
@pytest.mark.parametrize(("design", "n_systems", "ratings", "targets", "seats"), [
    ("latin_square", 3, 2, 6 * 3 * 2, 3 * 2),  # a list per system, a seat per list and rating
    ("crossed", 3, 1, 6 * 3, 1),
    ("pairwise", 3, 1, 6 * 3 * 2, 3 * 2),  # each item with each ordered pair of systems
])
def test_study_open_refuses_a_design_over_the_slot_limit_before_building(
        db, design, n_systems, ratings, targets, seats):
    study = make_study(n_items=6, n_systems=n_systems, design=design, ratings_per_output=ratings)
    # Every seat starts with the calibration items too.
    total = targets + seats * study.calibration_items.count()
    with override_settings(EVALSTUDY_MAX_DESIGN_SLOTS=total):
        assert not [p for p in study_validate(study=study) if "SLOTS" in p]
    with override_settings(EVALSTUDY_MAX_DESIGN_SLOTS=total - 1):
        problems = study_validate(study=study)
        assert any("EVALSTUDY_MAX_DESIGN_SLOTS" in p and f"{total:,}" in p
                   for p in problems), problems
        with pytest.raises(ValidationError, match="EVALSTUDY_MAX_DESIGN_SLOTS"):
            study_open(study=study)
    assert not Assignment.objects.filter(study=study).exists()
    study_open(study=study)
    assert Assignment.objects.filter(study=study).count() == seats
    assert AssignmentSlot.objects.filter(assignment__study=study).count() == total


@pytest.mark.parametrize("design", ["latin_square", "crossed", "pairwise"])
def test_the_slot_count_matches_the_built_design_with_parts_and_checks(db, design):
    from evalstudy.services import design_slot_count, study_build_assignments

    study = make_study(n_items=7, n_systems=3, design=design, ratings_per_output=2,
                       items_per_rater=3, attention_check_every=2)
    predicted = design_slot_count(
        design=design, n_items=7, n_systems=3, ratings_per_output=2, items_per_rater=3,
        n_calibration=study.calibration_items.count(), attention_every=2,
        n_attention=study.attention_checks.count())
    study_build_assignments(study=study)
    assert AssignmentSlot.objects.filter(assignment__study=study).count() == predicted


@pytest.mark.parametrize(("setting", "value", "word"), [
    ("EVALSTUDY_MAX_ITEMS", 5, "items"), ("EVALSTUDY_MAX_SYSTEMS", 2, "systems"),
    ("EVALSTUDY_MAX_CRITERIA", 2, "criteria"), ("EVALSTUDY_MAX_RATINGS_PER_OUTPUT", 1, "ratings"),
])
def test_study_validate_checks_counts_made_outside_the_spec(db, setting, value, word):
    study = make_study(n_items=6, n_systems=3, ratings_per_output=2)
    with override_settings(**{setting: value}):
        problems = study_validate(study=study)
    assert any(setting in p and word in p for p in problems), problems


def test_study_validate_checks_settings_written_past_the_forms(db):
    study = make_study()
    Study.objects.filter(pk=study.pk).update(lease_minutes=10**9)
    study.refresh_from_db()
    assert any("lease_minutes" in p for p in study_validate(study=study))


def test_criterion_rows_count_for_the_criteria_limit(db):
    study = make_study()
    Criterion.objects.create(study=study, key="more", prompt="?", kind="binary", order=5)
    with override_settings(EVALSTUDY_MAX_CRITERIA=3):
        assert any("EVALSTUDY_MAX_CRITERIA" in p for p in study_validate(study=study))


@pytest.mark.parametrize("endpoint", ["api-study-systems", "api-study-raters"])
def test_every_json_endpoint_refuses_nul_and_deep_nesting_with_400(api, draft, endpoint):
    """Before: a NUL in a system's or rater's metadata reached PostgreSQL (500), and a body
    nested past the recursion limit was a RecursionError (500) on every endpoint but the bulk
    ones."""
    url = reverse(endpoint, args=[draft.slug])
    body = ({"name": "sys-new", "metadata": {"note": "a\u0000b"}}
            if endpoint == "api-study-systems"
            else {"kind": "crowd", "external_id": "p1", "metadata": {"note": "a\u0000b"}})
    response = post_json(api, url, body)
    assert response.status_code == 400, response.content[:300]
    assert "metadata" in response.json()["field_errors"]
    deep = '{"name": "x", "metadata": {"d": ' + "[" * DEEP + "]" * DEEP + "}}"
    assert api.post(url, data=deep, content_type="application/json").status_code == 400
    assert not draft.systems.filter(name="sys-new").exists()
