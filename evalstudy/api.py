"""REST endpoints for studies and what they hold (under /api/v1/): studies, spec import,
open/close, progress, systems, items and outputs (bulk), criteria, design export, raters and
their entry links, rater personal data, collaborators, and API tokens.

Views are thin: they check access through `evalstudy.permissions`, parse the body and call one
service or selector. Errors take the shape of `evalstudy.rest.exception_handler`.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import parsers, serializers, status
from rest_framework.exceptions import APIException, PermissionDenied, Throttled
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from . import criteria as rules
from . import login_throttle
from . import permissions as perms
from .audit import audit_record, instance_changes, model_snapshot
from .importers import (
    items_import,
    outputs_import,
    parse_outputs_csv,
    parse_outputs_json,
    spec_limits,
    study_import_spec,
)
from .models import Criterion, Item, Output, Rater, Study, StudyCollaborator, System
from .permissions import EDITOR, OWNER, VIEWER, IsResearcher, StudyRole, check_study
from .rest import PageNumberPagination, SafeJSONParser, TokenObtainThrottle, api_token_create
from .selectors import design_write_csv
from .services import rater_invite, study_close, study_open
from .spec import (
    SpecError,
    SpecInvalid,
    decode,
    json_value_problem,
    parse_items_file,
    parse_study_spec,
    study_setting_problems,
)


# --- shared pieces --------------------------------------------------------------------------
class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field_errors = serializers.DictField(child=serializers.ListField(
        child=serializers.CharField()))
    errors = serializers.ListField(
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
    """The page envelope of `evalstudy.rest.PageNumberPagination` around `serializer`."""
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


class RawTextParser(parsers.BaseParser):
    """Lets a file be posted as the raw body (`curl --data-binary @items.csv`)."""

    media_type = "text/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read()


class CsvParser(RawTextParser):
    media_type = "text/csv"


class JsonLinesParser(RawTextParser):
    media_type = "application/x-ndjson"


class YamlParser(RawTextParser):
    media_type = "application/yaml"


UPLOAD_PARSERS = [SafeJSONParser, parsers.MultiPartParser, CsvParser, JsonLinesParser,
                  YamlParser, RawTextParser]
# What a multipart envelope (boundaries, part headers) may add to the file it carries.
MULTIPART_SLACK = 64 * 1024


def uploaded_text(request, default_name: str, *, what: str = "upload",
                  limit_setting: str = "EVALSTUDY_UPLOAD_MAX_BYTES") -> tuple[str, str] | None:
    """(text, file name) of a multipart `file` or a raw text body; None for a JSON body.

    Refused (SpecInvalid naming the limit and `limit_setting`) when over that setting, and
    before anything is read when the declared length already is: DRF reads a body through the
    request stream, where Django's DATA_UPLOAD_MAX_MEMORY_SIZE is not checked, and the raw-body
    parsers would hold it all in memory."""
    limit = getattr(settings, limit_setting)

    def refuse(size: int, name: str) -> SpecInvalid:
        return SpecInvalid([SpecError(name, None, "", (
            f"{size:,} bytes is over the {what} limit of {limit:,} bytes ({limit_setting}); "
            + ("import the items from a CSV or JSONL file" if what == "spec"
               else "split the file")))])

    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit + MULTIPART_SLACK:
        raise refuse(declared, default_name)
    upload = request.FILES.get("file") if hasattr(request, "FILES") else None
    if upload is not None:
        if upload.size > limit:
            raise refuse(upload.size, upload.name)
        return decode(upload.read(), upload.name), upload.name
    if isinstance(request.data, bytes | str):
        data = request.data
        if len(data) > limit:
            raise refuse(len(data), default_name)
        return (decode(data, default_name) if isinstance(data, bytes) else data), default_name
    return None


def no_content_type_error(what: str) -> SpecInvalid:
    return SpecInvalid([SpecError("request", None, "", f"send {what}")])


class StudyScopedView(APIView):
    """A view on one study (URL kwarg `slug`); `study_roles` maps HTTP methods to the minimum
    role (see evalstudy.permissions)."""

    permission_classes = [StudyRole]
    study_roles = {"GET": VIEWER}

    @property
    def paginator(self) -> PageNumberPagination:
        if not hasattr(self, "_paginator"):
            self._paginator = PageNumberPagination()
        return self._paginator

    def get_study(self) -> Study:
        if not hasattr(self, "_study"):
            minimum = perms.study_role_for(self, self.request.method)
            study = Study.objects.filter(slug=self.kwargs["slug"]).first()
            self._study = check_study(self.request.user, study, minimum)
        return self._study


def require_draft(study: Study) -> None:
    if study.status != Study.Status.DRAFT:
        raise Conflict(f"Study {study.slug!r} is {study.status}; only a draft study can change.")


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "Conflicts with the study's state."


def _absolute(request, name: str, *args) -> str:
    return request.build_absolute_uri(reverse(name, args=args))


# --- studies --------------------------------------------------------------------------------
class StudySerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    your_role = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Study
        fields = ("slug", "title", "status", "design", "instructions", "consent_text",
                  "ratings_per_output", "items_per_rater", "randomise_order",
                  "reference_shown", "allow_revision", "completion_url", "completion_code",
                  "screen_out_url", "screen_out_code", "lease_minutes", "attention_check_every",
                  "attention_fail_limit", "encoder_path", "owner", "your_role", "url",
                  "created_at", "updated_at")
        read_only_fields = ("status", "owner", "created_at", "updated_at")

    def get_your_role(self, study) -> str | None:
        return perms.study_access(self.context["request"].user, study)

    def get_url(self, study) -> str:
        return _absolute(self.context["request"], "api-study", study.slug)

    def validate(self, data):
        """The bounds of the design settings (EVALSTUDY_MAX_RATINGS_PER_OUTPUT and co.), as the
        spec reader and the admin apply them; only for the fields this request sets, so a
        value stored before a limit was lowered does not block an unrelated change (opening
        the study reports it)."""
        problems = study_setting_problems(data, spec_limits())
        if problems:
            raise serializers.ValidationError({name: [problem]
                                               for name, problem in problems.items()})
        return data


class StudyList(APIView):
    """Studies you have a role on; create one (researchers)."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [IsResearcher()]
        return super().get_permissions()

    @extend_schema(operation_id="studies_list",
                   responses={200: paginated(StudySerializer, "Study"), **errors(401)},
                   parameters=[OpenApiParameter("status", str, enum=Study.Status.values),
                               *PAGE_PARAMETERS])
    def get(self, request):
        studies = perms.studies_visible_to(request.user).select_related("owner")
        if request.query_params.get("status"):
            studies = studies.filter(status=request.query_params["status"])
        page = self.paginator.paginate_queryset(studies.order_by("-created_at", "pk"), request,
                                                view=self)
        return self.paginator.get_paginated_response(
            StudySerializer(page, many=True, context={"request": request}).data)

    @property
    def paginator(self) -> PageNumberPagination:
        if not hasattr(self, "_paginator"):
            self._paginator = PageNumberPagination()
        return self._paginator

    @extend_schema(request=StudySerializer, responses={201: StudySerializer, **errors(400, 401,
                                                                                      403)})
    def post(self, request):
        body = StudySerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        study = body.save(owner=request.user)
        audit(request, "create", study, target=study)
        return Response(StudySerializer(study, context={"request": request}).data,
                        status=status.HTTP_201_CREATED,
                        headers={"Location": _absolute(request, "api-study", study.slug)})


