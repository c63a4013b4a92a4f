"""Benchmark: build and store a Latin-square study design on PostgreSQL.

What is measured
----------------
`evalstudy.services.study_build_assignments` on a Latin-square study of ``--items`` items x
``--systems`` systems with ``--ratings`` ratings per output (defaults: 10,000 x 4 x 3, i.e.
120,000 target slots, plus one calibration slot per seat). The timed call is the whole service:
validation, loading items and outputs, building the lists, ordering every seat, and writing the
seats (Assignment rows) and slots (AssignmentSlot rows) in one transaction. On PostgreSQL the
service writes the slots with COPY (kit.bulk.rows_insert).

Why a reference
---------------
Seconds alone depend on the machine, so the same run also times writing the same number of
slot rows two other ways, into an equally empty slot table:

* ``orm bulk_create``: instantiate AssignmentSlot objects and ``bulk_create`` them in batches of
  ``SLOT_BATCH_SIZE``, in one transaction, into seats created beforehand (untimed). This is the
  least a service writing slots through the ORM could cost (as this one did before it used
  COPY, and as it still does on SQLite).
* ``copy``: a raw ``COPY ... FROM STDIN`` of the same rows (text prepared untimed), the lower
  bound of the database itself.

Both references include their transaction's commit, as the service's time does (the slot
table's foreign keys are deferred, so the commit is where they are checked).

Before every timed operation the seats and slots of the bench study are deleted and the two
tables are ``VACUUM ANALYZE``d, so each operation starts from the same state. With ``--repeat``
each operation is run that many times and the best time is reported.

Target
------
The last line is ``target design_vs_copy: ratio R (goal <= 1.3)``, R being the service's time
over the bare COPY's, both from this run. The machine's load average is printed before and
after: on a shared machine a high load makes the figures noisy.

Run: ``.venv/bin/python bench/design.py [--items 10000 --systems 4 --ratings 3
--items-per-rater N --repeat 1 --keep --profile --smoke]``; ``--smoke``: 12 items x 2 systems,
no goal (make test runs it, so that a schema change cannot break the references unseen).
DATABASE_URL defaults to ``postgres://postgres@127.0.0.1:5432/evalstudy_bench``; the database
is created if missing and migrated. The bench study (slug ``bench-latin-square``) is deleted
at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from bench.common import setup_django  # noqa: E402

SLUG = "bench-latin-square"

DESIGN_GOAL = 1.3  # service / bare COPY, from the issue


@dataclass
class Timing:
    operation: str
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else float("inf")


# --- database and Django ------------------------------------------------------------------


def execute(statement: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def vacuum_analyze() -> None:
    """VACUUM ANALYZE the seat and slot tables (outside any transaction)."""
    from evalstudy.models import Assignment, AssignmentSlot

    for model in (Assignment, AssignmentSlot):
        execute(f'VACUUM ANALYZE "{model._meta.db_table}"')


# --- the bench study ----------------------------------------------------------------------


def clear_design(study_id: int) -> None:
    """Delete every seat and slot of the study with plain SQL, then VACUUM ANALYZE."""
    from django.db import transaction

    from evalstudy.models import Assignment, AssignmentSlot

    seats = Assignment._meta.db_table
    slots = AssignmentSlot._meta.db_table
    with transaction.atomic():
        execute(
            f'DELETE FROM "{slots}" WHERE assignment_id IN '
            f'(SELECT id FROM "{seats}" WHERE study_id = %s)',
            [study_id],
        )
        execute(f'DELETE FROM "{seats}" WHERE study_id = %s', [study_id])
    vacuum_analyze()


def delete_bench_study() -> None:
    from evalstudy.models import Study

    for study_id in Study.objects.filter(slug=SLUG).values_list("id", flat=True):
        clear_design(study_id)
        Study.objects.filter(pk=study_id).delete()


def create_study(args: argparse.Namespace):
    """Create the bench study with its systems, items, outputs, criterion and calibration item."""
    from django.db import transaction

    from evalstudy.models import CalibrationItem, Criterion, Item, Output, Study, System

    with transaction.atomic():
        study = Study.objects.create(
            slug=SLUG, title="Benchmark: Latin square", design=Study.Design.LATIN_SQUARE,
            ratings_per_output=args.ratings, items_per_rater=args.items_per_rater,
            seed=20240601,
        )
        Criterion.objects.create(
            study=study, key="fluent", prompt="Is the output fluent?", kind="binary"
        )
        CalibrationItem.objects.create(
            study=study, key="calibration-1", reference="The cat sat.", text="The cat sat.",
            expected={"fluent": "yes"},
        )
        systems = System.objects.bulk_create(
            System(study=study, name=f"system-{s}") for s in range(args.systems)
        )
        items = Item.objects.bulk_create(
            (Item(study=study, external_id=f"item-{i:06d}", reference=f"Reference {i}.")
             for i in range(args.items)),
            batch_size=5000,
        )
        Output.objects.bulk_create(
            (Output(item=item, system=system, text=f"Output of {system.name} for item {n}.")
             for n, item in enumerate(items) for system in systems),
            batch_size=5000,
        )
    return study


def slot_columns() -> tuple[str, ...]:
    """The columns the references write, in this order: every column of the slot table but
    its id, read from the model (a hand-kept list once missed `shown_outputs`, NOT NULL, and
    the COPY failed), the seat first."""
    from evalstudy.models import AssignmentSlot

    columns = [f.column for f in AssignmentSlot._meta.concrete_fields if not f.primary_key]
    columns.remove("assignment_id")
    return ("assignment_id", *columns)


def slot_rows(study_id: int) -> tuple[int, list[tuple]]:
    """The study's seats count and slot rows: (seat number, then slot_columns() after the
    first)."""
    from evalstudy.models import Assignment, AssignmentSlot

    seat_ids = list(
        Assignment.objects.filter(study_id=study_id).order_by("seat_index")
        .values_list("id", flat=True)
    )
    number = {pk: n for n, pk in enumerate(seat_ids)}
    rows = [
        (number[assignment_id], *rest)
        for assignment_id, *rest in (
            AssignmentSlot.objects.filter(assignment__study_id=study_id)
            .order_by("assignment_id", "position")
            .values_list(*slot_columns())
        )
    ]
    return len(seat_ids), rows


def create_seats(study, n_seats: int) -> list[int]:
    """Seats for the reference inserts (untimed), like the service's, without slots."""
    from evalstudy.models import Assignment

    seats = Assignment.objects.bulk_create(
        Assignment(study=study, seat_index=n, list_index=n, replica=0, seed=n)
        for n in range(n_seats)
    )
    return [seat.pk for seat in seats]


