"""The API's OpenAPI description of errors and pages: the one error shape (`kit.rest`) on
every operation, and helpers for the views' `extend_schema` declarations."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field_errors = serializers.DictField(child=serializers.ListField(
        child=serializers.CharField()))
    # The serializer's metaclass moves declared fields out of the class, so this one does not
    # hide Serializer.errors at run time; the stubs see the class attribute only.
    errors = serializers.ListField(  # type: ignore[assignment]
        required=False, child=inline_serializer("FileError", fields={
            "source": serializers.CharField(), "row": serializers.IntegerField(allow_null=True),
            "field": serializers.CharField(), "message": serializers.CharField(),
        }), help_text="Bulk bodies and files: every problem with its row and field.")


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    text = {400: "Invalid input (nothing written)", 401: "Not signed in",
            403: "Your role on this study does not allow this", 404: "No such study (or not "
            "yours)", 409: "Conflicts with the study's state", 422: "Unprocessable",
            429: "Too many requests"}
    return {code: OpenApiResponse(ErrorSerializer, description=text[code]) for code in codes}


def paginated(serializer: type[serializers.Serializer], name: str) -> serializers.Serializer:
    """The page envelope of `kit.rest.PageNumberPagination` around `serializer`."""
    return inline_serializer(f"Paginated{name}List", fields={
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": serializer(many=True),
    })


PAGE_PARAMETERS = [
    OpenApiParameter("page", int, description="Page number (from 1)."),
    OpenApiParameter("page_size", int, description="Rows per page (default 100, max 5000)."),
]
READ_ERRORS = errors(401, 403, 404)
WRITE_ERRORS = errors(400, 401, 403, 404, 409)


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
