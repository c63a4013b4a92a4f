"""Prolific operations: link a study, sync its submissions, approve, reject, pay a bonus.

Every write is audited (evalstudy.audit) inside the service's transaction, with the actor and
the interface that asked. Tenancy: a submission acted on is one synced for this study's own
link, and its participant must be the study's own enrolled rater; nothing reaches another
study's participants.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import ngettext

from evalstudy.audit import audit_record
from evalstudy.models import Assignment, AuditEvent, Enrollment, Rater, Study
from evalstudy.privacy import PSEUDONYM_PREFIX
from evalstudy.services import assignment_withdraw

from .client import ProlificClient, ProlificError
from .models import ProlificLink, ProlificSubmission

# Prolific's rejection categories (docs: "Reject a submission").
REJECTION_CATEGORIES = (
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
    "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER",
)
REJECTION_MESSAGE_MIN = 100
MESSAGE_MAX = 5000
PROLIFIC_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")


class NotLinked(Exception):
    """The study has no Prolific link (409)."""


class UnknownSubmission(Exception):
    """No submission of this study's Prolific study has that id (404)."""


# A link may name only a PROLIFIC_* variable: naming SECRET_KEY or DATABASE_URL would send
# the server's secrets to Prolific as a token (and "token_set" would say whether they exist).
TOKEN_ENV = re.compile(r"^PROLIFIC_[A-Z0-9_]{1,90}$")


def token_env_problem(name: str) -> str | None:
    if name and (not TOKEN_ENV.match(name) or name == "PROLIFIC_API_URL"):
        return "An environment variable named PROLIFIC_<SOMETHING> (A-Z, 0-9, _)."
    return None


def token_env_refusal(actor: Any, name: str | None, current: str = "") -> str | None:
    """Why `actor` may not make a link use the server's environment variable `name`: the
    server's PROLIFIC_* variables may hold other labs' tokens (PROLIFIC_TOKEN_LAB2, say), and
    naming one would borrow that lab's access to Prolific. Only an administrator of the
    installation (a superuser), who sets those variables, assigns them; an editor gives the
    token itself (api_token). Keeping the name a link has already is allowed, and so is a
    command run on the server (no actor: whoever runs it holds the variables already)."""
    if not name or name == current or actor is None or getattr(actor, "is_superuser", False):
        return None
    return ("Only an administrator of this installation may name a server environment "
            "variable (it may hold another lab's token): give your own Prolific token as "
            "api_token instead.")


def own_token(link: ProlificLink) -> str:
    """The link's own token: its environment variable's value, else its stored token (empty:
    none, PROLIFIC_API_TOKEN is used)."""
    if link.token_env and not token_env_problem(link.token_env):
        value = os.environ.get(link.token_env, "")
        if value:
            return value
    return link.api_token


def token_for(link: ProlificLink) -> str:
    """The token a link uses: its own environment variable, its stored token, then
    PROLIFIC_API_TOKEN."""
    return own_token(link) or settings.PROLIFIC_API_TOKEN


def uses_installation_token(link: ProlificLink) -> bool:
    """Whether the link reaches Prolific with the installation-wide PROLIFIC_API_TOKEN (no
    token of its own, or one that is the same value, e.g. token_env naming
    PROLIFIC_API_TOKEN): that token proves nothing about the linker's own Prolific access."""
    own = own_token(link)
    return not own or own == settings.PROLIFIC_API_TOKEN


def internal_name_for(study: Study) -> str:
    """The internal name the platform gives the Prolific study it creates for `study`
    (prolific_create); an existing Prolific study with this internal name may be linked with
    the installation-wide token. It holds the study's primary key, not only its slug: a slug
    can be changed or freed and taken by another owner's study, a primary key is never given
    again, so a Prolific study created for one study never matches another."""
    return f"evalstudy {study.slug} #{study.pk}"


