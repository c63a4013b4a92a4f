"""The rater's loop at the speed of its database: serve the current item, and take an answer and
serve the next item, in one locking read and at most two writes.

Raters repeat one thing thousands of times: answer the item in front of them for the first time
and get the next. On PostgreSQL this module does exactly that in

1. one read that locks the rater's seat (`SELECT ... FOR UPDATE OF` the seat row) and returns
   everything the request needs: the seat, the study, the rater and its enrollment, the slot
   answered, the first slot still open, the next one with its texts and media (each with its
   listening log), whether the answered slot's media are still to be heard (a study's
   "hear it to the end first"), the slot count and the study's questions (as JSON);
2. one write: a statement whose data-modifying `WITH` parts insert the judgments, complete
   the answered slot and mark the next one served, and, only when due, update the seat (its
   lease, renewed at most once a minute as `evalstudy.services.lease_renew` decides, or its
   end).

with the session read before them (and the account's user row for raters who sign in), and the
transaction's BEGIN and COMMIT around them: five statements, six for an account. Django's ORM
would compile a dozen queries for the same work, and compiling them costs more than running
them; the SQL here is written once per process from the models' table and column names.

Storing an answer is `annotation.services.judgment_submit`'s, the one entry every interface
calls: `submit_and_next` is its fast storage strategy, and nothing else calls it
(tests/annotation/test_rater_loop.py checks). The general strategy (`judgment_submit`'s own,
then `evalstudy.services.assignment_next` and `annotation.selectors.slot_view` for the page)
handles every case. This module only takes the cases it would accept without question: a
first answer to the current item, and the same answers to an answered item again (a double
click or a retry: nothing stored, the rater gets the item they are on). For anything else
(another database, a revision, invalid answers, a rater without a seat, a refused or stopped
rater, a session bound under an old crowd session) it returns None and writes nothing, and
`judgment_submit` stores the answer with its general strategy. The answers are checked by the
same core (`annotation.answer_checks`), and every other condition checked here is at least as
strict as the general strategy's, so the loop can never accept what the general strategy would
refuse (tests/annotation/test_rater_loop.py runs the same scenarios through both).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from evalstudy import criteria as rules
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Enrollment,
    Item,
    ItemMedia,
    Output,
    Rater,
    Study,
)
from evalstudy.services import lease_renew

from .alignment import alignment_for
from .answer_checks import StoreCounts, SubmissionRefused, answers_checked
from .flow import after_attention_check, after_calibration_item
from .media import media_views
from .models import Judgment, ListeningLog
from .selectors import SlotView, marked_sides, question_of, study_sides


def _table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model: Any, field: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(field).column)


# --- what the locking read returns ------------------------------------------------------------
@dataclass(frozen=True)
class SlotTexts:
    """A slot as its page shows it (never its system)."""

    slot_id: int
    kind: str
    position: int
    reference: str
    context: str
    text: str
    text_b: str
    media_json: str = ""  # its media and their listening log (`_media_json_sql`), or ""


@dataclass
class SeatContext:
    """One rater's seat in one study, read under the seat's lock."""

    seat_id: int
    seat_state: str
    lease_expires_at: dt.datetime | None
    study: Study
    rater: Rater
    enrolled: bool  # an enrollment exists and its invitation is not pending
    stopped: bool
    platform_session_id: str | None  # None: no enrollment
    consented: bool
    instructions_seen: bool
    slot_id: int | None  # the slot answered (None when only serving)
    slot_kind: str
    slot_completed: bool
    slot_served_at: dt.datetime | None
    slot_calibration_id: int | None
    first_open_id: int | None
    next: SlotTexts | None  # the first open slot other than the one answered
    next_served: bool
    previous_target_id: int | None  # the last completed target slot before `next`
    total: int
    criteria: tuple[Criterion, ...]
    criteria_json: str  # the criteria as the database gave them: the key of what is built
    # Media of the answered slot not yet heard to the end, when the study requires it.
    media_pending: int = 0


def _criteria_json_sql() -> str:
    """The study's criteria as one JSON array (PostgreSQL), in the order raters see them."""
    fields = ("id", "key", "prompt", "description", "kind", "scale_points", "labels", "options",
              "allow_tie", "allow_both", "required", "show_if_criterion", "show_if_values",
              "order", "scale_min", "scale_max", "severity_weights", "span_reference")
    pairs = ", ".join(f"'{name}', c.{_column(Criterion, name)}" for name in fields)
    order = _column(Criterion, "order")
    return (f"(SELECT json_agg(json_build_object({pairs}) ORDER BY c.{order}, c.id)::text "
            f"FROM {_table(Criterion)} c WHERE c.{_column(Criterion, 'study')} = st.id)")


