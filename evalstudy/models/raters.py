"""Who gives judgments (people and proxies alike) and their participation in a study."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q

from .studies import Study


def new_token() -> str:
    """A rater's entry-link secret."""
    return secrets.token_urlsafe(24)


class Rater(models.Model):
    """Anyone or anything that gives judgments: people and proxies go through the same code.

    Tenancy: a rater belongs to the study that admitted it (`study`): personal-link invitees,
    crowd participants (one per study and participant id, so the same Prolific id in two
    studies is two pseudonymous raters), imported raters and proxy judges. Only account
    holders (`user`) are installation-wide; they sign in and see the studies that enrolled
    them. An entry link therefore works in its own study only, and never for an account.
    """

    class Kind(models.TextChoices):
        SLP = "slp", "Speech-language pathologist"
        CROWD = "crowd", "Crowd worker"
        EXPERT = "expert", "Expert"
        LLM = "llm", "LLM judge"
        METRIC = "metric", "Automatic metric / learned proxy"

    class Origin(models.TextChoices):
        INVITED = "invited", "Invited (personal link)"
        CROWD = "crowd", "Crowd entry URL"
        IMPORTED = "imported", "Imported judgments"
        PROXY = "proxy", "Proxy judge"
        ACCOUNT = "account", "Account holder"

    HUMAN_KINDS = (Kind.SLP, Kind.CROWD, Kind.EXPERT)
    # Personal data hidden from the study's other collaborators (e.g. an email in the
    # metadata, as the rater admin and API hide it): the audit trail says it changed, never to
    # what (kit.audit).
    AUDIT_REDACTED = ("metadata",)

    kind = models.CharField(max_length=10, choices=Kind.choices)
    # How the rater came in. A crowd entry URL resumes only raters it created: an invited
    # rater's participant id is not a way in for whoever knows it.
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.INVITED)
    study = models.ForeignKey(
        Study, null=True, blank=True, on_delete=models.CASCADE, related_name="own_raters",
        help_text="The study this rater belongs to (empty for account holders).",
    )
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="rater",
    )
    external_id = models.CharField(
        max_length=200, blank=True, help_text="E.g. a Prolific PID or a proxy's name."
    )
    display_name = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    access_token = models.CharField(
        max_length=64, unique=True, default=new_token, editable=False,
        help_text="Secret of the rater's personal entry link (/enter/<token>/).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Identities are looked up within their study: a participant id says nothing
            # about who the same id is in another owner's study.
            models.UniqueConstraint(
                fields=["study", "kind", "external_id"],
                condition=Q(study__isnull=False) & ~Q(external_id=""),
                name="rater_external_id_unique_in_study",
            ),
            models.UniqueConstraint(
                fields=["kind", "external_id"],
                condition=Q(study__isnull=True) & ~Q(external_id=""),
                name="rater_external_id_unique_unscoped",
            ),
            # An account is installation-wide; tying it to one study would let that study's
            # owner manage a person who also works for other owners.
            models.CheckConstraint(
                condition=Q(user__isnull=True) | Q(study__isnull=True),
                name="rater_account_not_study_scoped",
            ),
        ]

    def __str__(self) -> str:
        return self.display_name or self.external_id or f"rater {self.pk}"

    @property
    def has_entry_link(self) -> bool:
        """Whether the personal entry link may be used: people without an account, of one
        study (a row left behind by a deleted account has no study: its old token, which
        owners could read while it was an account's, opens nothing)."""
        return self.is_human and self.user_id is None and self.study_id is not None

    @property
    def is_human(self) -> bool:
        return self.kind in self.HUMAN_KINDS


class Enrollment(models.Model):
    """A rater's participation in one study, before and beside their seat: consent, crowd
    platform ids, instructions seen, and whether they were stopped (screened out)."""

    class StopReason(models.TextChoices):
        SCREENING = "screening", "Failed the study's screening rules"
        ATTENTION = "attention", "Too many failed attention checks"
        DECLINED = "declined", "Did not give consent"
        CALIBRATION = "calibration", "Below the study's calibration pass mark"
        REOPENED = "reopened", "Seat reopened to someone else by the researcher"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="enrollments")
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="enrollments")
    # An account holder enrolled by a researcher sees the invitation and accepts it first:
    # until then the study does not exist for them and they are not among its raters.
    invitation_pending = models.BooleanField(default=False)
    platform_study_id = models.CharField(max_length=100, blank=True)
    platform_session_id = models.CharField(max_length=100, blank=True)
    entered_at = models.DateTimeField(auto_now_add=True)
    consented_at = models.DateTimeField(null=True, blank=True)
    instructions_seen_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=12, choices=StopReason.choices, blank=True)
    # Excluded from the analysis by a researcher (reversible; the judgments stay stored).
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_reason = models.CharField(max_length=500, blank=True)
    excluded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "rater"], name="enrollment_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.rater} in {self.study}"
