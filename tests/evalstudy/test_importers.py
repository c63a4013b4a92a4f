"""Writing specs, item files and judgment files to the database, and reading studies back."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

import pytest
import yaml

from annotation.models import Judgment, JudgmentRevision
from annotation.services import judgments_import
from evalstudy import importers
from evalstudy.importers import items_import, spec_to_document, study_import_spec, study_to_spec
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Item,
    Output,
    Rater,
    Study,
    System,
)
from evalstudy.services import assignment_claim, study_build_assignments, study_open, study_validate
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_items_file, parse_judgments_csv
from evalstudy.spec.study import parse_study_spec
from tests.factories import RaterFactory, UserFactory, invite, make_study

DEMO = Path(__file__).resolve().parents[2] / "demo"
NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def demo_text(name: str) -> str:
    return (DEMO / name).read_text(encoding="utf-8")


def demo_spec(name: str = "asr_meaning.yaml"):
    return parse_study_spec(demo_text(name), name)


def document_to_spec(document: dict, source: str = "edited.yaml"):
    """A document written out as YAML and parsed again, as a user's edited file would be."""
    return parse_study_spec(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), source)


def snapshot(study: Study) -> dict:
    """Every row a spec import writes, by key, with its id and content."""
    return {
        "study": Study.objects.filter(pk=study.pk).values().get(),
        "systems": dict(System.objects.filter(study=study).values_list("name", "id")),
        "criteria": {
            key: (pk, prompt, parent)
            for pk, key, prompt, parent in Criterion.objects.filter(study=study).values_list(
                "id", "key", "prompt", "show_if_criterion_id"
            )
        },
        "items": {
            ext: (pk, ref)
            for pk, ext, ref in Item.objects.filter(study=study).values_list(
                "id", "external_id", "reference"
            )
        },
        "outputs": {
            (ext, name): (pk, text)
            for pk, ext, name, text in Output.objects.filter(item__study=study).values_list(
                "id", "item__external_id", "system__name", "text"
            )
        },
        "calibration": sorted(
            CalibrationItem.objects.filter(study=study).values_list("id", "key", "text")
        ),
        "attention": sorted(
            AttentionCheck.objects.filter(study=study).values_list("id", "key", "text")
        ),
        "seats": sorted(
            Assignment.objects.filter(study=study).values_list("id", "rater_id", "state")
        ),
    }


# --- importing a spec ---------------------------------------------------------------------------
@pytest.mark.django_db
def test_importing_the_asr_demo_creates_a_study_that_validates_and_opens():
    owner = UserFactory()
    studies_before = Study.objects.count()

    study, outcome = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml", owner=owner)

    assert outcome == "created"
    assert Study.objects.count() == studies_before + 1
    study.refresh_from_db()
    assert (study.slug, study.status, study.owner) == ("asr-meaning-demo", "draft", owner)
    assert (study.design, study.ratings_per_output, study.items_per_rater) == (
        "latin_square", 2, 12
    )
    assert (study.attention_check_every, study.attention_fail_limit) == (6, 2)
    assert study.completion_code == "CX9R4T2M"
    assert sorted(study.systems.values_list("name", flat=True)) == [
        "asr-large", "asr-medium", "asr-small"
    ]
    assert study.items.count() == 36
    assert Output.objects.filter(item__study=study).count() == 36 * 3
    assert Output.objects.get(
        item__study=study, item__external_id="spk01-s002", system__name="asr-small"
    ).text == "tell sam i will be there at half past seven"
    item = study.items.get(external_id="spk01-s001")
    assert item.reference == "turn on the kitchen light"
    assert item.metadata == {
        "speaker": "spk01", "speech_type": "dysarthria", "severity": "mild", "task": "command"
    }
    criteria = list(study.criteria.order_by("order"))
    assert [(c.key, c.kind, c.order) for c in criteria] == [
        ("severity", "severity", 0), ("usable", "binary", 1), ("note", "text", 2)
    ]
    note = criteria[2]
    assert (note.show_if_criterion, note.show_if_values, note.required) == (
        criteria[0], ["2"], False
    )
    assert list(study.calibration_items.order_by("order").values_list("key", "expected")) == [
        ("calib-good", {"severity": "0", "usable": "yes"}),
        ("calib-poor", {"severity": "2", "usable": "no"}),
    ]
    assert study.calibration_items.get(key="calib-poor").feedback.startswith("Only one word")
    assert list(study.attention_checks.order_by("order").values_list("key", flat=True)) == [
        "attn-1", "attn-2", "attn-3"
    ]

    assert study_validate(study=study) == []
    opened = study_open(study=study)
    assert opened.status == Study.Status.OPEN
    # 3 latin-square lists of 36 cells, each split into 3 parts of 12, each rated twice.
    assert study.assignments.filter(source=Assignment.Source.DESIGN).count() == 3 * 3 * 2


