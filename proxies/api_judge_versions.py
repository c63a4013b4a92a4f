"""REST endpoints for versioned judge prompts (under /api/v1/): list a study's versions and
create the next one (editors; audited), read one with its examples and held-out set. Runs of a
version are started with the proxy-run endpoint (`prompt_version`). Object checks are
evalstudy.permissions'; a refused request (the service's ValidationError) is answered with
400 in the common error shape (kit.rest)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.api.base import StudyScopedView
from evalstudy.audit import API
from evalstudy.permissions import EDITOR, VIEWER, check_study

from .models import JudgePromptVersion, ProxyRun
from .versions import (
    DEFAULT_DEV_FRACTION,
    MAX_EXAMPLES,
    VERSION_METHODS,
    held_out_outputs,
    judge_prompt_version_create,
    judge_prompt_versions,
)


class JudgePromptVersionSerializer(serializers.ModelSerializer):
    criterion = serializers.CharField(source="criterion.key", read_only=True)
    # The serializer's metaclass moves declared fields out of the class, so this one does not
    # hide Field.parent at run time; the stubs see the class attribute only.
    parent = serializers.IntegerField(  # type: ignore[assignment]
        source="parent.number", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True,
                                       allow_null=True)
    runs = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = JudgePromptVersion
        fields = ("id", "criterion", "method", "number", "parent", "template", "examples",
                  "example_outputs", "split", "source_run", "corrections", "note", "runs",
                  "created_at", "created_by", "url")

    def get_runs(self, version) -> list[int]:
        return sorted(run.pk for run in version.runs.all())

    def get_url(self, version) -> str:
        return self.context["request"].build_absolute_uri(
            reverse("api-judge-version", args=[version.pk]))


class CreateVersionSerializer(serializers.Serializer):
    base_version = serializers.IntegerField(required=False, allow_null=True, help_text=(
        "Id of the version to improve: its latest finished run's disagreements with the human "
        "majority on the development split become examples. Omit for version 1."))
    criterion = serializers.CharField(required=False, help_text="Version 1 only.")
    method = serializers.ChoiceField(choices=VERSION_METHODS, required=False,
                                     help_text="Version 1 only.")
    run = serializers.IntegerField(required=False, allow_null=True, help_text=(
        "Version 1 only: a finished run of the same judge whose disagreements become examples."))
    template = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                     default=None)
    n_examples = serializers.IntegerField(required=False, default=4, min_value=0,
                                          max_value=MAX_EXAMPLES)
    outputs = serializers.ListField(child=serializers.IntegerField(), required=False,
                                    allow_null=True, default=None, help_text=(
                                        "Your own pick of units (output ids) instead of the "
                                        "automatic one; each must lie in the development "
                                        "split."))
    notes = serializers.DictField(child=serializers.CharField(max_length=500), required=False,
                                  help_text="{output id: why}, shown with the example.")
    dev_fraction = serializers.FloatField(required=False, default=DEFAULT_DEV_FRACTION)
    seed = serializers.IntegerField(required=False, default=0, min_value=0)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class StudyJudgeVersions(StudyScopedView):
    """The study's judge prompt versions (viewers); create the next one (editors): 201."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses=JudgePromptVersionSerializer(many=True))
    def get(self, request, slug):
        study = self.get_study()
        versions = judge_prompt_versions(study).prefetch_related("runs")
        return Response(JudgePromptVersionSerializer(
            versions, many=True, context={"request": request}).data)

    @extend_schema(request=CreateVersionSerializer, responses={201: JudgePromptVersionSerializer})
    def post(self, request, slug):
        study = self.get_study()
        body = CreateVersionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        # Another study's version or run is as unknown here as a missing one.
        base = None
        if data.get("base_version") is not None:
            base = JudgePromptVersion.objects.filter(pk=data["base_version"], study=study).first()
            if base is None:
                raise ValidationError({"base_version": [
                    f"no prompt version {data['base_version']} of this study"]})
        run = None
        if data.get("run") is not None:
            run = ProxyRun.objects.filter(pk=data["run"], study=study).first()
            if run is None:
                raise ValidationError({"run": [f"no proxy run {data['run']} of this study"]})
        version = judge_prompt_version_create(
            study=study, base_version=base, criterion_key=data.get("criterion"),
            method=data.get("method"), run=run, template=data.get("template"),
            n_examples=data["n_examples"], outputs=data.get("outputs"),
            notes=data.get("notes"), dev_fraction=data["dev_fraction"], seed=data["seed"],
            note=data.get("note", ""), actor=request.user, source=API)
        return Response(JudgePromptVersionSerializer(version, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class JudgeVersionDetail(APIView):
    """One prompt version with its examples and the outputs it is evaluated on (viewers)."""

    @extend_schema(responses=JudgePromptVersionSerializer)
    def get(self, request, pk):
        version = get_object_or_404(
            JudgePromptVersion.objects.select_related("study", "criterion", "parent"), pk=pk)
        check_study(request.user, version.study, VIEWER)
        data = JudgePromptVersionSerializer(version, context={"request": request}).data
        data["held_out_outputs"] = sorted(held_out_outputs(version))
        return Response(data)
