"""API tokens for scripts: `Authorization: Token <secret>` (also `Bearer`).

A token belongs to one user and acts with that user's roles; only its hash is stored.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .audit import SYSTEM, audit_record
from .models import ApiToken, AuditEvent

TOKEN_PREFIX = "es_"  # noqa: S105 - what every token starts with, not a token


def token_hash(raw: str) -> str:
    # The secrets are 256-bit random strings: a fast hash is enough (no dictionary to guess).
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def api_token_create(*, user: Any, name: str = "", expires_at=None, actor: Any = None,
                     source: str = SYSTEM) -> tuple[ApiToken, str]:
    """A new token for `user`; returns (row, secret). The secret is shown once, never stored.
    Audited as "create" (the token's prefix and name, never the secret)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name[:100], prefix=raw[:10],
                                    key_hash=token_hash(raw), expires_at=expires_at)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE,
                 target=("evalstudy.apitoken", token.pk, f"API token {token.prefix}..."),
                 changes={"token": [None, f"{token.prefix}... of {user.get_username()}"],
                          "name": [None, token.name]})
    return token, raw


@transaction.atomic
def api_token_revoke(*, user: Any, prefix: str | None = None, actor: Any = None,
                     source: str = SYSTEM) -> int:
    """Delete the user's tokens (those starting with `prefix`, or all); returns how many.
    Audited as "delete" with the prefixes revoked."""
    tokens = ApiToken.objects.filter(user=user)
    if prefix:
        tokens = tokens.filter(prefix__startswith=prefix[:16])
    prefixes = sorted(tokens.values_list("prefix", flat=True))
    deleted, _ = tokens.delete()
    if deleted:
        audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE,
                     target=("evalstudy.apitoken", "", f"API tokens of {user.get_username()}"),
                     changes={"tokens": [[f"{p}..." for p in prefixes], None]})
    return deleted


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token <secret>` (also `Bearer`) for scripts."""

    keywords = ("token", "bearer")

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].decode("latin-1").lower() not in self.keywords:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: "
                                                  "expected 'Token <secret>'.")
        raw = parts[1].decode("latin-1")
        token = (ApiToken.objects.select_related("user").filter(key_hash=token_hash(raw))
                 .first())
        now = timezone.now()
        if token is None or (token.expires_at is not None and token.expires_at <= now):
            raise exceptions.AuthenticationFailed("Invalid or expired token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("This account is disabled.")
        # One write per minute at most: a script making many calls should not write each time.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request):
        return "Token"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "evalstudy.tokens.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <secret>` from POST /api/v1/auth/token/ or "
                               "`manage.py api_token create`."}
