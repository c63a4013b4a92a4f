"""Writing a design's slots with COPY on PostgreSQL (kit.bulk), and the bulk-insert fallback.

The two paths must store the very same rows; the COPY path must run inside the service's
transaction (nothing written on failure) and leave the id sequence right.
"""

import datetime as dt
import decimal
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

import kit.bulk
from evalstudy.models import Assignment, AssignmentSlot, AuditEvent, Item
from evalstudy.services import study_build_assignments
from kit.bulk import copy_text, rows_insert
from tests.factories import make_study

pytestmark = pytest.mark.django_db

SLOT_TABLE = AssignmentSlot._meta.db_table
# The suite runs on PostgreSQL; on SQLite (the embedded default) only the fallback can be run.
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY path")


def _slot_table(study):
    """Every column of every slot of `study`, the seat given by its index (ids differ)."""
    seat_index = dict(study.assignments.values_list("id", "seat_index"))
    columns = [f.attname for f in AssignmentSlot._meta.concrete_fields if f.attname != "id"]
    rows = AssignmentSlot.objects.filter(assignment__study=study).values(*columns)
    return sorted(
        (seat_index[row.pop("assignment_id")], row["position"], sorted(row.items()))
        for row in rows
    )


def _statements(queries, table):
    return [q["sql"] for q in queries if f'"{table}"' in q["sql"]]


@postgresql_only
def test_copy_is_available_on_the_test_database():
    assert kit.bulk.copy_available(), "the suite runs on PostgreSQL with psycopg2"


@postgresql_only
def test_slots_are_written_with_copy_on_postgresql():
    study = make_study(n_items=9, n_systems=3, ratings_per_output=2, attention_check_every=3)
    with CaptureQueriesContext(connection) as queries:
        study_build_assignments(study=study)
    slot_statements = _statements(queries.captured_queries, SLOT_TABLE)
    copies = [sql for sql in slot_statements if sql.startswith("COPY ")]
    inserts = [sql for sql in slot_statements if sql.startswith("INSERT ")]
    assert len(copies) == 1 and copies[0].endswith("FROM STDIN")
    assert inserts == []
    assert AssignmentSlot.objects.filter(assignment__study=study).count() == 6 * (1 + 9 + 3)


@postgresql_only
def test_copy_passes_through_the_connections_execute_wrappers():
    study = make_study(n_items=4, n_systems=2)
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        study_build_assignments(study=study)
    assert any(sql.startswith(f'COPY "{SLOT_TABLE}"') for sql in seen)


@pytest.mark.parametrize("design, options", [
    ("latin_square", {"ratings_per_output": 2, "attention_check_every": 3}),
    ("latin_square", {"items_per_rater": 4}),
    ("pairwise", {"attention_check_every": 2}),
    ("crossed", {"ratings_per_output": 2}),
])
def test_copy_and_bulk_create_store_identical_slots(monkeypatch, design, options):
    study = make_study(n_items=8, n_systems=3, design=design, **options)
    study_build_assignments(study=study)
    copied = _slot_table(study)

    monkeypatch.setattr(kit.bulk, "copy_available", lambda using="default": False)
    with CaptureQueriesContext(connection) as queries:
        study_build_assignments(study=study)  # rebuilds the same design, seeds and all
    statements = _statements(queries.captured_queries, SLOT_TABLE)
    assert not any(sql.startswith("COPY") for sql in statements)
    assert any(sql.startswith("INSERT") for sql in statements)
    inserted = _slot_table(study)

    assert copied == inserted
    assert len(copied) > 0
    kinds = {row[2][[name for name, _ in row[2]].index("kind")][1] for row in copied}
    assert "calibration" in kinds and "target" in kinds
    if options.get("attention_check_every"):
        assert "attention" in kinds
    nulls = AssignmentSlot.objects.filter(assignment__study=study)
    assert not nulls.filter(served_at__isnull=False).exists()
    assert not nulls.filter(completed_at__isnull=False).exists()
    if design == "pairwise":
        assert not nulls.filter(kind="target", output_b__isnull=True).exists()
    else:
        assert not nulls.filter(output_b__isnull=False).exists()
    assert not nulls.filter(kind="target", calibration_item__isnull=False).exists()


