"""Storing judgments: a rater's answers (`judgment_submit`, the one entry every interface
calls: the rating page, the rater API) and judgments made elsewhere (`judgments_import`).

`judgment_submit` chooses how an answer is stored. A browser session's first answer to its
current item (and the same answers again) is stored by the rater's loop
(`annotation.loop.submit_and_next`: one locking read and one write on PostgreSQL, the next
item served with it); everything else (a revision, a refusal, invalid answers, a rater of the
API, another database) by the general strategy here, through `_store_value`, so a repeated
answer is a no-op and a changed one keeps the earlier value in history. Both strategies check
the answers with the same Django-free core (`annotation.answer_checks`), and the loop takes
only what the general strategy would accept, so which one stored an answer never shows in the
rows.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from evalstudy import criteria as rules
from evalstudy.audit import SYSTEM, audit_export, audit_record
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    AuditEvent,
    Criterion,
    Output,
    Rater,
    Study,
)
from evalstudy.services import NotEnrolled, enrollment_of, lease_renew
from evalstudy.spec.errors import SpecError, SpecInvalid
from evalstudy.spec.files import JudgmentRow
from kit.csvsafe import SafeDictWriter

from . import loop
from .answer_checks import (
    StoreCounts,
    SubmissionInvalid,
    SubmissionRefused,
    answers_checked,
)
from .flow import after_attention_check, after_calibration_item
from .media import media_unfinished, must_finish_message
from .models import Judgment, JudgmentRevision
from .monitor_selectors import PROGRESS_COLUMNS, progress_rows, study_monitor
from .rows import StudyRows
from .selectors import slot_texts

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["SessionRater", "StoreCounts", "SubmissionInvalid", "SubmissionRefused",
           "judgment_submit", "judgments_import", "progress_export", "shown_text"]


@dataclass(frozen=True)
class SessionRater:
    """The rater a browser session acts for, as the session names them: the rater bound to it
    by an entry link or a crowd URL (`rater_id`, under the crowd `platform_session`), else the
    signed-in account `user_id`'s rater, in the study `slug`. The loop's strategy finds the
    rater under the seat's lock from these; the general strategy asks `find` for the rater
    (the interface's own checks: a study that did not admit them is its 404)."""

    slug: str
    rater_id: int | None
    user_id: int | None
    find: Callable[[], Rater] = field(compare=False)
    platform_session: str = ""


def _store_value(
    *, slot: AssignmentSlot, criterion: Criterion, rater: Rater, value: str,
    served_at: dt.datetime | None, now: dt.datetime, counts: StoreCounts,
) -> None:
    """Upsert one judgment. Precondition: the caller holds a lock on `slot`'s row."""
    numeric = criterion.rule.numeric(value)
    judgment = Judgment.objects.filter(slot=slot, criterion=criterion).first()
    if judgment is None:
        Judgment.objects.create(
            slot=slot, criterion=criterion, rater=rater, value=value, numeric_value=numeric,
            served_at=served_at, submitted_at=now,
        )
        counts.created += 1
    elif judgment.value == value:
        counts.unchanged += 1
    else:
        JudgmentRevision.objects.create(
            judgment=judgment, value=judgment.value, submitted_at=judgment.submitted_at
        )
        judgment.value, judgment.numeric_value = value, numeric
        judgment.submitted_at = now
        judgment.revision += 1
        judgment.save(update_fields=["value", "numeric_value", "submitted_at", "revision"])
        counts.revised += 1


def judgment_submit(
    *, rater: Rater | SessionRater, slot_id: int, answers: Mapping[str, object],
    now: dt.datetime | None = None,
) -> StoreCounts:
    """Store a rater's answers to one slot. Idempotent: the same post twice stores one judgment.

    Refused (nothing stored) unless the slot is in the rater's own active seat and is either
    the current slot (the first not completed) or, when the study allows revisions, an earlier
    completed one. Raises SubmissionRefused or SubmissionInvalid.

    `rater`: a Rater (the API), or a browser session's `SessionRater`, whose first answer to
    its current item the rater's loop stores and answers with the next item, served
    (`StoreCounts.served`, an `annotation.loop.LoopPage`); what the loop leaves (it writes
    nothing then) is stored here like any other answer.
    """
    if isinstance(rater, SessionRater):
        page = loop.submit_and_next(slug=rater.slug, rater_id=rater.rater_id,
                                    user_id=rater.user_id, slot_id=slot_id, answers=answers,
                                    platform_session=rater.platform_session, now=now)
        if page is not None and page.counts is not None:
            page.counts.served = page
            return page.counts
        rater = rater.find()
    return _stored_in_general(rater=rater, slot_id=slot_id, answers=answers, now=now)


def _stored_in_general(*, rater: Rater, slot_id: int, answers: Mapping[str, object],
                       now: dt.datetime | None) -> StoreCounts:
    """The general strategy: every case, with the ORM, under the seat's and the slot's locks."""
    now = now or timezone.now()
    with transaction.atomic():
        found = (
            AssignmentSlot.objects.filter(pk=slot_id, assignment__rater=rater)
            .values_list("assignment_id", flat=True).first()
        )
        if found is None:
            raise SubmissionRefused(gettext("This item is not in your list."), status=404)
        # Lock order seat, then slot (as assignment_next and the lease expiry do), so a
        # submission and an expiry cannot interleave: an expired seat stays expired.
        seat = (Assignment.objects.select_for_update(of=("self",)).select_related("study")
                .get(pk=found))
        slot = AssignmentSlot.objects.select_for_update().get(pk=slot_id)
        study = seat.study
        if seat.state == Assignment.State.EXPIRED:
            raise SubmissionRefused(gettext("Your time on this study ran out."), status=409)
        if study.status != Study.Status.OPEN:
            raise SubmissionRefused(gettext("This study is not open."), status=409)
        try:
            enrollment = enrollment_of(study=study, rater=rater)
        except NotEnrolled:
            raise SubmissionRefused(gettext("This item is not in your list."), status=404) from None
        if enrollment.stopped_at is not None:
            raise SubmissionRefused(gettext("Your participation in this study has ended."),
                                    status=409)
        criteria = list(study.criteria.select_related("show_if_criterion").order_by("order", "id"))
        if slot.completed_at is None:
            current = seat.slots.filter(completed_at__isnull=True).order_by("position").first()
            if current is None or current.pk != slot.pk:
                raise SubmissionRefused(gettext("This is not your current item."), status=409)
            # The study's "hear it to the end first" (annotation.media), whatever the browser.
            if media_unfinished(slot, study):
                raise SubmissionRefused(must_finish_message(), status=409)
        # Only the answers of kinds read against the slot (its text, the outputs it shows)
        # need it: fetched only for them.
        shown = (shown_text(slot, study)
                 if any(c.rule.spec.slot_bound for c in criteria) else None)
        checked = answers_checked(criteria, answers, shown, translate=gettext)
        if checked.errors:
            raise SubmissionInvalid(checked.errors)
        cleaned = checked.answers
        if slot.completed_at is not None:
            stored = dict(slot.judgments.values_list("criterion__key", "value"))
            if stored == cleaned:
                return StoreCounts(unchanged=len(cleaned), slot_kind=slot.kind)
            if not study.allow_revision:
                raise SubmissionRefused(
                    gettext("This study does not allow changing answers."), status=409)
            if slot.kind != AssignmentSlot.Kind.TARGET:
                # Practice items were already answered with feedback, and a check that could
                # be retried would check nothing.
                raise SubmissionRefused(gettext("Practice items and checks cannot be changed."),
                                        status=409)
        counts = StoreCounts(slot_kind=slot.kind)
        by_key = {c.key: c for c in criteria}
        for key, value in cleaned.items():
            _store_value(slot=slot, criterion=by_key[key], rater=rater, value=value,
                         served_at=slot.served_at, now=now, counts=counts)
        # Answers to questions that the new answers hide no longer apply.
        counts.removed, _ = slot.judgments.exclude(criterion__key__in=cleaned).delete()
        if slot.completed_at is None:
            slot.completed_at = now
            slot.save(update_fields=["completed_at"])
        fields = ["lease_expires_at"] if lease_renew(seat, study, now) else []
        if not seat.slots.filter(completed_at__isnull=True).exists():
            seat.state, seat.completed_at = Assignment.State.DONE, now
            fields += ["state", "completed_at"]
        if fields:
            seat.save(update_fields=fields)
        if slot.kind == AssignmentSlot.Kind.ATTENTION:
            counts.stopped = after_attention_check(study=study, rater=rater)
        elif slot.kind == AssignmentSlot.Kind.CALIBRATION:
            counts.stopped = after_calibration_item(study=study, rater=rater)
        return counts


def judgments_import(
    *, study: Study, rows: list[JudgmentRow], file_name: str, default_rater_kind: str = "expert",
    now: dt.datetime | None = None, actor: Any = None, source: str = SYSTEM,
) -> StoreCounts:
    """Load tidy judgments made elsewhere, for re-analysis. All rows valid or nothing stored.

    Each rater (a rater of this study, whatever raters elsewhere share its id) gets one
    `imported` seat in the study with a slot per output (or output pair,
    for pairwise criteria, where `system` is A and `system_b` is B). Re-importing the same file
    changes nothing; a changed value is stored as a revision. Raises SpecInvalid. Audited as
    "import" with the file and the counts.
    """
    now = now or timezone.now()
    errors: list[SpecError] = []
    rows_of = StudyRows.of(study)
    criteria = rows_of.criteria
    texts: dict[int, rules.ShownText] = {}
    if any(c.rule.spec.marks_spans for c in criteria.values()):
        texts = {pk: rules.ShownText(text, reference) for pk, text, reference in
                 Output.objects.filter(item__study=study)
                 .values_list("id", "text", "item__reference")}
    kinds = set(Rater.Kind.values)
    plan: dict[tuple[str, str], dict[tuple[int, int | None], dict[str, tuple[str, int]]]] = {}
    for row in rows:
        def fail(where: str, message: str, row: JudgmentRow = row) -> None:
            errors.append(SpecError(file_name, row.line, where, message))

        kind = row.rater_kind or default_rater_kind
        if kind not in kinds:
            fail("rater_kind", f"{kind!r} is not one of {', '.join(sorted(kinds))}")
        found = rows_of.resolve(row, fail, lambda c: (
            f"criterion {c.key!r} is {c.kind}: its answers name outputs by the position they "
            "were shown in, which a tidy row (item, system) cannot say; they are not imported"
            if c.rule.spec.shows == rules.TUPLE else None))
        if found is None:
            continue
        criterion, output, output_b = found
        try:
            value = criterion.rule.normalise(
                *_imported_spans(row.value, output, texts) if criterion.rule.spec.marks_spans
                else (row.value,))
        except ValueError as error:
            fail("value", f"criterion {criterion.key!r}: {error}")
            continue
        slot_answers = plan.setdefault((kind, row.rater), {}).setdefault((output, output_b), {})
        earlier = slot_answers.get(criterion.key)
        if earlier is not None and earlier[0] != value:
            fail("value", f"conflicts with line {earlier[1]} for the same rater, output and "
                          "criterion")
            continue
        if earlier is None:  # a repeated identical row keeps pointing at the first
            slot_answers[criterion.key] = (value, row.line)
    if errors:
        raise SpecInvalid(errors)

    counts = StoreCounts()
    with transaction.atomic():
        for (kind, external_id), slots in plan.items():
            # A rater of this study only: an imported id never attaches to a rater of another
            # study, nor to an account holder (whose entry would then be the importer's).
            rater, _ = Rater.objects.get_or_create(
                study=study, kind=kind, external_id=external_id,
                defaults={"display_name": external_id, "origin": Rater.Origin.IMPORTED},
            )
            seat, _ = Assignment.objects.get_or_create(
                study=study, rater=rater,
                defaults={"source": Assignment.Source.IMPORTED, "state": Assignment.State.DONE,
                          "claimed_at": now, "completed_at": now},
            )
            if seat.source != Assignment.Source.IMPORTED:
                raise SpecInvalid([SpecError(
                    file_name, None, "rater", f"rater {external_id!r} already rates this study in "
                    "the browser; import their judgments under another rater id",
                )])
            existing = {(s.output_id, s.output_b_id): s for s in seat.slots.all()}
            next_position = max((s.position for s in existing.values()), default=-1) + 1
            for (output, output_b), answers in slots.items():
                slot = existing.get((output, output_b))
                if slot is None:
                    slot = AssignmentSlot.objects.create(
                        assignment=seat, position=next_position, kind=AssignmentSlot.Kind.TARGET,
                        output_id=output, output_b_id=output_b, completed_at=now,
                    )
                    next_position += 1
                for key, (value, _line) in answers.items():
                    _store_value(slot=slot, criterion=criteria[key], rater=rater, value=value,
                                 served_at=None, now=now, counts=counts)
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=study,
                     changes={"what": "judgments", "file": file_name, "created": counts.created,
                              "revised": counts.revised, "unchanged": counts.unchanged})
    return counts


