"""Parsing and validating study specs, item files and judgment files (no database).

Every error must name the file, the line and the field path; these tests pin all three.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalstudy.importers import spec_to_document
from evalstudy.spec.errors import SpecError, SpecInvalid
from evalstudy.spec.files import parse_items_file, parse_judgments_csv
from evalstudy.spec.load import decode
from evalstudy.spec.study import parse_study_spec

DEMO = Path(__file__).resolve().parents[2] / "demo"

BASE = textwrap.dedent("""\
    study:
      slug: tiny
      title: Tiny study
    systems:
      - name: a
      - name: b
    criteria:
      - key: severity
        kind: severity
        prompt: How much meaning is lost?
      - key: usable
        kind: binary
        prompt: Is it usable?
      - key: comment
        kind: text
        prompt: Anything else?
        required: false
    items:
      - id: i1
        reference: r1
        outputs: {a: x1, b: y1}
      - id: i2
        reference: r2
        outputs: {a: x2, b: y2}
    calibration:
      - id: c1
        output: o
        expected: {severity: 0, usable: "yes"}
    attention_checks:
      - id: t1
        output: junk
        expected: {severity: 2}
""")

PAIRWISE = textwrap.dedent("""\
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
    items:
      - id: i1
        outputs: {a: x1, b: y1}
    calibration:
      - id: c1
        output_a: good
        output_b: bad
        expected: {preference: A}
