"""Rater personal data: export everything we hold about one participant, or erase it.

What is personal: the rater's external id (a Prolific PID), display name (crowd entry copies the
PID there), metadata, the linked user account (username, name, email, logins), the crowd
platform's session id of each enrollment, and the entry-link token (a credential). What is kept
on erasure: the rater row (under a pseudonym), its kind, every enrollment timestamp (consent is
evidence), every seat and every judgment, so each analysis gives the same numbers as before.

Copies of the personal values made elsewhere are scrubbed too: audit events about the rater and
its enrollments here, and whatever other apps copied (the analysis app's stored runs name raters
by `str(rater)`); see `rater_data_erase`.

What other apps hold about a rater reaches the export and the erasure through a
`PrivacyContribution` each registers from its AppConfig.ready (`privacy_contribution_register`):
the annotation app's judgments and rater sessions, the analysis app's stored runs.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.html import escape

from .audit import SYSTEM, audit_export, audit_record
from .models import Assignment, AuditEvent, Enrollment, Rater, Study, new_token

PSEUDONYM_PREFIX = "erased-"
ERASED = "<erased>"
# Rater fields whose values are personal: never copied into the audit trail.
PERSONAL_RATER_FIELDS = ("external_id", "display_name", "metadata", "user")
# Enrollment fields whose values are personal.
PERSONAL_ENROLLMENT_FIELDS = ("platform_session_id",)

# A function replacing erased names in a text (see `_scrubber`); None when there is none.
Scrub = Callable[[str], str]


@dataclass(frozen=True)
class PrivacyContribution:
    """What one app holds about raters, for their export and erasure. Every part is optional.

    export(rater, studies): entries for the export document, within the requester's scope
        (`studies`: None for the installation, else study ids); JSON-safe, in a fixed order.
    studies_of(rater): ids of the studies the app's rows show the rater took part in (an owner
        may erase only a rater whose participation lies entirely in studies they own).
    session_bound(session data, rater): whether a browser session acts as the rater; such
        sessions end on erasure (with the database session engine).
    scrub(study ids, scrub): replace the erased names in the app's copies within these studies
        (`scrub` is None when there is nothing to replace); returns entries for the erasure's
        audit event (e.g. how many rows changed). Runs in the erasure's transaction.
    """

    export: Callable[[Rater, Collection[int] | None], dict[str, Any]] | None = None
    studies_of: Callable[[Rater], Iterable[int]] | None = None
    session_bound: Callable[[Mapping[str, Any], Rater], bool] | None = None
    scrub: Callable[[set[int], Scrub | None], dict[str, Any]] | None = None


_CONTRIBUTIONS: list[PrivacyContribution] = []


def privacy_contribution_register(contribution: PrivacyContribution) -> None:
    """Add an app's part to every export and erasure; call it once, from AppConfig.ready (the
    apps' order in INSTALLED_APPS is the order of their entries in the export)."""
    if contribution not in _CONTRIBUTIONS:  # ready() may run twice in tests
        _CONTRIBUTIONS.append(contribution)


class NotAPerson(ValueError):
    """Erasure and export are for people; proxies (LLM and metric raters) hold no personal data."""


class OutsideYourStudies(PermissionError):
    """The rater's data reaches beyond the studies the requester owns (an account holder, or a
    rater of another owner's study): only an admin may erase it."""


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


@transaction.atomic
def rater_data_export(rater: Rater, *, studies: Collection[int] | None = None,
                      study: Study | None = None, file: str = "", actor: Any = None,
                      source: str = SYSTEM) -> dict[str, Any]:
    """Everything personal held about `rater`, as a JSON-safe dict (never the entry token).

    `studies`: the requester's scope (`permissions.privacy_scope`): None for the whole
    installation (an admin, the shell); else only what concerns those studies (an owner), and
    the account's details (username, email, logins) are left out, since an account is
    installation-wide. The other apps' entries (`PrivacyContribution.export`) come after the
    seats, before `exported_at`.

    Audited as "export" of the rater by id (never by name), under `study` when the request
    came through one, with `file` when written to one."""
    audit_export(actor=actor, source=source, what="personal data", fmt="json", study=study,
                 target=("evalstudy.rater", rater.pk, f"rater {rater.pk}"), file=file)
    user = rater.user if studies is None else None
    enrollments = Enrollment.objects.filter(rater=rater)
    assignments = Assignment.objects.filter(rater=rater)
    if studies is not None:
        enrollments = enrollments.filter(study__in=studies)
        assignments = assignments.filter(study__in=studies)
    # An account's name and metadata are the installation's (an admin's to give out), not
    # one study owner's.
    account_scoped = studies is not None and rater.user_id is not None
    document = {
        "scope": "installation" if studies is None else "studies you own",
        "rater": {
            "id": rater.pk, "kind": rater.kind, "external_id": rater.external_id,
            "display_name": None if account_scoped else rater.display_name,
            "metadata": None if account_scoped else rater.metadata,
            "created_at": _iso(rater.created_at),
            "has_personal_entry_link": rater.has_entry_link,
            "erased": "erased_at" in (rater.metadata or {}),
        },
        "account": rater.user_id is not None,
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
            for e in enrollments.select_related("study").order_by("entered_at", "id")
        ],
        "assignments": [
            {"study": a.study.slug, "state": a.state, "claimed_at": _iso(a.claimed_at),
             "completed_at": _iso(a.completed_at)}
            for a in assignments.select_related("study").order_by("id")
        ],
    }
    for contribution in _CONTRIBUTIONS:
        if contribution.export is not None:
            document.update(contribution.export(rater, studies))
    document["exported_at"] = timezone.now().isoformat()
    return document


