"""Aggregated judgments: counts of people per answer per output (or pair of outputs), the way
published data sets ship human judgments (HATS: for each reference and two hypotheses, how
many listeners preferred each), imported as such instead of as invented raters.

Invented raters (one per vote) made every rater-level statistic wrong: 7,150 "raters" who each
judged one pair, a ceiling kappa averaged over pairs of raters who never shared a unit, and
rater random effects for people who do not exist. `VoteCount` rows carry no rater, and the
analysis (`analysis.stats.votes`) computes from them only what counts can give.

For a pairwise criterion the import says whether `system` is the output people saw as A
(`position="shown"`) or whether A/B is only the file's order (`position="unknown"`, as in
HATS, whose hypA/hypB are not screen positions); the analysis then fits no position term.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from evalstudy import criteria as rules
from evalstudy.audit import SYSTEM, audit_record
from evalstudy.models import AuditEvent, Study
from evalstudy.spec.errors import SpecError, SpecInvalid
from evalstudy.spec.files import VoteRow

from .models import VoteCount
from .rows import StudyRows

Position = Literal["shown", "unknown"]
POSITIONS = ("shown", "unknown")


def countable(kind: rules.AnswerKind) -> bool:
    """Whether counting people per answer means something for a kind: its answer is one of a
    declared list per output or pair (a span or a free text is one person's own answer; a
    ranking names outputs by the place they were shown in)."""
    return kind.closed


@dataclass
class VoteImport:
    units: int = 0  # outputs or pairs whose counts were written
    votes: int = 0  # people counted, all answers together
    replaced: int = 0  # units that had counts before (replaced, not added to)


def vote_counts_import(*, study: Study, rows: list[VoteRow], file_name: str,
                       position: Position = "shown", now: dt.datetime | None = None,
                       actor: Any = None, source: str = SYSTEM) -> VoteImport:
    """Store the counts of `rows`, all valid or nothing stored (SpecInvalid lists every
    problem by line and column). A unit's counts are replaced as a whole by a re-import, so
    importing the same file twice changes nothing. Audited as "import"."""
    if position not in POSITIONS:
        raise SpecInvalid([SpecError(file_name, None, "position",
                                     f"must be one of {', '.join(POSITIONS)}")])
    now = now or timezone.now()
    errors: list[SpecError] = []
    rows_of = StudyRows.of(study)
    plan: dict[tuple[int, int, int | None], dict[str, tuple[int, int]]] = {}
    for row in rows:
        def fail(where: str, message: str, row: VoteRow = row) -> None:
            errors.append(SpecError(file_name, row.line, where, message))

        found = rows_of.resolve(row, fail, lambda c: (
            f"criterion {c.key!r} is {c.kind}: counts of people per answer are taken for "
            "binary, severity, Likert, categorical and pairwise criteria"
            if not countable(c.rule.spec) else None))
        if found is None:
            continue
        criterion, output, output_b = found
        try:
            value = str(criterion.rule.normalise(row.value))
        except ValueError as error:
            fail("value", f"criterion {criterion.key!r}: {error}")
            continue
        if position == "unknown" and output_b is not None and (
                (criterion.pk, output_b, output) in plan):
            # A/B is only the file's order: the pair written the other way is the same unit.
            fail("system", f"the pair ({row.system_b}, {row.system}) of {row.item!r} is "
                           "already counted in the other order: with the position unknown "
                           "it is one pair; write its counts once")
            continue
        answers = plan.setdefault((criterion.pk, output, output_b), {})
        if value in answers:
            fail("value", f"{value!r} is counted twice for this unit (first on line "
                          f"{answers[value][1]})")
            continue
        answers[value] = (row.count, row.line)
    if errors:
        raise SpecInvalid(errors)
    counts = VoteImport()
    known = position == "shown"
    with transaction.atomic():
        for (criterion_id, output, output_b), answers in plan.items():
            earlier = VoteCount.objects.filter(criterion_id=criterion_id, output_id=output,
                                               output_b_id=output_b)
            if not known and output_b is not None:
                # The same pair imported earlier in the other order is this unit too.
                earlier = earlier | VoteCount.objects.filter(
                    criterion_id=criterion_id, output_id=output_b, output_b_id=output)
            counts.replaced += earlier.exists()
            earlier.delete()
            VoteCount.objects.bulk_create(
                VoteCount(study=study, criterion_id=criterion_id, output_id=output,
                          output_b_id=output_b, value=value, count=count, imported_at=now,
                          position_known=known, source_file=file_name[:300])
                for value, (count, _line) in answers.items())
            counts.units += 1
            counts.votes += sum(count for count, _line in answers.values())
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=study,
                     changes={"what": "vote counts", "file": file_name, "position": position,
                              "units": counts.units, "votes": counts.votes,
                              "replaced": counts.replaced})
    return counts
