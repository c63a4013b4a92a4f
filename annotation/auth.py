"""Who the rater behind an API request is: `Authorization: Rater <entry token>`, a signed-in
account's rater, or the rater bound to the browser session by an entry link; the permission
and throttle of the rater endpoints (/api/v1/rater/)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, throttling
from rest_framework import permissions as drf_permissions

from evalstudy.models import Rater

from .rater import current_rater


class RaterTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Rater <entry token>`: the secret of a rater's personal entry link
    (people without an account; the link and the token work in the rater's own study only).

    The request stays anonymous as a user (no researcher rights); `request.auth` is the Rater,
    which the rater endpoints use. For crowd tooling that acts for one participant."""

    def authenticate(self, request):
        from django.contrib.auth.models import AnonymousUser

        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].decode("latin-1").lower() != "rater":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: "
                                                  "expected 'Rater <entry token>'.")
        rater = Rater.objects.filter(access_token=parts[1].decode("latin-1")).first()
        # Proxy raters (LLM judges, metrics) are written by the system, never by a client;
        # account holders authenticate as their account (API token or session), so a rater
        # token seen by a study's owner never acts for a person with an account.
        if rater is None or not rater.has_entry_link:
            raise exceptions.AuthenticationFailed("Invalid rater token.")
        return AnonymousUser(), rater


class RaterTokenScheme(OpenApiAuthenticationExtension):
    target_class = "annotation.auth.RaterTokenAuthentication"
    name = "raterAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Rater <entry token>`: the secret of the rater's personal "
                               "entry link /enter/<token>/ (rater endpoints only)."}


def rater_for_request(request: Any) -> Rater | None:
    """The rater behind an API request: an `Authorization: Rater <token>` header, else the
    signed-in user's rater, else the rater bound to this browser session (entry link)."""
    if isinstance(getattr(request, "auth", None), Rater):
        return request.auth
    return current_rater(request._request if hasattr(request, "_request") else request)


class IsRater(drf_permissions.BasePermission):
    """A rater (by entry token, account or session); what they reach is their own slots."""

    message = "This endpoint is for raters; this account has no rater profile."

    def has_permission(self, request, view) -> bool:
        rater = rater_for_request(request)
        if rater is None:
            if not request.user.is_authenticated and request.auth is None:
                return False  # 401: nobody signed in
            raise PermissionDenied(self.message)
        request.rater = rater
        return True


class RaterThrottle(throttling.ScopedRateThrottle):
    """Per rater (whatever the authentication), else per client address."""

    scope_attr = "throttle_scope"

    def get_cache_key(self, request, view):
        rater = getattr(request, "rater", None) or (
            request.auth if isinstance(request.auth, Rater) else None
        )
        ident = f"rater-{rater.pk}" if rater is not None else (
            f"user-{request.user.pk}" if request.user.is_authenticated else self.get_ident(request)
        )
        return self.cache_format % {"scope": self.scope, "ident": ident}
