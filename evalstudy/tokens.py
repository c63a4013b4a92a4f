"""API tokens for scripts: `Authorization: Token <secret>` (also `Bearer`).

A token belongs to one user and acts with that user's roles; only its hash is stored.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .models import ApiToken

TOKEN_PREFIX = "es_"


def token_hash(raw: str) -> str:
    # The secrets are 256-bit random strings: a fast hash is enough (no dictionary to guess).
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(*, user: Any, name: str = "", expires_at=None) -> tuple[ApiToken, str]:
    """A new token for `user`; returns (row, secret). The secret is shown once, never stored."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name[:100], prefix=raw[:10],
                                    key_hash=token_hash(raw), expires_at=expires_at)
    return token, raw


def api_token_revoke(*, user: Any, prefix: str | None = None) -> int:
    """Delete the user's tokens (those starting with `prefix`, or all); returns how many."""
    tokens = ApiToken.objects.filter(user=user)
    if prefix:
        tokens = tokens.filter(prefix__startswith=prefix[:16])
    deleted, _ = tokens.delete()
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
