"""The adjudication queue: units (an output, or a pair of outputs for a pairwise criterion) whose
raters disagree beyond a threshold, or where a proxy and the raters disagree, for an expert to
label; and the service that records the expert's label.

The rules are `analysis.stats.disagreement` (a Django-free core); this module reads the
judgments they need, joins the labels already given, and writes new ones. Adjudicated labels
are `Adjudication` rows: a rater's judgment is never changed. The pages and the API
(`analysis.adjudication_views`, `analysis.api`) call these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Prefetch, Q
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.audit import SYSTEM, actor_user, audit_record
from evalstudy.criteria import PAIR, kind_of, pair_oriented
from evalstudy.models import AssignmentSlot, AuditEvent, Criterion, Enrollment, Output, Study

from .models import Adjudication, AdjudicationRevision
from .selectors import JudgmentFilter, judgments_tidy, rater_labels
from .stats.disagreement import (
    ADJUDICABLE,
    REASON_LABELS,
    REASONS,
    Answer,
    Flag,
    Thresholds,
    unit_flags,
)

NOTE_MAX_LENGTH = 5000
STATES = ("open", "done", "all")


class UnitNotFound(LookupError):
    """No such unit in this study (another study's output, an unknown criterion, a pair that
    is not one item's two outputs): the interfaces answer 404."""


def criterion_scale(criterion: Criterion) -> tuple[float, float] | None:
    """(lowest, highest) value of an ordinal criterion, whose span normalises the spread."""
    return criterion.rule.spec.value_range(criterion.rule)


def adjudicable_criteria(study: Study) -> list[Criterion]:
    return list(study.criteria.filter(kind__in=ADJUDICABLE).order_by("order", "id"))


@dataclass
class QueueEntry:
    criterion: Criterion
    output: int
    output_b: int | None
    item: str
    flag: Flag | None
    adjudication: Adjudication | None = None
    stored_reason: str = ""

    @property
    def reasons(self) -> list[str]:
        return list(self.flag.reasons) if self.flag else []

    @property
    def why(self) -> list[str]:
        if self.flag:
            return list(self.flag.why)
        return [f"no longer meets the queue's rules; queued because {self.stored_reason}"
                if self.stored_reason else "no longer meets the queue's rules"]

    @property
    def done(self) -> bool:
        return self.adjudication is not None

    def as_dict(self) -> dict[str, Any]:
        adjudication = self.adjudication
        return {
            "criterion": self.criterion.key, "kind": self.criterion.kind,
            "output": self.output, "output_b": self.output_b, "item": self.item,
            "reasons": self.reasons, "why": self.why,
            "n_human": self.flag.n_human if self.flag else None,
            "answers": self.flag.counts if self.flag else {},
            "majority": self.flag.majority if self.flag else None,
            "adjudicated": None if adjudication is None else {
                "value": adjudication.value, "note": adjudication.note,
                "by": str(adjudication.adjudicated_by or ""),
                "at": adjudication.adjudicated_at.isoformat(),
                "revision": adjudication.revision},
        }


def _unit_of(kind: str, output: int, output_b: Any, value: str) -> tuple[tuple[int, int | None],
                                                                         str]:
    if kind_of(kind).shows == PAIR:
        return pair_oriented(int(output), None if output_b is None else int(output_b),
                                 value)
    return (int(output), None), value


def queue_flags(study: Study, thresholds: Thresholds | None = None
                ) -> dict[str, tuple[Criterion, dict[tuple[int, int | None], Flag]]]:
    """criterion key -> (criterion, {unit: why it is queued}) over the judgments an analysis
    reads by default (target slots; raters the researcher excluded left out)."""
    criteria = adjudicable_criteria(study)
    if not criteria:
        return {}
    table = judgments_tidy(study, JudgmentFilter())
    found: dict[str, tuple[Criterion, dict[tuple[int, int | None], Flag]]] = {}
    for criterion in criteria:
        rows = table[table["criterion"] == criterion.key]
        answers = []
        for output, output_b, rater, value, is_human in zip(
                rows["output"], rows["output_b"], rows["rater"], rows["value"],
                rows["is_human"], strict=True):
            unit, value = _unit_of(criterion.kind, output, None if _missing(output_b)
                                   else output_b, str(value))
            answers.append(Answer(unit, rater, value, bool(is_human)))
        found[criterion.key] = (criterion, unit_flags(
            answers, kind=criterion.kind, scale=criterion_scale(criterion),
            thresholds=thresholds))
    return found


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def adjudication_queue(study: Study, *, thresholds: Thresholds | None = None,
                       criterion: str = "", reason: str = "", state: str = "open"
                       ) -> list[QueueEntry]:
    """The queue of `study`: queued units, each with why and its adjudicated label if it has
    one. `criterion` (a key) and `reason` (one of REASONS) filter; `state`: "open" (not yet
    adjudicated), "done" (adjudicated, including units the rules no longer queue) or "all"."""
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}")
    if reason and reason not in REASONS:
        raise ValueError(f"reason must be one of {', '.join(REASONS)}")
    flags = queue_flags(study, thresholds)
    labels = {(a.criterion_id, a.output_id, a.output_b_id): a for a in
              Adjudication.objects.filter(study=study).select_related("adjudicated_by")}
    items = dict(Output.objects.filter(item__study=study)
                 .values_list("id", "item__external_id"))
    entries: list[QueueEntry] = []
    seen: set[tuple[int, int, int | None]] = set()
    for key, (found_criterion, units) in flags.items():
        if criterion and key != criterion:
            continue
        for unit, flag in units.items():
            if reason and reason not in flag.reasons:
                continue
            at = (found_criterion.pk, unit[0], unit[1])
            seen.add(at)
            entries.append(QueueEntry(found_criterion, unit[0], unit[1],
                                      items.get(unit[0], ""), flag, labels.get(at)))
    if not reason:
        by_pk = {c.pk: c for c in adjudicable_criteria(study)}
        for at, label in labels.items():
            if at in seen or at[0] not in by_pk or (criterion and by_pk[at[0]].key != criterion):
                continue
            entries.append(QueueEntry(by_pk[at[0]], at[1], at[2], items.get(at[1], ""), None,
                                      label, stored_reason=label.reason))
    if state == "open":
        entries = [e for e in entries if not e.done]
    elif state == "done":
        entries = [e for e in entries if e.done]
    order = {c.pk: n for n, c in enumerate(adjudicable_criteria(study))}
    return sorted(entries, key=lambda e: (order.get(e.criterion.pk, 0), e.item, e.output,
                                          e.output_b or 0))


