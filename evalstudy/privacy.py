"""Rater personal data: export everything we hold about one participant, or erase it.

What is personal: the rater's external id (a Prolific PID), display name (crowd entry copies the
PID there), metadata, the linked user account (username, name, email, logins), the crowd
platform's session id of each enrollment, and the entry-link token (a credential). What is kept
on erasure: the rater row (under a pseudonym), its kind, every enrollment timestamp (consent is
evidence), every seat and every judgment, so each analysis gives the same numbers as before.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from .audit import audit_record
from .models import Assignment, AuditEvent, Enrollment, Rater, _new_token

PSEUDONYM_PREFIX = "erased-"
ERASED = "<erased>"
# Rater fields whose values are personal: never copied into the audit trail.
PERSONAL_RATER_FIELDS = ("external_id", "display_name", "metadata", "user")


class NotAPerson(ValueError):
    """Erasure and export are for people; proxies (LLM and metric raters) hold no personal data."""


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def rater_data_export(rater: Rater) -> dict[str, Any]:
    """Everything personal held about `rater`, as a JSON-safe dict (never the entry token)."""
    from annotation.models import Judgment, JudgmentRevision

    user = rater.user
    judgments = (Judgment.objects.filter(rater=rater)
                 .values("slot__assignment__study__slug")
                 .annotate(n=Count("id")).order_by("slot__assignment__study__slug"))
    revisions = JudgmentRevision.objects.filter(judgment__rater=rater).count()
    return {
        "rater": {
            "id": rater.pk, "kind": rater.kind, "external_id": rater.external_id,
            "display_name": rater.display_name, "metadata": rater.metadata,
            "created_at": _iso(rater.created_at),
            "has_personal_entry_link": bool(rater.access_token),
            "erased": "erased_at" in (rater.metadata or {}),
        },
        "user": None if user is None else {
            "username": user.get_username(), "email": user.email,
            "first_name": user.first_name, "last_name": user.last_name,
            "is_active": user.is_active, "date_joined": _iso(user.date_joined),
            "last_login": _iso(user.last_login),
        },
        "enrollments": [
            {
                "study": e.study.slug, "platform_study_id": e.platform_study_id,
                "platform_session_id": e.platform_session_id,
                "entered_at": _iso(e.entered_at), "consented_at": _iso(e.consented_at),
                "instructions_seen_at": _iso(e.instructions_seen_at),
                "stopped_at": _iso(e.stopped_at), "stop_reason": e.stop_reason,
            }
            for e in Enrollment.objects.filter(rater=rater).select_related("study")
            .order_by("entered_at", "id")
        ],
        "assignments": [
            {"study": a.study.slug, "state": a.state, "claimed_at": _iso(a.claimed_at),
             "completed_at": _iso(a.completed_at)}
            for a in Assignment.objects.filter(rater=rater).select_related("study").order_by("id")
        ],
        "judgments_per_study": {row["slot__assignment__study__slug"]: row["n"]
                                for row in judgments},
        "judgment_revisions": revisions,
        "exported_at": timezone.now().isoformat(),
    }


def _end_sessions(rater: Rater, user_id: int | None) -> int:
    """Delete the database sessions bound to this rater (entry link) or its user account, so a
    browser that was signed in as the participant no longer is. Only the database session
    engine can be searched this way; other engines expire sessions on their own."""
    if settings.SESSION_ENGINE != "django.contrib.sessions.backends.db":
        return 0
    from django.contrib.sessions.models import Session

    from annotation.rater import SESSION_KEY

    ended = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        data = session.get_decoded()
        if data.get(SESSION_KEY) == rater.pk or (
            user_id is not None and str(data.get("_auth_user_id")) == str(user_id)
        ):
            ended.append(session.pk)
    Session.objects.filter(pk__in=ended).delete()
    return len(ended)


@transaction.atomic
def rater_data_erase(rater: Rater, *, actor: Any, source: str = "") -> None:
    """Replace the rater's personal data with a pseudonym; keep the rater and its judgments.

    Precondition: the rater is a person (NotAPerson otherwise). Idempotent: erasing an erased
    rater keeps its pseudonym. The linked user account is anonymised, deactivated and detached;
    the entry link stops working (new token) and the participant's open sessions end. Earlier
    audit events that named the rater are scrubbed, and the erasure itself is audited without
    any of the erased values.
    """
    rater = Rater.objects.select_for_update().get(pk=rater.pk)
    if not rater.is_human:
        raise NotAPerson(f"rater {rater.pk} is a {rater.get_kind_display()}, not a person")
    metadata = rater.metadata or {}
    already = rater.external_id.startswith(PSEUDONYM_PREFIX) and "erased_at" in metadata
    pseudonym = rater.external_id if already else PSEUDONYM_PREFIX + secrets.token_hex(6)
    user = rater.user
    user_id = user.pk if user is not None else None
    if user is not None:
        user.username = f"{pseudonym}-user"[:150]
        user.email = user.first_name = user.last_name = ""
        user.is_active = False
        user.set_unusable_password()
        user.save()
    rater.external_id = rater.display_name = pseudonym
    rater.metadata = {"erased_at": metadata.get("erased_at") or timezone.now().isoformat()}
    rater.user = None
    rater.access_token = _new_token()
    rater.save()
    Enrollment.objects.filter(rater=rater).exclude(platform_session_id="").update(
        platform_session_id="")
    sessions = _end_sessions(rater, user_id)
    # Earlier events about this rater (admin edits) carry its old name and values.
    for event in AuditEvent.objects.filter(target_type=rater._meta.label_lower,
                                           target_id=str(rater.pk)):
        event.target_repr = pseudonym
        event.changes = {key: [ERASED, ERASED] if key in PERSONAL_RATER_FIELDS else value
                         for key, value in (event.changes or {}).items()}
        event.save(update_fields=["target_repr", "changes"])
    if user_id is not None:
        AuditEvent.objects.filter(actor_id=user_id).update(actor_repr=f"{pseudonym}-user")
    audit_record(
        actor=actor, action=AuditEvent.Action.ERASE, target=rater, source=source,
        changes={"erased": list(PERSONAL_RATER_FIELDS) + ["platform_session_id", "access_token"],
                 "user_account": "anonymised and deactivated" if user_id else "none",
                 "sessions_ended": sessions, "repeated": already},
    )