class StudyDetail(StudyScopedView):
    """A study's settings; change them while it is a draft (editors)."""

    study_roles = {"GET": VIEWER, "PATCH": EDITOR}

    @extend_schema(responses={200: StudySerializer, **READ_ERRORS})
    def get(self, request, slug):
        return Response(StudySerializer(self.get_study(), context={"request": request}).data)

    @extend_schema(request=StudySerializer(partial=True),
                   responses={200: StudySerializer, **WRITE_ERRORS})
    def patch(self, request, slug):
        study = self.get_study()
        require_draft(study)
        body = StudySerializer(study, data=request.data, partial=True,
                               context={"request": request})
        body.is_valid(raise_exception=True)
        before = model_snapshot(study)
        body.save()
        audit(request, "update", study, target=study, changes=instance_changes(before, study))
        return Response(body.data)


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField()


IMPORT_RESULT = inline_serializer("ImportResult", fields={
    "outcome": serializers.ChoiceField(["created", "updated", "unchanged"]),
    "study": StudySerializer(),
})


class StudyImport(APIView):
    """Create or update a study from a spec file (YAML or JSON), as `manage.py import_study`.

    Send the file as multipart `file`, or as the raw body (application/yaml, application/json,
    text/plain). Nothing is written when the spec has a problem; every problem is listed with
    its line and field. Updating an existing study needs the editor role on it. A spec is at
    most EVALSTUDY_SPEC_MAX_BYTES (refused unread), nested at most EVALSTUDY_SPEC_MAX_DEPTH
    levels, with at most EVALSTUDY_SPEC_MAX_NODES values (see the README, "Limits").
    """

    permission_classes = [IsResearcher]
    parser_classes = [parsers.MultiPartParser, YamlParser, RawTextParser, CsvParser]

    def get_parsers(self):
        # A JSON spec is parsed by the spec reader (with line numbers), not by DRF.
        return [*super().get_parsers(), _JsonAsTextParser()]

    @extend_schema(
        request={"multipart/form-data": UploadSerializer, "application/yaml": OpenApiTypes.STR,
                 "application/json": OpenApiTypes.OBJECT},
        responses={201: IMPORT_RESULT, 200: IMPORT_RESULT, **WRITE_ERRORS},
    )
    def post(self, request):
        limits = spec_limits()
        # The tighter of the two limits, refused before the body is read.
        tighter = ("EVALSTUDY_SPEC_MAX_BYTES" if limits.max_bytes
                   <= settings.EVALSTUDY_UPLOAD_MAX_BYTES else "EVALSTUDY_UPLOAD_MAX_BYTES")
        upload = uploaded_text(request, "spec", what="spec", limit_setting=tighter)
        if upload is None:
            raise no_content_type_error("the spec as a multipart 'file' or as the raw body")
        text, name = upload
        spec = parse_study_spec(text, name, limits)
        existing = Study.objects.filter(slug=spec.settings["slug"]).first()
        if existing is not None:
            if perms.study_access(request.user, existing) is None:
                raise SpecInvalid([SpecError(name, None, "study.slug",
                                             f"slug {existing.slug!r} is taken")])
            check_study(request.user, existing, EDITOR)
        study, outcome = study_import_spec(spec=spec, source=name, owner=request.user)
        audit(request, "import", study, changes={"what": "spec", "file": name,
                                                 "outcome": outcome})
        data = {"outcome": outcome,
                "study": StudySerializer(study, context={"request": request}).data}
        return Response(data, status=201 if outcome == "created" else 200)