def client_for(link: ProlificLink | None = None, *, token: str | None = None) -> ProlificClient:
    return ProlificClient(
        token=token if token is not None else (token_for(link) if link else ""),
        base_url=settings.PROLIFIC_API_URL, timeout=settings.PROLIFIC_TIMEOUT_S,
        retries=settings.PROLIFIC_RETRIES, max_wait=settings.PROLIFIC_MAX_RETRY_WAIT_S,
    )


def _link_of(study: Study) -> ProlificLink:
    link = ProlificLink.objects.filter(study=study).first()
    if link is None:
        raise NotLinked(f"Study {study.slug} is not linked to a Prolific study.")
    return link


def _valid_id(value: str, what: str) -> str:
    value = (value or "").strip()
    if not PROLIFIC_ID.match(value):
        raise ValidationError({what: f"{what} must be Prolific's id (letters and digits)."})
    return value


# --- link ------------------------------------------------------------------------------------
def link_taken(prolific_study_id: str, study: Study | None) -> bool:
    """Whether another study is linked to this Prolific study already."""
    others = ProlificLink.objects.filter(prolific_study_id=prolific_study_id)
    return (others.exclude(study=study) if study is not None else others).exists()


def link_check(study: Study, prolific_study_id: str, link: ProlificLink) -> dict[str, Any]:
    """Read the Prolific study `link` (not stored; its tokens as they would be saved) would
    link `study` to, and check that the linker may: with a token of the link's own (stored,
    or named by token_env), Prolific's answer is the proof; with only the installation-wide
    PROLIFIC_API_TOKEN, which reaches every lab's Prolific studies on this installation, the
    Prolific study's internal name must be this study's (`evalstudy <slug>`, as
    prolific_create names it). Raises ProlificError (Prolific refused) or ValidationError
    (the installation token may not link it). Returns Prolific's study."""
    remote = client_for(link).study(prolific_study_id)  # raises ProlificError
    if uses_installation_token(link):
        expected = internal_name_for(study)
        if str(remote.get("internal_name") or "").strip() != expected:
            # Prolific's names of the study are not repeated: they may be another lab's.
            raise ValidationError({"prolific_study_id": (
                "The installation's Prolific token (PROLIFIC_API_TOKEN) links only a Prolific "
                f"study whose internal name is \"{expected}\" (as evalstudy names the "
                "Prolific studies it creates), and this one's is not. Either give your own "
                "Prolific API token (api_token, or token_env naming a PROLIFIC_* environment "
                "variable), or set the Prolific study's internal name to "
                f"\"{expected}\" on Prolific, then link it again.")})
    return remote


def prolific_link(*, study: Study, prolific_study_id: str, actor: Any, source: str,
                  api_token: str | None = None, token_env: str | None = None) -> ProlificLink:
    """Link `study` to a Prolific study: read it from Prolific first (a wrong id or token is
    refused with Prolific's message and nothing is stored), then store its id. Relinking
    replaces the id; a token given replaces the stored one.

    Tenancy: PROLIFIC_API_TOKEN reaches every Prolific study of the installation's account,
    other labs' included. With it alone, only a Prolific study whose internal name is this
    study's (`evalstudy <slug>`) may be linked; any other needs a token of the link's own
    (link_check). Refused with nothing stored nor audited."""
    prolific_study_id = _valid_id(prolific_study_id, "prolific_study_id")
    if token_env is not None and (problem := token_env_problem(token_env)):
        raise ValidationError({"token_env": problem})
    existing = ProlificLink.objects.filter(study=study).first()
    if refusal := token_env_refusal(actor, token_env, existing.token_env if existing else ""):
        raise ValidationError({"token_env": refusal})
    if link_taken(prolific_study_id, study):
        # Said without naming the other study, which the caller may not see.
        raise ValidationError({"prolific_study_id": "This Prolific study is already linked to "
                                                    "another study."})
    link = existing or ProlificLink(study=study)
    if api_token is not None:
        link.api_token = api_token.strip()
    if token_env is not None:
        link.token_env = token_env
    remote = link_check(study, prolific_study_id, link)  # raises ProlificError, ValidationError
    with transaction.atomic():
        before = existing.prolific_study_id if existing else None
        link.prolific_study_id = prolific_study_id
        link.prolific_name = str(remote.get("name") or remote.get("internal_name") or "")[:300]
        link.prolific_status = str(remote.get("status") or "")[:40]
        if existing is not None and before != prolific_study_id:
            link.submissions.all().delete()  # they were another Prolific study's
        link.save()
        changes: dict[str, Any] = {"prolific_study_id": [before, prolific_study_id]}
        if api_token is not None:
            changes["api_token"] = "(changed)"  # noqa: S105 - the audit says it changed
        audit_record(actor=actor, source=source, study=study,
                     action=AuditEvent.Action.UPDATE if existing else AuditEvent.Action.CREATE,
                     target=("prolific link", link.pk, str(link)), changes=changes)
    return link