def _which_sql(media: str, slot: str) -> str:
    """Which of a slot's media a row of ItemMedia is: the item's, or output A's or B's."""
    output = _column(ItemMedia, "output")
    return (f"CASE WHEN {media}.{output} IS NULL THEN 'item' "
            f"WHEN {media}.{output} = {slot}.{_column(AssignmentSlot, 'output')} THEN 'a' "
            "ELSE 'b' END")


def _slot_media_sql(slot: str) -> str:
    """FROM ... WHERE of the media shown with `slot` (a target slot) and each one's listening
    log, if any."""
    media, log = _table(ItemMedia), _table(ListeningLog)
    output, item = _column(ItemMedia, "output"), _column(ItemMedia, "item")
    s_output, s_output_b = (_column(AssignmentSlot, "output"),
                            _column(AssignmentSlot, "output_b"))
    return (f"FROM {_table(Output)} so JOIN {media} m ON m.{item} = so.{_column(Output, 'item')} "
            f"AND (m.{output} IS NULL OR m.{output} = {slot}.{s_output} "
            f"OR m.{output} = {slot}.{s_output_b}) "
            f"LEFT JOIN {log} l ON l.{_column(ListeningLog, 'slot')} = {slot}.id "
            f"AND l.{_column(ListeningLog, 'which')} = {_which_sql('m', slot)} "
            f"WHERE so.id = {slot}.{s_output}")


def _media_json_sql() -> str:
    """The next slot's media as one JSON array (annotation.media.media_views' rows)."""
    return ("(SELECT json_agg(json_build_object("
            f"'which', {_which_sql('m', 'nxt')}, 'kind', m.kind, 'mime', m.mime, "
            f"'duration', m.{_column(ItemMedia, 'duration_s')}, 'plays', l.plays, "
            f"'seeks', l.seeks, 'done', l.completed))::text {_slot_media_sql('nxt')})")


def _media_pending_sql() -> str:
    """How many media of the answered slot were not heard to the end, when the study makes
    raters hear them first (else 0)."""
    return (f"CASE WHEN st.{_column(Study, 'media_must_finish')} THEN "
            f"(SELECT count(*) {_slot_media_sql('cur')} AND l.completed IS NOT TRUE) "
            "ELSE 0 END")