class _JsonAsTextParser(RawTextParser):
    media_type = "application/json"


class StudyOpen(StudyScopedView):
    """Validate the study, build its rater lists if needed, and let raters in (editors)."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=None, responses={200: StudySerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = study_open(study=self.get_study())
        audit(request, "open", study, target=study)
        return Response(StudySerializer(study, context={"request": request}).data)


class StudyClose(StudyScopedView):
    """Stop handing out seats (editors)."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=None, responses={200: StudySerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = study_close(study=self.get_study())
        audit(request, "close", study, target=study)
        return Response(StudySerializer(study, context={"request": request}).data)


class ProgressSerializer(serializers.Serializer):
    status = serializers.CharField()
    seats_filled = serializers.IntegerField()
    seats_total = serializers.IntegerField()
    outputs_total = serializers.IntegerField()
    outputs_complete = serializers.IntegerField()
    ratings_target = serializers.IntegerField()
    coverage = serializers.DictField(child=serializers.IntegerField(),
                                     help_text="completed ratings -> number of outputs")
    median_seconds = serializers.FloatField(allow_null=True)
    raters = serializers.ListField(child=inline_serializer("RaterProgress", fields={
        "rater_id": serializers.IntegerField(), "rater": serializers.CharField(),
        "kind": serializers.CharField(), "state": serializers.CharField(),
        "done": serializers.IntegerField(), "total": serializers.IntegerField(),
        "median_seconds": serializers.FloatField(allow_null=True),
        "attention_failed": serializers.IntegerField(),
        "calibration_accuracy": serializers.FloatField(allow_null=True),
        "stopped": serializers.CharField(),
    }))


