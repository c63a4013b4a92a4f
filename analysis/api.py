"""REST endpoints for analyses and exports (under /api/v1/): start an analysis (202 + status
URL), its status, its report downloads (HTML, PDF, JSON), and tidy exports of a study's
judgments (CSV, JSONL, Parquet). Viewers read and download; editors start analyses."""

from __future__ import annotations

import io
import json

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.api.base import StudyScopedView, audit
from evalstudy.permissions import EDITOR, VIEWER, studies_visible_to
from kit.csvsafe import SafeDictWriter, plain_cell
from kit.openapi import READ_ERRORS, WRITE_ERRORS, errors
from kit.rest import accepted

from .models import AnalysisRun
from .selectors import JudgmentFilter, judgments_tidy
from .services import analysis_run_start

REPORT_FORMATS = {"html": "report.html", "pdf": "report.pdf", "json": "result.json"}


class AnalysisRunSerializer(serializers.ModelSerializer):
    study = serializers.SlugRelatedField(slug_field="slug", read_only=True)
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
                                    "thresholds (see the README).")


def _runs(request):
    return AnalysisRun.objects.filter(study__in=studies_visible_to(request.user))


class StudyAnalysisRuns(StudyScopedView):
    """The study's latest 50 analyses; start one (editors): 202 + status URL."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: AnalysisRunSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        runs = (AnalysisRun.objects.filter(study=self.get_study()).select_related("study")
                .defer("result", "report_html", "report_pdf")[:50])
        return Response(AnalysisRunSerializer(runs, many=True, context={"request": request}).data)

    @extend_schema(request=StartAnalysisSerializer,
                   responses={202: AnalysisRunSerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        body = StartAnalysisSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = analysis_run_start(study=study, options=body.validated_data.get("options") or {},
                                 user=request.user)
        data = AnalysisRunSerializer(run, context={"request": request}).data
        return accepted(data, data["status_url"])


class AnalysisRunDetail(APIView):
    """One analysis's status, progress and (when done) report links (viewers of its study)."""

    @extend_schema(responses={200: AnalysisRunSerializer, **READ_ERRORS})
    def get(self, request, pk):
        run = get_object_or_404(_runs(request).defer("result", "report_html", "report_pdf"),
                                pk=pk)
        return Response(AnalysisRunSerializer(run, context={"request": request}).data)


class AnalysisReport(APIView):
    """A finished analysis's report: `fmt` is html, pdf or json (404 until it exists)."""

    fmt = "html"

    @extend_schema(responses={
        (200, "text/html"): OpenApiTypes.STR, (200, "application/pdf"): OpenApiTypes.BINARY,
        (200, "application/json"): OpenApiTypes.OBJECT, **READ_ERRORS})
    def get(self, request, pk):
        run = get_object_or_404(_runs(request).select_related("study"), pk=pk)
        if run.status != AnalysisRun.Status.DONE:
            raise Http404("This analysis has no report yet.")
        name = f"{run.study.slug}-analysis"
        if self.fmt == "html":
            response = HttpResponse(run.report_html, content_type="text/html; charset=utf-8")
        elif self.fmt == "pdf":
            if not run.report_pdf:
                raise Http404("This analysis has no PDF.")
            response = HttpResponse(bytes(run.report_pdf), content_type="application/pdf")
        else:
            response = HttpResponse(json.dumps(run.result, indent=1),
                                    content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{name}.{self.fmt}"'
        audit(request, "export", run.study, target=run,
              changes={"what": "analysis report", "format": self.fmt})
        return response


# --- tidy exports ---------------------------------------------------------------------------
EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson",
                "parquet": "application/vnd.apache.parquet"}


class JudgmentsExport(StudyScopedView):
    """Every judgment of the study as a tidy table (one row per rater x slot x criterion, with
    item and system metadata), as CSV (formula-like cells neutralised), JSONL or Parquet."""

    fmt = "csv"

    @extend_schema(
        parameters=[
            OpenApiParameter("raters", str, enum=["all", "human", "proxy"]),
            OpenApiParameter("include_calibration", bool),
            OpenApiParameter("exclude_attention_failed", bool),
            OpenApiParameter("exclude_incomplete", bool),
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

        frame = judgments_tidy(study, JudgmentFilter(
            include_calibration=flag("include_calibration"),
            exclude_attention_failed=flag("exclude_attention_failed"),
            exclude_incomplete=flag("exclude_incomplete"), raters=raters,
        ))
        columns = list(frame.columns)
        if self.fmt == "parquet":
            body = self._parquet(frame)
        else:
            records = ({name: plain_cell(value) for name, value in zip(columns, row, strict=True)}
                       for row in frame.itertuples(index=False, name=None))
            text = io.StringIO()
            if self.fmt == "csv":
                writer = SafeDictWriter(text, fieldnames=columns)
                writer.writeheader()
                for record in records:
                    writer.writerow(record)
            else:
                for record in records:
                    text.write(json.dumps(record, ensure_ascii=False) + "\n")
            body = text.getvalue().encode()
        audit(request, "export", study, changes={"what": "judgments", "format": self.fmt,
                                                 "rows": len(frame)})
        response = HttpResponse(body, content_type=EXPORT_TYPES[self.fmt])
        response["Content-Disposition"] = (
            f'attachment; filename="{study.slug}-judgments.{self.fmt}"')
        return response

    @staticmethod
    def _parquet(frame) -> bytes:
        frame = frame.copy()
        for name in frame.columns:
            if frame[name].dtype == object:
                # Metadata columns may mix numbers and text; Parquet columns have one type.
                kinds = {type(v) for v in frame[name] if plain_cell(v) is not None}
                if len(kinds) > 1 or (kinds and not kinds <= {str}):
                    frame[name] = frame[name].map(
                        lambda v: None if plain_cell(v) is None else v if isinstance(v, str) else
                        json.dumps(plain_cell(v)))
        buffer = io.BytesIO()
        frame.to_parquet(buffer, engine="pyarrow", index=False)
        return buffer.getvalue()