@functools.cache
def _context_sql(answering: bool) -> str:
    """The locking read (PostgreSQL). Parameters: $1 the slot answered (`answering`; NULL when
    only serving), $2 the study's slug, $3 the rater's id, $4 the user's id; the rater is the
    row with that id, or the account's rater when the id is NULL.

    Answering locks the answered slot's row with the seat's: a request that waited for another
    one's lock (a double submit) then reads the rows it locked as that one left them (slot
    completed: the general path answers), where the rest of the statement still sees the
    moment it started."""
    slot, seat = _table(AssignmentSlot), _table(Assignment)
    s_assignment, s_completed = (_column(AssignmentSlot, "assignment"),
                                 _column(AssignmentSlot, "completed_at"))
    s_position, s_kind = _column(AssignmentSlot, "position"), _column(AssignmentSlot, "kind")
    open_slots = f"FROM {slot} s WHERE s.{s_assignment} = seat.id AND s.{s_completed} IS NULL"
    calibration, attention = (_column(AssignmentSlot, "calibration_item"),
                              _column(AssignmentSlot, "attention_check"))
    return f"""
SELECT seat.id, seat.{_column(Assignment, 'state')},
       seat.{_column(Assignment, 'lease_expires_at')},
       st.id, st.slug, st.title, st.status, st.instructions, st.consent_text,
       st.reference_shown, st.allow_revision, st.lease_minutes, st.attention_fail_limit,
       st.calibration_pass_mark,
       st.language, st.rater_labels, st.alignment_shown,
       st.media_must_finish, st.media_max_plays, st.media_autoplay,
       r.id, r.kind, r.{_column(Rater, 'user')}, r.{_column(Rater, 'study')}, r.origin,
       en.id, en.invitation_pending, en.stopped_at, en.platform_session_id,
       en.consented_at, en.instructions_seen_at,
       cur.id, cur.{s_kind}, cur.{s_completed}, cur.served_at,
       cur.{calibration},
       (SELECT s.id {open_slots} ORDER BY s.{s_position} LIMIT 1),
       nxt.id, nxt.{s_kind}, nxt.{s_position}, nxt.served_at,
       i.reference, i.context, o.text, ob.text,
       COALESCE(cal.reference, att.reference), COALESCE(cal.context, att.context),
       COALESCE(cal.text, att.text), COALESCE(cal.text_b, att.text_b),
       (SELECT s.id FROM {slot} s WHERE s.{s_assignment} = seat.id
          AND s.{s_kind} = '{AssignmentSlot.Kind.TARGET.value}' AND s.{s_completed} IS NOT NULL
          AND s.{s_position} < nxt.{s_position} ORDER BY s.{s_position} DESC LIMIT 1),
       (SELECT count(*) FROM {slot} s WHERE s.{s_assignment} = seat.id),
       {_criteria_json_sql()},
       {_media_json_sql()},
       {_media_pending_sql()}
FROM {seat} seat
JOIN {_table(Study)} st ON st.id = seat.{_column(Assignment, 'study')}
JOIN {_table(Rater)} r ON r.id = seat.{_column(Assignment, 'rater')}
LEFT JOIN {_table(Enrollment)} en ON en.{_column(Enrollment, 'study')} = st.id
     AND en.{_column(Enrollment, 'rater')} = r.id
{"JOIN" if answering else "LEFT JOIN"} {slot} cur ON cur.id = $1
     AND cur.{s_assignment} = seat.id
LEFT JOIN LATERAL (SELECT s.* {open_slots} AND s.id IS DISTINCT FROM $1
                   ORDER BY s.{s_position} LIMIT 1) nxt ON true
LEFT JOIN {_table(Output)} o ON o.id = nxt.{_column(AssignmentSlot, 'output')}
LEFT JOIN {_table(Item)} i ON i.id = o.{_column(Output, 'item')}
LEFT JOIN {_table(Output)} ob ON ob.id = nxt.{_column(AssignmentSlot, 'output_b')}
LEFT JOIN {_table(CalibrationItem)} cal ON cal.id = nxt.{calibration}
LEFT JOIN {_table(AttentionCheck)} att ON att.id = nxt.{attention}
WHERE st.slug = $2
  AND (($3::bigint IS NOT NULL AND r.id = $3)
       OR ($3::bigint IS NULL AND r.{_column(Rater, 'user')} = $4))
FOR UPDATE OF seat{", cur" if answering else ""}
"""


# Statements prepared on each database connection (`_execute`), by connection.
_PREPARED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_PARAMETER = re.compile(r"\$(\d+)")
_BIGINT_END = 2**63