# --- sync ------------------------------------------------------------------------------------
def _enrollment_for(study: Study, participant_id: str, submission_id: str) -> Enrollment | None:
    """The study's own enrolment of this Prolific participant: by the session id Prolific
    sent at entry (it is the submission's id), else by the crowd rater's participant id."""
    own = Enrollment.objects.filter(study=study, rater__study=study,
                                    rater__kind=Rater.Kind.CROWD)
    return (own.filter(platform_session_id=submission_id).first()
            or own.filter(rater__external_id=participant_id).first())


def _when(value: Any) -> dt.datetime | None:
    return parse_datetime(value) if isinstance(value, str) and value else None


def prolific_sync(*, study: Study, actor: Any, source: str,
                  now: dt.datetime | None = None) -> dict[str, int]:
    """Read every submission of the linked Prolific study, store those of this study's own
    enrolled participants, and free at once the seat of every one who returned or timed out
    (their unjudged slots go to the next rater: evalstudy.services.assignment_withdraw).

    Tenancy: a submission whose participant did not enter through this study (no enrolment
    of this study has its session id or participant id) is not stored, and one stored before
    that no longer matches is removed: the Prolific study may have participants of others,
    whose ids and statuses are not this study's to read or act on. Idempotent. Returns counts:
    `submissions` read from Prolific, `matched` (stored), `unmatched` (ignored: not from this
    study's participants), `seats_freed`, `skipped` (ids that are not Prolific's)."""
    now = now or timezone.now()
    link = _link_of(study)
    remote = list(client_for(link).submissions(link.prolific_study_id))
    counts = {"submissions": 0, "matched": 0, "seats_freed": 0, "unmatched": 0, "skipped": 0}
    with transaction.atomic():
        link = ProlificLink.objects.select_for_update().get(pk=link.pk)
        kept_ids: list[int] = []
        for row in remote:
            submission_id = str(row.get("id") or "")
            participant_id = str(row.get("participant_id") or row.get("participant") or "")
            if not PROLIFIC_ID.match(submission_id) or not PROLIFIC_ID.match(participant_id):
                counts["skipped"] += 1  # not an id Prolific gives: never stored nor sent back
                continue
            counts["submissions"] += 1
            kept = ProlificSubmission.objects.filter(
                link=link, submission_id=submission_id[:64],
                participant_id__startswith=PSEUDONYM_PREFIX).values_list(
                "participant_id", flat=True).first()
            if kept:  # its participant was erased here: never read their id back in
                participant_id = kept
            enrollment = _enrollment_for(study, participant_id, submission_id)
            if enrollment is None:
                counts["unmatched"] += 1  # not this study's participant: not stored
                continue
            sub, _ = ProlificSubmission.objects.update_or_create(
                link=link, submission_id=submission_id[:64],
                defaults={
                    "participant_id": participant_id[:64],
                    "status": str(row.get("status") or "")[:40],
                    "enrollment": enrollment,
                    "started_at": _when(row.get("started_at")),
                    "completed_at": _when(row.get("completed_at")),
                    "study_code": str(row.get("study_code") or "")[:100],
                },
            )
            kept_ids.append(sub.pk)
            counts["matched"] += 1
            if sub.status in ProlificSubmission.FREES_SEAT and sub.seat_freed_at is None:
                if assignment_withdraw(study=study, rater=enrollment.rater, now=now):
                    counts["seats_freed"] += 1
                sub.seat_freed_at = now
                sub.save(update_fields=["seat_freed_at"])
        # Rows of no enrolment of this study (stored before submissions were filtered, or
        # whose enrolment is gone) are not kept either.
        removed, _ = (ProlificSubmission.objects.filter(link=link).exclude(pk__in=kept_ids)
                      .exclude(enrollment__study=study, enrollment__rater__study=study)
                      .delete())
        link.last_synced_at = now
        link.save(update_fields=["last_synced_at"])
        changes: dict[str, Any] = {"prolific_sync": counts}
        if removed:
            changes["unmatched_removed"] = removed
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.IMPORT,
                     target=("prolific link", link.pk, str(link)), changes=changes)
    return counts