class StudyProgress(StudyScopedView):
    """Seats, coverage of outputs and each rater's progress (the monitor page as JSON)."""

    @extend_schema(responses={200: ProgressSerializer, **READ_ERRORS})
    def get(self, request, slug):
        from annotation.monitoring import study_monitor

        study = self.get_study()
        monitor = study_monitor(study)
        return Response({
            "status": study.status, "seats_filled": monitor.seats_filled,
            "seats_total": monitor.seats_total, "outputs_total": monitor.outputs_total,
            "outputs_complete": monitor.outputs_complete, "ratings_target": monitor.target,
            "coverage": {str(k): v for k, v in sorted(monitor.coverage.items())},
            "median_seconds": monitor.median_seconds,
            "raters": [{
                "rater_id": row.rater_id, "rater": row.rater, "kind": row.kind,
                "state": row.state, "done": row.done, "total": row.total,
                "median_seconds": row.median_seconds, "attention_failed": row.attention_failed,
                "calibration_accuracy": row.calibration_accuracy, "stopped": row.stopped,
            } for row in monitor.raters],
        })


# --- systems and criteria -------------------------------------------------------------------
class SystemSerializer(serializers.ModelSerializer):
    class Meta:
        model = System
        fields = ("id", "name", "description", "metadata")

    def validate_name(self, name):
        if self.context["study"].systems.filter(name=name).exists():
            raise serializers.ValidationError(f"the study already has a system {name!r}")
        return name