def _database_sessions() -> bool:
    """Whether sessions live in the `django_session` table (Django's database store, or one
    built on it such as kit.sessions)."""
    from importlib import import_module

    from django.contrib.sessions.backends.db import SessionStore

    return issubclass(import_module(settings.SESSION_ENGINE).SessionStore, SessionStore)


def _end_sessions(rater: Rater, user_id: int | None) -> int:
    """Delete the database sessions bound to this rater (an app's `session_bound`, e.g. an
    entry link) or signed in as its user account, so a browser that was signed in as the
    participant no longer is. Only the database session engine can be searched this way; other
    engines expire sessions on their own."""
    if not _database_sessions():
        return 0
    from django.contrib.sessions.models import Session

    bound = [c.session_bound for c in _CONTRIBUTIONS if c.session_bound is not None]
    ended = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        data = session.get_decoded()
        if any(is_bound(data, rater) for is_bound in bound) or (
            user_id is not None and str(data.get("_auth_user_id")) == str(user_id)
        ):
            ended.append(session.pk)
    Session.objects.filter(pk__in=ended).delete()
    return len(ended)


# A single character or a short number cannot be told apart from the levels, counts and keys in
# an analysis result; such a label alone identifies nobody once the rater row no longer holds it.
_TOO_SHORT = re.compile(r".|\d{1,5}")


def _names_held(rater: Rater) -> set[str]:
    """Every name the rater went by that copies may hold: the current external id and display
    name, and earlier ones that admin edits recorded in the audit trail. Precondition: called
    before the rater's own audit events are scrubbed."""
    names = {rater.external_id, rater.display_name}
    for changes in AuditEvent.objects.filter(
        target_type=rater._meta.label_lower, target_id=str(rater.pk)
    ).values_list("changes", flat=True):
        for field in ("external_id", "display_name"):
            pair = (changes or {}).get(field)
            if isinstance(pair, list):
                names.update(value for value in pair if isinstance(value, str))
    return {name for name in names if name and name != ERASED
            and not name.startswith(PSEUDONYM_PREFIX) and not _TOO_SHORT.fullmatch(name)}


def _scrubber(values: Iterable[str], pseudonym: str) -> Scrub | None:
    """A function that replaces each value by `pseudonym` wherever it stands as a whole token
    (not inside a longer word, so a short name does not eat into other text), as written,
    HTML-escaped (reports) or JSON-escaped (data embedded in pages). None: nothing to replace."""
    forms: set[str] = set()
    for value in values:
        forms |= {value, str(escape(value)), json.dumps(value)[1:-1]}
    forms.discard("")
    if not forms:
        return None
    # Longest first, so a name that contains another is replaced whole. A letter or digit next
    # to a match makes it part of a longer word; "_" and punctuation do not ("rater_<PID>").
    pattern = re.compile("|".join(
        rf"(?<![^\W_]){re.escape(form)}(?![^\W_])"
        for form in sorted(forms, key=len, reverse=True)))
    return lambda text: pattern.sub(pseudonym, text)


