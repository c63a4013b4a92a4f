"""The study's items and outputs (paginated, filterable, bulk upload) and its design export."""

from __future__ import annotations

import io
import json
import re

from django.db.models import Q
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.response import Response

from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS, paginated

from ..audit import API
from ..importers import (
    items_import,
    outputs_import,
    parse_outputs_csv,
    parse_outputs_json,
)
from ..models import Item, Output
from ..permissions import EDITOR, VIEWER
from ..services import design_export, spec_limits
from ..spec.errors import SpecError, SpecInvalid
from ..spec.files import json_value_problem, parse_items_file
from .base import (
    UPLOAD_PARSERS,
    StudyScopedView,
    UploadSerializer,
    no_content_type_error,
    uploaded_text,
)

# --- items and outputs ----------------------------------------------------------------------
META_NAME = re.compile(r"^[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")


def metadata_filter(params, prefix: str) -> Q:
    """`?meta.<field>=value` filters on item metadata (text or number equal to the value)."""
    condition = Q()
    for name, value in params.items():
        if not name.startswith("meta."):
            continue
        field = name.removeprefix("meta.")
        if not META_NAME.match(field):
            raise ApiValidationError({name: ["metadata field names are letters, digits, - "
                                             "and single _"]})
        match = Q(**{f"{prefix}metadata__{field}": value})
        for number in (int, float):
            try:
                match |= Q(**{f"{prefix}metadata__{field}": number(value)})
                break
            except ValueError:
                continue
        condition &= match
    return condition


META_PARAMETER = OpenApiParameter(
    "meta.<field>", str, description="Item metadata equals this value (e.g. meta.speaker=S01); "
    "repeat with other fields to combine.")


class ItemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Item
        fields = ("id", "external_id", "reference", "context", "metadata")


class ItemInSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The item's external id.")
    reference = serializers.CharField(required=False, allow_blank=True)
    # The serializer's metaclass moves declared fields out of the class, so this one does not
    # hide Field.context at run time; the stubs see the class attribute only.
    context = serializers.CharField(  # type: ignore[assignment]
        required=False, allow_blank=True)
    metadata = serializers.DictField(required=False)
    outputs = serializers.DictField(child=serializers.CharField(allow_blank=True),
                                    help_text="system name -> output text, one per system")


BULK_RESULT = inline_serializer("BulkResult", fields={
    "items_written": serializers.IntegerField(), "outputs_written": serializers.IntegerField(),
})