@pytest.mark.django_db
@pytest.mark.parametrize("demo", ["asr_meaning.yaml", "summary_preference.yaml"])
def test_reimporting_the_identical_spec_changes_nothing(demo):
    study, _ = study_import_spec(spec=demo_spec(demo), file_name=demo)
    before = snapshot(study)

    again, outcome = study_import_spec(spec=demo_spec(demo), file_name=demo)

    assert outcome == "unchanged"
    assert again.pk == study.pk
    assert snapshot(study) == before  # same ids, same text, same updated_at


@pytest.mark.django_db
def test_reimporting_the_identical_spec_over_an_open_study_with_raters_is_fine():
    study, _ = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    study_open(study=study)
    assignment_claim(study=study, rater=RaterFactory(), now=NOW)
    before = snapshot(study)

    _, outcome = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")

    assert outcome == "unchanged"
    assert snapshot(study) == before


@pytest.mark.django_db
@pytest.mark.parametrize("demo", ["asr_meaning.yaml", "summary_preference.yaml"])
def test_export_import_export_round_trips(demo):
    study, _ = study_import_spec(spec=demo_spec(demo), file_name=demo)
    exported = spec_to_document(study_to_spec(study))
    # The export is the spec the study came from.
    assert exported == spec_to_document(demo_spec(demo))

    copied = copy.deepcopy(exported)
    copied["study"]["slug"] = "round-trip-copy"
    twin, outcome = study_import_spec(spec=document_to_spec(copied), file_name="copy.yaml")
    assert outcome == "created"
    assert twin.pk != study.pk

    exported_again = spec_to_document(study_to_spec(twin))
    assert exported_again["study"]["slug"] == "round-trip-copy"
    exported_again["study"]["slug"] = exported["study"]["slug"]
    assert exported_again == exported
    assert twin.items.count() == study.items.count()
    assert study_validate(study=twin) == []


def _changed_asr_document() -> dict:
    """The ASR demo with one output edited, the last item removed and a fourth system added."""
    document = spec_to_document(demo_spec())
    document["items"][0]["outputs"]["asr-small"] = "turn on the kitchen lamp"
    removed = document["items"].pop()
    assert removed["id"] == "spk06-s036"
    document["systems"].append({"name": "asr-xl", "description": "Extra large",
                                "metadata": {"params": "3B"}})
    for item in document["items"]:
        item["outputs"]["asr-xl"] = item["reference"]
    return document


@pytest.mark.django_db
def test_a_changed_spec_updates_a_draft_study_in_place():
    study, _ = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    before = snapshot(study)
    changed = document_to_spec(_changed_asr_document())

    updated, outcome = study_import_spec(spec=changed, file_name="edited.yaml")

    assert outcome == "updated"
    assert updated.pk == study.pk
    after = snapshot(study)
    # Kept rows keep their ids.
    assert before["systems"] == {
        k: v for k, v in after["systems"].items() if k != "asr-xl"
    }
    assert after["criteria"] == before["criteria"]
    assert after["calibration"] == before["calibration"]
    assert after["attention"] == before["attention"]
    del before["items"]["spk06-s036"]
    assert after["items"] == before["items"]
    # The edited output is updated in place, the removed item's outputs are gone.
    key = ("spk01-s001", "asr-small")
    assert after["outputs"][key] == (before["outputs"][key][0], "turn on the kitchen lamp")
    assert not any(item == "spk06-s036" for item, _ in after["outputs"])
    for (item, system), (pk, text) in before["outputs"].items():
        if item != "spk06-s036" and (item, system) != key:
            assert after["outputs"][item, system] == (pk, text)
    # The new system has an output for each of the 35 items.
    xl = System.objects.get(study=study, name="asr-xl")
    assert (xl.description, xl.metadata) == ("Extra large", {"params": "3B"})
    assert Output.objects.filter(system=xl).count() == 35
    assert Output.objects.get(system=xl, item__external_id="spk01-s003").text == (
        "what is the weather going to be like tomorrow"
    )
    assert study.items.count() == 35
    assert Output.objects.filter(item__study=study).count() == 35 * 4
    assert study_to_spec(study) == changed
    assert study_validate(study=study) == []
    # And the updated study is now "unchanged" for the new spec.
    assert study_import_spec(spec=changed, file_name="edited.yaml")[1] == "unchanged"


