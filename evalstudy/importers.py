"""Writing parsed specs and item files to the database, and reading a study back as a spec.

Imports are atomic: a spec either lands whole or not at all. Re-importing the same spec is a
no-op; a changed spec updates a draft study in place (matching systems, criteria, items and
control items by their keys) and is refused for a study that raters have started, because
changing what people already judged would corrupt the data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError

from .audit import SYSTEM, actor_user, audit_export, audit_record
from .media import media_prepared
from .media_fetch import MediaSource
from .models import (
    Assignment,
    AttentionCheck,
    AuditEvent,
    CalibrationItem,
    Criterion,
    Item,
    ItemMedia,
    Output,
    Study,
    StudyPlan,
    System,
)
from .selectors import study_started
from .services import spec_limits, study_plan_save
from .spec.errors import SpecError, SpecInvalid
from .spec.fields import PAIRWISE_DESIGNS, STUDY_FIELDS
from .spec.files import check_items_against_systems
from .spec.limits import (
    SpecLimits,
    control_problem,
)
from .spec.plan import PlanSpec, plan_to_document
from .spec.study import ControlSpec, CriterionSpec, ItemSpec, StudySpec, SystemSpec

BATCH_SIZE = 2000


# --- reading a study back ---------------------------------------------------------------------
def study_to_spec(study: Study) -> StudySpec:
    """The study as a StudySpec: what `export_study` writes and what re-import compares to."""
    systems = list(study.systems.order_by("id"))
    names = {system.pk: system.name for system in systems}
    outputs: dict[int, dict[str, str]] = {}
    for item_id, system_id, text in (
        Output.objects.filter(item__study=study).order_by("system_id")
        .values_list("item_id", "system_id", "text")
    ):
        outputs.setdefault(item_id, {})[names[system_id]] = text
    # Media read back as the references they were imported from (evalstudy.media).
    media: dict[int, str] = {}
    output_media: dict[int, dict[str, str]] = {}
    for item_id, output_system, ref in ItemMedia.objects.filter(item__study=study).values_list(
            "item_id", "output__system_id", "source"):
        if output_system is None:
            media[item_id] = ref
        else:
            output_media.setdefault(item_id, {})[names[output_system]] = ref
    return StudySpec(
        settings={name: getattr(study, name) for name in STUDY_FIELDS},
        systems=[SystemSpec(s.name, s.description, s.metadata) for s in systems],
        criteria=[
            CriterionSpec(
                key=c.key, kind=c.kind, prompt=c.prompt, description=c.description,
                scale_points=c.scale_points, labels=c.labels, options=list(c.options),
                allow_tie=c.allow_tie, allow_both=c.allow_both, required=c.required,
                scale_min=c.scale_min,
                scale_max=c.scale_max, severity_weights=dict(c.severity_weights or {}),
                span_reference=c.span_reference,
                show_if_criterion=c.show_if_criterion.key if c.show_if_criterion else None,
                show_if_values=list(c.show_if_values),
            )
            for c in study.criteria.select_related("show_if_criterion").order_by("order", "id")
        ],
        items=[
            ItemSpec(item.external_id, item.reference, item.context, item.metadata,
                     outputs.get(item.pk, {}), media=media.get(item.pk, ""),
                     output_media=output_media.get(item.pk, {}))
            for item in study.items.order_by("id")
        ],
        calibration=[_control_spec(c) for c in study.calibration_items.order_by("order", "id")],
        attention_checks=[_control_spec(c) for c in study.attention_checks.order_by("order", "id")],
        plan=_plan_spec(study),
    )


def _plan_spec(study: Study) -> PlanSpec | None:
    plan = StudyPlan.objects.filter(study=study).select_related("criterion").first()
    if plan is None:
        return None
    return PlanSpec(
        criterion=plan.criterion.key if plan.criterion is not None else None,
        contrasts=[[str(a), str(b)] for a, b in plan.contrasts or []],
        target_ci_width=plan.target_ci_width, stop_on_decision=plan.stop_on_decision,
        alpha=plan.alpha, spending=plan.spending, check_every=plan.check_every,
        max_looks=plan.max_looks, max_judgments=plan.max_judgments)


def _control_spec(control: CalibrationItem | AttentionCheck) -> ControlSpec:
    return ControlSpec(
        key=control.key, reference=control.reference, context=control.context, text=control.text,
        text_b=control.text_b, expected=dict(control.expected),
        feedback=getattr(control, "feedback", ""),
    )


def spec_to_document(spec: StudySpec) -> dict[str, Any]:
    """A StudySpec as the YAML/JSON document `parse_study_spec` reads (round-trip)."""
    pairwise = spec.settings.get("design") in PAIRWISE_DESIGNS

    def criterion(c: CriterionSpec) -> dict[str, Any]:
        doc: dict[str, Any] = {"key": c.key, "kind": c.kind, "prompt": c.prompt}
        if c.description:
            doc["description"] = c.description
        if c.scale_points is not None:
            doc["scale_points"] = c.scale_points
        if c.labels:
            doc["labels"] = c.labels
        if c.options:
            doc["options"] = c.options
        if c.allow_tie:
            doc["allow_tie"] = True
        if c.allow_both:
            doc["allow_both"] = True
        if c.scale_min is not None:
            doc["scale_min"], doc["scale_max"] = c.scale_min, c.scale_max
        if c.severity_weights:
            doc["severity_weights"] = c.severity_weights
        if c.span_reference:
            doc["span_reference"] = True
        doc["required"] = c.required
        if c.show_if_criterion:
            doc["show_if"] = {"criterion": c.show_if_criterion, "in": c.show_if_values}
        return doc

    def control(c: ControlSpec, with_feedback: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": c.key, "reference": c.reference}
        if c.context:
            doc["context"] = c.context
        if pairwise:
            doc["output_a"], doc["output_b"] = c.text, c.text_b
        else:
            doc["output"] = c.text
        doc["expected"] = c.expected
        if with_feedback:
            doc["feedback"] = c.feedback
        return doc

    return {
        "study": dict(spec.settings),
        "systems": [asdict(s) for s in spec.systems],
        "criteria": [criterion(c) for c in spec.criteria],
        "items": [
            {"id": i.external_id, "reference": i.reference, "context": i.context,
             "metadata": i.metadata, "outputs": i.outputs,
             **({"media": i.media} if i.media else {}),
             **({"output_media": i.output_media} if i.output_media else {})}
            for i in spec.items
        ],
        "calibration": [control(c, True) for c in spec.calibration],
        "attention_checks": [control(c, False) for c in spec.attention_checks],
        **({"plan": plan_to_document(spec.plan)} if spec.plan is not None else {}),
    }


# --- writing ---------------------------------------------------------------------------------
def _check_may_update(study: Study, actor: Any, file_name: str) -> None:
    """SpecInvalid unless `actor` (a user; None for the shell) may change `study`."""
    from .permissions import EDITOR, ROLE_RANK, study_access

    user = actor_user(actor)
    if user is None:
        return
    role = study_access(user, study)
    if role is None:
        raise SpecInvalid([SpecError(file_name, None, "study.slug",
                                     f"slug {study.slug!r} is taken")])
    if ROLE_RANK[role] < ROLE_RANK[EDITOR]:
        raise SpecInvalid([SpecError(
            file_name, None, "study.slug",
            f"your role on study {study.slug!r} is {role}; updating it needs editor or above")])


def study_spec_export(*, study: Study, fmt: str, file: str = "", actor: Any = None,
                      source: str = SYSTEM) -> dict[str, Any]:
    """The study as a spec document (`spec_to_document`), for the caller to write as `fmt`
    (yaml or json) to `file` (blank: a download or stdout). Audited as "export"."""
    document = spec_to_document(study_to_spec(study))
    audit_export(actor=actor, source=source, what="spec", fmt=fmt, target=study, file=file)
    return document


def study_import_spec(*, spec: StudySpec, file_name: str, owner: Any = None, actor: Any = None,
                      source: str = SYSTEM, media_from: MediaSource | None = None
                      ) -> tuple[Study, str]:
    """Create or update the study a spec describes; returns (study, "created"|"updated"|
    "unchanged"). Raises SpecInvalid (nothing written) when the spec would change a study that
    raters have started, or when the database refuses a change. Audited as "import" with the
    file and the outcome (an unchanged re-import too: someone sent the file).

    A user (`actor`) may update only a study they edit: another's slug is taken, as if the
    study did not exist for them (SpecInvalid, nothing written). The shell and the system
    (no user) may import over any study.

    Media files the items name are read from `media_from` (default: the media directory and
    allowed URLs) and checked before anything is written (evalstudy.media).
    """
    slug = spec.settings["slug"]

    def record(study: Study, outcome: str) -> tuple[Study, str]:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=study,
                     changes={"what": "spec", "file": file_name, "outcome": outcome})
        return study, outcome

    # Whose study it is is checked before any media file is read: another's slug reads
    # nothing (and is checked again under the lock below).
    existing = Study.objects.filter(slug=slug).first()
    if existing is not None:
        _check_may_update(existing, actor, file_name)
    with media_prepared(spec.items, file_name=file_name, slug=slug, whole=True, spec_paths=True,
                        source=media_from, per_study=actor_user(actor) is not None
                        ) as media, transaction.atomic():
        study = Study.objects.select_for_update().filter(slug=slug).first()
        if study is not None:
            _check_may_update(study, actor, file_name)
            current = study_to_spec(study)
            if _same_content(current, spec):
                return record(study, "unchanged")
            if current.plan != spec.plan:
                _check_plan_may_change(study, spec, file_name)
            if study_started(study):
                raise SpecInvalid([SpecError(
                    file_name, None, "study.slug",
                    f"study {slug!r} is {study.status} and has raters; a changed spec cannot be "
                    "imported over it (import it under a new slug, or re-import the same spec)",
                )])
            outcome = "updated"
        else:
            study = Study(owner=owner)
            outcome = "created"
        for name, value in spec.settings.items():
            setattr(study, name, value)
        study.save()
        # Seats built from the old content are stale; study_open rebuilds them. They go first:
        # their slots protect the outputs that the new content may remove.
        study.assignments.filter(source=Assignment.Source.DESIGN, rater__isnull=True).delete()
        try:
            _sync(study, spec, actor=actor, source=source, file_name=file_name)
            media.write(study)
        except ProtectedError as error:
            raise SpecInvalid([SpecError(
                file_name, None, "", f"cannot remove rows that judgments refer to: {error.args[0]}"
            )]) from None
        return record(study, outcome)


def _same_content(a: StudySpec, b: StudySpec) -> bool:
    """Whether two specs describe the same study. Systems and items have no order in the
    database (a study reads them back by id), so their order in the file does not count."""

    def canonical(spec: StudySpec) -> StudySpec:
        return replace(
            spec, systems=sorted(spec.systems, key=lambda s: s.name),
            items=sorted(spec.items, key=lambda i: i.external_id),
        )

    return canonical(a) == canonical(b)


def _check_plan_may_change(study: Study, spec: StudySpec, file_name: str) -> None:
    """SpecInvalid when the study's plan was registered (the study opened with it): a
    pre-registered stopping rule never changes, whatever else the file says."""
    registered = StudyPlan.objects.filter(study=study, registered_at__isnull=False).first()
    if registered is not None:
        raise SpecInvalid([SpecError(
            file_name, spec.plan.line if spec.plan is not None else None, "plan",
            f"the plan of study {study.slug!r} was registered at "
            f"{registered.registered_at:%Y-%m-%d %H:%M} UTC when it opened; a registered plan "
            "cannot change (export the study and keep its plan block, or import the new plan "
            "under a new slug)")])


def _sync_plan(study: Study, plan: PlanSpec | None, criteria: dict[str, Criterion], *,
               actor: Any, source: str, file_name: str) -> None:
    """Create, change or remove the study's plan as the file says, through the audited
    service (which refuses a registered plan)."""
    if _plan_spec(study) == plan:
        return
    if plan is None:
        existing = StudyPlan.objects.filter(study=study, registered_at__isnull=True).first()
        if existing is not None:
            audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE,
                         target=existing, changes={})
            existing.delete()
        return
    fields = {name: getattr(plan, name) for name in StudyPlan.PLAN_FIELDS}
    fields["criterion"] = criteria[plan.criterion] if plan.criterion is not None else None
    try:
        study_plan_save(study=study, fields=fields, actor=actor, source=source)
    except ValidationError as error:
        raise SpecInvalid([SpecError(file_name, plan.line, "plan", message)
                           for message in error.messages]) from None


def _sync(study: Study, spec: StudySpec, *, actor: Any = None, source: str = SYSTEM,
          file_name: str = "") -> None:
    systems = {s.name: s for s in study.systems.all()}
    for s in spec.systems:
        system = systems.get(s.name) or System(study=study, name=s.name)
        system.description, system.metadata = s.description, s.metadata
        system.save()
        systems[s.name] = system
    study.systems.exclude(name__in=[s.name for s in spec.systems]).delete()

    criteria = {c.key: c for c in study.criteria.all()}
    for order, c in enumerate(spec.criteria):
        criterion = criteria.get(c.key) or Criterion(study=study, key=c.key)
        for name in ("kind", "prompt", "description", "scale_points", "labels", "options",
                     "allow_tie", "allow_both", "required", "show_if_values", "scale_min",
                     "scale_max", "severity_weights", "span_reference"):
            setattr(criterion, name, getattr(c, name))
        criterion.order = order
        criterion.show_if_criterion = None
        criterion.save()
        criteria[c.key] = criterion
    for c in spec.criteria:
        if c.show_if_criterion:
            criteria[c.key].show_if_criterion = criteria[c.show_if_criterion]
            criteria[c.key].save(update_fields=["show_if_criterion"])
    # Before criteria go: the plan protects the criterion it reads.
    _sync_plan(study, spec.plan, criteria, actor=actor, source=source,
               file_name=file_name or study.slug)
    study.criteria.exclude(key__in=[c.key for c in spec.criteria]).delete()

    _write_items(study, spec.items, systems, delete_missing=True)
    for model, controls in (
        (CalibrationItem, spec.calibration), (AttentionCheck, spec.attention_checks)
    ):
        existing = {c.key: c for c in model.objects.filter(study=study)}
        for order, control in enumerate(controls):
            row = existing.get(control.key) or model(study=study, key=control.key)
            row.reference, row.context, row.text, row.text_b = (
                control.reference, control.context, control.text, control.text_b
            )
            row.expected, row.order = control.expected, order
            if isinstance(row, CalibrationItem):
                row.feedback = control.feedback
            row.save()
        model.objects.filter(study=study).exclude(key__in=[c.key for c in controls]).delete()


def _write_items(
    study: Study, items: list[ItemSpec], systems: dict[str, System], *, delete_missing: bool
) -> tuple[int, int]:
    """Upsert items and their outputs in bulk; returns (items written, outputs written)."""
    existing = {item.external_id: item for item in study.items.all()}
    new_items, changed_items = [], []
    for spec in items:
        item = existing.get(spec.external_id)
        if item is None:
            new_items.append(Item(study=study, external_id=spec.external_id,
                                  reference=spec.reference, context=spec.context,
                                  metadata=spec.metadata))
        elif (item.reference, item.context, item.metadata) != (
            spec.reference, spec.context, spec.metadata
        ):
            item.reference, item.context = spec.reference, spec.context
            item.metadata = spec.metadata
            changed_items.append(item)
    Item.objects.bulk_create(new_items, batch_size=BATCH_SIZE)
    Item.objects.bulk_update(changed_items, ["reference", "context", "metadata"],
                             batch_size=BATCH_SIZE)
    if delete_missing:
        study.items.exclude(external_id__in=[spec.external_id for spec in items]).delete()
    ids = dict(study.items.values_list("external_id", "id"))

    current = {
        (o.item_id, o.system_id): o for o in Output.objects.filter(item__study=study)
    }
    new_outputs, changed_outputs = [], []
    for spec in items:
        for name, text in spec.outputs.items():
            key = (ids[spec.external_id], systems[name].pk)
            output = current.get(key)
            if output is None:
                new_outputs.append(Output(item_id=key[0], system_id=key[1], text=text))
            elif output.text != text:
                output.text = text
                changed_outputs.append(output)
    Output.objects.bulk_create(new_outputs, batch_size=BATCH_SIZE)
    Output.objects.bulk_update(changed_outputs, ["text"], batch_size=BATCH_SIZE)
    return len(new_items) + len(changed_items), len(new_outputs) + len(changed_outputs)


def items_import(
    *, study: Study, items: list[ItemSpec], file_name: str, limits: SpecLimits | None = None,
    actor: Any = None, source: str = SYSTEM, media_from: MediaSource | None = None,
) -> tuple[int, int]:
    """Add or update items and outputs of a draft study from a parsed CSV/JSONL file.

    Every item must give an output for each of the study's systems, and the study may not end
    up with more than `limits.max_items` items (default: the settings). Atomic; returns
    (items written, outputs written). Raises SpecInvalid naming the file and line. Audited as
    "import" with the file and the counts.

    Media files the items name (columns media, output_media) are read from `media_from`
    (default: the media directory and allowed URLs) and checked before anything is written;
    items without media keep theirs (evalstudy.media).
    """
    limits = limits or spec_limits()
    with media_prepared(items, file_name=file_name, slug=study.slug, whole=False,
                        spec_paths=False, source=media_from,
                        per_study=actor_user(actor) is not None
                        ) as media, transaction.atomic():
        study = Study.objects.select_for_update().get(pk=study.pk)
        if study_started(study):
            raise SpecInvalid([SpecError(
                file_name, None, "", f"study {study.slug!r} is {study.status} and has raters; "
                "items can only be added to a draft study",
            )])
        ids = {item.external_id for item in items}
        total = study.items.count() + len(ids) - study.items.filter(external_id__in=ids).count()
        if total > limits.max_items:
            raise SpecInvalid([SpecError(
                file_name, None, "", f"study {study.slug!r} would have {total:,} items, over the "
                f"limit of {limits.max_items:,} (EVALSTUDY_MAX_ITEMS)",
            )])
        systems = {s.name: s for s in study.systems.all()}
        if not systems:
            raise SpecInvalid([SpecError(file_name, None, "", f"study {study.slug!r} has no "
                                         "systems yet: define them before importing outputs")])
        check_items_against_systems(items, set(systems), file_name)
        n_items, n_outputs = _write_items(study, items, systems, delete_missing=False)
        n_media = media.write(study)
        study.assignments.filter(source=Assignment.Source.DESIGN, rater__isnull=True).delete()
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=study,
                     changes={"what": "items", "file": file_name, "items": n_items,
                              "outputs": n_outputs, "media": n_media})
        return n_items, n_outputs


# --- outputs on their own (API bulk create) -------------------------------------------------
OUTPUT_CSV_COLUMNS = ("item", "system", "output")


@dataclass(frozen=True)
class OutputRow:
    row: int  # CSV line, or position (from 1) in a JSON list
    item: str
    system: str
    text: str


def _too_many_rows(source: str, row: int | None, count: str, limit: int) -> SpecInvalid:
    return SpecInvalid([SpecError(
        source, row, "", f"{count} outputs in one request; at most {limit:,} "
        "(EVALSTUDY_MAX_ITEMS): send them in batches",
    )])


def parse_outputs_json(data: Any, source: str, max_rows: int | None = None) -> list[OutputRow]:
    """A JSON list of {"item", "system", "text"}, at most `max_rows` long; SpecInvalid listing
    every bad element (a control character included: PostgreSQL refuses NUL in text)."""
    if not isinstance(data, list):
        raise SpecInvalid([SpecError(source, None, "", "expected a JSON list of "
                                     '{"item", "system", "text"} objects')])
    if max_rows is not None and len(data) > max_rows:
        raise _too_many_rows(source, None, f"{len(data):,}", max_rows)
    rows, errors = [], []
    for number, entry in enumerate(data, start=1):
        if not isinstance(entry, dict):
            errors.append(SpecError(source, number, "", "expected an object"))
            continue
        unknown = set(entry) - {"item", "system", "text"}
        for name in sorted(unknown):
            errors.append(SpecError(source, number, name, "unknown field; expected item, "
                                                          "system, text"))
        values = {}
        for name in ("item", "system", "text"):
            value = entry.get(name)
            if not isinstance(value, str) or (name != "text" and not value.strip()):
                errors.append(SpecError(source, number, name, "missing" if value is None else
                                        "must be non-empty text" if name != "text" else
                                        "must be text"))
            if isinstance(value, str) and (problem := control_problem(value)) is not None:
                errors.append(SpecError(source, number, name, problem))
                value = None
            values[name] = value.strip() if isinstance(value, str) and name != "text" else value
        item, system, text = values["item"], values["system"], values["text"]
        if (not unknown and isinstance(item, str) and isinstance(system, str)
                and isinstance(text, str)):
            rows.append(OutputRow(number, item, system, text))
    if errors:
        raise SpecInvalid(errors)
    return rows


def parse_outputs_csv(text: str, source: str, max_rows: int | None = None) -> list[OutputRow]:
    """CSV with columns item, system, output (others are refused: this is not an item file),
    at most `max_rows` rows."""
    from .spec.files import csv_rows

    rows: list[OutputRow] = []
    errors: list[SpecError] = []
    for line, row in csv_rows(text, source, OUTPUT_CSV_COLUMNS):
        if max_rows is not None and len(rows) == max_rows:
            raise _too_many_rows(source, line, "more than", max_rows)
        extra = set(row) - set(OUTPUT_CSV_COLUMNS)
        if extra:
            raise SpecInvalid([SpecError(source, 1, "header", f"unexpected column(s) "
                                         f"{', '.join(sorted(extra))}; expected item,system,"
                                         "output (use the items endpoint for item fields)")])
        item, system = row["item"].strip(), row["system"].strip()
        for name, value in (("item", item), ("system", system)):
            if not value:
                errors.append(SpecError(source, line, name, "must not be empty"))
        rows.append(OutputRow(line, item, system, row["output"]))
    if errors:
        raise SpecInvalid(errors)
    return rows


def outputs_import(*, study: Study, rows: list[OutputRow], file_name: str, actor: Any = None,
                   source: str = SYSTEM) -> int:
    """Create or update outputs of existing items and systems of a draft study; returns how
    many were written. All rows valid or nothing written (SpecInvalid names row and field).
    Audited as "import" with the file and the count.

    Only the items the rows name are read, so importing in batches costs the same per batch
    whatever the study's size.
    """
    with transaction.atomic():
        study = Study.objects.select_for_update().get(pk=study.pk)
        if study_started(study):
            raise SpecInvalid([SpecError(
                file_name, None, "", f"study {study.slug!r} is {study.status} and has raters; "
                "outputs can only be added to a draft study",
            )])
        systems = dict(study.systems.values_list("name", "id"))
        items = dict(
            study.items.filter(external_id__in={row.item for row in rows})
            .values_list("external_id", "id")
        )
        errors: list[SpecError] = []
        first: dict[tuple[str, str], int] = {}
        for row in rows:
            if row.item not in items:
                errors.append(SpecError(file_name, row.row, "item",
                                        f"no item {row.item!r} in study {study.slug!r}"))
            if row.system not in systems:
                errors.append(SpecError(file_name, row.row, "system",
                                        f"no system {row.system!r} in study {study.slug!r}"))
            names = (row.item, row.system)
            if names in first:
                errors.append(SpecError(file_name, row.row, "system", f"second output for "
                                        f"{row.item!r}/{row.system!r} (first at row "
                                        f"{first[names]})"))
            first.setdefault(names, row.row)
        if errors:
            raise SpecInvalid(errors)
        current = {
            (o.item_id, o.system_id): o
            for o in Output.objects.filter(item_id__in=items.values())
        }
        new, changed = [], []
        for row in rows:
            key = (items[row.item], systems[row.system])
            output = current.get(key)
            if output is None:
                new.append(Output(item_id=key[0], system_id=key[1], text=row.text))
            elif output.text != row.text:
                output.text = row.text
                changed.append(output)
        Output.objects.bulk_create(new, batch_size=BATCH_SIZE)
        Output.objects.bulk_update(changed, ["text"], batch_size=BATCH_SIZE)
        if new:
            # Seats built before these outputs existed would leave them unrated.
            study.assignments.filter(source=Assignment.Source.DESIGN, rater__isnull=True).delete()
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=study,
                     changes={"what": "outputs", "file": file_name,
                              "outputs": len(new) + len(changed)})
        return len(new) + len(changed)


# --- the items grid (the study admin's "Edit items in a grid") --------------------------------
def items_grid_save(
    *, study: Study, items: list[ItemSpec], remove: list[str], file_name: str,
    limits: SpecLimits | None = None, actor: Any = None, source: str = SYSTEM,
) -> tuple[int, int, int]:
    """Write the items of the grid (`items_import`) and delete the items of `remove` (external
    ids) of a draft study without raters, in one transaction: any problem writes nothing.
    Returns (items written, outputs written, items removed). The removal is audited as
    "delete" with the ids, the rest as `items_import` audits it."""
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        removed = 0
        if remove:
            if study_started(locked):
                raise SpecInvalid([SpecError(
                    file_name, None, "", f"study {locked.slug!r} is {locked.status} and has "
                    "raters; items can only be removed from a draft study")])
            # Seats built from the old items go first: their slots protect the outputs.
            locked.assignments.filter(source=Assignment.Source.DESIGN,
                                      rater__isnull=True).delete()
            try:
                Item.objects.filter(study=locked, external_id__in=remove).delete()
            except ProtectedError as error:
                raise SpecInvalid([SpecError(
                    file_name, None, "", f"cannot remove items that judgments refer to: "
                    f"{error.args[0]}")]) from None
            removed = len(set(remove))
            audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE,
                         target=locked, changes={"what": "items", "file": file_name,
                                                 "removed": sorted(set(remove))})
        n_items, n_outputs = (0, 0)
        if items:
            n_items, n_outputs = items_import(study=locked, items=items, file_name=file_name,
                                              limits=limits, actor=actor, source=source)
        return n_items, n_outputs, removed