def _execute(cursor: Any, name: str, sql: str, params: list[Any]) -> None:
    """Run `sql` (parameters $1, $2, ...) as the prepared statement `name` of this database
    connection, preparing it on first use: PostgreSQL then plans the loop's statements once per
    connection instead of on every request (their planning costs about what running them
    does). With EVALSTUDY_DB_PREPARED_STATEMENTS off (a connection pooler in transaction mode
    shares server sessions between clients, and a statement prepared on one is missing on the
    next), the statement is sent whole each time."""
    if not settings.EVALSTUDY_DB_PREPARED_STATEMENTS:
        cursor.execute(_PARAMETER.sub(r"%(p\1)s", sql),
                       {f"p{index}": value for index, value in enumerate(params, start=1)})
        return
    # The name carries the statement's digest: a server session that outlived a deploy (or is
    # shared by mistake) never runs another version's statement under the same name.
    name = f"{name}_{hashlib.sha256(sql.encode()).hexdigest()[:12]}"
    prepared = _PREPARED.setdefault(connection.connection, set())
    if name not in prepared:
        cursor.execute(f"PREPARE {name} AS {sql}")
        prepared.add(name)
    cursor.execute(f"EXECUTE {name} ({', '.join(['%s'] * len(params))})", params)


def _when(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return parse_datetime(str(value))


# Built once per process for each distinct criteria JSON (content-addressed: a changed question
# is another text, so nothing stale is ever served), and shared read-only by requests.
_CRITERIA_CACHE = 512


@functools.lru_cache(maxsize=_CRITERIA_CACHE)
def _criteria(rows_json: str | None) -> tuple[Criterion, ...]:
    criteria = []
    for row in json.loads(rows_json or "[]"):
        parent = row.pop("show_if_criterion")
        criteria.append(Criterion(**row, show_if_criterion_id=parent))
    by_id = {c.pk: c for c in criteria}
    for criterion in criteria:
        if criterion.show_if_criterion_id is not None:
            parent = by_id.get(criterion.show_if_criterion_id)
            if parent is None:  # a condition on another study's question: never shown here
                return ()
            criterion.show_if_criterion = parent
    return tuple(criteria)


def questions_html(rows_json: str, study: Study) -> str:
    """The questions of a fresh item (no answer, no error) for these criteria, as `study`'s
    raters see them (its language, what it calls outputs A and B), rendered once per such
    combination: the same for every item of a study, and most of what a page costs to
    render."""
    return _questions_html(rows_json, study.language, study_sides(study))


@functools.lru_cache(maxsize=_CRITERIA_CACHE)
def _questions_html(rows_json: str, language: str, sides: tuple[str, str]) -> str:
    from django.template.loader import render_to_string
    from django.utils import translation

    with translation.override(language):
        questions = [question_of(c, sides) for c in _criteria(rows_json)]
        return render_to_string("annotation/_questions.html", {"questions": questions,
                                                               "errors": {}})


def _read(*, slug: str, rater_id: int | None, user_id: int | None,
          slot_id: int | None) -> SeatContext | None:
    """The seat context under the seat's lock; None when the rater holds no seat in `slug`.
    Precondition: inside a transaction (the lock lasts until it ends)."""
    answering = slot_id is not None
    with connection.cursor() as cursor:
        _execute(cursor, f"evalstudy_loop_read_{int(answering)}", _context_sql(answering),
                 [slot_id, slug, rater_id, user_id])
        row = cursor.fetchone()
    if row is None:
        return None
    (seat_id, seat_state, lease, study_id, study_slug, title, status, instructions, consent,
     reference_shown, allow_revision, lease_minutes, fail_limit, pass_mark, language,
     rater_labels,
     alignment_shown, must_finish, max_plays, autoplay,
     r_id, r_kind, r_user, r_study, r_origin,
     en_id, pending, stopped_at, platform_session, consented_at, seen_at,
     cur_id, cur_kind, cur_completed, cur_served, cur_calibration,
     first_open, n_id, n_kind, n_position, n_served, reference, context, text, text_b,
     c_reference, c_context, c_text, c_text_b, previous, total, criteria, media_json,
     media_pending) = row
    study = Study(pk=study_id, slug=study_slug, title=title, status=status,
                  instructions=instructions, consent_text=consent,
                  reference_shown=reference_shown, allow_revision=allow_revision,
                  lease_minutes=lease_minutes, attention_fail_limit=fail_limit,
                  calibration_pass_mark=pass_mark,
                  language=language, alignment_shown=alignment_shown,
                  media_must_finish=must_finish, media_max_plays=max_plays,
                  media_autoplay=autoplay,
                  # Django reads JSON columns as text and decodes them itself
                  rater_labels=(json.loads(rater_labels) if isinstance(rater_labels, str)
                                else rater_labels))
    rater = Rater(pk=r_id, kind=r_kind, user_id=r_user, study_id=r_study, origin=r_origin)
    upcoming = None
    if n_id is not None:
        target = n_kind == AssignmentSlot.Kind.TARGET
        upcoming = SlotTexts(
            slot_id=n_id, kind=n_kind, position=n_position,
            reference=(reference if target else c_reference) or "",
            context=(context if target else c_context) or "",
            text=(text if target else c_text) or "", text_b=(text_b if target else c_text_b) or "",
            media_json=(media_json or "") if target else "")
    return SeatContext(
        seat_id=seat_id, seat_state=seat_state, lease_expires_at=_when(lease), study=study,
        rater=rater, enrolled=en_id is not None and not pending, stopped=stopped_at is not None,
        platform_session_id=platform_session if en_id is not None else None,
        consented=consented_at is not None, instructions_seen=seen_at is not None,
        slot_id=cur_id, slot_kind=cur_kind or "", slot_completed=cur_completed is not None,
        slot_served_at=_when(cur_served), slot_calibration_id=cur_calibration,
        first_open_id=first_open, next=upcoming, next_served=n_served is not None,
        previous_target_id=previous, total=total, criteria=_criteria(criteria),
        criteria_json=criteria or "", media_pending=media_pending or 0)


# --- who may go on ----------------------------------------------------------------------------
def _may_rate(context: SeatContext, platform_session: str, *, bound: bool) -> bool:
    """What every rater page checks, for the fast path: the session's rater may act here
    (`annotation.rater.current_rater`: a rater `bound` to the session by an entry link or a
    crowd URL must still have a working entry link, i.e. be no account's), the study admitted
    them and is open (`evalstudy.services.enrollment_of`), their seat is live and they were not
    stopped (`annotation.flow.next_step`), and the study's questions are in order."""
    rater, study = context.rater, context.study
    return (
        rater.is_human
        and (not bound or rater.has_entry_link)
        and (rater.study_id is None or rater.study_id == study.pk)
        # A crowd participant's browser acts for them only under the platform session it was
        # bound with (`annotation.rater._still_bound`).
        and (rater.origin != Rater.Origin.CROWD or context.platform_session_id is None
             or context.platform_session_id == platform_session)
        and context.enrolled and not context.stopped
        and study.status == Study.Status.OPEN
        and context.seat_state == Assignment.State.ACTIVE
        and (not study.consent_text.strip() or context.consented)
        and (not study.instructions.strip() or context.instructions_seen)
        and bool(context.criteria)
    )


# --- what the caller renders ------------------------------------------------------------------
@dataclass
class LoopPage:
    """What to show after the loop's work: `view` (the next item), or `done` (the list is
    finished), or `feedback_slot` (a practice item was answered: show its feedback), or
    `stopped` (an attention check ended the rater's participation)."""

    study: Study
    view: SlotView | None = None
    questions_html: str = ""  # the view's questions, rendered (`questions_html`)
    previous_slot_id: int | None = None
    done: bool = False
    feedback_slot: int | None = None
    stopped: bool = False
    counts: StoreCounts | None = None


def _view(context: SeatContext) -> SlotView | None:
    upcoming = context.next
    if upcoming is None:
        return None
    slot = AssignmentSlot(pk=upcoming.slot_id, kind=upcoming.kind, position=upcoming.position,
                          assignment_id=context.seat_id)
    reference = upcoming.reference if context.study.reference_shown else ""
    return SlotView(
        alignment=(None if upcoming.text_b
                   else alignment_for(context.study, reference, upcoming.text)),
        slot=slot, kind=upcoming.kind, reference=reference,
        context=upcoming.context, text=upcoming.text, text_b=upcoming.text_b,
        position=upcoming.position + 1, total=context.total,
        questions=[question_of(c, study_sides(context.study)) for c in context.criteria],
        marked=marked_sides(context.criteria),
        media=(media_views(json.loads(upcoming.media_json), slot_id=upcoming.slot_id,
                           rater_id=context.rater.pk) if upcoming.media_json else []))



_JUDGMENT_COLUMNS = ("slot", "criterion", "rater", "value", "numeric_value", "served_at",
                     "submitted_at", "revision")


@functools.cache
def _write_sql(n_judgments: int) -> str:
    """One statement for a submission's writes: insert `n_judgments` judgments, complete the
    answered slot and mark the next one served, and update the seat when `seat_due` (its lease
    and its end: NULL parameters leave a column as it is). PostgreSQL runs every data-modifying
    part of a WITH once and to completion, whether or not the outer query reads it."""
    slot, seat = _table(AssignmentSlot), _table(Assignment)
    completed, served = _column(AssignmentSlot, "completed_at"), _column(AssignmentSlot,
                                                                         "served_at")
    lease, state, ended = (_column(Assignment, "lease_expires_at"),
                           _column(Assignment, "state"), _column(Assignment, "completed_at"))
    numbers = iter(range(1, 1000))

    def param(cast: str = "") -> str:
        return f"${next(numbers)}{cast}"

    parts = []
    if n_judgments:
        columns = ", ".join(_column(Judgment, name) for name in _JUDGMENT_COLUMNS)
        rows = ", ".join("(" + ", ".join(param() for _ in _JUDGMENT_COLUMNS) + ")"
                         for _ in range(n_judgments))
        parts.append(f"judged AS (INSERT INTO {_table(Judgment)} ({columns}) VALUES {rows} "
                     "RETURNING 1)")
    answered, now, upcoming = param(), param("::timestamptz"), param()
    parts.append(
        f"slots AS (UPDATE {slot} SET "
        f"{completed} = CASE WHEN id = {answered} THEN {now} ELSE {completed} END, "
        f"{served} = CASE WHEN id = {upcoming} AND {served} IS NULL THEN {now} "
        f"ELSE {served} END WHERE id IN ({answered}, {upcoming}) RETURNING 1)")
    parts.append(
        f"seat AS (UPDATE {seat} SET {lease} = COALESCE({param('::timestamptz')}, {lease}), "
        f"{state} = COALESCE({param('::varchar')}, {state}), "
        f"{ended} = COALESCE({param('::timestamptz')}, {ended}) "
        f"WHERE id = {param()} AND {param('::boolean')} RETURNING 1)")
    return f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM slots)"


