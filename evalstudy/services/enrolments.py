"""Who may take part: the enrolment gate every rater page goes through, admission and
screening, invitations and stopping a participant."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from ..audit import SYSTEM, audit_record
from ..models import (
    Assignment,
    AuditEvent,
    Enrollment,
    Rater,
    Study,
)
from .seats import assignment_withdraw


# --- who may take part -----------------------------------------------------------------------
class NotEnrolled(Exception):
    """The rater was not admitted to the study: for them it does not exist (404)."""


def enrollment_of(*, study: Study, rater: Rater) -> Enrollment:
    """The rater's enrollment in `study`; NotEnrolled unless the study admitted them.

    The one gate every rater page and rater API call goes through: a rater reaches a study
    they were invited to (personal link, API, admin) or admitted to through that study's crowd
    entry URL, and nothing else. A rater scoped to another study never passes, whatever rows
    exist (defence in depth against a row pointing the wrong way)."""
    if rater.study_id is not None and rater.study_id != study.pk:
        raise NotEnrolled(f"Rater {rater.pk} does not belong to study {study.slug}.")
    enrollment = Enrollment.objects.filter(study=study, rater=rater).first()
    if enrollment is None or enrollment.invitation_pending:
        raise NotEnrolled(f"Rater {rater.pk} is not enrolled in study {study.slug}.")
    return enrollment


def fails_screening(study: Study, rater: Rater) -> bool:
    """Screening rule: a crowd participant who took part in an excluded study may not take this
    one. Raters are per study, so the participant is recognised by their crowd id."""
    if rater.kind != Rater.Kind.CROWD or not rater.external_id:
        return False
    # Only studies of the same owner count: screening against another owner's study would
    # tell this study's owner who took part there.
    excluded = study.excluded_studies.filter(owner_id=study.owner_id).values("pk")
    same_person = Rater.objects.filter(kind=Rater.Kind.CROWD, external_id=rater.external_id)
    return (
        Enrollment.objects.filter(study__in=excluded, rater__in=same_person).exists()
        or Assignment.objects.filter(study__in=excluded, rater__in=same_person).exists()
    )


def enrollment_stop(*, enrollment: Enrollment, reason: str,
                    now: dt.datetime | None = None) -> None:
    """Stop a participant (screening, consent declined, attention checks): their unjudged
    slots go to the next rater at once and what they submitted stays. Idempotent."""
    if enrollment.stopped_at is not None:
        return
    enrollment.stopped_at = now or timezone.now()
    enrollment.stop_reason = reason
    enrollment.save(update_fields=["stopped_at", "stop_reason"])
    assignment_withdraw(study=enrollment.study, rater=enrollment.rater, now=now)


@transaction.atomic
def enrollment_admit(*, study: Study, rater: Rater) -> tuple[Enrollment, bool]:
    """Admit `rater` to `study` (an invitation or a crowd entry); returns (enrollment, created).
    Idempotent. A new participant is screened at once (see `fails_screening`).

    Precondition: the rater belongs to `study`, or is an account holder (whose enrollment
    waits for them to accept the invitation: `invitation_answer`)."""
    if rater.study_id is None and rater.user_id is None:
        raise ValidationError(f"Rater {rater.pk} belongs to no study and has no account.")
    if rater.study_id is not None and rater.study_id != study.pk:
        raise ValidationError(f"Rater {rater.pk} belongs to another study.")
    if not rater.is_human:
        raise ValidationError("Proxies (LLM and metric raters) are not enrolled.")
    enrollment, created = Enrollment.objects.get_or_create(
        study=study, rater=rater, defaults={"invitation_pending": rater.user_id is not None})
    if created and fails_screening(study, rater):
        enrollment_stop(enrollment=enrollment, reason=Enrollment.StopReason.SCREENING)
    return enrollment, created


@transaction.atomic
def rater_invite(
    *, study: Study, kind: str, display_name: str = "", external_id: str = "",
    metadata: dict | None = None, user: Any = None, username: str = "", actor: Any = None,
    source: str = SYSTEM,
) -> Rater | None:
    """Invite a person to `study`.

    Without `user`: a new rater of this study with a personal entry link that works in this
    study only; returned. Raises ValidationError (a duplicate external id in the study, a
    proxy kind).

    With `user` (an account holder, the active account `username` names, or None when none
    does, so that the answer is the same): an invitation they accept or decline on their page; until
    they accept, the study does not exist for them and they are not among its raters. Returns
    None whether or not such an active account exists (no way to test usernames, nothing of
    the account shown to the inviter). The account's rater is created on its first invitation
    as an SLP (an account's kind is the installation's business, not one inviter's).

    Audited as "create": the new rater, or for an account the invitation (without the
    username, and the same event whether or not the account exists).
    """
    if kind not in Rater.HUMAN_KINDS:
        raise ValidationError(f"Invitations are for people: {', '.join(Rater.HUMAN_KINDS)}.")
    if user is not None or username:
        # Not the name typed: an account's username is personal data that every collaborator
        # reads in the trail and that erasing the account could not reach there.
        audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                     changes={"invitation": [None, "an account, by its username"]})
        if user is None or not getattr(user, "is_active", False):
            return None
        rater, _ = Rater.objects.get_or_create(
            user=user, defaults={"kind": Rater.Kind.SLP, "origin": Rater.Origin.ACCOUNT,
                                 "display_name": user.get_username()})
        if rater.is_human:
            enrollment_admit(study=study, rater=rater)
        return None
    if external_id and Rater.objects.filter(study=study, kind=kind,
                                            external_id=external_id).exists():
        raise ValidationError(f"A {kind} rater {external_id!r} is already in study {study.slug}.")
    rater = Rater.objects.create(study=study, kind=kind, external_id=external_id,
                                 display_name=display_name, metadata=metadata or {},
                                 origin=Rater.Origin.INVITED)
    enrollment_admit(study=study, rater=rater)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                 target=rater, changes={"invited": [None, study.slug]})
    return rater


@transaction.atomic
def invitation_answer(*, study: Study, rater: Rater, accept: bool) -> bool:
    """The account holder's answer to an invitation to `study`: accepting makes the study
    theirs to rate, declining removes the invitation (nothing of them stays with the study).
    Returns whether there was a pending invitation."""
    enrollment = (Enrollment.objects.select_for_update()
                  .filter(study=study, rater=rater, invitation_pending=True).first())
    if enrollment is None:
        return False
    if accept:
        enrollment.invitation_pending = False
        enrollment.save(update_fields=["invitation_pending"])
    else:
        enrollment.delete()
    return True
