"""What every API view shares: the error shape, the JSON parser, pagination and the 202 answer.

Error shape, for every error under /api/ (DRF views, 404 of unknown paths, unhandled
exceptions): `{"code": str, "message": str, "field_errors": {field: [reason, ...]}}`, plus
`"errors": [{"source", "row", "field", "message"}]` when a file or a bulk body has problems
(each naming its row, field and reason, like the importers do). Unhandled exceptions are
logged with their traceback and answered with 500 and that shape, never a stack trace, even
with DEBUG on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from rest_framework import authentication, exceptions, pagination, parsers, status
from rest_framework.response import Response

# The logger's name is the one operators filter on (it predates the kit).
logger = logging.getLogger("evalstudy.api")


def enforce_csrf(request) -> None:
    """Refuse an unsafe request without a valid CSRF token (403), as DRF's
    SessionAuthentication does for signed-in users; for requests whose identity comes from the
    browser session by another route (a rater's entry link)."""
    authentication.SessionAuthentication().enforce_csrf(request)


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


# Exceptions that carry a list of problems in a file or bulk body, each with its row and field:
# exception type -> function giving `[{"source", "row", "field", "message"}, ...]`. The apps
# register their own (evalstudy's spec reader does) from AppConfig.ready.
_FILE_PROBLEMS: dict[type[Exception], Callable[[Any], list[dict[str, Any]]]] = {}


def file_problems_register(exception: type[Exception],
                           rows: Callable[[Any], list[dict[str, Any]]]) -> None:
    """Answer `exception` (and its subclasses) with 400, code "invalid_file", and `rows(exc)` as
    the body's `errors`, wherever an API view raises it."""
    _FILE_PROBLEMS[exception] = rows


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
    # Imported here: rest_framework.views imports this module (the REST settings name its
    # parser and this handler, which APIView reads when it is defined).
    from rest_framework.views import set_rollback

    headers: dict[str, str] = {}
    for exception, rows in _FILE_PROBLEMS.items():
        if isinstance(exc, exception):
            errors = rows(exc)
            count = "1 problem" if len(errors) == 1 else f"{len(errors)} problems"
            return Response(error_body("invalid_file", f"Nothing was written: {count}.",
                                       errors=errors), status=400)
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
    # Only some APIExceptions carry these (NotAuthenticated's header, Throttled's wait).
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        headers["WWW-Authenticate"] = auth_header
    wait = getattr(exc, "wait", None)
    if wait:
        headers["Retry-After"] = str(int(wait))
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