class SystemList(StudyScopedView):
    """The systems compared (never shown to raters); add one while the study is a draft."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: SystemSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        return Response(SystemSerializer(self.get_study().systems.order_by("name"),
                                         many=True).data)

    @extend_schema(request=SystemSerializer, responses={201: SystemSerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        require_draft(study)
        body = SystemSerializer(data=request.data, context={"study": study})
        body.is_valid(raise_exception=True)
        audit(request, "create", study, target=body.save(study=study))
        return Response(body.data, status=status.HTTP_201_CREATED)


class CriterionSerializer(serializers.ModelSerializer):
    show_if_criterion = serializers.CharField(
        required=False, allow_null=True, source="show_if_criterion.key",
        help_text="Key of an earlier criterion: ask this one only when its answer is in "
                  "show_if_values.")

    class Meta:
        model = Criterion
        fields = ("id", "key", "prompt", "description", "kind", "scale_points", "labels",
                  "options", "allow_tie", "required", "show_if_criterion", "show_if_values",
                  "order")

    def validate(self, data):
        study = self.context["study"]
        limits = spec_limits()
        count = study.criteria.count()
        if count >= limits.max_criteria:
            raise serializers.ValidationError(
                f"the study has {count} criteria, the most allowed (EVALSTUDY_MAX_CRITERIA)")
        if study.criteria.filter(key=data["key"]).exists():
            raise serializers.ValidationError({"key": [f"the study already has a criterion "
                                                       f"{data['key']!r}"]})
        # JSON fields: PostgreSQL refuses NUL in them (a 500), and no control belongs there.
        for name in ("labels", "options", "show_if_values"):
            if (problem := json_value_problem(data.get(name), limits)) is not None:
                raise serializers.ValidationError({name: [problem]})
        problems = rules.check_rule(data["kind"], scale_points=data.get("scale_points"),
                                    labels=data.get("labels") or [],
                                    options=list(data.get("options") or []))
        if problems:
            raise serializers.ValidationError({"kind": problems})
        parent_key = (data.pop("show_if_criterion", None) or {}).get("key")
        if parent_key:
            parent = study.criteria.filter(key=parent_key).first()
            if parent is None:
                raise serializers.ValidationError(
                    {"show_if_criterion": [f"no criterion {parent_key!r} in this study"]})
            # Raters answer in (order, id) order and the new row gets the highest id, so the
            # parent comes first unless its order is higher (see spec.show_if_problems).
            order = data.get("order", 0)
            if parent.order > order:
                raise serializers.ValidationError({"show_if_criterion": [
                    f"{parent_key!r} comes after this criterion (its order is {parent.order}, "
                    f"this one's {order}); a question can depend only on an earlier one: give "
                    f"this one an order of at least {parent.order}"]})
            for value in data.get("show_if_values") or []:
                try:
                    parent.rule.normalise(value)
                except ValueError as error:
                    raise serializers.ValidationError({"show_if_values": [str(error)]}) from None
            data["show_if_criterion"] = parent
        return data


class CriterionList(StudyScopedView):
    """The questions raters answer, in order; add one while the study is a draft."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: CriterionSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        criteria = self.get_study().criteria.select_related("show_if_criterion")
        return Response(CriterionSerializer(criteria.order_by("order", "id"), many=True).data)

    @extend_schema(request=CriterionSerializer, responses={201: CriterionSerializer,
                                                           **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        require_draft(study)
        body = CriterionSerializer(data=request.data, context={"study": study})
        body.is_valid(raise_exception=True)
        audit(request, "create", study, target=body.save(study=study))
        return Response(body.data, status=status.HTTP_201_CREATED)


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
    context = serializers.CharField(required=False, allow_blank=True)
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
        n_items, n_outputs = items_import(study=study, items=items, source=name, limits=limits)
        audit(request, "import", study, changes={"what": "items", "file": name,
                                                 "items": n_items, "outputs": n_outputs})
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
            source = "body"
        else:
            text, source = upload
            rows = parse_outputs_csv(text, source, max_rows=max_rows)
        written = outputs_import(study=study, rows=rows, source=source)
        audit(request, "import", study, changes={"what": "outputs", "file": source,
                                                 "outputs": written})
        return Response({"items_written": 0, "outputs_written": written},
                        status=status.HTTP_201_CREATED)


# --- design ---------------------------------------------------------------------------------
class DesignCsv(StudyScopedView):
    """Every seat's slots in order, as CSV (cells that look like formulas are neutralised)."""

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.BINARY, **READ_ERRORS})
    def get(self, request, slug):
        study = self.get_study()
        buffer = io.StringIO()
        count = design_write_csv(study, buffer)
        audit(request, "export", study, changes={"what": "design.csv", "rows": count})
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-design.csv"'
        return response


def audit(request, action: str, study: Study | None, *, target: Any = None,
          changes: dict | None = None) -> None:
    """Record an API change or export in the audit trail (evalstudy.audit)."""
    audit_record(actor=request.user if request.user.is_authenticated else None, action=action,
                 study=study, target=target, changes=changes, source="api")


# --- raters ---------------------------------------------------------------------------------
class RaterSerializer(serializers.ModelSerializer):
    entry_url = serializers.SerializerMethodField(
        help_text="The rater's personal link, for this study only (a secret: send it to the "
                  "rater only). Null for account holders, who sign in, and for proxies.")
    email = serializers.EmailField(write_only=True, required=False,
                                   help_text="Stored in the rater's metadata.")
    username = serializers.CharField(
        write_only=True, required=False,
        help_text="Invite the holder of this account instead of creating a personal-link "
                  "rater: they sign in and see the study on their page.")

    class Meta:
        model = Rater
        fields = ("id", "kind", "external_id", "display_name", "metadata", "email", "username",
                  "created_at", "entry_url")
        read_only_fields = ("created_at",)

    def get_entry_url(self, rater) -> str | None:
        if not rater.has_entry_link:
            return None
        return _absolute(self.context["request"], "annotation:enter", rater.access_token)

    def validate_kind(self, kind):
        if kind not in Rater.HUMAN_KINDS:
            raise serializers.ValidationError("the API invites people: slp, crowd or expert")
        return kind

    def validate_username(self, username):
        # No error for an unknown name: the answer must not tell who has an account.
        return get_user_model().objects.filter(username=username, is_active=True).first()

    def to_representation(self, rater):
        data = super().to_representation(rater)
        request = self.context.get("request")
        if rater.user_id is not None and not (request and request.user.is_superuser):
            # An account's metadata is the installation's, not one study owner's.
            data["metadata"] = {}
        return data