@pytest.mark.django_db
def test_a_changed_spec_updates_settings_criteria_and_controls():
    study, _ = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    severity_id = study.criteria.get(key="severity").pk
    document = spec_to_document(demo_spec())
    document["study"]["title"] = "New title"
    document["study"]["ratings_per_output"] = 3
    document["criteria"] = [c for c in document["criteria"] if c["key"] != "note"]
    document["criteria"][1]["prompt"] = "Usable as it is?"
    document["attention_checks"] = document["attention_checks"][:1]

    _, outcome = study_import_spec(spec=document_to_spec(document), file_name="edited.yaml")

    assert outcome == "updated"
    study.refresh_from_db()
    assert (study.title, study.ratings_per_output) == ("New title", 3)
    assert list(study.criteria.order_by("order").values_list("key", "prompt")) == [
        ("severity", document["criteria"][0]["prompt"]), ("usable", "Usable as it is?")
    ]
    assert study.criteria.get(key="severity").pk == severity_id
    assert list(study.attention_checks.values_list("key", flat=True)) == ["attn-1"]


@pytest.mark.django_db
def test_an_item_inserted_in_the_middle_does_not_make_the_same_spec_look_changed():
    """Items and systems are read back by id; their order in the file is not content."""
    document = spec_to_document(demo_spec())
    inserted = document["items"].pop(3)
    study, _ = study_import_spec(spec=document_to_spec(document), file_name="v1.yaml")
    document["items"].insert(3, inserted)
    document["systems"].insert(0, document["systems"].pop())
    full = document_to_spec(document)
    assert study_import_spec(spec=full, file_name="v2.yaml")[1] == "updated"

    assert study_import_spec(spec=full, file_name="v2.yaml")[1] == "unchanged"
    study_open(study=study)
    assignment_claim(study=study, rater=RaterFactory(), now=NOW)
    assert study_import_spec(spec=full, file_name="v2.yaml")[1] == "unchanged"


@pytest.mark.django_db
def test_updating_a_draft_whose_seats_were_built_replaces_the_stale_seats():
    """Unclaimed seats built from the old content must not block removing an item."""
    study, _ = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    assert study_build_assignments(study=study) == 18
    changed = document_to_spec(_changed_asr_document())

    _, outcome = study_import_spec(spec=changed, file_name="edited.yaml")

    assert outcome == "updated"
    assert not study.assignments.exists()
    assert not study.items.filter(external_id="spk06-s036").exists()
    study_open(study=study)
    assert not AssignmentSlot.objects.filter(
        assignment__study=study, output__item__external_id="spk06-s036"
    ).exists()
    # 4 systems now: 4 latin-square lists of 35 cells, 3 parts each, rated twice.
    assert study.assignments.count() == 4 * 3 * 2


@pytest.mark.django_db
def test_a_changed_spec_over_an_open_study_with_a_rater_is_refused():
    study, _ = study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    study_open(study=study)
    seat = assignment_claim(study=study, rater=RaterFactory(), now=NOW)
    before = snapshot(study)

    with pytest.raises(SpecInvalid) as caught:
        study_import_spec(spec=document_to_spec(_changed_asr_document()), file_name="edited.yaml")

    (error,) = caught.value.errors
    assert (error.source, error.path) == ("edited.yaml", "study.slug")
    assert "'asr-meaning-demo' is open and has raters" in error.message
    assert "import it under a new slug" in error.message
    assert snapshot(study) == before
    seat.refresh_from_db()
    assert seat.state == Assignment.State.ACTIVE