def scrub_json(value: Any, scrub: Scrub) -> Any:
    """`value` (decoded JSON) with `scrub` applied to every string, dictionary keys included."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [scrub_json(item, scrub) for item in value]
    if isinstance(value, dict):
        return {(scrub(key) if isinstance(key, str) else key): scrub_json(item, scrub)
                for key, item in value.items()}
    return value


def _studies_of(rater: Rater) -> set[int]:
    """Ids of the studies the rater took part in (enrolled, held a seat, or as the other apps'
    rows show: judged)."""
    studies = (set(Enrollment.objects.filter(rater=rater).values_list("study_id", flat=True))
               | set(Assignment.objects.filter(rater=rater).values_list("study_id", flat=True)))
    for contribution in _CONTRIBUTIONS:
        if contribution.studies_of is not None:
            studies |= set(contribution.studies_of(rater))
    return studies


def _scrub_events(events, pseudonym: str, personal: Iterable[str],
                  scrub: Scrub | None, repr_for) -> int:
    """Give each audit event a pseudonymous `target_repr`, mark the personal fields of its
    `changes` as erased and scrub the erased names from the other values."""
    personal = set(personal)
    count = 0
    for event in events:
        changes = {key: [ERASED, ERASED] if key in personal else value
                   for key, value in (event.changes or {}).items()}
        event.changes = scrub_json(changes, scrub) if scrub else changes
        event.target_repr = repr_for(event)[:200]
        event.save(update_fields=["target_repr", "changes"])
        count += 1
    return count


def _enrollment_events(rater: Rater):
    """Audit events about the rater's enrollments, including enrollments deleted since (their
    creation or deletion event lists the rater)."""
    label = Enrollment._meta.label_lower
    ids = {str(pk) for pk in Enrollment.objects.filter(rater=rater).values_list("pk", flat=True)}
    ids |= set(AuditEvent.objects.filter(target_type=label, changes__rater__contains=[rater.pk])
               .values_list("target_id", flat=True))
    return AuditEvent.objects.filter(target_type=label, target_id__in=ids)


@transaction.atomic
def rater_data_erase(rater: Rater, *, actor: Any = None, source: str = SYSTEM,
                     studies: Collection[int] | None = None) -> None:
    """Replace the rater's personal data with a pseudonym; keep the rater and its judgments.

    `studies`: the requester's scope (`permissions.privacy_scope`); None for the whole
    installation (an admin, the shell). An owner may erase a rater whose every enrollment,
    seat and judgment lies in studies they own, and never an account holder (the account spans
    the installation): OutsideYourStudies otherwise, with nothing changed.

    Precondition: the rater is a person (NotAPerson otherwise). Idempotent: erasing an erased
    rater keeps its pseudonym. The linked user account is anonymised, deactivated and detached;
    the entry link stops working (new token) and the participant's open sessions end.

    Copies are scrubbed in the same transaction:
    - audit events about the rater and about its enrollments (their repr names the rater, their
      changes may hold its names and platform session ids) get the pseudonym and `<erased>`;
      events the linked account made keep only a pseudonymous actor name;
    - the other apps' copies in the rater's studies (`PrivacyContribution.scrub`; the analysis
      app's stored runs): every name the rater went by (now and in earlier admin edits) is
      replaced by the pseudonym. Names of one character or short numbers are not replaced
      (see `_TOO_SHORT`).
    The erasure itself is audited without any of the erased values. Not covered: files already
    downloaded, and an analysis that is running right now and read the judgments before the
    erasure (it stores the old name; erase again after it finishes).
    """
    rater = Rater.objects.select_for_update().get(pk=rater.pk)
    if not rater.is_human:
        raise NotAPerson(f"rater {rater.pk} is a {rater.get_kind_display()}, not a person")
    if studies is not None:
        if rater.user_id is not None:
            raise OutsideYourStudies(
                f"rater {rater.pk} is an account holder; accounts span the installation, so "
                "an administrator erases their data")
        if not _studies_of(rater) <= set(studies):
            raise OutsideYourStudies(
                f"rater {rater.pk} also took part in studies you do not own; an "
                "administrator can erase their data across the installation")
    metadata = rater.metadata or {}
    already = rater.external_id.startswith(PSEUDONYM_PREFIX) and "erased_at" in metadata
    pseudonym = rater.external_id if already else PSEUDONYM_PREFIX + secrets.token_hex(6)
    scrub = _scrubber(_names_held(rater), pseudonym)
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
    rater.access_token = new_token()
    rater.save()
    Enrollment.objects.filter(rater=rater).exclude(platform_session_id="").update(
        platform_session_id="")
    sessions = _end_sessions(rater, user_id)
    # Earlier events about this rater (admin edits) carry its old name and values.
    _scrub_events(AuditEvent.objects.filter(target_type=rater._meta.label_lower,
                                            target_id=str(rater.pk)),
                  pseudonym, PERSONAL_RATER_FIELDS, scrub, lambda event: pseudonym)
    # Events about its enrollments: the repr is "<rater> in <study>" (Enrollment.__str__).
    _scrub_events(_enrollment_events(rater), pseudonym, PERSONAL_ENROLLMENT_FIELDS, scrub,
                  lambda event: f"{pseudonym} in {event.study_slug}" if event.study_slug
                  else pseudonym)
    if user_id is not None:
        AuditEvent.objects.filter(actor_id=user_id).update(actor_repr=f"{pseudonym}-user")
    changes = {"erased": [*PERSONAL_RATER_FIELDS, "platform_session_id", "access_token"],
               "user_account": "anonymised and deactivated" if user_id else "none",
               "sessions_ended": sessions, "repeated": already}
    took_part = _studies_of(rater)
    for contribution in _CONTRIBUTIONS:
        if contribution.scrub is not None:
            changes.update(contribution.scrub(took_part, scrub))
    audit_record(actor=actor, action=AuditEvent.Action.ERASE, target=rater, source=source,
                 changes=changes)