def _write(context: SeatContext, rows: list[tuple], now: dt.datetime,
           upcoming: SlotTexts | None, *, serve: bool) -> None:
    """The submission's writes in one statement (`_write_sql`): the judgments, the answered
    slot completed and, with `serve`, the next one served (it is shown in the answer), and the
    seat's lease renewed when due (`lease_renew`) and its end when no slot is left."""
    seat = Assignment(pk=context.seat_id, lease_expires_at=context.lease_expires_at)
    renew = lease_renew(seat, context.study, now)
    done = upcoming is None
    slot_id = context.slot_id
    next_id = upcoming.slot_id if upcoming and serve else None
    params = [v for row in rows for v in row] + [
        slot_id, now, next_id,
        seat.lease_expires_at if renew else None, Assignment.State.DONE.value if done else None,
        now if done else None, seat.pk, renew or done]
    with connection.cursor() as cursor:
        _execute(cursor, f"evalstudy_loop_write_{len(rows)}", _write_sql(len(rows)), params)


@functools.cache
def _serve_sql() -> str:
    """Mark a slot served (when it was not) and renew the seat's lease when due, in one
    statement: parameters $1 now, $2 slot, $3 lease (NULL: not due), $4 seat."""
    served, lease = _column(AssignmentSlot, "served_at"), _column(Assignment, "lease_expires_at")
    return (f"WITH served AS (UPDATE {_table(AssignmentSlot)} SET {served} = $1::timestamptz "
            f"WHERE id = $2 AND {served} IS NULL RETURNING 1), "
            f"seat AS (UPDATE {_table(Assignment)} SET {lease} = $3::timestamptz "
            f"WHERE id = $4 AND $3::timestamptz IS NOT NULL RETURNING 1) "
            f"SELECT (SELECT count(*) FROM served)")