@pytest.mark.django_db
def test_an_invalid_spec_writes_nothing():
    studies = Study.objects.count()
    text = demo_text("asr_meaning.yaml").replace("  ratings_per_output: 2\n",
                                                 "  ratings_per_output: two\n")
    with pytest.raises(SpecInvalid) as caught:
        study_import_spec(spec=parse_study_spec(text, "bad.yaml"), file_name="bad.yaml")
    assert [e.path for e in caught.value.errors] == ["study.ratings_per_output"]
    assert Study.objects.count() == studies
    assert not Item.objects.exists()


@pytest.mark.django_db
def test_an_import_that_fails_half_way_leaves_nothing(monkeypatch):
    studies = Study.objects.count()

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(importers, "_write_items", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        study_import_spec(spec=demo_spec(), file_name="asr_meaning.yaml")
    assert Study.objects.count() == studies
    assert not System.objects.filter(study__slug="asr-meaning-demo").exists()
    assert not Criterion.objects.filter(study__slug="asr-meaning-demo").exists()


# --- items from files -------------------------------------------------------------------------
def items_csv(*rows: str) -> str:
    return "item,system,output,reference,meta.speaker\n" + "".join(row + "\n" for row in rows)


@pytest.mark.django_db
def test_items_import_adds_csv_items_to_a_draft_study(study):
    kept = snapshot(study)["outputs"]
    text = items_csv(
        "new-1,sys-0,a0,ref one,spk9", "new-1,sys-1,a1,ref one,spk9", "new-1,sys-2,a2,ref one,spk9",
        "new-2,sys-0,b0,ref two,", "new-2,sys-1,b1,ref two,", "new-2,sys-2,b2,ref two,",
    )
    items = parse_items_file(text, "more.csv", "csv")

    written = items_import(study=study, items=items, file_name="more.csv")

    assert written == (2, 6)
    assert study.items.count() == 8
    new = study.items.get(external_id="new-1")
    assert (new.reference, new.metadata) == ("ref one", {"speaker": "spk9"})
    assert study.items.get(external_id="new-2").metadata == {}
    assert dict(Output.objects.filter(item=new).values_list("system__name", "text")) == {
        "sys-0": "a0", "sys-1": "a1", "sys-2": "a2"
    }
    after = snapshot(study)["outputs"]
    assert {k: v for k, v in after.items() if k[0].startswith("item-")} == kept
    assert study_validate(study=study) == []
    # The same file again writes nothing.
    assert items_import(study=study, items=items, file_name="more.csv") == (0, 0)


@pytest.mark.django_db
def test_items_import_refuses_an_item_without_every_systems_output(study):
    text = items_csv(
        "new-1,sys-0,a0,r,", "new-1,sys-1,a1,r,", "new-1,sys-2,a2,r,",
        "new-2,sys-0,b0,r,", "new-2,sys-1,b1,r,",
    )
    items = parse_items_file(text, "more.csv", "csv")
    before = snapshot(study)

    with pytest.raises(SpecInvalid) as caught:
        items_import(study=study, items=items, file_name="more.csv")

    (error,) = caught.value.errors
    assert (error.source, error.line) == ("more.csv", 5)
    assert "new-2" in str(error) and "sys-2" in str(error)
    assert error.message == "no output for system 'sys-2'"
    assert snapshot(study) == before
    assert not Item.objects.filter(external_id__startswith="new-").exists()


@pytest.mark.django_db
def test_items_import_refuses_an_output_for_an_unknown_system(study):
    items = parse_items_file(
        '{"id": "new-1", "outputs": {"sys-0": "a", "sys-1": "b", "sys-2": "c", "gpt": "d"}}\n',
        "more.jsonl", "jsonl",
    )
    with pytest.raises(SpecInvalid) as caught:
        items_import(study=study, items=items, file_name="more.jsonl")
    assert [(e.line, e.message) for e in caught.value.errors] == [
        (1, "output for 'gpt', which is not a system of the study")
    ]
    assert study.items.count() == 6


@pytest.mark.django_db
def test_items_import_refuses_an_open_study():
    study = make_study(status=Study.Status.OPEN)
    items = parse_items_file(
        items_csv("new-1,sys-0,a,r,", "new-1,sys-1,b,r,", "new-1,sys-2,c,r,"), "more.csv", "csv"
    )
    with pytest.raises(SpecInvalid) as caught:
        items_import(study=study, items=items, file_name="more.csv")
    (error,) = caught.value.errors
    assert error.source == "more.csv"
    assert f"study {study.slug!r} is open" in error.message
    assert "only be added to a draft study" in error.message
    assert study.items.count() == 6


# --- judgments from files -----------------------------------------------------------------------
HEADER = "rater,item,system,criterion,value,rater_kind,system_b\n"


def judgment_rows(*rows: str, source: str = "judgments.csv"):
    return parse_judgments_csv(HEADER + "".join(row + "\n" for row in rows), source)


def import_rows(study: Study, *rows: str):
    return judgments_import(study=study, rows=judgment_rows(*rows), file_name="judgments.csv",
                            now=NOW)


GOOD_ROWS = (
    "ann,item-000,sys-0,severity,0,slp,",
    "ann,item-000,sys-0,usable,Yes,slp,",
    "ann,item-001,sys-1,severity,2,slp,",
    "ann,item-001,sys-1,note,number changed,slp,",
    "bob,item-000,sys-0,severity,1,,",
)


@pytest.mark.django_db
def test_judgments_import_stores_every_row(study):
    counts = import_rows(study, *GOOD_ROWS)

    assert (counts.created, counts.revised, counts.unchanged) == (5, 0, 0)
    ann = Rater.objects.get(external_id="ann")
    bob = Rater.objects.get(external_id="bob")
    assert (ann.kind, bob.kind) == ("slp", "expert")  # expert is the default kind
    seat = Assignment.objects.get(study=study, rater=ann)
    assert (seat.source, seat.state) == (Assignment.Source.IMPORTED, Assignment.State.DONE)
    assert seat.slots.count() == 2
    stored = {
        (j.slot.output.item.external_id, j.slot.output.system.name, j.criterion.key): (
            j.value, j.numeric_value
        )
        for j in Judgment.objects.filter(rater=ann).select_related(
            "slot__output__item", "slot__output__system", "criterion"
        )
    }
    assert stored == {
        ("item-000", "sys-0", "severity"): ("0", 0.0),
        ("item-000", "sys-0", "usable"): ("yes", None),
        ("item-001", "sys-1", "severity"): ("2", 2.0),
        ("item-001", "sys-1", "note"): ("number changed", None),
    }
    assert Judgment.objects.get(rater=bob).value == "1"
    assert all(s.completed_at == NOW for s in AssignmentSlot.objects.filter(assignment=seat))


@pytest.mark.django_db
def test_judgments_reimport_is_unchanged_and_a_changed_value_is_a_revision(study):
    import_rows(study, *GOOD_ROWS)
    ids = sorted(Judgment.objects.values_list("id", flat=True))

    again = import_rows(study, *GOOD_ROWS)

    assert (again.created, again.revised, again.unchanged) == (0, 0, 5)
    assert sorted(Judgment.objects.values_list("id", flat=True)) == ids
    assert AssignmentSlot.objects.filter(assignment__study=study).count() == 3
    assert not JudgmentRevision.objects.exists()

    changed = list(GOOD_ROWS)
    changed[0] = "ann,item-000,sys-0,severity,2,slp,"
    counts = import_rows(study, *changed)

    assert (counts.created, counts.revised, counts.unchanged) == (0, 1, 4)
    judgment = Judgment.objects.get(rater__external_id="ann", criterion__key="severity",
                                    slot__output__item__external_id="item-000")
    assert (judgment.value, judgment.numeric_value, judgment.revision) == ("2", 2.0, 1)
    (revision,) = JudgmentRevision.objects.all()
    assert (revision.judgment_id, revision.value, revision.submitted_at) == (
        judgment.pk, "0", NOW
    )
    assert sorted(Judgment.objects.values_list("id", flat=True)) == ids


@pytest.mark.django_db
def test_judgments_import_reports_every_bad_row_with_its_line_and_stores_nothing(study):
    raters = Rater.objects.count()
    rows = (
        "ann,item-000,sys-0,severity,0,,",       # line 2: fine
        "ann,item-999,sys-0,severity,0,,",       # line 3: unknown item
        "ann,item-000,sys-9,severity,0,,",       # line 4: unknown system
        "ann,item-000,sys-0,fluency,3,,",        # line 5: unknown criterion
        "ann,item-000,sys-1,severity,5,,",       # line 6: invalid value
        "ann,item-000,sys-2,usable,yes,robot,",  # line 7: bad rater kind
        "ann,item-000,sys-2,severity,1,,sys-1",  # line 8: system_b on a non-pairwise criterion
    )
    with pytest.raises(SpecInvalid) as caught:
        import_rows(study, *rows)

    errors = caught.value.errors
    assert [(e.source, e.line, e.path) for e in errors] == [
        ("judgments.csv", 3, "item"),
        ("judgments.csv", 4, "system"),
        ("judgments.csv", 5, "criterion"),
        ("judgments.csv", 6, "value"),
        ("judgments.csv", 7, "rater_kind"),
        ("judgments.csv", 8, "system_b"),
    ]
    assert errors[0].message == f"no item 'item-999' in study {study.slug!r}"
    assert errors[1].message == "no output of system 'sys-9' for item 'item-000'"
    assert errors[2].message == f"no criterion 'fluency' in study {study.slug!r}"
    assert errors[3].message == "criterion 'severity': '5' is not one of '0', '1', '2'"
    assert errors[4].message == "'robot' is not one of crowd, expert, llm, metric, slp"
    assert errors[5].message == "criterion 'severity' is not pairwise"
    assert not Judgment.objects.exists()
    assert Rater.objects.count() == raters
    assert not Assignment.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_conflicting_duplicate_rows_are_reported(study):
    with pytest.raises(SpecInvalid) as caught:
        import_rows(
            study,
            "ann,item-000,sys-0,severity,0,,",
            "ann,item-000,sys-0,severity,0,,",  # the same answer twice is fine
            "ann,item-000,sys-0,severity,1,,",
        )
    assert [(e.line, e.path, e.message) for e in caught.value.errors] == [
        (4, "value", "conflicts with line 2 for the same rater, output and criterion")
    ]
    assert not Judgment.objects.exists()


@pytest.mark.django_db
def test_identical_duplicate_rows_store_one_judgment(study):
    counts = import_rows(study, "ann,item-000,sys-0,usable,yes,,", "ann,item-000,sys-0,usable,y,,")
    assert counts.created == 1
    assert Judgment.objects.get().value == "yes"


@pytest.mark.django_db
def test_pairwise_judgments_need_system_b():
    study = make_study(design="pairwise", n_systems=2)

    with pytest.raises(SpecInvalid) as caught:
        import_rows(
            study,
            "ann,item-000,sys-0,preference,A,crowd,",
            "ann,item-001,sys-0,preference,B,crowd,sys-0",
        )
    assert [(e.line, e.path) for e in caught.value.errors] == [(2, "system_b"), (3, "system_b")]
    assert caught.value.errors[0].message == (
        "a pairwise criterion needs system_b (the output shown as B)"
    )
    assert caught.value.errors[1].message == "no other output of system 'sys-0' for 'item-001'"
    assert not Judgment.objects.exists()

    counts = import_rows(study, "ann,item-000,sys-0,preference,b,crowd,sys-1")
    assert counts.created == 1
    judgment = Judgment.objects.select_related("slot__output__system",
                                               "slot__output_b__system").get()
    assert judgment.value == "B"
    assert (judgment.slot.output.system.name, judgment.slot.output_b.system.name) == (
        "sys-0", "sys-1"
    )
    assert judgment.slot.output.item.external_id == "item-000"


@pytest.mark.django_db
def test_judgments_of_a_rater_who_rates_in_the_browser_are_refused_whole():
    study = make_study(status=Study.Status.OPEN)
    browser_rater = invite(study, external_id="PID-browser")
    assignment_claim(study=study, rater=browser_rater, now=NOW)
    raters = Rater.objects.count()

    with pytest.raises(SpecInvalid) as caught:
        import_rows(
            study,
            "ann,item-000,sys-0,usable,yes,expert,",        # a new rater, listed first
            "PID-browser,item-000,sys-0,usable,no,crowd,",
        )
    (error,) = caught.value.errors
    assert error.path == "rater"
    assert "'PID-browser' already rates this study in the browser" in error.message
    assert not Judgment.objects.exists()
    assert Rater.objects.count() == raters
    assert not Assignment.objects.filter(source=Assignment.Source.IMPORTED).exists()