# --- one unit ------------------------------------------------------------------------------
@dataclass
class UnitAnswer:
    rater: str
    rater_kind: str
    is_human: bool
    value: str
    submitted_at: Any
    excluded: bool = False


@dataclass
class UnitView:
    study: Study
    criterion: Criterion
    output: Output
    output_b: Output | None
    reference: str
    context: str
    reference_shown_to_raters: bool
    humans: list[UnitAnswer]
    proxies: list[UnitAnswer]
    flag: Flag | None
    adjudication: Adjudication | None
    history: list[AdjudicationRevision] = field(default_factory=list)
    choices: list[str] | None = None

    @property
    def item(self) -> str:
        return self.output.item.external_id


def unit_resolve(study: Study, criterion_key: str, output_id: int, output_b_id: int | None
                 ) -> tuple[Criterion, Output, Output | None]:
    """The criterion and outputs of a unit of `study`; UnitNotFound for anything else (another
    study's output, a criterion the queue does not hold, a pair that is not two outputs of one
    item in id order, a pair for a criterion of single outputs or the other way round)."""
    criterion = study.criteria.filter(key=criterion_key, kind__in=ADJUDICABLE).first()
    if criterion is None:
        raise UnitNotFound(f"no criterion {criterion_key!r} to adjudicate in this study")
    outputs = Output.objects.filter(item__study=study).select_related("item")
    output = outputs.filter(pk=output_id).first()
    if output is None:
        raise UnitNotFound("no such output in this study")
    if (criterion.rule.spec.shows == PAIR) != (output_b_id is not None):
        raise UnitNotFound("a pairwise criterion's unit is a pair of outputs, any other "
                           "criterion's a single output")
    output_b = None
    if output_b_id is not None:
        output_b = outputs.filter(pk=output_b_id, item_id=output.item_id).first()
        if output_b is None or output_b.pk <= output.pk:
            raise UnitNotFound("no such pair of outputs in this study")
    return criterion, output, output_b


