"""What every API view shares: authentication, the error shape, pagination and throttles.

Error shape, for every error under /api/ (DRF views, 404 of unknown paths, unhandled
exceptions): `{"code": str, "message": str, "field_errors": {field: [reason, ...]}}`, plus
`"errors": [{"source", "row", "field", "message"}]` when a file or a bulk body has problems
(each naming its row, field and reason, like the importers do). Unhandled exceptions are
logged with their traceback and answered with 500 and that shape, never a stack trace, even
with DEBUG on.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, pagination, parsers, status, throttling
from rest_framework.response import Response

from .models import ApiToken, Rater
from .spec import SpecInvalid

logger = logging.getLogger("evalstudy.api")

TOKEN_PREFIX = "es_"


# --- tokens ---------------------------------------------------------------------------------
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


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "evalstudy.rest.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <secret>` from POST /api/v1/auth/token/ or "
                               "`manage.py api_token create`."}


def enforce_csrf(request) -> None:
    """Refuse an unsafe request without a valid CSRF token (403), as DRF's
    SessionAuthentication does for signed-in users; for requests whose identity comes from the
    browser session by another route (a rater's entry link)."""
    authentication.SessionAuthentication().enforce_csrf(request)


class RaterTokenScheme(OpenApiAuthenticationExtension):
    target_class = "evalstudy.rest.RaterTokenAuthentication"
    name = "raterAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Rater <entry token>`: the secret of the rater's personal "
                               "entry link /enter/<token>/ (rater endpoints only)."}


# --- parsing --------------------------------------------------------------------------------
def _nul_path(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) holding a NUL character, which PostgreSQL cannot
    store in text; None when there is none. Iterative: the body's depth is bounded already."""
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return where or "(body)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    return f"{where}.(key)" if where else "(key)"
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{index}]", child) for index, child in enumerate(item))
    return None


class SafeJSONParser(parsers.JSONParser):
    """DRF's JSON parser for every API view, answering with a 400 (never a 500) a body nested
    past Python's recursion limit or holding a NUL character (U+0000, `\\u0000`), which the
    database cannot store in a text or JSON field. A NUL is reported under the body's field
    (`field_errors`) with its path."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
        where = _nul_path(data)
        if where is not None:
            field = where.split(".", 1)[0].split("[", 1)[0] if isinstance(data, dict) else ""
            message = f"{where}: the NUL character (U+0000) is not allowed in text"
            raise exceptions.ValidationError({field: [message]} if field else [message])
        return data


# --- throttles ------------------------------------------------------------------------------
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


class TokenObtainThrottle(throttling.ScopedRateThrottle):
    """Per client address: password guessing must not get faster with more usernames.

    The address is the sign-in pages' (`login_throttle.client_address`): REMOTE_ADDR unless a
    trusted proxy header is configured, never a client-supplied X-Forwarded-For."""

    def get_cache_key(self, request, view):
        from .login_throttle import client_address

        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


# --- pagination -----------------------------------------------------------------------------
class PageNumberPagination(pagination.PageNumberPagination):
    """`?page=N&page_size=M` (default 100, at most 5,000)."""

    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 5000


# --- errors ---------------------------------------------------------------------------------
def error_body(code: str, message: str, field_errors: dict | None = None,
               errors: list | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "field_errors": field_errors or {}}
    if errors is not None:
        body["errors"] = errors
    return body


def spec_errors(error: SpecInvalid) -> list[dict[str, Any]]:
    return [{"source": e.source, "row": e.line, "field": e.path, "message": e.message}
            for e in error.errors]


def _flatten(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{key}: {text}" for key, value in detail.items() for text in _flatten(value)]
    if isinstance(detail, list):
        return [text for value in detail for text in _flatten(value)]
    return [str(detail)]


def _field_errors(detail: Any) -> tuple[dict[str, Any], list[str]]:
    """DRF validation detail -> (field errors, messages without a field)."""
    if isinstance(detail, dict):
        fields = {key: value for key, value in detail.items()
                  if key not in ("non_field_errors", "detail")}
        general = _flatten(detail.get("non_field_errors", [])) + _flatten(
            detail.get("detail", []))
        return fields, general
    return {}, _flatten(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every error in the one shape; unknown exceptions are 500."""
    # Imported here: rest_framework.views imports this module (authentication classes).
    from rest_framework.views import set_rollback

    headers: dict[str, str] = {}
    if isinstance(exc, SpecInvalid):
        errors = spec_errors(exc)
        return Response(error_body("invalid_file", f"Nothing was written: {len(errors)} "
                                   "problem(s).", errors=errors), status=400)
    if isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {}
        return Response(error_body("invalid", "; ".join(exc.messages), fields), status=400)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    if not isinstance(exc, exceptions.APIException):
        request = context.get("request")
        logger.exception("Unhandled error in %s %s", getattr(request, "method", "?"),
                         getattr(request, "path", "?"))
        set_rollback()
        return Response(error_body("server_error", "Internal server error; it was logged."),
                        status=500)
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, exceptions.ValidationError):
        fields, general = _field_errors(exc.detail)
        message = "; ".join(general) or "Invalid input: see field_errors."
        body = error_body("invalid", message, fields)
    else:
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        body = error_body(code, "; ".join(_flatten(exc.detail)))
    set_rollback()
    return Response(body, status=exc.status_code, headers=headers)


def accepted(data: dict[str, Any], status_url: str) -> Response:
    """202 for work handed to the workers, with `Location` naming where to follow it."""
    return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": status_url})


def api_error_response(request, status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status_code)


def is_api_path(path: str) -> bool:
    return path.startswith("/api/")


# Handlers for config/urls.py: JSON under /api/, Django's pages elsewhere.
def handler404(request, exception=None):
    if is_api_path(request.path):
        return api_error_response(request, status.HTTP_404_NOT_FOUND, "not_found",
                                  "No such endpoint.")
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler500(request):
    if is_api_path(request.path):
        return api_error_response(request, 500, "server_error",
                                  "Internal server error; it was logged.")
    from django.views.defaults import server_error

    return server_error(request)


# --- schema ---------------------------------------------------------------------------------
ERROR_RESPONSES = {
    "400": "Invalid input: `field_errors` (and `errors` for files and bulk rows) say where.",
    "401": "Not authenticated.",
    "403": "Authenticated, but the role on this study does not allow it.",
    "404": "No such object, or a study the caller has no role on.",
    "429": "Throttled: see the Retry-After header.",
}


def document_error_responses(result: dict, generator: Any, request: Any, public: Any) -> dict:
    """drf-spectacular post-processing hook: every operation documents the one error shape for
    the statuses any operation may answer, since the exception handler (not the views) produces
    them; a view's own description of a status wins."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = {
        "type": "object",
        "required": ["code", "message", "field_errors"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "field_errors": {"type": "object", "additionalProperties": {}},
            "errors": {"type": "array", "items": {"type": "object", "properties": {
                "source": {"type": "string"}, "row": {"type": "integer", "nullable": True},
                "field": {"type": "string"}, "message": {"type": "string"}}}},
        },
    }
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            for code, description in ERROR_RESPONSES.items():
                responses.setdefault(code, {"description": description, "content": error})
    return result
