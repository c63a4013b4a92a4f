"""A study's link to its Prolific study, and the submissions read from Prolific."""

from __future__ import annotations

from django.db import models

from evalstudy.models import Enrollment, Study


class ProlificLink(models.Model):
    """One study's connection to one Prolific study.

    The API token is taken, in this order, from the environment variable named in `token_env`,
    from `api_token` (entered in the admin, stored, never shown back), then from
    PROLIFIC_API_TOKEN. Neither the admin nor the API ever displays it: they say whether one
    is set. PROLIFIC_API_TOKEN alone links only a Prolific study whose internal name is
    `evalstudy <slug>` (the one the platform creates for the study); any other existing
    Prolific study needs a token of the link's own (services.link_check).
    """

    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="prolific_link")
    prolific_study_id = models.CharField(max_length=64, help_text="Prolific's id of the study.")
    prolific_name = models.CharField(max_length=300, blank=True)
    prolific_status = models.CharField(max_length=40, blank=True)
    token_env = models.CharField(
        max_length=100, blank=True,
        help_text="Name of an environment variable PROLIFIC_<SOMETHING> holding this study's "
                  "Prolific API token (empty: the stored token, else PROLIFIC_API_TOKEN).",
    )
    # A secret: never rendered, never serialised, and left out of the audit trail.
    api_token = models.CharField(max_length=500, blank=True)
    linked_at = models.DateTimeField(auto_now_add=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    AUDIT_REDACTED = ("api_token",)

    class Meta:
        constraints = [
            # One Prolific study feeds one study here: a second link (another owner's study)
            # would read its participants and act on their submissions.
            models.UniqueConstraint(fields=["prolific_study_id"],
                                    name="prolific_link_one_study"),
        ]

    def __str__(self) -> str:
        return f"{self.study.slug} -> Prolific {self.prolific_study_id}"


class ProlificSubmission(models.Model):
    """A Prolific submission as last synced, of one of the study's own enrolled participants
    (matched by Prolific's session id or the participant's id); the Prolific study's other
    submissions are not stored."""

    class Status(models.TextChoices):
        ACTIVE = "ACTIVE", "Active"
        AWAITING_REVIEW = "AWAITING REVIEW", "Awaiting review"
        APPROVED = "APPROVED", "Approved"
        REJECTED = "REJECTED", "Rejected"
        RETURNED = "RETURNED", "Returned"
        TIMED_OUT = "TIMED-OUT", "Timed out"

    FREES_SEAT = (Status.RETURNED, Status.TIMED_OUT)

    link = models.ForeignKey(ProlificLink, on_delete=models.CASCADE, related_name="submissions")
    submission_id = models.CharField(max_length=64)
    participant_id = models.CharField(max_length=64)
    # Prolific may add statuses: stored as read, not limited to the choices.
    status = models.CharField(max_length=40)
    enrollment = models.ForeignKey(
        Enrollment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    study_code = models.CharField(max_length=100, blank=True)
    seat_freed_at = models.DateTimeField(null=True, blank=True)
    bonus_minor = models.PositiveIntegerField(default=0, help_text="Bonuses paid, in pence/cents.")
    synced_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["link_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["link", "submission_id"],
                                    name="prolific_submission_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.submission_id} ({self.status})"
