"""The audit trail: who did what, when, to which study configuration or export."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .studies import Study


class AuditEvent(models.Model):
    """Who did what, when, to which study configuration or export. Append-only.

    Events outlive what they describe: the study link is SET_NULL and its slug is copied, and
    the target is a label + pk + repr rather than a foreign key, so deleting a study, a
    criterion or a user keeps the record of it.
    """

    class Action(models.TextChoices):
        CREATE = "create", "Create"
        UPDATE = "update", "Update"
        DELETE = "delete", "Delete"
        OPEN = "open", "Open"
        CLOSE = "close", "Close"
        BUILD = "build", "Build rater lists"
        IMPORT = "import", "Import"
        EXPORT = "export", "Export"
        ERASE = "erase", "Erase personal data"
        START = "start", "Start a run"

    class Source(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "API"
        COMMAND = "command", "Management command"
        WEB = "web", "Web page"
        SYSTEM = "system", "System (beat, workers)"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    # Kept when the user is deleted: an audit trail must still say who it was.
    actor_repr = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=20, choices=Action.choices)
    study = models.ForeignKey(
        Study, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events",
    )
    study_slug = models.CharField(max_length=80, blank=True, db_index=True)
    target_type = models.CharField(max_length=100, blank=True, help_text="e.g. evalstudy.criterion")
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True,
                               help_text="field -> [before, after]; for exports: what was written")
    source = models.CharField(max_length=10, choices=Source.choices, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["study", "-at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_repr or '-'} {self.action} {self.target_repr}"
