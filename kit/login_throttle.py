"""Throttled sign-in for the browser login page and the admin login.

Failed attempts are counted in the cache per (username, client address) and per client
address. Past `LOGIN_FAILURE_LIMIT` failures for a username from one address (or
`LOGIN_FAILURE_LIMIT_PER_ADDRESS` from one address for any usernames) the form refuses to check
passwords until `LOGIN_LOCKOUT_SECONDS` after the first failure; the page answers 429. A
successful sign-in clears that username's counter.

Several web processes or hosts share the counters only when the cache is shared (CACHE_URL
pointing at Redis); with the per-process default each process counts alone, which is why the
deploy checks warn about a local-memory cache in production.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError

THROTTLED = "throttled"


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, or the header named by LOGIN_CLIENT_ADDRESS_HEADER
    (e.g. HTTP_X_REAL_IP) when a trusted proxy in front of the app sets it."""
    header = settings.LOGIN_CLIENT_ADDRESS_HEADER
    value = request.META.get(header, "") if header else ""
    # X-Forwarded-For style lists: the proxy appends the address it saw last.
    return (value.split(",")[-1].strip() if value else "") or request.META.get("REMOTE_ADDR", "")


def _key(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


def _keys(request, username: str) -> tuple[str, str]:
    address = client_address(request)
    return _key("user", username.strip().lower(), address), _key("address", address)


def is_locked_out(request, username: str) -> bool:
    user_key, address_key = _keys(request, username)
    counts = cache.get_many([user_key, address_key])
    per_address = settings.LOGIN_FAILURE_LIMIT_PER_ADDRESS
    return counts.get(user_key, 0) >= settings.LOGIN_FAILURE_LIMIT or bool(
        per_address and counts.get(address_key, 0) >= per_address)


def record_failure(request, username: str) -> None:
    for key in _keys(request, username):
        # add() starts the window at the first failure; incr() keeps its expiry.
        cache.add(key, 0, timeout=settings.LOGIN_LOCKOUT_SECONDS)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.LOGIN_LOCKOUT_SECONDS)


def record_success(request, username: str) -> None:
    cache.delete(_keys(request, username)[0])


class LoginThrottleMixin:
    """For AuthenticationForm subclasses: refuse while locked out, count failures."""

    def clean(self):
        username = self.data.get("username", "") or ""
        if self.request is not None and is_locked_out(self.request, username):
            minutes = max(1, round(settings.LOGIN_LOCKOUT_SECONDS / 60))
            raise ValidationError(
                f"Too many failed sign-in attempts. Try again in {minutes} minutes.",
                code=THROTTLED,
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            if self.request is not None:
                record_failure(self.request, username)
            raise
        if self.request is not None:
            record_success(self.request, username)
        return cleaned


class ThrottledAuthenticationForm(LoginThrottleMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(LoginThrottleMixin, AdminAuthenticationForm):
    pass


class ThrottledLoginView(auth_views.LoginView):
    """The browser login page; answers 429 while the address or username is locked out."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if any(error.code == THROTTLED for error in form.errors.as_data().get("__all__", [])):
            response.status_code = 429
        return response