class ItemList(StudyScopedView):
    """Items (paginated, filterable); add or update many at once while the study is a draft.

    POST a JSON list of items (the spec's shape), a CSV (item,system,output[,reference,context,
    metadata columns]) or JSONL, as the raw body or a multipart `file`. One transaction: any
    problem writes nothing and every problem is listed with its row and field. At most
    EVALSTUDY_MAX_ITEMS items per request and in the study."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}
    parser_classes = UPLOAD_PARSERS

    @extend_schema(
        parameters=[OpenApiParameter("external_id", str), META_PARAMETER, *PAGE_PARAMETERS],
        responses={200: paginated(ItemSerializer, "Item"), **READ_ERRORS},
    )
    def get(self, request, slug):
        items = self.get_study().items.order_by("id")
        if request.query_params.get("external_id"):
            items = items.filter(external_id=request.query_params["external_id"])
        items = items.filter(metadata_filter(request.query_params, ""))
        page = self.paginator.paginate_queryset(items, request, view=self)
        return self.paginator.get_paginated_response(ItemSerializer(page, many=True).data)

    @extend_schema(
        request={"application/json": ItemInSerializer(many=True), "text/csv": OpenApiTypes.STR,
                 "application/x-ndjson": OpenApiTypes.STR,
                 "multipart/form-data": UploadSerializer},
        responses={201: BULK_RESULT, **WRITE_ERRORS},
    )
    def post(self, request, slug):
        study = self.get_study()
        limits = spec_limits()
        upload = uploaded_text(request, "items")
        if upload is None:
            if not isinstance(request.data, list):
                raise no_content_type_error("a JSON list of items, a CSV or a JSONL file")
            if len(request.data) > limits.max_items:
                raise SpecInvalid([SpecError("body", None, "", (
                    f"{len(request.data):,} items in one request; at most {limits.max_items:,} "
                    "(EVALSTUDY_MAX_ITEMS)"))])
            # Checked before json.dumps, which recurses on what it writes.
            problems = [SpecError("body", number, "", problem)
                        for number, entry in enumerate(request.data, start=1)
                        if (problem := json_value_problem(entry, limits)) is not None]
            if problems:
                raise SpecInvalid(problems)
            # One JSON object per line: the spec reader then reports "line N" for element N.
            text, name, fmt = "\n".join(json.dumps(entry) for entry in request.data), "body", \
                "jsonl"
        else:
            text, name = upload
            fmt = "jsonl" if (name.endswith(".jsonl") or request.content_type.startswith(
                "application/x-ndjson")) else "csv"
        items = parse_items_file(text, name, fmt, limits)
        n_items, n_outputs = items_import(study=study, items=items, file_name=name,
                                          limits=limits, actor=request.user, source=API)
        return Response({"items_written": n_items, "outputs_written": n_outputs},
                        status=status.HTTP_201_CREATED)


class OutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    item = serializers.CharField(help_text="The item's external id.")
    system = serializers.CharField(help_text="The system's name.")
    text = serializers.CharField(allow_blank=True)


class OutputList(StudyScopedView):
    """Outputs (paginated; filter by system, item, item metadata); add or update many at once.

    POST a JSON list of {item, system, text} or a CSV with columns item,system,output (raw body
    or multipart `file`); items and systems must exist. One transaction; every problem is
    listed with its row and field and nothing is written. At most EVALSTUDY_MAX_ITEMS rows per
    request: send more in batches."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}
    parser_classes = UPLOAD_PARSERS

    @extend_schema(
        parameters=[OpenApiParameter("system", str, description="System name"),
                    OpenApiParameter("item", str, description="Item external id"),
                    META_PARAMETER, *PAGE_PARAMETERS],
        responses={200: paginated(OutputSerializer, "Output"), **READ_ERRORS},
    )
    def get(self, request, slug):
        study = self.get_study()
        outputs = Output.objects.filter(item__study=study).order_by("id")
        if request.query_params.get("system"):
            outputs = outputs.filter(system__name=request.query_params["system"])
        if request.query_params.get("item"):
            outputs = outputs.filter(item__external_id=request.query_params["item"])
        outputs = outputs.filter(metadata_filter(request.query_params, "item__"))
        rows = outputs.values_list("id", "item__external_id", "system__name", "text")
        page = self.paginator.paginate_queryset(rows, request, view=self)
        return self.paginator.get_paginated_response([
            {"id": pk, "item": item, "system": system, "text": text}
            for pk, item, system, text in page
        ])

    @extend_schema(
        request={"application/json": OutputSerializer(many=True), "text/csv": OpenApiTypes.STR,
                 "multipart/form-data": UploadSerializer},
        responses={201: BULK_RESULT, **WRITE_ERRORS},
    )
    def post(self, request, slug):
        study = self.get_study()
        max_rows = spec_limits().max_items
        upload = uploaded_text(request, "outputs.csv")
        if upload is None:
            rows = parse_outputs_json(request.data, "body", max_rows=max_rows)
            name = "body"
        else:
            text, name = upload
            rows = parse_outputs_csv(text, name, max_rows=max_rows)
        written = outputs_import(study=study, rows=rows, file_name=name, actor=request.user,
                                 source=API)
        return Response({"items_written": 0, "outputs_written": written},
                        status=status.HTTP_201_CREATED)


# --- design ---------------------------------------------------------------------------------
class DesignCsv(StudyScopedView):
    """Every seat's slots in order, as CSV (cells that look like formulas are neutralised)."""

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.BINARY, **READ_ERRORS})
    def get(self, request, slug):
        study = self.get_study()
        buffer = io.StringIO()
        design_export(study=study, stream=buffer, actor=request.user, source=API)
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-design.csv"'
        return response