def fast_path_available() -> bool:
    """The fast path speaks PostgreSQL (row locks of one table in a join, LATERAL, JSON);
    other databases (the embedded SQLite default) take the general path."""
    return connection.vendor == "postgresql"


def submit_and_next(*, slug: str, rater_id: int | None, user_id: int | None, slot_id: int,
                    answers: Mapping[str, object], platform_session: str = "",
                    now: dt.datetime | None = None) -> LoopPage | None:
    """Store the first answers to the rater's current slot and serve the next one, or return
    None (nothing written) for `judgment_submit`'s general strategy to decide (see the
    module's docstring). Only `annotation.services.judgment_submit` calls it.

    The rater is `rater_id` (a session bound by an entry link or a crowd URL, acting under the
    crowd `platform_session`) or the account `user_id`'s rater. Same guarantees as
    `judgment_submit` then `assignment_next`: under the seat's lock, so a double submit stores
    once and an expiry cannot interleave; the slot must be the first open one of a live seat;
    the answers are checked by the same `annotation.answer_checks.answers_checked`.
    """
    if not fast_path_available() or not 0 < slot_id < _BIGINT_END:
        return None  # (an id no row can have: the general path answers 404)
    now = now or timezone.now()
    with transaction.atomic():
        context = _read(slug=slug, rater_id=rater_id, user_id=user_id, slot_id=slot_id)
        if (context is None or not _may_rate(context, platform_session,
                                             bound=rater_id is not None)
                or context.slot_id is None):
            return None
        if any(c.rule.spec.slot_bound for c in context.criteria):
            # Some kinds' answers are read against the answered slot (its text, the outputs
            # it shows), which this read does not fetch.
            return None
        if context.media_pending and not context.slot_completed:
            return None  # media to hear first: the general path refuses, saying so
        try:
            checked = answers_checked(context.criteria, answers)
        except SubmissionRefused:  # a misconfigured condition: the general strategy says so
            return None
        if checked.errors:
            return None
        cleaned = checked.answers
        if context.slot_completed:
            return _repeated(context, cleaned, now)
        if context.first_open_id != slot_id:
            return None
        by_key = {c.key: c for c in context.criteria}
        rows = [(slot_id, by_key[key].pk, context.rater.pk, value,
                 by_key[key].rule.numeric(value), context.slot_served_at, now, 0)
                for key, value in cleaned.items()]
        upcoming = context.next
        # The next item is served now only when this answer shows it: a practice item's
        # feedback comes first, and an attention check may stop the rater (time on task starts
        # when an item is shown, as on the general path).
        _write(context, rows, now, upcoming,
               serve=context.slot_kind == AssignmentSlot.Kind.TARGET)
        counts = StoreCounts(created=len(rows), slot_kind=context.slot_kind)
        page = LoopPage(study=context.study, counts=counts)
        if context.slot_kind == AssignmentSlot.Kind.ATTENTION:
            counts.stopped = after_attention_check(study=context.study, rater=context.rater)
            if not counts.stopped and upcoming is not None:
                _serve(context, now, renew=False)
        elif context.slot_kind == AssignmentSlot.Kind.CALIBRATION:
            # The pass mark's stop (if due) comes after this item's feedback page.
            counts.stopped = after_calibration_item(study=context.study, rater=context.rater)
        if context.slot_kind == AssignmentSlot.Kind.CALIBRATION:
            page.feedback_slot = slot_id
            page.stopped = counts.stopped
        elif counts.stopped:
            page.stopped = True
        elif upcoming is None:
            page.done = True
        else:
            page.view = _view(context)
            page.questions_html = questions_html(context.criteria_json, context.study)
            if context.study.allow_revision:
                page.previous_slot_id = (slot_id if context.slot_kind
                                         == AssignmentSlot.Kind.TARGET
                                         else context.previous_target_id)
        return page