# --- timed operations ---------------------------------------------------------------------


def timed(function: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def time_service(study) -> tuple[float, int, int]:
    """Time study_build_assignments; returns seconds, seats and slots (counted afterwards)."""
    from evalstudy.models import AssignmentSlot
    from evalstudy.services import study_build_assignments

    clear_design(study.pk)
    seconds, seats = timed(lambda: study_build_assignments(study=study))
    slots = AssignmentSlot.objects.filter(assignment__study=study).count()
    return seconds, seats, slots


def time_orm_bulk_create(study, n_seats: int, rows: list[tuple]) -> float:
    """Time instantiating and bulk-inserting `rows` as AssignmentSlot objects, batch by batch."""
    from django.db import transaction

    from evalstudy.models import AssignmentSlot
    from evalstudy.services import SLOT_BATCH_SIZE

    clear_design(study.pk)
    seat_ids = create_seats(study, n_seats)
    vacuum_analyze()

    columns = slot_columns()

    def insert() -> None:
        with transaction.atomic():
            batch: list[AssignmentSlot] = []
            for seat, *rest in rows:
                batch.append(AssignmentSlot(
                    **dict(zip(columns, (seat_ids[seat], *rest), strict=True))
                ))
                if len(batch) >= SLOT_BATCH_SIZE:
                    AssignmentSlot.objects.bulk_create(batch)
                    batch = []
            AssignmentSlot.objects.bulk_create(batch)

    seconds, _ = timed(insert)
    return seconds


def time_copy(study, n_seats: int, rows: list[tuple]) -> float:
    """Time a raw COPY of `rows` into the slot table (the text is prepared untimed)."""
    from django.db import connection, transaction

    from evalstudy.models import AssignmentSlot

    clear_design(study.pk)
    seat_ids = create_seats(study, n_seats)
    vacuum_analyze()

    def field(value: object) -> str:  # COPY's text format; JSON columns as JSON
        if value is None:
            return r"\N"
        text = json.dumps(value) if isinstance(value, list | dict) else str(value)
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    text = "".join(
        "\t".join(field(v) for v in (seat_ids[seat], *rest)) + "\n" for seat, *rest in rows
    )
    statement = (
        f'COPY "{AssignmentSlot._meta.db_table}" ({", ".join(slot_columns())}) FROM STDIN'
    )

    def copy() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.copy_expert(statement, io.StringIO(text))

    seconds, _ = timed(copy)
    return seconds


def profile_service(study, top: int) -> None:
    """Run the service once under cProfile and print the most expensive functions."""
    from evalstudy.services import study_build_assignments

    clear_design(study.pk)
    profiler = cProfile.Profile()
    profiler.runcall(study_build_assignments, study=study)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print("\ncProfile of study_build_assignments, by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)
    print("by own time:")
    stats.sort_stats("tottime").print_stats(top)


# --- report -------------------------------------------------------------------------------


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} CPUs)"


