"""The adaptive pairwise design: its pre-registered plan, seats built when raters arrive, and
the stopping checks' record.

Seats of an adaptive study are not built when it opens. When a rater claims a seat
(`evalstudy.services.assignment_claim` finds no free one), `adaptive_seat_create` builds one
from the allocation (`evalstudy.design.adaptive.allocate_seat`): the pairs that lower the
plan's least certain contrast most, at the strengths the last stopping check stored in
`StudyPlan.allocation`, with every cell already handed out counted. The plan's row lock
serialises seat building, so two raters arriving together see each other's cells. The checks
themselves are computed by the analysis (`analysis.stopping`, a higher layer) and recorded here
(`stopping_check_record`), which closes the study when the rule is met.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Max
from django.utils import timezone

from kit.audit import instance_changes, model_snapshot

from ..audit import SYSTEM, audit_record
from ..design import TargetCell, order_seat, seat_seed
from ..design.adaptive import all_pairs, allocate_seat
from ..design.builders import DesignError
from ..models import Assignment, AssignmentSlot, AuditEvent, Output, StoppingCheck, Study, StudyPlan
from ..spec.plan import PLAN_KINDS
from .studies import study_close

log = logging.getLogger(__name__)

# A seat's comparisons when the study sets no items_per_rater.
DEFAULT_SEAT_SIZE = 20


class PlanRegistered(ValidationError):
    """The plan was registered when the study opened; it can no longer change."""


def plan_problems(study: Study) -> list[str]:
    """What stops an adaptive study from opening, as sentences (for `study_validate`)."""
    plan = StudyPlan.objects.filter(study=study).first()
    if plan is None:
        return ["An adaptive design needs a pre-registered plan (criterion, contrasts, target "
                "CI width or decision, alpha, spending function, looks): add it under "
                "'Adaptive plan' before opening."]
    problems = []
    criterion = plan.criterion if plan.criterion_id is not None else None
    if criterion is not None and (criterion.study_id != study.pk
                                  or criterion.kind not in PLAN_KINDS):
        problems.append("The plan's criterion must be a pairwise criterion of this study.")
    names = set(study.systems.values_list("name", flat=True))
    contrasts = plan.contrasts or []
    if not isinstance(contrasts, list):
        problems.append("The plan's contrasts must be a list of pairs of system names.")
        contrasts = []
    for pair in contrasts:
        if (not isinstance(pair, list | tuple) or len(pair) != 2 or pair[0] == pair[1]
                or any(name not in names for name in pair)):
            problems.append(f"The plan's contrast {pair!r} does not name two different "
                            "systems of the study.")
    if plan.target_ci_width is None and not plan.stop_on_decision:
        problems.append("The plan needs a target CI width or stop_on_decision.")
    if plan.target_ci_width is not None and plan.target_ci_width <= 0:
        problems.append("The plan's target CI width must be positive.")
    return problems


def plan_contrasts(plan: StudyPlan) -> list[tuple[str, str]]:
    """The plan's contrasts as (system, system) names; every pair when it lists none."""
    if plan.contrasts:
        return [(str(a), str(b)) for a, b in plan.contrasts]
    return all_pairs(list(plan.study.systems.order_by("name").values_list("name", flat=True)))


def plan_criterion(plan: StudyPlan) -> Any:
    if plan.criterion_id is not None:
        return plan.criterion
    return (plan.study.criteria.filter(kind__in=PLAN_KINDS).order_by("order", "id")
            .first())


