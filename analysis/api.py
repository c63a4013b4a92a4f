"""REST endpoints for analyses and exports (under /api/v1/): start an analysis (202 + status
URL), its status, its report downloads (HTML, PDF, JSON), and tidy exports of a study's
judgments (CSV, JSONL, Parquet). Viewers read and download; editors start analyses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.api.base import StudyScopedView
from evalstudy.api.runs import RunDetail, StudyRunList
from evalstudy.audit import API
from evalstudy.permissions import EDITOR, VIEWER, check_study
from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS, errors, paginated

from .adjudication import (
    UnitNotFound,
    adjudicable_criteria,
    adjudication_queue,
    adjudication_record,
    adjudication_unit,
)
from .adjudication_views import QueueForm
from .exports import NotExported, judgments_export, report_export, spans_export
from .models import Adjudication, AnalysisRun
from .selectors import JudgmentFilter
from .services import analysis_run_start

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from evalstudy.models import Criterion, Study

REPORT_FORMATS = {"html": "report.html", "pdf": "report.pdf", "json": "result.json"}


class AnalysisRunSerializer(serializers.ModelSerializer):
    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    status_url = serializers.SerializerMethodField()
    report_urls = serializers.SerializerMethodField()

    class Meta:
        model = AnalysisRun
        fields = ("id", "study", "options", "status", "step", "done", "total", "error",
                  "created_at", "started_at", "heartbeat_at", "finished_at", "status_url",
                  "report_urls")

    def _absolute(self, name, *args):
        return self.context["request"].build_absolute_uri(reverse(name, args=args))

    def get_status_url(self, run) -> str:
        return self._absolute("api-analysis-run", run.pk)

    def get_report_urls(self, run) -> dict[str, str]:
        """Download links (html, pdf, json) once the run is done; empty before."""
        if run.status != AnalysisRun.Status.DONE:
            return {}
        return {fmt: self._absolute(f"api-analysis-report-{fmt}", run.pk)
                for fmt in REPORT_FORMATS}


class StartAnalysisSerializer(serializers.Serializer):
    options = serializers.DictField(required=False, help_text="Formula, filters, engine, "
                                    "thresholds (docs/guide/analysis.md).")


# Never shown in a run's status: read only for a download.
REPORT_COLUMNS = ("result", "report_html", "report_pdf")


class StudyAnalysisRuns(StudyRunList):
    """The study's latest analyses; start one (editors): 202 + status URL."""

    run_model = AnalysisRun
    serializer_class = AnalysisRunSerializer
    start_serializer_class = StartAnalysisSerializer
    deferred = REPORT_COLUMNS

    def start(self, study, data, *, actor, source):
        return analysis_run_start(study=study, options=data.get("options") or {}, actor=actor,
                                  source=source)


class AnalysisRunDetail(RunDetail):
    """One analysis's status, progress and (when done) report links (viewers of its study)."""

    run_model = AnalysisRun
    serializer_class = AnalysisRunSerializer
    deferred = REPORT_COLUMNS


REPORT_TYPES = {"html": "text/html; charset=utf-8", "pdf": "application/pdf",
                "json": "application/json"}


class AnalysisReport(APIView):
    """A finished analysis's report: `fmt` is html, pdf or json (404 until it exists)."""

    fmt = "html"

    @extend_schema(responses={
        (200, "text/html"): OpenApiTypes.STR, (200, "application/pdf"): OpenApiTypes.BINARY,
        (200, "application/json"): OpenApiTypes.OBJECT, **READ_ERRORS})
    def get(self, request, pk):
        run = get_object_or_404(AnalysisRun.objects.select_related("study"), pk=pk)
        check_study(request.user, run.study, VIEWER)
        try:
            body = report_export(run=run, fmt=self.fmt, actor=request.user, source=API)
        except NotExported as error:
            raise Http404(str(error)) from None
        response = HttpResponse(body, content_type=REPORT_TYPES[self.fmt])
        response["Content-Disposition"] = (
            f'attachment; filename="{run.study.slug}-analysis.{self.fmt}"')
        return response


# --- tidy exports ---------------------------------------------------------------------------
EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson",
                "parquet": "application/vnd.apache.parquet"}