def test_failure_while_writing_slots_rolls_everything_back(monkeypatch):
    study = make_study(n_items=12, n_systems=3, ratings_per_output=2)
    study_build_assignments(study=study)
    before = _slot_table(study)
    seats_before = list(study.assignments.order_by("id").values_list("id", flat=True))
    events_before = AuditEvent.objects.count()

    # Small COPY pieces, so that rows have already been sent when the failure comes.
    monkeypatch.setattr(kit.bulk, "_ROWS_PER_PIECE", 3)
    import evalstudy.services.building as services

    real_order_seat = services.order_seat
    calls = []

    def order_seat_with_unknown_calibration(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # the last seat's list names a calibration item that does not exist
            kwargs["calibration"] = ["no-such-calibration-item"]
        return real_order_seat(*args, **kwargs)

    monkeypatch.setattr(services, "order_seat", order_seat_with_unknown_calibration)
    with pytest.raises(KeyError, match="no-such-calibration-item"):
        study_build_assignments(study=study)

    assert len(calls) == 4  # seats are ordered as they stream: it failed on the 4th of 6
    assert list(study.assignments.order_by("id").values_list("id", flat=True)) == seats_before
    assert _slot_table(study) == before
    assert AuditEvent.objects.count() == events_before


def test_a_rejected_row_rolls_back_the_whole_copy_and_the_connection_stays_usable():
    study = make_study(n_items=3, n_systems=2)
    seat = Assignment.objects.create(study=study, seat_index=99)
    output_id = study.items.first().outputs.first().pk
    rows = [(seat.pk, n, "target", output_id) for n in range(5000)]
    rows[4321] = (seat.pk, 4321, "target", None)  # breaks slot_kind_matches_content
    with pytest.raises(IntegrityError, match="slot_kind_matches_content"):
        rows_insert(model=AssignmentSlot, rows=rows,
                    fields=("assignment_id", "position", "kind", "output_id"))
    assert not seat.slots.exists()
    assert rows_insert(model=AssignmentSlot, rows=rows[:3],
                       fields=("assignment_id", "position", "kind", "output_id")) == 3


def test_ids_come_from_the_sequence_and_later_orm_inserts_work():
    study = make_study(n_items=6, n_systems=2)
    study_build_assignments(study=study)
    slot_ids = list(AssignmentSlot.objects.filter(assignment__study=study)
                    .values_list("id", flat=True))
    assert len(slot_ids) == len(set(slot_ids)) and None not in slot_ids

    seat = Assignment.objects.create(study=study, seat_index=50)
    later = AssignmentSlot.objects.create(
        assignment=seat, position=0, kind="target", output=study.items.first().outputs.first()
    )
    assert later.pk > max(slot_ids)
    study_build_assignments(study=study)  # rebuilding again keeps taking fresh ids
    rebuilt = AssignmentSlot.objects.filter(assignment__study=study, assignment__seat_index__lt=50)
    assert min(rebuilt.values_list("id", flat=True)) > later.pk


AWKWARD_TEXTS = [
    "plain", "", "tab\there", "new\nline", "carriage\rreturn", "back\\slash", "\\N", "\\.",
    "trailing backslash\\", "ünïcödé — “quotes” 日本", "'; DROP TABLE x; --", "a,b\"c",
]


@pytest.mark.parametrize("use_copy", [True, False])
def test_rows_insert_keeps_awkward_text_nulls_and_json(monkeypatch, use_copy):
    if not use_copy:
        monkeypatch.setattr(kit.bulk, "copy_available", lambda using="default": False)
    study = make_study(n_items=0, n_systems=1)
    rows = [(study.pk, f"id-{n}", text, text[::-1]) for n, text in enumerate(AWKWARD_TEXTS)]
    written = rows_insert(model=Item, fields=("study_id", "external_id", "reference", "context"),
                          rows=iter(rows))
    assert written == len(rows)
    stored = {i.external_id: i for i in Item.objects.filter(study=study)}
    for _, external_id, text, reversed_text in rows:
        assert stored[external_id].reference == text
        assert stored[external_id].context == reversed_text
        assert stored[external_id].metadata == {}, "the field's default, as bulk_create writes"

    metadata = {"speaker": "tab\tand \"quote\"", "severity": [1, None, 2.5], "nested": {"a": "\\"}}
    rows_insert(model=Item, fields=("study_id", "external_id", "metadata"),
                rows=[(study.pk, "with-metadata", metadata)])
    assert Item.objects.get(study=study, external_id="with-metadata").metadata == metadata


@postgresql_only
def test_rows_insert_refuses_nul_and_writes_nothing():
    study = make_study(n_items=0, n_systems=1)
    rows = [(study.pk, "ok", "fine"), (study.pk, "bad", "nul\x00inside")]
    with pytest.raises(ValueError, match="NUL"):
        rows_insert(model=Item, fields=("study_id", "external_id", "reference"), rows=rows)
    assert not Item.objects.filter(study=study).exists()


def test_rows_insert_refuses_the_auto_id_and_unknown_fields():
    with pytest.raises(ValueError, match="writable attnames"):
        rows_insert(model=Item, fields=("id", "study_id"), rows=[])
    with pytest.raises(ValueError, match="writable attnames"):
        rows_insert(model=Item, fields=("study",), rows=[])


def test_rows_insert_inside_an_outer_transaction_is_undone_with_it():
    study = make_study(n_items=0, n_systems=1)
    with pytest.raises(RuntimeError), transaction.atomic():
        rows_insert(model=Item, fields=("study_id", "external_id"), rows=[(study.pk, "x")])
        assert Item.objects.filter(study=study).count() == 1
        raise RuntimeError
    assert not Item.objects.filter(study=study).exists()


def test_copy_text_formats_values_as_postgresql_reads_them():
    assert copy_text(None) == "\\N"
    assert copy_text(True) == "t" and copy_text(False) == "f"
    assert copy_text(42) == "42"
    assert copy_text("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"
    assert copy_text(AssignmentSlot.Kind.TARGET) == "target"
    assert copy_text(decimal.Decimal("1.50")) == "1.50"
    assert copy_text(1.25) == "1.25"
    moment = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    assert copy_text(moment) == "2024-05-01T12:30:00+00:00"
    assert copy_text(dt.date(2024, 5, 1)) == "2024-05-01"
    key = uuid.UUID(int=7)
    assert copy_text(key) == str(key)
    with pytest.raises(ValueError, match="naive"):
        copy_text(dt.datetime(2024, 5, 1))
    with pytest.raises(TypeError, match="dict"):
        copy_text({"a": 1})
    with pytest.raises(ValueError, match="NUL"):
        copy_text("a\x00b")
