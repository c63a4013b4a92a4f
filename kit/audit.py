"""Audit plumbing that knows no app: what changed on a model instance, and the one hook through
which the kit's audited admin writes the trail.

The trail itself (its model and `audit_record`) belongs to an app, which registers its writer
with `recorder_register` from its AppConfig.ready; `record` fails loudly without one, so no
change made through an audited page ever goes unrecorded. `model_snapshot` /
`instance_changes` turn a model instance before and after a save into
`{field: [before, after]}`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models

# The admin's actions, as the trail's writer names them.
CREATE, UPDATE, DELETE = "create", "update", "delete"
ADMIN = "admin"

_recorder: Callable[..., Any] | None = None


def recorder_register(recorder: Callable[..., Any]) -> None:
    """Make `recorder` the trail's writer: called with keyword arguments `actor`, `action`,
    `target`, `changes` and `source` (`CREATE`/`UPDATE`/`DELETE`, `ADMIN`), in the caller's
    transaction. One writer per installation; registering again replaces it."""
    global _recorder
    _recorder = recorder


def record(**event: Any) -> Any:
    """Write one audit event through the registered writer (see `recorder_register`)."""
    if _recorder is None:
        raise ImproperlyConfigured(
            "No audit recorder is registered: an app must call kit.audit.recorder_register() "
            "from its AppConfig.ready before audited admin pages are used.")
    return _recorder(**event)


# Values longer than this are cut in `changes`: the trail says that a long text changed, it
# is not a second copy of every instruction text.
MAX_VALUE_CHARS = 500
# Never copied into the trail: secrets stay where they are.
SECRET_FIELDS = frozenset({"password", "access_token", "key_hash", "token",
                           "platform_session_id"})
# What the trail says of a field a model lists in `AUDIT_REDACTED` (personal data such as a
# rater's name or email): that it changed, never the values, since the trail is read by every
# collaborator of the study.
REDACTED = "<personal data>"


def redacted_fields(model: Any) -> frozenset[str]:
    """The fields of `model` (a class or an instance) whose values the trail never shows."""
    return frozenset(getattr(model, "AUDIT_REDACTED", ()))


def _redact(changes: dict[str, list[Any]], model: Any) -> dict[str, list[Any]]:
    hidden = redacted_fields(model)
    return {name: [None if old in (None, "", {}, []) else REDACTED,
                   None if new in (None, "", {}, []) else REDACTED]
            if name in hidden else [old, new] for name, (old, new) in changes.items()}


def json_safe(value: Any) -> Any:
    """A JSON-safe, short version of a field value."""
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, (models.QuerySet, set, frozenset)) or (
        isinstance(value, (list, tuple)) and value
        and all(isinstance(v, models.Model) for v in value)
    ):
        # A collection of related rows (many-to-many): its order means nothing.
        items = [json_safe(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
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
        snapshot[field.name] = json_safe(getattr(instance, field.attname))
    if instance.pk is not None:
        for field in instance._meta.many_to_many:
            if wanted is not None and field.name not in wanted:
                continue
            snapshot[field.name] = sorted(
                json_safe(pk) for pk in getattr(instance, field.name).values_list("pk", flat=True)
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
    changes = {
        name: [old.get(name), new.get(name)]
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    }
    model = after if isinstance(after, models.Model) else before
    return _redact(changes, model) if isinstance(model, models.Model) else changes


def form_changes(form) -> dict[str, list[Any]]:
    """`{field: [initial, cleaned]}` for a bound ModelForm's changed fields (m2m included)."""
    changes = {}
    for name in form.changed_data:
        if name in SECRET_FIELDS:
            continue
        changes[name] = [json_safe(form.initial.get(name)), json_safe(form.cleaned_data.get(name))]
    instance = getattr(form, "instance", None)
    return _redact(changes, instance) if instance is not None else changes