def sync_summary(counts: dict[str, int]) -> str:
    """prolific_sync's counts as one sentence (the monitor, the admin, the command)."""
    def number(count: int, one: str, many: str) -> str:
        return ngettext(one, many, count) % {"count": count}

    submissions = number(counts["submissions"], "%(count)d submission", "%(count)d submissions")
    freed = number(counts["seats_freed"], "%(count)d seat freed", "%(count)d seats freed")
    text = (f"Prolific: {submissions}, {counts['matched']} from this study's participants "
            f"synced, {freed}.")
    if counts.get("unmatched"):
        text += " " + number(
            counts["unmatched"],
            "%(count)d submission on Prolific not from this study's participants was ignored.",
            "%(count)d submissions on Prolific not from this study's participants were "
            "ignored.")
    if counts.get("skipped"):
        text += " " + number(counts["skipped"],
                             "%(count)d with an id that is not Prolific's was skipped.",
                             "%(count)d with ids that are not Prolific's were skipped.")
    return text


def prolific_sync_open_studies(*, now: dt.datetime | None = None) -> int:
    """Periodic (beat): sync every linked open study. One study's failure (a wrong token,
    Prolific down) does not stop the others. Returns how many synced."""
    done = 0
    links = ProlificLink.objects.filter(study__status=Study.Status.OPEN).select_related("study")
    for link in links:
        try:
            prolific_sync(study=link.study, actor=None, source=AuditEvent.Source.SYSTEM, now=now)
        except ProlificError:
            continue
        done += 1
    return done


# --- actions on one submission ---------------------------------------------------------------
def own_submissions(study: Study):
    """The stored submissions of the study's link whose participant is this study's own
    enrolled rater: the only ones listed or acted on."""
    return ProlificSubmission.objects.filter(link__study=study, enrollment__study=study,
                                             enrollment__rater__study=study)


def _submission_of(study: Study, submission_id: str) -> ProlificSubmission:
    """This study's submission, and only when its participant is this study's own enrolled
    rater: a submission id of another study (or of nobody here) is unknown."""
    link = _link_of(study)
    sub = (own_submissions(study).select_for_update()
           .filter(link=link, submission_id=str(submission_id)[:64])
           .select_related("enrollment__rater").first())
    if sub is None:
        raise UnknownSubmission(f"No submission {submission_id!r} of a participant of "
                                f"{study.slug}.")
    return sub


def _after_transition(sub: ProlificSubmission, answer: dict[str, Any], status: str) -> None:
    sub.status = str(answer.get("status") or status)[:40]
    sub.save(update_fields=["status", "synced_at"])


def prolific_approve(*, study: Study, submission_id: str, actor: Any,
                     source: str) -> ProlificSubmission:
    """Approve one submission on Prolific (`{"action": "APPROVE"}`)."""
    with transaction.atomic():
        sub = _submission_of(study, submission_id)
        before = sub.status
        answer = client_for(sub.link).transition(sub.submission_id, {"action": "APPROVE"})
        _after_transition(sub, answer, ProlificSubmission.Status.APPROVED)
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.UPDATE,
                     target=("prolific submission", sub.pk, sub.submission_id),
                     changes={"status": [before, sub.status]})
    return sub