def _imported_spans(raw: str, output: int, texts: Mapping[int, rules.ShownText]
                    ) -> tuple[object, rules.ShownText]:
    """An imported span answer and the texts it marks. A file made elsewhere does not carry
    the digest of the text: the output's current text is the one it marks, and its digest is
    added (one that is given must still match)."""
    shown = texts[output]
    try:
        value = json.loads(raw) if raw.strip() else {"spans": []}
    except ValueError:
        raise ValueError("the spans are not valid JSON") from None
    if isinstance(value, list):
        value = {"spans": value}
    if isinstance(value, dict):
        value.setdefault("text_sha256", rules.text_sha256(shown.output))
    return value, shown


def shown_text(slot: AssignmentSlot, study: Study) -> rules.ShownText:
    """The texts of `slot` its rater sees (the reference only where the study shows it)."""
    reference, _context, text, text_b = slot_texts(slot)
    shown = len(slot.shown_outputs) or (2 if text_b or slot.output_b_id else 1)
    return rules.ShownText(text, reference if study.reference_shown else "", n_outputs=shown)


def progress_export(*, study: Study, stream: SupportsWrite[str], file: str = "", actor: Any = None,
                    source: str = SYSTEM) -> int:
    """Write the monitor's per-rater progress as CSV to `stream` (formula-looking cells
    neutralised); returns the rows. Audited as "export"."""
    writer = SafeDictWriter(stream, fieldnames=PROGRESS_COLUMNS)
    writer.writeheader()
    rows = 0
    for row in progress_rows(study_monitor(study)):
        writer.writerow(row)
        rows += 1
    audit_export(actor=actor, source=source, what="progress", fmt="csv", target=study,
                 file=file, rows=rows)
    return rows