def print_environment(args: argparse.Namespace, url: str) -> None:
    from django.db import connection

    (version,) = execute("SHOW server_version")[0]
    parts = urlsplit(url)
    print(f"machine:    {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"PostgreSQL: {version} at {parts.hostname}:{parts.port or 5432}"
          f"/{connection.settings_dict['NAME']}")
    print(f"parameters: items={args.items} systems={args.systems} ratings={args.ratings} "
          f"items_per_rater={args.items_per_rater} repeat={args.repeat}")
    print(f"load:       {load_average()} before")


def print_table(timings: list[Timing]) -> None:
    orm = next(t for t in timings if t.operation == "orm bulk_create")
    copy = next(t for t in timings if t.operation == "copy")
    print(f"\n{'operation':<26} {'rows':>9} {'seconds':>9} {'rows/s':>10} "
          f"{'x orm':>7} {'x copy':>7}")
    for t in timings:
        print(f"{t.operation:<26} {t.rows:>9,} {t.seconds:>9.3f} {t.rate:>10,.0f} "
              f"{t.seconds / orm.seconds:>7.2f} {t.seconds / copy.seconds:>7.2f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--ratings", type=int, default=3, help="ratings per output")
    parser.add_argument("--items-per-rater", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="report the best of N runs")
    parser.add_argument("--keep", action="store_true", help="keep the bench study at the end")
    parser.add_argument("--profile", action="store_true",
                        help="also run the service once under cProfile")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes (12 items x 2 systems), no goal (for make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.items, args.systems, args.ratings, args.repeat = 12, 2, 1, 1
    if min(args.items, args.systems, args.ratings, args.repeat) < 1:
        parser.error("--items, --systems, --ratings and --repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    url = setup_django("bench/design.py")
    print_environment(args, url)

    delete_bench_study()
    seconds, study = timed(lambda: create_study(args))
    print(f"setup:      {args.items:,} items, {args.items * args.systems:,} outputs "
          f"created in {seconds:.1f} s (untimed)")

    best: dict[str, float] = {}
    seats = slots = 0
    rows: list[tuple] = []
    for _ in range(args.repeat):
        seconds, seats, slots = time_service(study)
        best["study_build_assignments"] = min(best.get("study_build_assignments", seconds),
                                              seconds)
        n_seats, rows = slot_rows(study.pk)
        assert n_seats == seats and len(rows) == slots, (n_seats, seats, len(rows), slots)
        for name, function in (("orm bulk_create", time_orm_bulk_create),
                               ("copy", time_copy)):
            seconds = function(study, seats, rows)
            best[name] = min(best.get(name, seconds), seconds)
    targets = sum(1 for row in rows if row[2] == "target")
    print(f"result:     {seats:,} seats, {slots:,} slots ({targets:,} target slots)")
    print_table([Timing(name, slots, seconds) for name, seconds in best.items()])

    if args.profile:
        profile_service(study, args.profile_top)
    if args.keep:
        time_service(study)  # leave the service's design behind, not a reference's
        print(f"\nkept study {SLUG} (id {study.pk})")
    else:
        delete_bench_study()
    print(f"load:       {load_average()} after")
    if args.smoke:
        print("smoke: tiny sizes, no goal")
        return
    ratio = best["study_build_assignments"] / best["copy"]
    print(f"target design_vs_copy: ratio {ratio:.2f} (goal <= {DESIGN_GOAL})")


if __name__ == "__main__":
    main()