def _repeated(context: SeatContext, cleaned: dict[str, str],
              now: dt.datetime) -> LoopPage | None:
    """The same answers to an answered slot again (a double click, a retry after a lost
    answer): nothing to store, and the rater gets the item they are on, as the first answer
    did. Any other answer to an answered slot (a revision, a refusal) is the general path's."""
    keys = {c.pk: c.key for c in context.criteria}
    with connection.cursor() as cursor:
        _execute(cursor, "evalstudy_loop_stored", _stored_sql(), [context.slot_id])
        stored = {keys.get(criterion): value for criterion, value in cursor.fetchall()}
    if stored != cleaned:
        return None
    page = LoopPage(study=context.study,
                    counts=StoreCounts(unchanged=len(cleaned), slot_kind=context.slot_kind))
    if context.slot_kind == AssignmentSlot.Kind.CALIBRATION:
        page.feedback_slot = context.slot_id
    elif context.next is None:
        page.done = True
    else:
        _serve(context, now)
        page.view = _view(context)
        page.questions_html = questions_html(context.criteria_json, context.study)
        if context.study.allow_revision:
            page.previous_slot_id = context.previous_target_id
    return page


@functools.cache
def _stored_sql() -> str:
    return (f"SELECT {_column(Judgment, 'criterion')}, value FROM {_table(Judgment)} "
            f"WHERE {_column(Judgment, 'slot')} = $1")