@transaction.atomic
def study_plan_save(*, study: Study, fields: dict[str, Any], actor: Any = None,
                    source: str = SYSTEM) -> StudyPlan:
    """Create or change `study`'s plan from `fields` (names of StudyPlan.PLAN_FIELDS). Refused
    with PlanRegistered once the plan is registered (the study opened). Audited as "create" or
    "update" with the changed fields."""
    unknown = sorted(set(fields) - set(StudyPlan.PLAN_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown plan fields: {', '.join(unknown)}.")
    plan = StudyPlan.objects.select_for_update().filter(study=study).first()
    if plan is not None and plan.registered_at is not None:
        raise PlanRegistered(
            f"The plan of {study.slug!r} was registered at {plan.registered_at:%Y-%m-%d %H:%M} "
            "UTC when the study opened; a pre-registered plan cannot change (stopping rules "
            "chosen after seeing data make the p-values dishonest).")
    before = model_snapshot(plan) if plan is not None else None
    created = plan is None
    plan = plan or StudyPlan(study=study)
    for name, value in fields.items():
        setattr(plan, name, value)
    plan.full_clean()
    plan.save()
    changes = {} if created or before is None else instance_changes(before, plan)
    if created or changes:
        audit_record(actor=actor, source=source, target=plan, changes=changes,
                     action=AuditEvent.Action.CREATE if created else AuditEvent.Action.UPDATE)
    return plan


@transaction.atomic
def study_plan_replace(*, study: Study, fields: dict[str, Any], actor: Any = None,
                       source: str = SYSTEM) -> StudyPlan:
    """Set every field of `study`'s plan at once (those `fields` leaves out take their
    defaults), as the API's PUT does: refused (ValidationError, nothing stored) unless the
    study is adaptive and the plan is one it could open with (`plan_problems`); refused with
    PlanRegistered once registered. Audited through `study_plan_save`."""
    if study.design != Study.Design.ADAPTIVE:
        raise ValidationError(f"Study {study.slug!r} has the {study.design} design; a stopping "
                              "plan is read only by the adaptive design.")
    complete: dict[str, Any] = {}
    for name in StudyPlan.PLAN_FIELDS:
        field = StudyPlan._meta.get_field(name)
        if not isinstance(field, models.Field):  # a relation's reverse side has no default
            raise TypeError(f"StudyPlan.{name} is not a concrete field")
        complete[name] = field.get_default()
    complete.update(fields)
    plan = study_plan_save(study=study, fields=complete, actor=actor, source=source)
    problems = plan_problems(study)
    if problems:
        raise ValidationError(problems)  # the atomic block undoes the save and its audit
    return plan


def plan_register(*, study: Study, actor: Any = None, source: str = SYSTEM,
                  now: dt.datetime | None = None) -> StudyPlan:
    """Register the plan of `study` as it opens (the caller holds the study's lock and has
    validated it). Registering twice keeps the first time."""
    plan = StudyPlan.objects.select_for_update().get(study=study)
    if plan.registered_at is None:
        # The blanks resolved as they read now, so that a criterion reordered or a system
        # added later cannot change which criterion and contrasts the rule reads.
        changes: dict[str, Any] = {}
        if plan.criterion_id is None:
            criterion = plan_criterion(plan)
            plan.criterion = criterion
            changes["criterion"] = [None, criterion.pk if criterion else None]
        if not plan.contrasts:
            plan.contrasts = [list(pair) for pair in plan_contrasts(plan)]
            changes["contrasts"] = [[], plan.contrasts]
        plan.registered_at = now or timezone.now()
        plan.save(update_fields=["registered_at", "criterion", "contrasts"])
        changes["registered_at"] = [None, plan.registered_at.isoformat()]
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, target=plan,
                     changes=changes)
    return plan


def _assigned_cells(study: Study) -> list[TargetCell]:
    """Every target cell handed out so far (answered or not; the slots of an expired seat
    live on in its replacement, so expired seats are left out)."""
    rows = (AssignmentSlot.objects
            .filter(assignment__study=study, kind=AssignmentSlot.Kind.TARGET,
                    output_b__isnull=False)
            .exclude(assignment__state=Assignment.State.EXPIRED)
            .values_list("output__item_id", "output__system__name", "output_b__system__name"))
    return [TargetCell(str(item), a, b) for item, a, b in rows]


def adaptive_seat_create(*, study: Study, now: dt.datetime) -> Assignment | None:
    """A new open seat of `study` built from the allocation, or None when the plan's maximum
    of comparisons is handed out (or there is nothing left to compare). Runs in the caller's
    transaction."""
    plan = StudyPlan.objects.select_for_update().filter(study=study).first()
    if plan is None or plan.registered_at is None:
        return None
    assigned = _assigned_cells(study)
    left = plan.max_judgments - len(assigned)
    if left <= 0:
        return None
    items = [str(pk) for pk in study.items.order_by("id").values_list("id", flat=True)]
    systems = list(study.systems.order_by("name").values_list("name", flat=True))
    size = min(study.items_per_rater or DEFAULT_SEAT_SIZE, len(items), left)
    strengths = {str(k): float(v) for k, v in (plan.allocation.get("strengths") or {}).items()}
    try:
        cells = allocate_seat(items=items, systems=systems, strengths=strengths,
                              contrasts=plan_contrasts(plan), assigned=assigned, size=size)
    except DesignError:
        # The study's systems no longer match its registered plan (changed outside the
        # admin, which refuses it): no seat rather than a server error for every rater; the
        # log says why collection stopped.
        log.error("adaptive study %s: no seat built", study.slug, exc_info=True)
        return None
    if not cells:
        return None
    top = study.assignments.aggregate(top=Max("seat_index"))["top"]
    seat_index = 0 if top is None else top + 1
    seat = Assignment.objects.create(study=study, seat_index=seat_index, list_index=seat_index,
                                     seed=seat_seed(study.seed, seat_index))
    output_id = {(str(item), name): pk for pk, item, name in
                 Output.objects.filter(item__study=study)
                 .values_list("id", "item_id", "system__name")}
    order = order_seat(
        cells, calibration=[str(pk) for pk in study.calibration_items.values_list("id",
                                                                                   flat=True)],
        attention_checks=[str(pk) for pk in study.attention_checks.values_list("id",
                                                                                flat=True)],
        attention_every=study.attention_check_every, seed=seat.seed,
        randomise=study.randomise_order)
    AssignmentSlot.objects.bulk_create(
        AssignmentSlot(
            assignment=seat, position=position, kind=slot.kind,
            output_id=output_id[(slot.cell.item, slot.cell.system)] if slot.cell else None,
            output_b_id=(output_id[(slot.cell.item, str(slot.cell.system_b))]
                         if slot.cell else None),
            calibration_item_id=(int(slot.control) if slot.kind == "calibration"
                                 and slot.control else None),
            attention_check_id=(int(slot.control) if slot.kind == "attention"
                                and slot.control else None),
        )
        for position, slot in enumerate(order))
    return seat


@transaction.atomic
def stopping_check_record(*, plan: StudyPlan, fields: dict[str, Any],
                          strengths: dict[str, float] | None) -> StoppingCheck:
    """Store one look (`fields`: StoppingCheck's), the strengths the next seats are built
    from, and close the study (audited, source system) when the look met the rule."""
    plan = StudyPlan.objects.select_for_update().select_related("study").get(pk=plan.pk)
    check = StoppingCheck.objects.create(plan=plan, **fields)
    if strengths is not None:
        plan.allocation = {"strengths": strengths, "look": check.look}
        plan.save(update_fields=["allocation"])
    if check.met:
        study_close(study=plan.study, actor=None, source=SYSTEM)
    return check