class RaterSummarySerializer(serializers.ModelSerializer):
    """A rater as collaborators below the owner see them: no entry link (a secret that lets
    its holder rate as that person) and no metadata (personal data such as the email)."""

    class Meta:
        model = Rater
        fields = ("id", "kind", "external_id", "display_name", "created_at")
        read_only_fields = fields


class RaterList(StudyScopedView):
    """The study's raters; invite one (editors): a new rater of this study whose personal entry
    link (in the answer) works in this study only, or, with `username`, an account holder.

    Listing shows entry links and metadata (personal data) to the study's owner and admins
    only; viewers and editors get the summary without them."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: paginated(RaterSerializer, "Rater"), **READ_ERRORS},
                   parameters=PAGE_PARAMETERS,
                   description="Owners and admins get every field; viewers and editors get "
                               "`id`, `kind`, `external_id`, `display_name`, `created_at`.")
    def get(self, request, slug):
        study = self.get_study()
        raters = perms.raters_of_study(study).order_by("pk")
        page = self.paginator.paginate_queryset(raters, request, view=self)
        serializer = (RaterSerializer if perms.has_role(request.user, study, OWNER)
                      else RaterSummarySerializer)
        return self.paginator.get_paginated_response(
            serializer(page, many=True, context={"request": request}).data)

    @extend_schema(request=RaterSerializer, responses={
        201: RaterSerializer,
        202: inline_serializer("AccountInvited", fields={"detail": serializers.CharField()}),
        **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        body = RaterSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        if "username" in request.data:
            # The same answer whether or not the account exists; the holder accepts first.
            if data.get("username") is not None:
                rater_invite(study=study, kind=data["kind"], user=data["username"])
            audit(request, "create", study, changes={
                "invitation": [None, f"account {request.data.get('username')!r}"]})
            return Response({"detail": "If an active account with this username exists, it "
                             "has been invited; it is listed among the study's raters once its "
                             "holder accepts."}, status=status.HTTP_202_ACCEPTED)
        metadata = dict(data.get("metadata") or {})
        if data.get("email"):
            metadata["email"] = data["email"]
        try:
            rater = rater_invite(
                study=study, kind=data["kind"], display_name=data.get("display_name", ""),
                external_id=data.get("external_id", ""), metadata=metadata,
                user=data.get("username"))
        except DjangoValidationError as error:
            raise ApiValidationError({"external_id": error.messages}) from None
        except IntegrityError:
            raise ApiValidationError({"external_id": ["a rater with this id exists already"]}
                                     ) from None
        audit(request, "create", study, target=rater)
        return Response(RaterSerializer(rater, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class RaterScopedView(StudyScopedView):
    def get_rater(self) -> Rater:
        return get_object_or_404(perms.raters_of_study(self.get_study()), pk=self.kwargs["pk"])


class RaterPersonalData(RaterScopedView):
    """Everything personal held about one rater (the study's owner or an admin). An owner gets
    what concerns their own studies only; an admin gets the whole installation's."""

    study_roles = {"GET": OWNER}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **READ_ERRORS})
    def get(self, request, slug, pk):
        from .privacy import rater_data_export

        rater = self.get_rater()
        data = rater_data_export(rater, studies=perms.privacy_scope(request.user))
        audit(request, "export", self.get_study(), target=rater,
              changes={"what": "rater personal data"})
        return Response(data)


class RaterErase(RaterScopedView):
    """Erase one rater's personal data; their pseudonymous judgments stay (owner or admin).
    An owner may erase only raters whose whole participation is in studies they own (not
    account holders: their accounts span the installation, an admin erases them)."""

    study_roles = {"POST": OWNER}

    @extend_schema(request=None, responses={200: inline_serializer("Erased", fields={
        "erased": serializers.BooleanField(), "rater": serializers.IntegerField()}),
        **WRITE_ERRORS})
    def post(self, request, slug, pk):
        from .privacy import NotAPerson, OutsideYourStudies, rater_data_erase

        rater = self.get_rater()
        try:
            rater_data_erase(rater, actor=request.user, source="api",
                             studies=perms.privacy_scope(request.user))
        except NotAPerson as error:
            raise ApiValidationError({"detail": [str(error)]}) from None
        except OutsideYourStudies as error:
            raise PermissionDenied(str(error)) from None
        return Response({"erased": True, "rater": rater.pk})


