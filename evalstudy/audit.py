"""The audit trail: who changed a study's configuration or exported its data, when, and what.

`audit_record` is the one way to write an `AuditEvent`. The services call it: every service that
changes a study's configuration, starts a run, imports or exports takes `actor` (the user, or
None for the shell and the workers) and `source` (`ADMIN`, `API`, `COMMAND`, `WEB`, `SYSTEM`)
and records its event inside its own transaction, so whichever interface called it, the trail is
the same, and a change that rolls back leaves no event claiming it happened. Interfaces never
write the trail themselves (tests/test_architecture.py holds them to it); the one exception is
the audited admin base (`kit.admin`), which records the admin's generic row edits through
`kit.audit`, to which EvalstudyConfig.ready registers `audit_record`. What changed on an
instance comes from `kit.audit.instance_changes`.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from typing import Any

from django.db import models

from kit.audit import json_safe

from .models import AuditEvent, Study

# Where a change came from (AuditEvent.Source): the interfaces pass one of these to the services.
ADMIN = AuditEvent.Source.ADMIN.value
API = AuditEvent.Source.API.value
COMMAND = AuditEvent.Source.COMMAND.value
WEB = AuditEvent.Source.WEB.value
# The default of every audited service: beat, the workers, and code that acts on its own.
SYSTEM = AuditEvent.Source.SYSTEM.value


def audit_export(*, actor: Any, source: str, what: str, fmt: str,
                 target: models.Model | tuple[str, Any, str], study: Study | None = None,
                 file: str = "", **details: Any) -> AuditEvent:
    """Record an export of `what` as `fmt` (to `file`, when it was written to one; blank for a
    download or stdout), with `details` such as the row count: one shape for every export."""
    changes: dict[str, Any] = {"what": what, "format": fmt, **details}
    if file:
        changes["file"] = file
    return audit_record(actor=actor, source=source, action=AuditEvent.Action.EXPORT,
                        study=study, target=target, changes=changes)


def _target_fields(target: Any) -> tuple[str, str, str]:
    if target is None:
        return "", "", ""
    if isinstance(target, models.Model):
        return target._meta.label_lower, str(target.pk or ""), str(target)[:200]
    label, pk, text = target
    return str(label), str(pk), str(text)[:200]


def _study_of(target: Any) -> Study | None:
    if isinstance(target, Study):
        return target
    study = getattr(target, "study", None) if isinstance(target, models.Model) else None
    return study if isinstance(study, Study) else None


def actor_user(actor: Any) -> Any:
    """The user row behind `actor` (for a run's `created_by`), None for the shell, the workers
    and an anonymous request."""
    if actor is not None and getattr(actor, "is_authenticated", False) and actor.pk:
        return actor
    return None


def _actor_fields(actor: Any, source: str) -> tuple[Any, str]:
    if actor_user(actor) is not None:
        return actor, actor.get_username()[:150]
    if source == AuditEvent.Source.COMMAND:
        # A management command has no Django user; the operating-system account ran it.
        try:
            return None, f"shell:{getpass.getuser()}"[:150]
        except (KeyError, OSError):
            return None, "shell"
    return None, ""


def audit_record(
    *,
    actor: Any,
    action: str,
    study: Study | None = None,
    target: models.Model | tuple[str, Any, str] | None = None,
    changes: Mapping[str, Any] | None = None,
    source: str = "",
) -> AuditEvent:
    """Write one audit event and return it.

    actor: the user who acted (None or AnonymousUser for commands and the system).
    action: an `AuditEvent.Action` value. study: the study concerned; taken from `target`
    when that is a Study or has a `study`. target: a model instance, or (label, pk, repr).
    changes: `{field: [before, after]}` for changes, or what was written for exports and
    imports (file, counts, format). source: an `AuditEvent.Source` value.
    Runs in the caller's transaction.
    """
    if action not in AuditEvent.Action.values:
        raise ValueError(f"unknown audit action {action!r}; use one of {AuditEvent.Action.values}")
    if source and source not in AuditEvent.Source.values:
        raise ValueError(f"unknown audit source {source!r}; use one of {AuditEvent.Source.values}")
    study = study or _study_of(target)
    user, actor_repr = _actor_fields(actor, source)
    target_type, target_id, target_repr = _target_fields(target)
    return AuditEvent.objects.create(
        actor=user, actor_repr=actor_repr, action=action,
        study=study if study is not None and study.pk else None,
        study_slug=study.slug if study is not None else "",
        target_type=target_type, target_id=target_id, target_repr=target_repr,
        changes=json_safe(dict(changes or {})), source=source,
    )