def prolific_reject(*, study: Study, submission_id: str, message: str, category: str,
                    actor: Any, source: str) -> ProlificSubmission:
    """Reject one submission with Prolific's required reason: a message of at least 100
    characters (shown to the participant) and one of REJECTION_CATEGORIES. Checked here
    before Prolific is called."""
    message = (message or "").strip()
    errors = {}
    if len(message) < REJECTION_MESSAGE_MIN:
        errors["message"] = (f"Prolific requires a message of at least {REJECTION_MESSAGE_MIN} "
                             f"characters ({len(message)} given).")
    if category not in REJECTION_CATEGORIES:
        errors["rejection_category"] = f"One of {', '.join(REJECTION_CATEGORIES)}."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        sub = _submission_of(study, submission_id)
        before = sub.status
        answer = client_for(sub.link).transition(sub.submission_id, {
            "action": "REJECT", "message": message, "rejection_category": category})
        _after_transition(sub, answer, ProlificSubmission.Status.REJECTED)
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.UPDATE,
                     target=("prolific submission", sub.pk, sub.submission_id),
                     changes={"status": [before, sub.status], "rejection_category": category,
                              "message": message})
    return sub


def prolific_bonus(*, study: Study, submission_id: str, amount_minor: int, actor: Any,
                   source: str) -> ProlificSubmission:
    """Pay one participant a bonus of `amount_minor` (pence or cents, the study's currency):
    a bulk bonus payment is set up for them alone, then paid. Bounded by
    PROLIFIC_MAX_BONUS_MINOR. Prolific's CSV takes the amount in major units ("1.25")."""
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor < 1:
        raise ValidationError({"amount_minor": "A whole number of pence/cents, at least 1."})
    if amount_minor > settings.PROLIFIC_MAX_BONUS_MINOR:
        raise ValidationError({"amount_minor": (
            f"At most {settings.PROLIFIC_MAX_BONUS_MINOR} (PROLIFIC_MAX_BONUS_MINOR).")})
    with transaction.atomic():
        sub = _submission_of(study, submission_id)
        client = client_for(sub.link)
        amount = Decimal(amount_minor) / 100
        created = client.bonus_create(sub.link.prolific_study_id,
                                      f"{sub.participant_id},{amount:.2f}\n")
        bulk_id = str(created.get("id") or "")
        if not bulk_id:
            raise ProlificError("Prolific set up no bonus payment (no id in its answer).")
        client.bonus_pay(bulk_id)  # not idempotent on Prolific's side: called once
        sub.bonus_minor += amount_minor
        sub.save(update_fields=["bonus_minor", "synced_at"])
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.UPDATE,
                     target=("prolific submission", sub.pk, sub.submission_id),
                     changes={"bonus_minor": amount_minor, "bulk_bonus_payment": bulk_id})
    return sub


def prolific_message(*, study: Study, submission_id: str, body: str, actor: Any,
                     source: str) -> ProlificSubmission:
    """Send one participant of this study a message through Prolific, about this study."""
    body = (body or "").strip()
    if not body or len(body) > MESSAGE_MAX:
        raise ValidationError({"body": f"A message of 1 to {MESSAGE_MAX} characters."})
    with transaction.atomic():
        sub = _submission_of(study, submission_id)
        if sub.participant_id.startswith(PSEUDONYM_PREFIX):
            raise ValidationError({"body": "This participant's data were erased here: "
                                           "message them from Prolific itself."})
        client_for(sub.link).message(sub.participant_id, sub.link.prolific_study_id, body)
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.UPDATE,
                     target=("prolific submission", sub.pk, sub.submission_id),
                     changes={"message": body})
    return sub