def adjudication_unit(study: Study, criterion_key: str, output_id: int,
                      output_b_id: int | None, thresholds: Thresholds | None = None
                      ) -> UnitView:
    """Everything the expert sees of one unit: the item's reference and context, the
    output(s), every rater's answer (named as the judgment browser names them; a pair's
    answers turned to read "A" as the lower output id), the proxies' answers, why it is queued
    and the label already given with its history. UnitNotFound for a unit outside `study`."""
    criterion, output, output_b = unit_resolve(study, criterion_key, output_id, output_b_id)
    judgments = Judgment.objects.filter(
        slot__assignment__study=study, criterion=criterion,
        slot__kind=AssignmentSlot.Kind.TARGET)
    if output_b is None:
        judgments = judgments.filter(slot__output=output, slot__output_b__isnull=True)
    else:
        judgments = judgments.filter(Q(slot__output=output, slot__output_b=output_b)
                                     | Q(slot__output=output_b, slot__output_b=output))
    rows = list(judgments.select_related("rater", "slot").order_by("submitted_at", "id"))
    names = rater_labels({j.rater_id: str(j.rater) for j in rows})
    excluded = set(Enrollment.objects.filter(study=study, excluded_at__isnull=False)
                   .values_list("rater_id", flat=True))
    humans: list[UnitAnswer] = []
    proxies: list[UnitAnswer] = []
    answers: list[Answer] = []
    for judgment in rows:
        assert judgment.slot.output_id is not None, "a target slot shows an output"
        _unit, value = _unit_of(criterion.kind, judgment.slot.output_id,
                                judgment.slot.output_b_id, judgment.value)
        answer = UnitAnswer(names[judgment.rater_id], judgment.rater.get_kind_display(),
                            judgment.rater.is_human, value, judgment.submitted_at,
                            judgment.rater_id in excluded)
        (humans if answer.is_human else proxies).append(answer)
        if not answer.excluded:
            answers.append(Answer(_unit, answer.rater, value, answer.is_human))
    unit = (output.pk, output_b.pk if output_b else None)
    flag = unit_flags(answers, kind=criterion.kind, scale=criterion_scale(criterion),
                      thresholds=thresholds).get(unit)
    adjudication = (Adjudication.objects.filter(criterion=criterion, output=output,
                                                output_b=output_b)
                    .select_related("adjudicated_by")
                    .prefetch_related(Prefetch("history", queryset=AdjudicationRevision.objects
                                               .select_related("adjudicated_by")))
                    .first())
    item = output.item
    return UnitView(
        study=study, criterion=criterion, output=output, output_b=output_b,
        reference=item.reference, context=item.context,
        reference_shown_to_raters=study.reference_shown, humans=humans, proxies=proxies,
        flag=flag, adjudication=adjudication,
        history=list(adjudication.history.all()) if adjudication else [],
        choices=criterion.rule.choices())


