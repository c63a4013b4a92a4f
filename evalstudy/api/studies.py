"""The study endpoints: list, create and change studies, import a spec, open and close; the
systems compared and the criteria raters answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import parsers, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS, errors, paginated
from kit.rest import PageNumberPagination, error_body

from .. import criteria as rules
from .. import permissions as perms
from ..audit import API
from ..blindness import identity_terms_clean
from ..importers import study_import_spec
from ..models import Criterion, Study, System
from ..permissions import EDITOR, VIEWER, IsResearcher, check_study
from ..services import (
    criterion_create,
    spec_limits,
    study_close,
    study_create,
    study_open,
    study_update,
    study_warnings,
    system_create,
)
from ..spec.errors import SpecError, SpecInvalid
from ..spec.fields import rater_labels_clean
from ..spec.files import json_value_problem
from ..spec.limits import study_setting_problems
from ..spec.study import parse_study_spec
from .base import (
    CsvParser,
    RawTextParser,
    StudyScopedView,
    UploadSerializer,
    YamlParser,
    absolute_url,
    no_content_type_error,
    require_draft,
    uploaded_text,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


# --- studies --------------------------------------------------------------------------------
class StudySerializer(serializers.ModelSerializer):
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True)
    your_role = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Study
        # Widened: the opened study's serializer adds a field to the same Meta.
        fields: tuple[str, ...] = (
            "slug", "title", "status", "design", "instructions", "consent_text",
            "ratings_per_output", "items_per_rater", "tuple_size", "randomise_order",
            "reference_shown", "allow_revision", "completion_url", "completion_code",
            "screen_out_url", "screen_out_code", "crowd_platform", "crowd_no_codes",
            "lease_minutes", "attention_check_every", "attention_fail_limit", "speeder_seconds",
            "calibration_pass_mark", "encoder_path", "language", "rater_labels", "identity_terms",
            "alignment_shown", "media_must_finish", "media_max_plays", "media_autoplay", "owner",
            "your_role", "url", "created_at", "updated_at",
        )
        read_only_fields = ("status", "owner", "created_at", "updated_at")

    def validate_rater_labels(self, value):
        """Stored as the spec and the admin store them (spaces around a label removed)."""
        try:
            return rater_labels_clean(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None

    def validate_identity_terms(self, value):
        """Stored as the spec and the admin store them (evalstudy.blindness)."""
        try:
            return identity_terms_clean(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None

    def get_your_role(self, study) -> str | None:
        return perms.study_access(self.context["request"].user, study)

    def get_url(self, study) -> str:
        return absolute_url(self.context["request"], "api-study", study.slug)

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


class OpenedStudySerializer(StudySerializer):
    """The study as it opened, with what should still be looked at (e.g. one attention item
    shown several times in a seat): the admin shows the same list."""

    warnings = serializers.SerializerMethodField()

    class Meta(StudySerializer.Meta):
        fields = (*StudySerializer.Meta.fields, "warnings")

    def get_warnings(self, study) -> list[str]:
        return study_warnings(study=study)


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
        study = study_create(owner=request.user, fields=body.validated_data,
                             actor=request.user, source=API)
        return Response(StudySerializer(study, context={"request": request}).data,
                        status=status.HTTP_201_CREATED,
                        headers={"Location": absolute_url(request, "api-study", study.slug)})


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
        study = study_update(study=study, fields=body.validated_data, actor=request.user,
                             source=API)
        return Response(StudySerializer(study, context={"request": request}).data)


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
    levels, with at most EVALSTUDY_SPEC_MAX_NODES values (the manual,
    docs/guide/configuration.md, "Limits").
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
        study, outcome = study_import_spec(spec=spec, file_name=name, owner=request.user,
                                           actor=request.user, source=API)
        data = {"outcome": outcome,
                "study": StudySerializer(study, context={"request": request}).data}
        return Response(data, status=201 if outcome == "created" else 200)


class _JsonAsTextParser(RawTextParser):
    media_type = "application/json"


class StudyOpen(StudyScopedView):
    """Validate the study, build its rater lists if needed, and let raters in (editors)."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=None, responses={200: OpenedStudySerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        """A study that opens answers it with `warnings` (problems that do not block opening,
        one a string). A study that cannot open answers 400 with every problem in `errors`,
        one a row (field "study"), and all of them in `message`."""
        try:
            study = study_open(study=self.get_study(), actor=request.user, source=API)
        except DjangoValidationError as error:
            problems = error.messages
            return Response(error_body(
                "invalid", "; ".join(problems), errors=[
                    {"source": slug, "row": None, "field": "study", "message": problem}
                    for problem in problems]), status=status.HTTP_400_BAD_REQUEST)
        return Response(OpenedStudySerializer(study, context={"request": request}).data)


class StudyClose(StudyScopedView):
    """Stop handing out seats (editors)."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=None, responses={200: StudySerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = study_close(study=self.get_study(), actor=request.user, source=API)
        return Response(StudySerializer(study, context={"request": request}).data)


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
        system = system_create(study=study, fields=body.validated_data, actor=request.user,
                               source=API)
        return Response(SystemSerializer(system).data, status=status.HTTP_201_CREATED)


class CriterionSerializer(serializers.ModelSerializer):
    show_if_criterion = serializers.CharField(
        required=False, allow_null=True, source="show_if_criterion.key",
        help_text="Key of an earlier criterion: ask this one only when its answer is in "
                  "show_if_values.")

    class Meta:
        model = Criterion
        fields = ("id", "key", "prompt", "description", "kind", "scale_points", "labels",
                  "options", "allow_tie", "allow_both", "required", "show_if_criterion",
                  "show_if_values",
                  "order", "scale_min", "scale_max", "severity_weights", "span_reference")

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
        for name in ("labels", "options", "show_if_values", "severity_weights"):
            if (problem := json_value_problem(data.get(name), limits)) is not None:
                raise serializers.ValidationError({name: [problem]})
        # The rule opening the study applies too (criteria.criterion_problems).
        problems = rules.criterion_problems(data)
        if problems:
            raise serializers.ValidationError({"kind": problems})
        parent_key = (data.pop("show_if_criterion", None) or {}).get("key")
        if parent_key:
            parent = study.criteria.filter(key=parent_key).first()
            if parent is None:
                raise serializers.ValidationError(
                    {"show_if_criterion": [f"no criterion {parent_key!r} in this study"]})
            # Raters answer in (order, id) order and the new row gets the highest id, so the
            # parent comes first unless its order is higher (see spec.study.show_if_problems).
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
        criterion = criterion_create(study=study, fields=body.validated_data,
                                     actor=request.user, source=API)
        return Response(CriterionSerializer(criterion).data, status=status.HTTP_201_CREATED)
