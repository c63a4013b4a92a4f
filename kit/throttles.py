"""DRF throttles shared by the apps' API views."""

from __future__ import annotations

from rest_framework import throttling

from .login_throttle import client_address


class TokenObtainThrottle(throttling.ScopedRateThrottle):
    """Per client address: password guessing must not get faster with more usernames.

    The address is the sign-in pages' (`login_throttle.client_address`): REMOTE_ADDR unless a
    trusted proxy header is configured, never a client-supplied X-Forwarded-For."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}
