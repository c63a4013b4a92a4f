"""The audit trail: who changed a study's configuration or exported its data, when, and what.

`audit_record` is the one way to write an `AuditEvent`; the admin, the management commands, the
download views and the API call it. It writes in the caller's transaction, so a change that
rolls back leaves no event claiming it happened. `model_snapshot` / `instance_changes` turn a
model instance before and after a save into `{field: [before, after]}`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import getpass
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models

from .models import AuditEvent, Study

# Values longer than this are cut in `changes`: the trail says that a long text changed, it
# is not a second copy of every instruction text.
MAX_VALUE_CHARS = 500
# Never copied into the trail: secrets stay where they are.
SECRET_FIELDS = frozenset({"password", "access_token", "key_hash", "token"})


def _plain(value: Any) -> Any:
    """A JSON-safe, short version of a field value."""
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, (models.QuerySet, set, frozenset)) or (
        isinstance(value, (list, tuple)) and value
        and all(isinstance(v, models.Model) for v in value)
    ):
        # A collection of related rows (many-to-many): its order means nothing.
        items = [_plain(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return value[:MAX_VALUE_CHARS] + f"... ({len(value)} characters)"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def model_snapshot(instance: models.Model, fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The instance's concrete field values (foreign keys as ids), JSON-safe.

    Many-to-many fields are included when the instance is saved (they need a pk); pass
    `fields` to restrict the snapshot.
    """
    wanted = set(fields) if fields is not None else None
    snapshot: dict[str, Any] = {}
    for field in instance._meta.concrete_fields:
        # Secrets stay out; auto_now timestamps change on every save and say nothing.
        if field.primary_key or field.name in SECRET_FIELDS or getattr(field, "auto_now", False):
            continue
        if wanted is not None and field.name not in wanted:
            continue
        snapshot[field.name] = _plain(getattr(instance, field.attname))
    if instance.pk is not None:
        for field in instance._meta.many_to_many:
            if wanted is not None and field.name not in wanted:
                continue
            snapshot[field.name] = sorted(
                _plain(pk) for pk in getattr(instance, field.name).values_list("pk", flat=True)
            )
    return snapshot


def instance_changes(
    before: models.Model | Mapping[str, Any] | None,
    after: models.Model | Mapping[str, Any] | None,
) -> dict[str, list[Any]]:
    """`{field: [before, after]}` for every field whose value differs.

    Either side may be a model instance, a `model_snapshot`, or None (a creation or a
    deletion: every field of the other side is listed, against None).
    """
    old = model_snapshot(before) if isinstance(before, models.Model) else dict(before or {})
    new = model_snapshot(after) if isinstance(after, models.Model) else dict(after or {})
    return {
        name: [old.get(name), new.get(name)]
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    }


def form_changes(form) -> dict[str, list[Any]]:
    """`{field: [initial, cleaned]}` for a bound ModelForm's changed fields (m2m included)."""
    changes = {}
    for name in form.changed_data:
        if name in SECRET_FIELDS:
            continue
        changes[name] = [_plain(form.initial.get(name)), _plain(form.cleaned_data.get(name))]
    return changes


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


def _actor_fields(actor: Any, source: str) -> tuple[Any, str]:
    if actor is not None and getattr(actor, "is_authenticated", False) and actor.pk:
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
        changes=_plain(dict(changes or {})), source=source,
    )
