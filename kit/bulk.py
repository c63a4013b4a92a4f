"""Writing many new rows of one model fast: PostgreSQL's COPY, the ORM's bulk insert elsewhere.

`rows_insert` takes plain tuples, not model instances: building, validating and rendering a
Django instance per row costs several times what the database needs to store it (a 120,000-row
study design spent 3.4x a bare COPY through `bulk_create`). On PostgreSQL with psycopg2 the rows
are streamed as one `COPY ... FROM STDIN` (text format) on the cursor Django itself uses, so
the COPY is part of the caller's transaction; on any other database (SQLite, the embedded
default) or driver the rows become instances and go through `bulk_create` in batches.

Both paths store the same row: columns the caller does not give get what `bulk_create` would
write (the field's default, `auto_now`/`auto_now_add` times, the database default where the
field declares `db_default`), ids come from the table's sequence, so later inserts keep working.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import NOT_PROVIDED, Field, JSONField, Model

COPY_NULL = r"\N"
# Rows joined into one piece of COPY data: big enough that the per-piece Python work vanishes,
# small enough that the whole input never sits in memory.
_ROWS_PER_PIECE = 2000
_READ_SIZE = 1 << 16
# COPY's text format gives tab, newline, carriage return and backslash a meaning: escape them.
_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_available(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether `rows_insert` can COPY on this database: PostgreSQL through psycopg2."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    import psycopg2  # only imported where PostgreSQL is configured

    # Every backend's wrapper has its driver module as `Database`; the stubs do not declare it.
    return connection.Database is psycopg2  # type: ignore[attr-defined]


def copy_text(value: Any) -> str:
    """One value as a field of COPY's text format (NULL, escaped text, ISO dates).

    Raises ValueError for text containing NUL (PostgreSQL text cannot hold it; the ORM refuses
    it too) and for a naive datetime while USE_TZ is on, TypeError for any other type (a JSON
    dict, bytes...): refusing is better than storing its repr.
    """
    if value is None:
        return COPY_NULL
    if isinstance(value, bool):  # before int: bool is an int
        return "t" if value else "f"
    if isinstance(value, int):
        return str(int(value))  # int(): an int subclass (an enum) may print as something else
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("text with a NUL character cannot be stored")
        return str.translate(value, _TEXT_ESCAPES)
    if isinstance(value, dt.datetime):
        if settings.USE_TZ and value.tzinfo is None:
            raise ValueError(f"naive datetime {value} while USE_TZ is on")
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float | decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"cannot write a {type(value).__name__} with COPY")


def _field_text(field: Field, value: Any) -> str:
    """`value` of `field` for COPY: a JSON field's value as JSON text (None is SQL NULL, as the
    ORM stores it), anything else through `copy_text`."""
    if isinstance(field, JSONField) and value is not None:
        value = json.dumps(value, cls=field.encoder)
    return copy_text(value)


class _PieceReader:
    """A file-like `read(size)` over pieces of text made on demand (what copy_expert reads)."""

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self._piece = ""
        self._offset = 0
        self.error: BaseException | None = None

    def read(self, size: int = -1) -> str:
        try:
            while self._offset >= len(self._piece):
                self._piece = next(self._pieces, "")
                self._offset = 0
                if not self._piece:
                    return ""
            if size < 0:
                size = len(self._piece)
            start = self._offset
            self._offset += size
            return self._piece[start:self._offset]
        except BaseException as error:
            # psycopg2 aborts the COPY and raises its own error; keep the caller's to re-raise.
            self.error = error
            raise


def _fill_ins(model: type[Model], given: Sequence[str]) -> tuple[list[Field], list[Field]]:
    """The model's other writable columns, split into constant ones and per-row ones (a
    callable default such as uuid4 gives each row its own value); the auto id and fields with a
    database default or a generated value are left to the database."""
    constant: list[Field] = []
    per_row: list[Field] = []
    for field in model._meta.concrete_fields:
        if field.attname in given or field is model._meta.auto_field:
            continue
        if getattr(field, "generated", False) or field.db_default is not NOT_PROVIDED:
            continue
        (per_row if field.has_default() and callable(field.default) else constant).append(field)
    return constant, per_row


def _check_fields(model: type[Model], fields: Sequence[str]) -> None:
    writable = {f.attname for f in model._meta.concrete_fields if f is not model._meta.auto_field}
    unknown = [name for name in fields if name not in writable]
    if unknown or len(set(fields)) != len(fields):
        raise ValueError(
            f"{model.__name__}: fields must be distinct writable attnames (not the auto id), "
            f"got {list(fields)}"
        )


def rows_insert(
    *,
    model: type[Model],
    fields: Sequence[str],
    rows: Iterable[Sequence[Any]],
    using: str = DEFAULT_DB_ALIAS,
    batch_size: int = 5000,
) -> int:
    """Insert `rows` (tuples of values for `fields`, by attname: "assignment_id") as new rows of
    `model`; returns how many were written.

    Preconditions: the values are what the columns store (ids, not instances; no expressions);
    the model's save() and signals are not called (as with bulk_create). Runs in the caller's
    transaction when there is one (inside a savepoint), else in its own: all rows are written or
    none. `rows` is consumed once, lazily, so it may be a generator; an exception it raises
    propagates unchanged after the rows written so far are rolled back.
    """
    _check_fields(model, fields)
    with transaction.atomic(using=using):
        if copy_available(using):
            return _copy_rows(model, fields, rows, using)
        return _bulk_create_rows(model, fields, rows, using, batch_size)


def _bulk_create_rows(model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]],
                      using: str, batch_size: int) -> int:
    manager = model._base_manager.db_manager(using)
    written = 0
    iterator = iter(rows)
    while batch := [model(**dict(zip(fields, row, strict=True)))
                    for row in islice(iterator, batch_size)]:
        manager.bulk_create(batch)
        written += len(batch)
    return written


def _copy_rows(model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]],
               using: str) -> int:
    connection = connections[using]
    constant, per_row = _fill_ins(model, fields)
    blank = model()  # what bulk_create would store in the columns not given
    suffix = "".join("\t" + _field_text(f, f.pre_save(blank, add=True)) for f in constant)
    suffix += "\n"
    # By attname from the concrete fields (rows_insert checked that each name is one of them).
    by_attname = {f.attname: f for f in model._meta.concrete_fields}
    given = [by_attname[name] for name in fields]
    columns = [f.column for f in given + per_row + constant]  # the order of line()'s values
    json_given = [(i, f) for i, f in enumerate(given) if isinstance(f, JSONField)]
    width = len(fields)
    count = 0

    def line(row: Sequence[Any]) -> str:
        if len(row) != width:
            # Not the row itself: its text may be personal data, and errors end up in logs.
            raise ValueError(f"a row of {len(row)} values for {width} fields")
        if json_given:
            row = list(row)
            for i, json_field in json_given:
                if row[i] is not None:
                    row[i] = json.dumps(row[i], cls=json_field.encoder)
        # Ints, NULLs and short codes ("target") are nearly every value of a design: spare them
        # the function call (letters and digits need no escaping).
        text = "\t".join([
            COPY_NULL if v is None else str(v) if type(v) is int
            else v if type(v) is str and v.isalnum() else copy_text(v)
            for v in row
        ])
        for field in per_row:
            text += "\t" + _field_text(field, field.get_default())
        return text + suffix

    def pieces() -> Iterator[str]:
        nonlocal count
        iterator = iter(rows)
        while lines := [line(row) for row in islice(iterator, _ROWS_PER_PIECE)]:
            count += len(lines)
            yield "".join(lines)

    quote = connection.ops.quote_name
    statement = (f"COPY {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "
                 "FROM STDIN")
    reader = _PieceReader(pieces())
    with connection.cursor() as cursor:
        _copy_execute(connection, cursor, statement,
                      lambda: cursor.cursor.copy_expert(statement, reader, size=_READ_SIZE),
                      reader)
    return count


def _copy_execute(connection: Any, cursor: Any, statement: str, copy: Callable[[], None],
                  reader: _PieceReader) -> None:
    """Run `copy` as Django runs a statement: through the connection's execute wrappers (which
    see `statement`), logged like a query where queries are logged (debug, tests'
    CaptureQueriesContext), database errors translated to django.db's, and an error raised
    while producing the rows re-raised as itself rather than as psycopg2's aborted COPY."""

    def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        connection.validate_no_broken_transaction()
        logging = cursor.debug_sql(sql) if isinstance(cursor, CursorDebugWrapper) else nullcontext()
        try:
            with logging, connection.wrap_database_errors:
                copy()
        except Exception:
            if reader.error is not None:
                raise reader.error from None
            raise

    executor: Callable[..., None] = run
    for wrapper in reversed(connection.execute_wrappers):
        executor = functools.partial(wrapper, executor)
    executor(statement, None, False, {"connection": connection, "cursor": cursor})