class JudgmentsExport(StudyScopedView):
    """Every judgment of the study as a tidy table (one row per rater x slot x criterion, with
    item and system metadata), as CSV (formula-like cells neutralised), JSONL or Parquet."""

    fmt = "csv"
    what, exporter = "judgments", staticmethod(judgments_export)

    @extend_schema(
        parameters=[
            OpenApiParameter("raters", str, enum=["all", "human", "proxy"]),
            OpenApiParameter("include_calibration", bool),
            OpenApiParameter("exclude_attention_failed", bool),
            OpenApiParameter("exclude_incomplete", bool),
            OpenApiParameter("exclude_unheard", bool),
            OpenApiParameter("include_excluded", bool,
                             description="keep the raters a researcher excluded"),
            OpenApiParameter("min_competence", float,
                             description="leave out raters whose MACE competence is below"),
        ],
        responses={(200, "text/csv"): OpenApiTypes.BINARY,
                   (200, "application/x-ndjson"): OpenApiTypes.BINARY,
                   (200, "application/vnd.apache.parquet"): OpenApiTypes.BINARY,
                   **errors(400, 401, 403, 404)},
    )
    def get(self, request, slug):
        study = self.get_study()
        params = request.query_params
        raters = params.get("raters", "all")
        if raters not in ("all", "human", "proxy"):
            raise serializers.ValidationError({"raters": ["one of all, human, proxy"]})

        def flag(name: str) -> bool:
            return params.get(name, "").lower() in ("1", "true", "yes")

        min_competence = None
        if params.get("min_competence", "").strip():
            try:
                min_competence = float(params["min_competence"])
            except ValueError:
                min_competence = -1.0
            if not 0.0 <= min_competence <= 1.0:
                raise serializers.ValidationError({"min_competence": ["a number from 0 to 1"]})

        body = self.exporter(study=study, filters=JudgmentFilter(
            include_calibration=flag("include_calibration"),
            exclude_attention_failed=flag("exclude_attention_failed"),
            exclude_incomplete=flag("exclude_incomplete"), raters=raters,
            exclude_unheard=flag("exclude_unheard"),
            include_excluded=flag("include_excluded"), min_competence=min_competence,
        ), fmt=self.fmt, actor=request.user, source=API)
        response = HttpResponse(body, content_type=EXPORT_TYPES[self.fmt])
        response["Content-Disposition"] = (
            f'attachment; filename="{study.slug}-{self.what}.{self.fmt}"')
        return response


class SpansExport(JudgmentsExport):
    """Every error span of the study's span criteria, one row per span (rater, item, system,
    criterion, side, start, end, the marked text, category, severity, weight), as CSV
    (formula-like cells neutralised), JSONL or Parquet; the same filters as the judgments."""

    what, exporter = "spans", staticmethod(spans_export)


# --- the adjudication queue -----------------------------------------------------------------
class QueueEntrySerializer(serializers.Serializer):
    criterion = serializers.CharField()
    kind = serializers.CharField()
    output = serializers.IntegerField()
    output_b = serializers.IntegerField(allow_null=True)
    item = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    why = serializers.ListField(child=serializers.CharField())
    n_human = serializers.IntegerField(allow_null=True)
    answers = serializers.DictField(child=serializers.IntegerField())
    majority = serializers.CharField(allow_null=True)
    adjudicated = serializers.DictField(allow_null=True)


class AdjudicationSerializer(serializers.ModelSerializer):
    criterion: serializers.SlugRelatedField[Criterion] = serializers.SlugRelatedField(
        slug_field="key", read_only=True)
    adjudicated_by: serializers.StringRelatedField[User] = serializers.StringRelatedField()

    class Meta:
        model = Adjudication
        fields = ("id", "criterion", "output", "output_b", "value", "numeric_value", "reason",
                  "note", "adjudicated_by", "adjudicated_at", "revision")


class AdjudicateSerializer(serializers.Serializer):
    criterion = serializers.SlugField(help_text="The criterion's key.")
    output = serializers.IntegerField(help_text="The output's id (a pair: the lower id).")
    output_b = serializers.IntegerField(required=False, allow_null=True,
                                        help_text="Pairwise criteria: the pair's other output.")
    value = serializers.JSONField(help_text="The label, as the criterion's rule reads it.")
    note = serializers.CharField(required=False, allow_blank=True, default="",
                                 max_length=5000, trim_whitespace=False)


class AdjudicationQueueView(StudyScopedView):
    """The adjudication queue (viewers): units whose raters disagree beyond the thresholds or
    where a proxy decided otherwise than the raters' majority, with why, and their adjudicated
    label if any. POST (editors): record the expert's label of one unit; the raters'
    judgments are never changed. 201 with the stored label."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(
        parameters=[
            OpenApiParameter("criterion", str), OpenApiParameter("reason", str,
                                                                 enum=["raters", "proxy"]),
            OpenApiParameter("state", str, enum=["open", "done", "all"]),
            OpenApiParameter("majority", float, description="nominal: majority share below"),
            OpenApiParameter("spread", float, description="ordinal: range/scale above"),
            OpenApiParameter("sd", float, description="ordinal: SD/scale above (off)"),
            OpenApiParameter("min_judgments", int), *PAGE_PARAMETERS],
        responses={200: paginated(QueueEntrySerializer, "QueueEntry"), **READ_ERRORS})
    def get(self, request, slug):
        study = self.get_study()
        form = QueueForm(request.query_params, criteria=adjudicable_criteria(study))
        if not form.is_valid():
            raise serializers.ValidationError(form.errors)
        data = form.cleaned_data
        entries = adjudication_queue(study, thresholds=form.thresholds(),
                                     criterion=data.get("criterion") or "",
                                     reason=data.get("reason") or "",
                                     state=data.get("state") or "open")
        page = self.paginator.paginate_queryset([e.as_dict() for e in entries], request,
                                                view=self)
        return self.paginator.get_paginated_response(page)

    @extend_schema(request=AdjudicateSerializer, responses={201: AdjudicationSerializer,
                                                            **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        given = AdjudicateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        try:
            unit = adjudication_unit(study, data["criterion"], data["output"],
                                     data.get("output_b"))
        except UnitNotFound as error:
            raise serializers.ValidationError({"output": [str(error)]}) from None
        label = adjudication_record(
            study=study, criterion=unit.criterion, output=unit.output, output_b=unit.output_b,
            value=data["value"], note=data.get("note", ""),
            reason="; ".join(unit.flag.why) if unit.flag else "", actor=request.user,
            source=API)
        return Response(AdjudicationSerializer(label).data, status=201)