def _serve(context: SeatContext, now: dt.datetime, *, renew: bool = True) -> None:
    """Mark the next slot served and renew the seat's lease (with `renew`), each only when
    due."""
    assert context.next is not None
    seat = Assignment(pk=context.seat_id, lease_expires_at=context.lease_expires_at)
    renewed = (seat.lease_expires_at if renew and lease_renew(seat, context.study, now)
               else None)
    if not context.next_served or renewed is not None:
        with connection.cursor() as cursor:
            _execute(cursor, "evalstudy_loop_serve", _serve_sql(),
                     [now, context.next.slot_id, renewed, seat.pk])


def serve_current(*, slug: str, rater_id: int | None, user_id: int | None,
                  platform_session: str = "", now: dt.datetime | None = None) -> LoopPage | None:
    """The rater's current item (marked served, the lease renewed when due), or None for the
    general path: no seat yet (claiming one is `assignment_claim`'s), a finished list, consent
    or instructions to see first, and every case `submit_and_next` leaves to it."""
    if not fast_path_available():
        return None
    now = now or timezone.now()
    with transaction.atomic():
        context = _read(slug=slug, rater_id=rater_id, user_id=user_id, slot_id=None)
        if (context is None or context.next is None
                or not _may_rate(context, platform_session, bound=rater_id is not None)
                or any(c.rule.spec.shows == rules.TUPLE for c in context.criteria)):
            return None  # (a slot of a tuple shows outputs this read does not fetch)
        _serve(context, now)
        page = LoopPage(study=context.study, view=_view(context),
                        questions_html=questions_html(context.criteria_json, context.study))
        if context.study.allow_revision:
            page.previous_slot_id = context.previous_target_id
        return page