# --- collaborators --------------------------------------------------------------------------
class CollaboratorSerializer(serializers.ModelSerializer):
    username = serializers.SlugRelatedField(source="user", slug_field="username",
                                            queryset=get_user_model().objects.all())

    class Meta:
        model = StudyCollaborator
        fields = ("username", "role")


class CollaboratorList(StudyScopedView):
    """Who else works on the study; add or change one (the owner or an admin)."""

    study_roles = {"GET": VIEWER, "POST": OWNER}

    @extend_schema(responses={200: CollaboratorSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        rows = StudyCollaborator.objects.filter(study=self.get_study()).select_related("user")
        return Response(CollaboratorSerializer(rows.order_by("pk"), many=True).data)

    @extend_schema(request=CollaboratorSerializer,
                   responses={201: CollaboratorSerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        body = CollaboratorSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = body.validated_data["user"]
        if user.pk == study.owner_id:
            raise ApiValidationError({"username": ["this user owns the study"]})
        row, _ = StudyCollaborator.objects.update_or_create(
            study=study, user=user, defaults={"role": body.validated_data["role"]})
        audit(request, "update", study, target=row,
              changes={"collaborator": [None, f"{user.username}:{row.role}"]})
        return Response(CollaboratorSerializer(row).data, status=status.HTTP_201_CREATED)


class CollaboratorDetail(StudyScopedView):
    """Remove a collaborator (the owner or an admin)."""

    study_roles = {"DELETE": OWNER}

    @extend_schema(responses={204: None, **WRITE_ERRORS})
    def delete(self, request, slug, username):
        study = self.get_study()
        row = get_object_or_404(StudyCollaborator, study=study, user__username=username)
        row.delete()
        audit(request, "delete", study, changes={"collaborator": [username, None]})
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- tokens ---------------------------------------------------------------------------------
class LockedOut(Throttled):
    default_code = "locked_out"
    default_detail = ("Too many failed sign-in attempts for this username; try again later "
                      "(see Retry-After).")


class TokenObtain(APIView):
    """Exchange a username and password for an API token (shown once). Throttled per client
    address, and locked out per username after repeated failures like the sign-in page
    (LOGIN_FAILURE_LIMIT, LOGIN_LOCKOUT_SECONDS): 429 with code "locked_out"."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [TokenObtainThrottle]
    throttle_scope = "token_obtain"

    @extend_schema(
        request=inline_serializer("TokenRequest", fields={
            "username": serializers.CharField(), "password": serializers.CharField(),
            "name": serializers.CharField(required=False, help_text="What it is for")}),
        responses={201: inline_serializer("TokenCreated", fields={
            "token": serializers.CharField(), "prefix": serializers.CharField(),
            "name": serializers.CharField(), "created_at": serializers.DateTimeField()}),
            **errors(400, 429)},
    )
    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        missing = {name: ["This field is required."] for name in ("username", "password")
                   if not data.get(name)}
        if missing:
            raise ApiValidationError(missing)
        username = str(data["username"])
        # The same per-username and per-address lockout as the sign-in pages: the API must
        # not be the unthrottled way to guess a password.
        if login_throttle.is_locked_out(request, username):
            raise LockedOut(wait=settings.LOGIN_LOCKOUT_SECONDS)
        user = authenticate(request._request, username=username,
                            password=str(data["password"]))
        if user is None:
            login_throttle.record_failure(request, username)
            raise ApiValidationError({"detail": ["Wrong username or password."]},
                                     code="invalid_credentials")
        login_throttle.record_success(request, username)
        token, raw = api_token_create(user=user, name=str(data.get("name", "")))
        return Response({"token": raw, "prefix": token.prefix, "name": token.name,
                         "created_at": token.created_at}, status=status.HTTP_201_CREATED)
