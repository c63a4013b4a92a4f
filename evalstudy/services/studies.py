"""A draft study's configuration (settings, systems, criteria, collaborators) and its status."""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction

from kit.audit import instance_changes, model_snapshot

from ..audit import SYSTEM, audit_record
from ..models import (
    AuditEvent,
    Criterion,
    Study,
    StudyCollaborator,
    System,
)

Row = TypeVar("Row", System, Criterion)


# --- study configuration ----------------------------------------------------------------------
class StudyNotDraft(ValidationError):
    """The study has left the draft state: its settings, systems and criteria are fixed."""


def locked_draft(study: Study) -> Study:
    locked = Study.objects.select_for_update().get(pk=study.pk)
    if locked.status != Study.Status.DRAFT:
        raise StudyNotDraft(f"Study {locked.slug!r} is {locked.status}; only a draft study "
                            "can change.")
    return locked


@transaction.atomic
def study_create(*, owner: Any, fields: dict[str, Any], actor: Any = None,
                 source: str = SYSTEM) -> Study:
    """A new draft study owned by `owner`, from already validated `fields`. Audited as
    "create"."""
    study = Study.objects.create(owner=owner, **fields)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, target=study)
    return study


@transaction.atomic
def study_update(*, study: Study, fields: dict[str, Any], actor: Any = None,
                 source: str = SYSTEM) -> Study:
    """Change a draft study's settings (already validated `fields`); raises StudyNotDraft once
    it is open or closed. Audited as "update" with each changed field (nothing when none did).
    """
    study = locked_draft(study)
    before = model_snapshot(study)
    for name, value in fields.items():
        setattr(study, name, value)
    study.save()
    changes = instance_changes(before, study)
    if changes:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, target=study,
                     changes=changes)
    return study


def _draft_row_create(model: type[Row], study: Study, fields: dict[str, Any], actor: Any,
                      source: str) -> Row:
    study = locked_draft(study)
    row = model.objects.create(study=study, **fields)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                 target=row, changes=instance_changes(None, row))
    return row


@transaction.atomic
def system_create(*, study: Study, fields: dict[str, Any], actor: Any = None,
                  source: str = SYSTEM) -> System:
    """Add a system to a draft study (StudyNotDraft otherwise). Audited as "create"."""
    return _draft_row_create(System, study, fields, actor, source)


@transaction.atomic
def criterion_create(*, study: Study, fields: dict[str, Any], actor: Any = None,
                     source: str = SYSTEM) -> Criterion:
    """Add a criterion (already checked against the study's rules) to a draft study
    (StudyNotDraft otherwise). Audited as "create"."""
    return _draft_row_create(Criterion, study, fields, actor, source)


@transaction.atomic
def collaborator_set(*, study: Study, user: Any, role: str, actor: Any = None,
                     source: str = SYSTEM) -> StudyCollaborator:
    """Give `user` the `role` (editor or viewer) on `study`, or change it. The owner is no
    collaborator (ValidationError). Audited as "update" with the role before and after."""
    if user.pk == study.owner_id:
        raise ValidationError({"username": ["this user owns the study"]})
    row = StudyCollaborator.objects.select_for_update().filter(study=study, user=user).first()
    before = row.role if row is not None else None
    if row is None:
        row = StudyCollaborator.objects.create(study=study, user=user, role=role)
    elif row.role != role:
        row.role = role
        row.save(update_fields=["role"])
    if before != role:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, study=study,
                     target=row, changes={"collaborator": [
                         None if before is None else f"{user.get_username()}:{before}",
                         f"{user.get_username()}:{role}"]})
    return row


@transaction.atomic
def collaborator_remove(*, study: Study, username: str, actor: Any = None,
                        source: str = SYSTEM) -> bool:
    """Take `username`'s role on `study` away; returns whether they had one. Audited as
    "delete"."""
    deleted, _ = StudyCollaborator.objects.filter(study=study,
                                                  user__username=username).delete()
    if deleted:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE, study=study,
                     changes={"collaborator": [username, None]})
    return bool(deleted)


def status_change(study: Study, status: str, actor: Any, source: str, action: str) -> None:
    """Set the locked `study`'s status and record the change (nothing when it had it)."""
    before = study.status
    if before == status:
        return
    study.status = status
    study.save(update_fields=["status", "updated_at"])
    audit_record(actor=actor, source=source, action=action, target=study,
                 changes={"status": [before, status]})


@transaction.atomic
def study_close(*, study: Study, actor: Any = None, source: str = SYSTEM) -> Study:
    """Stop handing out seats; raters with a seat can no longer be served new slots. Audited
    as "close" with the status change."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    status_change(study, Study.Status.CLOSED, actor, source, AuditEvent.Action.CLOSE)
    return study
