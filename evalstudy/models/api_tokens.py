"""Scripts' credentials for the API (hashed secrets)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A script's credential for the API. Only a SHA-256 hash of the secret is stored: a leaked
    database does not leak working tokens. A user may hold several (one per script/machine);
    revoking one is deleting its row."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for.")
    prefix = models.CharField(
        max_length=16, help_text="The secret's first characters, to tell tokens apart."
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Blank: never expires.")

    class Meta:
        ordering = ["user", "-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}... ({self.user}{', ' + self.name if self.name else ''})"