# --- the service ---------------------------------------------------------------------------
def adjudication_record(*, study: Study, criterion: Criterion, output: Output,
                        output_b: Output | None = None, value: Any, note: str = "",
                        reason: str = "", actor: Any = None, source: str = SYSTEM
                        ) -> Adjudication:
    """Record the expert's label of one unit: `value` checked by the criterion's rule
    (evalstudy.criteria: stored in its canonical spelling), `note` free text, `reason` why the
    unit was queued (kept with the label). A pair given the other way round is stored in id
    order with its answer turned around. A changed label or note keeps what it replaced as a
    revision; the same label and note again change nothing. Raises ValidationError naming the
    field for a bad value, a unit outside `study` or a criterion the queue does not hold;
    nothing is stored then. Never touches a Judgment. Audited as "create" or "update"."""
    errors: dict[str, list[str]] = {}
    if criterion.study_id != study.pk:
        errors["criterion"] = ["not a criterion of this study"]
    elif criterion.kind not in ADJUDICABLE:
        errors["criterion"] = [f"{criterion.kind} criteria are not adjudicated (only "
                               f"{', '.join(ADJUDICABLE)})"]
    if output.item.study_id != study.pk:
        errors["output"] = ["not an output of this study"]
    if output_b is not None and (output_b.item_id != output.item_id or output_b.pk == output.pk):
        errors["output_b"] = ["must be another output of the same item"]
    pair = criterion.rule.spec.shows == PAIR
    if not errors and pair != (output_b is not None):
        errors["output_b"] = ["a pairwise criterion is adjudicated on a pair of outputs"
                              if pair
                              else "only pairwise criteria are adjudicated on a pair"]
    note = str(note or "")
    if len(note) > NOTE_MAX_LENGTH:
        errors["note"] = [f"at most {NOTE_MAX_LENGTH} characters"]
    canonical = ""
    if "criterion" not in errors:
        try:
            canonical = criterion.rule.normalise(value)
        except ValueError as error:
            errors["value"] = [f"{error} (criterion {criterion.key!r}, {criterion.kind})"]
    if errors:
        raise ValidationError(errors)
    if output_b is not None and output.pk > output_b.pk:
        (_first, _second), canonical = pair_oriented(output.pk, output_b.pk, canonical)
        output, output_b = output_b, output
    now = timezone.now()
    with transaction.atomic():
        # The criterion's row serialises two experts labelling the same unit for the first
        # time (no Adjudication row exists yet to lock): the second then updates the first's
        # label, with a revision, instead of failing on the unique constraint.
        type(criterion).objects.select_for_update().filter(pk=criterion.pk).first()
        current = (Adjudication.objects.select_for_update()
                   .filter(criterion=criterion, output=output, output_b=output_b).first())
        if current is not None and current.value == canonical and current.note == note:
            return current
        user = actor_user(actor)
        if current is None:
            current = Adjudication.objects.create(
                study=study, criterion=criterion, output=output, output_b=output_b,
                value=canonical, numeric_value=criterion.rule.numeric(canonical),
                reason=str(reason or "")[:500], note=note, adjudicated_by=user,
                adjudicated_at=now)
            audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE,
                         target=current, changes={"value": [None, canonical],
                                                  "note": [None, note],
                                                  "unit": _unit_text(criterion, output, output_b),
                                                  "reason": current.reason})
            return current
        AdjudicationRevision.objects.create(
            adjudication=current, value=current.value, note=current.note,
            adjudicated_by=current.adjudicated_by, adjudicated_at=current.adjudicated_at)
        changes = {"value": [current.value, canonical], "note": [current.note, note],
                   "unit": _unit_text(criterion, output, output_b)}
        current.value, current.note = canonical, note
        current.numeric_value = criterion.rule.numeric(canonical)
        current.adjudicated_by, current.adjudicated_at = user, now
        current.revision += 1
        if reason:
            current.reason = str(reason)[:500]
        current.save()
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE,
                     target=current, changes=changes)
    return current


def _unit_text(criterion: Criterion, output: Output, output_b: Output | None) -> str:
    pair = f"outputs {output.pk} and {output_b.pk}" if output_b else f"output {output.pk}"
    return f"{criterion.key} on {pair}"


def reason_label(reason: str) -> str:
    return REASON_LABELS.get(reason, reason)
