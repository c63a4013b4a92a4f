"""The adaptive design's pre-registered plan (`evalstudy.models.StudyPlan`): read it,
set it while the study is a draft and the plan unregistered, and read the stopping checks
(looks) made under it."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from kit.openapi import READ_ERRORS, WRITE_ERRORS

from ..audit import API
from ..models import StoppingCheck, StudyPlan
from ..permissions import EDITOR, VIEWER
from ..services import PlanRegistered, study_plan_replace
from ..spec.plan import MAX_WHOLE, PLAN_KINDS
from .base import Conflict, StudyScopedView, require_draft


class StudyPlanSerializer(serializers.ModelSerializer):
    criterion = serializers.CharField(
        source="criterion.key", allow_null=True, required=False, max_length=60,
        help_text="Key of the pairwise criterion the rule reads (null: the study's first "
                  "pairwise criterion).")
    contrasts = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(max_length=100),
                                    min_length=2, max_length=2),
        required=False, max_length=1000,
        help_text='Pairs of system names, e.g. [["ours", "baseline"]] (empty: every pair).')
    check_every = serializers.IntegerField(min_value=1, max_value=MAX_WHOLE, required=False)
    max_looks = serializers.IntegerField(min_value=1, max_value=MAX_WHOLE, required=False)
    max_judgments = serializers.IntegerField(min_value=1, max_value=MAX_WHOLE, required=False)

    class Meta:
        model = StudyPlan
        fields = (*StudyPlan.PLAN_FIELDS, "registered_at")
        read_only_fields = ("registered_at",)

    def validate_target_ci_width(self, value):
        if value is not None and value <= 0:
            raise serializers.ValidationError("must be positive (log-odds), or null")
        return value

    def validate_criterion(self, key):
        # Resolved in the study the request targets only: another study's criterion is
        # "not a criterion of this study", whatever its key.
        if key is None:
            return None
        criterion = self.context["study"].criteria.filter(key=key).first()
        if criterion is None:
            raise serializers.ValidationError(f"no criterion {key!r} in this study")
        if criterion.kind not in PLAN_KINDS:
            raise serializers.ValidationError(
                f"{key!r} is a {criterion.kind} criterion; the plan reads a pairwise one")
        return criterion

    def validate_contrasts(self, pairs):
        names = set(self.context["study"].systems.values_list("name", flat=True))
        for index, (a, b) in enumerate(pairs):
            if a == b or a not in names or b not in names:
                raise serializers.ValidationError(
                    f"contrast {index}: {[a, b]!r} does not name two different systems of "
                    "this study")
        return pairs

    def validate(self, data):
        # Said here in words: the database constraint behind it names only itself.
        if data.get("target_ci_width") is None and not data.get("stop_on_decision"):
            raise serializers.ValidationError(
                "The plan needs a target CI width or stop_on_decision: true (a rule that can "
                "stop before its last look).")
        return data

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        # source="criterion.key" nests the value; the service takes the criterion itself.
        if "criterion" in values:
            values["criterion"] = values["criterion"]["key"]
        return values


class StoppingCheckSerializer(serializers.ModelSerializer):
    class Meta:
        model = StoppingCheck
        fields = ("look", "judgments", "information_fraction", "alpha_spent", "boundary",
                  "nominal_alpha", "estimates", "met", "reason", "checked_at")


def _plan_of(study) -> StudyPlan:
    plan = StudyPlan.objects.filter(study=study).select_related("criterion").first()
    if plan is None:
        raise NotFound(f"Study {study.slug!r} has no stopping plan (PUT one while it is a "
                       "draft in the adaptive design).")
    return plan


class StudyPlanView(StudyScopedView):
    """The adaptive design's pre-registered stopping rule. Viewers read it; editors set it
    (PUT: every field at once, those left out take their defaults) while the study is a draft
    and the plan is not registered: from the moment the study opens, the plan is frozen (409)."""

    study_roles = {"GET": VIEWER, "PUT": EDITOR}

    @extend_schema(responses={200: StudyPlanSerializer, **READ_ERRORS})
    def get(self, request, slug):
        return Response(StudyPlanSerializer(_plan_of(self.get_study())).data)

    @extend_schema(request=StudyPlanSerializer,
                   responses={200: StudyPlanSerializer, **WRITE_ERRORS})
    def put(self, request, slug):
        """400: a field is invalid, the study is not adaptive, or it could not open with the
        plan. 409: the study is not a draft, or the plan was registered."""
        study = self.get_study()
        require_draft(study)
        registered = StudyPlan.objects.filter(study=study, registered_at__isnull=False).first()
        if registered is not None:
            raise Conflict(f"The plan of {study.slug!r} was registered at "
                           f"{registered.registered_at:%Y-%m-%d %H:%M} UTC; a pre-registered "
                           "plan cannot change.")
        body = StudyPlanSerializer(data=request.data, context={"study": study})
        body.is_valid(raise_exception=True)
        try:
            plan = study_plan_replace(study=study, fields=body.validated_data,
                                      actor=request.user, source=API)
        except PlanRegistered as error:  # registered since the check above
            raise Conflict(" ".join(error.messages)) from None
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.messages) from None
        return Response(StudyPlanSerializer(plan).data)


class StudyPlanChecks(StudyScopedView):
    """The looks made under the plan so far, in order: judgments counted, information
    fraction, alpha spent, the nominal |z| boundary, each contrast's estimate, and whether
    the rule was met (the study was then closed)."""

    study_roles = {"GET": VIEWER}

    @extend_schema(responses={200: StoppingCheckSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        plan = _plan_of(self.get_study())
        return Response(StoppingCheckSerializer(plan.checks.order_by("look"), many=True).data)