""")


def line_of(text: str, fragment: str, occurrence: int = 1) -> int:
    """1-based line number of the `occurrence`-th line containing `fragment`."""
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if fragment in line]
    assert len(hits) >= occurrence, f"{fragment!r} not in text"
    return hits[occurrence - 1]


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once"
    return text.replace(old, new)


def errors_of(text: str, source: str = "spec.yaml") -> list[SpecError]:
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(text, source)
    assert caught.value.errors, "SpecInvalid must carry its errors"
    assert str(caught.value) == "\n".join(str(e) for e in caught.value.errors)
    return caught.value.errors


def only_error(text: str) -> SpecError:
    errors = errors_of(text)
    assert len(errors) == 1, errors
    return errors[0]


def read_demo(name: str) -> str:
    return (DEMO / name).read_text(encoding="utf-8")


# --- the demos ---------------------------------------------------------------------------------
def test_asr_demo_parses_with_all_its_parts():
    spec = parse_study_spec(read_demo("asr_meaning.yaml"), "asr_meaning.yaml")

    assert spec.settings["slug"] == "asr-meaning-demo"
    assert spec.settings["design"] == "latin_square"
    assert spec.settings["ratings_per_output"] == 2
    assert spec.settings["items_per_rater"] == 12
    assert spec.settings["attention_check_every"] == 6
    assert spec.settings["randomise_order"] is True
    assert [s.name for s in spec.systems] == ["asr-small", "asr-medium", "asr-large"]
    assert spec.systems[0].metadata["params"] == "39M"
    assert [c.key for c in spec.criteria] == ["severity", "usable", "note"]
    assert [c.kind for c in spec.criteria] == ["severity", "binary", "text"]
    assert len(spec.criteria[0].labels) == 3
    note = spec.criteria[2]
    assert (note.show_if_criterion, note.show_if_values) == ("severity", ["2"])
    assert note.required is False

    assert len(spec.items) == 36
    assert len({i.external_id for i in spec.items}) == 36
    assert spec.items[0].external_id == "spk01-s001"
    assert spec.items[0].reference == "turn on the kitchen light"
    assert spec.items[0].metadata["speaker"] == "spk01"
    assert all(set(i.outputs) == {"asr-small", "asr-medium", "asr-large"} for i in spec.items)

    assert [c.key for c in spec.calibration] == ["calib-good", "calib-poor"]
    assert spec.calibration[0].expected == {"severity": "0", "usable": "yes"}
    assert spec.calibration[1].feedback.startswith("Only one word is missing")
    assert [c.key for c in spec.attention_checks] == ["attn-1", "attn-2", "attn-3"]
    assert spec.attention_checks[0].expected == {"severity": "2", "usable": "no"}
    assert all(c.text and not c.text_b for c in spec.calibration + spec.attention_checks)


def test_summary_demo_is_pairwise_with_a_and_b_controls():
    spec = parse_study_spec(read_demo("summary_preference.yaml"), "summary_preference.yaml")

    assert spec.settings["design"] == "pairwise"
    assert spec.settings["ratings_per_output"] == 3
    assert spec.settings["reference_shown"] is False
    assert [s.name for s in spec.systems] == ["summariser-a", "summariser-b"]
    assert [(c.key, c.kind) for c in spec.criteria] == [
        ("preference", "pairwise"), ("reason", "text")
    ]
    assert spec.criteria[0].allow_tie is False
    assert len(spec.items) == 10
    assert all(set(i.outputs) == {"summariser-a", "summariser-b"} for i in spec.items)
    assert [c.key for c in spec.calibration] == ["calib-pool"]
    control = spec.calibration[0]
    assert control.text.startswith("Pendle Cross Leisure Centre is closing")
    assert control.text_b.startswith("The pool at Pendle Cross Leisure Centre")
    assert control.expected == {"preference": "B"}
    assert spec.attention_checks == []


def test_base_spec_is_valid():
    spec = parse_study_spec(BASE, "spec.yaml")
    assert [i.external_id for i in spec.items] == ["i1", "i2"]
    assert spec.items[1].outputs == {"a": "x2", "b": "y2"}
    assert spec.settings["ratings_per_output"] == 1  # defaults filled in
    assert spec.settings["lease_minutes"] == 60
    assert spec.settings["items_per_rater"] is None
    assert spec.attention_checks[0].expected == {"severity": "2"}


def test_yaml_1_1_booleans_normalise_to_yes_and_no():
    text = edit(BASE, 'usable: "yes"}', "usable: yes}")
    text = edit(text, "    required: false\n",
                "    required: false\n    show_if: {criterion: usable, in: [no]}\n")
    text = edit(text, "expected: {severity: 2}", "expected: {severity: 2, usable: off}")
    spec = parse_study_spec(text, "spec.yaml")
    assert spec.calibration[0].expected == {"severity": "0", "usable": "yes"}
    assert spec.attention_checks[0].expected == {"severity": "2", "usable": "no"}
    assert spec.criteria[2].show_if_criterion == "usable"
    assert spec.criteria[2].show_if_values == ["no"]


def test_an_unquoted_date_in_metadata_stays_the_text_it_was_written_as():
    """YAML reads 2024-01-31 as a date; metadata goes to a JSON field, so it must stay text."""
    text = edit(BASE, "    reference: r1\n",
                "    reference: r1\n    metadata: {recorded: 2024-01-31}\n")
    spec = parse_study_spec(text, "spec.yaml")
    assert spec.items[0].metadata == {"recorded": "2024-01-31"}
    assert json.dumps(spec.items[0].metadata) == '{"recorded": "2024-01-31"}'


# --- errors in a spec: line, path and reason -------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "marker", "path", "message"),
    [
        pytest.param(
            "attention_checks:\n", "colours: [red]\nattention_checks:\n", "colours:", "colours",
            "unknown section; expected one of attention_checks, calibration, criteria, items,"
            " plan, study, systems", id="unknown-section",
        ),
        pytest.param(
            "  title: Tiny study\n", "  title: Tiny study\n  colour: red\n", "colour: red",
            "study.colour", "unknown field; expected one of slug, title,", id="unknown-study-field",
        ),
        pytest.param(
            "  slug: tiny\n", "", "title: Tiny", "study", "missing required field 'slug'",
            id="missing-slug",
        ),
        pytest.param(
            "  title: Tiny study\n", "", "slug: tiny", "study", "missing required field 'title'",
            id="missing-title",
        ),
        pytest.param(
            "    prompt: Anything else?\n", "", "key: comment", "criteria[2]",
            "missing required field 'prompt'", id="missing-criterion-prompt",
        ),
        pytest.param(
            "  slug: tiny\n", "  slug: Tiny Study!\n", "slug: Tiny", "study.slug",
            "'Tiny Study!' is not a slug", id="bad-slug",
        ),
        pytest.param(
            "  title: Tiny study\n", "  title: Tiny study\n  design: zigzag\n", "design: zigzag",
            "study.design", "'zigzag' is not one of latin_square, crossed, pairwise",
            id="unknown-design",
        ),
        pytest.param(
            "  title: Tiny study\n", "  title: Tiny study\n  completion_url: ftp://x/y\n",
            "completion_url", "study.completion_url", "is not an http(s) URL", id="bad-url",
        ),
        pytest.param(
            "{a: x1, b: y1}", "{a: x1, b: y1, c: z1}", "id: i1", "items[0].outputs",
            "output for 'c', which is not a system of the study", id="output-unknown-system",
        ),
        pytest.param(
            "{a: x2, b: y2}", "{a: x2}", "id: i2", "items[1].outputs",
            "no output for system 'b'", id="missing-output",
        ),
        pytest.param(
            "    reference: r2\n", "    reference: r2\n    colour: red\n", "colour: red",
            "items[1].colour", "unknown field; expected one of id, reference,",
            id="unknown-item-field",
        ),
        pytest.param(
            "  title: Tiny study\n", "  title: Tiny study\n  title: Again\n", "title: Again", "",
            "key 'title' appears twice in the same mapping", id="duplicate-yaml-key",
        ),
        pytest.param(
            "    required: false\n",
            "    required: false\n    show_if: {criterion: nope, in: [1]}\n", "key: comment",
            "criteria[2].show_if", "names 'nope', which is not another criterion",
            id="show-if-unknown-criterion",
        ),
        pytest.param(
            "    required: false\n",
            "    required: false\n    show_if: {criterion: comment, in: [x]}\n", "key: comment",
            "criteria[2].show_if", "names 'comment', which is not another criterion",
            id="show-if-itself",
        ),
        pytest.param(
            "    required: false\n",
            "    required: false\n    show_if: {criterion: severity, in: [5]}\n", "key: comment",
            "criteria[2].show_if", "value for 'severity': '5' is not one of '0', '1', '2'",
            id="show-if-value-invalid",
        ),
        pytest.param(
            "    required: false\n", "    required: false\n    show_if: {criterion: severity}\n",
            "show_if:", "criteria[2].show_if", "expected {criterion: KEY, in: [VALUES]}",
            id="show-if-shape",
        ),
        pytest.param(
            "    kind: text\n", "    kind: likert\n", "key: comment", "criteria[2]",
            "likert needs scale_points between 2 and 11", id="likert-without-scale-points",
        ),
        pytest.param(
            "    kind: text\n", "    kind: likert\n    scale_points: 12\n", "key: comment",
            "criteria[2]", "likert needs scale_points between 2 and 11", id="likert-12-points",
        ),
        pytest.param(
            "    kind: text\n", "    kind: categorical\n    options: [only]\n", "key: comment",
            "criteria[2]", "categorical needs at least 2 options", id="categorical-one-option",
        ),
        pytest.param(
            "    kind: text\n", "    kind: stars\n", "kind: stars", "criteria[2].kind",
            "'stars' is not one of likert, binary", id="unknown-kind",
        ),
        pytest.param(
            "  - key: comment\n", "  - key: has space\n", "key: has space", "criteria[2].key",
            "use letters, digits, - and _ only", id="criterion-key-characters",
        ),
        pytest.param(
            "  - key: comment\n", "  - key: usable  # again\n", "# again", "criteria[2]",
            "duplicate criterion key 'usable' (first at line 11)", id="duplicate-criterion",
        ),
        pytest.param(
            "  - name: b\n", "  - name: b\n  - name: a  # again\n", "# again", "systems[2]",
            "duplicate system name 'a' (first at line 5)", id="duplicate-system",
        ),
        pytest.param(
            'usable: "yes"}', 'usable: "maybe"}', "id: c1", "calibration[0].expected.usable",
            "'maybe' is not one of 'yes', 'no'", id="calibration-expected-invalid",
        ),
        pytest.param(
            "expected: {severity: 2}", "expected: {severity: 2, fluency: 3}", "id: t1",
            "attention_checks[0].expected.fluency", "not a criterion of the study",
            id="attention-expected-unknown-criterion",
        ),
        pytest.param(
            "{a: x2, b: y2}", "[x2, y2]", "outputs: [x2", "items[1].outputs",
            "expected a mapping, got a list", id="outputs-not-a-mapping",
        ),
        pytest.param(
            "    reference: r1\n", "    reference: r1\n    metadata: [speaker]\n",
            "metadata: [speaker]", "items[0].metadata", "expected a mapping, got a list",
            id="item-metadata-not-a-mapping",
        ),
        pytest.param(
            "    output: junk\n", "    output: [junk]\n", "output: [junk]",
            "attention_checks[0].output", "expected text, got a list", id="control-output-a-list",
        ),
        pytest.param(
            "    output: junk\n", "", "id: t1", "attention_checks[0]",
            "missing required field 'output'", id="attention-check-without-output",
        ),
    ],
)
def test_each_error_names_its_line_and_path(old, new, marker, path, message):
    text = edit(BASE, old, new)
    error = only_error(text)
    assert error.source == "spec.yaml"
    assert error.line == line_of(text, marker)
    assert error.path == path
    assert message in error.message
    assert str(error).startswith(f"spec.yaml:{error.line}: ")


def test_wrong_types_are_each_reported_on_their_own_line():
    text = edit(BASE, "  title: Tiny study\n",
                '  title: Tiny study\n  ratings_per_output: "two"\n  randomise_order: 3\n')
    errors = errors_of(text)
    assert [(e.line, e.path, e.message) for e in errors] == [
        (4, "study.ratings_per_output", "expected a whole number, got 'two'"),
        (5, "study.randomise_order", "expected true or false, got 3"),
    ]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("ratings_per_output: 0", "must be at least 1, got 0"),
        ("ratings_per_output: true", "expected a whole number, got True"),
        ("lease_minutes: 1.5", "expected a whole number, got 1.5"),
        ("reference_shown: maybe", "expected true or false, got 'maybe'"),
    ],
)
def test_settings_are_type_checked(setting, message):
    text = edit(BASE, "  title: Tiny study\n", f"  title: Tiny study\n  {setting}\n")
    error = only_error(text)
    assert (error.line, error.path, error.message) == (
        4, f"study.{setting.split(':')[0]}", message
    )


def test_duplicate_item_id_points_back_to_the_first():
    text = edit(BASE, "  - id: i2\n", "  - id: i1\n")
    error = only_error(text)
    first, second = line_of(text, "- id: i1"), line_of(text, "- id: i1", 2)
    assert (first, second) == (19, 22)
    assert error.line == second
    assert error.path == "items[1]"
    assert error.message == f"duplicate item id 'i1' (first at line {first})"


def test_duplicate_yaml_key_inside_an_item_is_reported_at_the_second_key():
    text = edit(BASE, "    reference: r2\n", "    reference: r2\n    reference: again\n")
    error = only_error(text)
    assert error.line == line_of(text, "reference: again")
    assert error.message == "key 'reference' appears twice in the same mapping"


def test_keys_longer_than_their_database_columns_are_refused():
    text = edit(BASE, "  - key: comment\n", f"  - key: {'k' * 61}\n")
    text = edit(text, "  - name: b\n", f"  - name: {'b' * 101}\n")
    text = edit(text, "  - id: t1\n", f"  - id: {'t' * 101}\n")
    errors = errors_of(text)
    found = {(e.path, e.message) for e in errors}
    assert ("criteria[2].key", "longer than 60 characters") in found
    assert ("systems[1].name", "longer than 100 characters") in found
    assert ("attention_checks[0].id", "longer than 100 characters") in found
    by_path = {e.path: e.line for e in errors}
    assert by_path["criteria[2].key"] == line_of(text, "k" * 61)
    # Sixty characters is still fine.
    spec = parse_study_spec(edit(BASE, "  - key: comment\n", f"  - key: {'k' * 60}\n"), "s")
    assert spec.criteria[2].key == "k" * 60


def test_pairwise_control_without_output_b():
    error = only_error(edit(PAIRWISE, "    output_b: bad\n", ""))
    assert error.line == line_of(PAIRWISE, "- id: c1")
    assert error.path == "calibration[0]"
    assert error.message == "a pairwise study needs output_a and output_b"


def test_pairwise_spec_parses_with_a_and_b():
    spec = parse_study_spec(PAIRWISE, "pair.yaml")
    control = spec.calibration[0]
    assert (control.text, control.text_b, control.expected) == ("good", "bad", {"preference": "A"})


def test_pairwise_needs_two_systems():
    text = edit(PAIRWISE, "  - name: b\n", "")
    text = edit(text, "{a: x1, b: y1}", "{a: x1}")
    error = only_error(text)
    assert (error.line, error.path) == (line_of(text, "systems:"), "systems")
    assert error.message == "pairwise needs 2 or more systems"


def test_broken_yaml_reports_its_line():
    text = edit(BASE, "    reference: r2\n", "    reference: [r2\n")
    error = only_error(text)
    assert error.message.startswith("not valid YAML/JSON: ")
    # The unclosed flow sequence runs into the next line, where the parser notices.
    assert error.line == line_of(text, "reference: [r2") + 1 == line_of(text, "outputs: {a: x2")
    assert error.message == "not valid YAML/JSON: expected ',' or ']', but got ':'"

    text = edit(BASE, "  - id: i2\n", "  - id: i2\n   bad: [\n")
    error = only_error(text)
    assert error.line == line_of(text, "bad: [")
    assert error.message.startswith("not valid YAML/JSON")


def test_a_spec_that_is_not_a_mapping():
    error = only_error("- just\n- a list\n")
    assert (error.line, error.path, error.message) == (1, "", "expected a mapping, got a list")


def test_all_errors_are_reported_at_once():
    text = edit(BASE, "  slug: tiny\n", "  slug: Bad Slug\n")
    text = edit(text, "{a: x2, b: y2}", "{a: x2}")
    text = edit(text, "expected: {severity: 2}", "expected: {severity: 9}")
    errors = errors_of(text)
    assert [(e.line, e.path) for e in errors] == [
        (2, "study.slug"),
        (line_of(text, "id: i2"), "items[1].outputs"),
        (line_of(text, "id: t1"), "attention_checks[0].expected.severity"),
    ]
    assert "no output for system 'b'" in errors[1].message
    assert "'9' is not one of '0', '1', '2'" in errors[2].message


# --- JSON specs --------------------------------------------------------------------------------
@pytest.mark.parametrize("demo", ["asr_meaning.yaml", "summary_preference.yaml"])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_a_json_spec_reads_the_same_as_the_yaml_it_came_from(demo, ensure_ascii):
    spec = parse_study_spec(read_demo(demo), demo)
    text = json.dumps(spec_to_document(spec), indent=2, ensure_ascii=ensure_ascii)
    again = parse_study_spec(text, "spec.json")
    assert again == spec
    assert again.items[5].outputs == spec.items[5].outputs


def test_json_escapes_beyond_the_basic_plane_are_joined():
    """json.dumps writes U+1F600 as a UTF-16 pair of \\u escapes; they mean one character."""
    document = spec_to_document(parse_study_spec(BASE, "spec.yaml"))
    document["items"][0]["outputs"]["a"] = "thumbs up \U0001f44d"
    document["study"]["title"] = "Emoji \U0001f600 study"
    text = json.dumps(document, indent=2)
    assert "\\ud83d\\ude00" in text
    spec = parse_study_spec(text, "spec.json")
    assert spec.settings["title"] == "Emoji \U0001f600 study"
    assert spec.items[0].outputs["a"] == "thumbs up \U0001f44d"
    spec.items[0].outputs["a"].encode("utf-8")  # no lone surrogates left

    broken = text.replace("\\ud83d\\ude00", "\\ud83d")
    error = only_error(broken)
    assert error.line == line_of(broken, '"title"')
    assert "surrogate" in error.message


def test_json_spec_errors_have_lines_too():
    document = spec_to_document(parse_study_spec(BASE, "spec.yaml"))
    document["items"][1]["outputs"].pop("b")
    document["study"]["colour"] = "red"
    text = json.dumps(document, indent=2)
    errors = errors_of(text, "spec.json")
    assert [(e.line, e.path) for e in errors] == [
        (line_of(text, '"colour"'), "study.colour"),
        (line_of(text, '"id": "i2"') - 1, "items[1].outputs"),  # the object opens a line above
    ]
    assert errors[1].message == "no output for system 'b'"


def test_broken_json_reports_its_line():
    text = '{\n  "study": {\n    "slug": "x",\n    "title": "t"\n  }\n  "systems": []\n}\n'
    error = only_error(text)  # no comma after the study object on line 5
    assert error.line == 6
    assert error.message == "not valid YAML/JSON: expected ',' or '}', but got '<scalar>'"


# --- items from CSV ------------------------------------------------------------------------
ITEMS_CSV = (
    "item,system,output,reference,context,meta.speaker,task\n"
    "i1,a,hello,ref one,,spk1,command\n"
    "i1,b,hullo,ref one,,spk1,command\n"
    'i2,a,"two, with comma",ref two,some context,,question\n'
    "i2,b,too,ref two,some context,,question\n"
)


def items_errors(text: str, fmt: str) -> list[SpecError]:
    with pytest.raises(SpecInvalid) as caught:
        parse_items_file(text, f"items.{fmt}", fmt)
    return caught.value.errors


def test_items_csv_long_form_with_metadata_columns():
    items = parse_items_file(ITEMS_CSV, "items.csv", "csv")
    assert [i.external_id for i in items] == ["i1", "i2"]
    first, second = items
    assert first.outputs == {"a": "hello", "b": "hullo"}
    assert (first.reference, first.context) == ("ref one", "")
    assert first.metadata == {"speaker": "spk1", "task": "command"}  # `meta.` prefix stripped
    assert first.line == 2
    assert second.outputs == {"a": "two, with comma", "b": "too"}
    assert (second.reference, second.context) == ("ref two", "some context")
    assert second.metadata == {"task": "question"}  # empty cells are left out
    assert second.line == 4


def test_items_csv_accepts_a_bom_and_crlf_through_decode():
    data = ("\ufeff" + ITEMS_CSV).replace("\n", "\r\n").encode("utf-8")
    items = parse_items_file(decode(data, "items.csv"), "items.csv", "csv")
    assert [i.external_id for i in items] == ["i1", "i2"]
    assert items[0].outputs == {"a": "hello", "b": "hullo"}


def test_items_csv_missing_column_is_reported_on_the_header():
    errors = items_errors("item,output,reference\ni1,x,r\n", "csv")
    assert [(e.line, e.path) for e in errors] == [(1, "header")]
    assert errors[0].message == "missing column(s) system; found item, output, reference"


@pytest.mark.parametrize(
    ("row", "found"), [("i2,a,x,ref,ctx,spk,task,extra", 8), ("i2,a,x", 3)]
)
def test_items_csv_row_with_wrong_number_of_columns(row, found):
    text = ITEMS_CSV + row + "\n"
    errors = items_errors(text, "csv")
    assert [(e.line, e.message) for e in errors] == [
        (6, f"expected 7 columns like the header, got {found}")
    ]


def test_items_csv_rows_of_one_item_must_agree():
    text = ITEMS_CSV.replace("i2,b,too,ref two,", "i2,b,too,ref 2,")
    errors = items_errors(text, "csv")
    assert [(e.line, e.path, e.message) for e in errors] == [
        (5, "reference", "differs from item 'i2' at line 4")
    ]


def test_items_csv_second_output_for_the_same_item_and_system():
    text = ITEMS_CSV + "i1,a,again,ref one,,spk1,command\n"
    errors = items_errors(text, "csv")
    assert [(e.line, e.path, e.message) for e in errors] == [
        (6, "system", "second output for 'i1'/'a' (first at line 2)")
    ]


def test_items_csv_reports_every_bad_row():
    text = ITEMS_CSV + ",a,x,r,,,\ni3,,x,r,,,\n"
    errors = items_errors(text, "csv")
    assert [(e.line, e.path, e.message) for e in errors] == [
        (6, "item", "must not be empty"), (7, "system", "must not be empty")
    ]


def test_unknown_items_format():
    errors = items_errors(ITEMS_CSV, "xlsx")
    assert errors[0].message == "unknown format 'xlsx'; use csv or jsonl"


# --- items from JSONL ------------------------------------------------------------------------
def jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_items_jsonl_happy_path():
    text = jsonl(
        {"id": "i1", "reference": "r1", "outputs": {"a": "x1", "b": "y1"}},
        "",
        {"id": "i2", "context": "c", "metadata": {"k": 1}, "outputs": {"a": "x2", "b": "y2"}},
    )
    items = parse_items_file(text, "items.jsonl", "jsonl")
    assert [(i.external_id, i.line) for i in items] == [("i1", 1), ("i2", 3)]
    assert items[0].reference == "r1"
    assert (items[1].context, items[1].metadata) == ("c", {"k": 1})
    assert items[1].outputs == {"a": "x2", "b": "y2"}


def test_items_jsonl_bad_json_is_reported_on_its_line():
    text = jsonl({"id": "i1", "outputs": {"a": "x"}}, {"id": "i2", "outputs": {"a": "y"}},
                 '{"id": "i3", outputs}')
    errors = items_errors(text, "jsonl")
    assert [(e.source, e.line, e.path) for e in errors] == [("items.jsonl", 3, "")]
    assert errors[0].message.startswith("not valid JSON: Expecting property name")
    assert "(column 14)" in errors[0].message


def test_items_jsonl_line_that_is_not_an_object():
    text = jsonl({"id": "i1", "outputs": {"a": "x"}}, [1, 2], '"text"')
    errors = items_errors(text, "jsonl")
    assert [(e.line, e.path, e.message) for e in errors] == [
        (2, "line 2", "expected a mapping, got a list"),
        (3, "line 3", "expected a mapping, got str"),
    ]


def test_items_jsonl_field_errors_name_their_line():
    text = jsonl(
        {"id": "i1", "outputs": {"a": "x"}},
        {"reference": "no id", "outputs": {"a": "x"}},
        {"id": "i3", "colour": "red", "outputs": {"a": "x"}},
        {"id": "i1", "outputs": {"a": "again"}},
        {"id": "i5", "outputs": ["x"]},
    )
    errors = items_errors(text, "jsonl")
    assert [(e.line, e.path) for e in errors] == [
        (2, "item"), (3, "item.colour"), (4, "id"), (5, "item.outputs")
    ]
    assert errors[0].message == "missing required field 'id'"
    assert errors[1].message.startswith("unknown field")
    assert errors[2].message == "duplicate item 'i1' (first at line 1)"
    assert errors[3].message == "expected a mapping, got a list"


# --- decoding ---------------------------------------------------------------------------------
def test_non_utf8_bytes_are_reported_with_their_line():
    data = "item,system,output\ni1,a,x\ni2,a,café\n".encode("latin-1")
    with pytest.raises(SpecInvalid) as caught:
        decode(data, "items.csv")
    (error,) = caught.value.errors
    assert (error.source, error.line) == ("items.csv", 3)
    assert "not UTF-8" in error.message
    assert "byte 0xe9" in error.message
    assert str(error).startswith("items.csv:3: the file is not UTF-8")


def test_decode_strips_a_bom():
    assert decode("\ufeffitem,system".encode(), "x.csv") == "item,system"
    assert decode("caf\u00e9".encode(), "x.csv") == "caf\u00e9"


# --- judgments CSV ----------------------------------------------------------------------------
def test_judgments_csv_parses_rows_with_optional_columns():
    text = (
        "rater,item,system,criterion,value,rater_kind,system_b\n"
        "r1,i1,a,severity,1,crowd,\n"
        " r2 , i2 ,b,preference, A ,,a\n"
    )
    rows = parse_judgments_csv(text, "judgments.csv")
    assert [(r.line, r.rater, r.item, r.system, r.criterion) for r in rows] == [
        (2, "r1", "i1", "a", "severity"), (3, "r2", "i2", "b", "preference")
    ]
    assert (rows[0].rater_kind, rows[0].system_b, rows[0].value) == ("crowd", "", "1")
    assert (rows[1].rater_kind, rows[1].system_b, rows[1].value) == ("", "a", " A ")


def test_judgments_csv_without_optional_columns():
    rows = parse_judgments_csv("rater,item,system,criterion,value\nr1,i1,a,usable,yes\n", "j.csv")
    assert [(r.rater_kind, r.system_b, r.value) for r in rows] == [("", "", "yes")]


def test_judgments_csv_requires_its_columns():
    with pytest.raises(SpecInvalid) as caught:
        parse_judgments_csv("rater,item,system,value\nr1,i1,a,1\n", "j.csv")
    assert [(e.line, e.path, e.message) for e in caught.value.errors] == [
        (1, "header", "missing column(s) criterion; found rater, item, system, value")
    ]


def test_judgments_csv_empty_rater_and_item_are_reported_per_line():
    text = (
        "rater,item,system,criterion,value\n"
        "r1,i1,a,usable,yes\n  ,i1,a,usable,no\nr1,,a,usable,no\n"
    )
    with pytest.raises(SpecInvalid) as caught:
        parse_judgments_csv(text, "j.csv")
    assert [(e.line, e.path, e.message) for e in caught.value.errors] == [
        (3, "rater", "must not be empty"), (4, "item", "must not be empty")
    ]