# --- create the Prolific study ---------------------------------------------------------------
def crowd_entry_url(study: Study) -> str:
    """The study's crowd URL as Prolific calls it: Prolific appends PROLIFIC_PID, STUDY_ID and
    SESSION_ID itself (`prolific_id_option: url_parameters`)."""
    return f"{settings.SITE_URL.rstrip('/')}{reverse('annotation:crowd_entry', args=[study.slug])}"


def _design_seats(study: Study) -> int:
    return Assignment.objects.filter(study=study, source=Assignment.Source.DESIGN).exclude(
        state=Assignment.State.EXPIRED).count()


def prolific_create(*, study: Study, description: str, reward_minor: int, minutes: int,
                    actor: Any, source: str, places: int | None = None,
                    api_token: str | None = None, token_env: str | None = None) -> ProlificLink:
    """Create the study's Prolific study, as a draft, and link the two.

    Prolific gets the study's title, its crowd URL, its completion code (manually reviewed) and
    its screen-out code, and as many places as the design has seats unless `places` says
    otherwise. Publishing and paying stay in Prolific's hands: a draft costs nothing. Refused,
    with nothing stored, when the study is not a Prolific crowd study, has no completion code,
    is already linked, or Prolific refuses."""
    errors: dict[str, str] = {}
    if study.crowd_platform != "prolific":
        errors["crowd_platform"] = "Choose Prolific as the study's crowd platform first."
    if not study.completion_code:
        errors["completion_code"] = ("Prolific needs a completion code: set the study's "
                                     "completion code first.")
    if ProlificLink.objects.filter(study=study).exists():
        errors["prolific_study_id"] = "The study is already linked to a Prolific study."
    if isinstance(reward_minor, bool) or not isinstance(reward_minor, int) or reward_minor < 1:
        errors["reward_minor"] = "The reward per participant in pence/cents, at least 1."
    if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1:
        errors["minutes"] = "The estimated completion time in whole minutes, at least 1."
    places = places if places is not None else _design_seats(study)
    if isinstance(places, bool) or not isinstance(places, int) or places < 1:
        errors["places"] = ("How many participants Prolific recruits, at least 1 (build the "
                            "study's seats first, or give it).")
    if token_env is not None and (problem := (token_env_problem(token_env)
                                              or token_env_refusal(actor, token_env))):
        errors["token_env"] = problem
    if errors:
        raise ValidationError(errors)
    link = ProlificLink(study=study, token_env=token_env or "",
                        api_token=(api_token or "").strip())
    codes = [{"code": study.completion_code, "code_type": "COMPLETED",
              "actions": [{"action": "MANUALLY_REVIEW"}]}]
    if study.screen_out_code:
        codes.append({"code": study.screen_out_code, "code_type": "OTHER",
                      "actions": [{"action": "MANUALLY_REVIEW"}]})
    remote = client_for(link).study_create({
        "name": study.title, "internal_name": internal_name_for(study),
        "description": (description or study.title).strip(),
        "external_study_url": crowd_entry_url(study), "prolific_id_option": "url_parameters",
        "completion_codes": codes, "total_available_places": places,
        "estimated_completion_time": minutes, "reward": reward_minor,
        "device_compatibility": ["desktop"],
    })
    prolific_study_id = str(remote.get("id") or "")
    if not PROLIFIC_ID.match(prolific_study_id):
        raise ProlificError("Prolific created no study (no id in its answer).")
    with transaction.atomic():
        link.prolific_study_id = prolific_study_id
        link.prolific_name = str(remote.get("name") or study.title)[:300]
        link.prolific_status = str(remote.get("status") or "UNPUBLISHED")[:40]
        link.save()
        audit_record(actor=actor, source=source, study=study, action=AuditEvent.Action.CREATE,
                     target=("prolific link", link.pk, str(link)),
                     changes={"prolific_study_id": [None, prolific_study_id],
                              "places": places, "reward_minor": reward_minor,
                              "minutes": minutes})
    return link
