"""REST endpoints for metric runs (under /api/v1/): start one (202 + status URL), follow its
progress, and page through the tidy results. Viewers of a study read; editors start runs
(object checks: evalstudy.permissions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers

from evalstudy.api.base import StudyScopedView
from evalstudy.api.runs import RunDetail, StudyRunList
from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, paginated
from kit.rest import PageNumberPagination

from .models import MetricRun
from .selectors import result_rows, study_results
from .services import metric_run_start

if TYPE_CHECKING:
    from evalstudy.models import Study


class MetricRunSerializer(serializers.ModelSerializer):
    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    status_url = serializers.SerializerMethodField()
    results_url = serializers.SerializerMethodField()

    class Meta:
        model = MetricRun
        fields = ("id", "study", "metrics", "params", "model_path", "status", "total", "done",
                  "failed_outputs", "error", "timings", "created_at", "started_at",
                  "heartbeat_at", "finished_at", "status_url", "results_url")

    def _absolute(self, name, *args):
        return self.context["request"].build_absolute_uri(reverse(name, args=args))

    def get_status_url(self, run) -> str:
        return self._absolute("api-metric-run", run.pk)

    def get_results_url(self, run) -> str:
        return self._absolute("api-metric-results", run.study.slug)


class StartRunSerializer(serializers.Serializer):
    metrics = serializers.ListField(child=serializers.CharField(), required=False)
    params = serializers.DictField(child=serializers.DictField(), required=False)
    model_path = serializers.CharField(
        required=False, allow_blank=True, default="",
        help_text="Encoder model directory (blank: the study's, else the default); it must lie "
                  "inside a directory of the EVALSTUDY_MODEL_DIRS setting.")


class StudyMetricRuns(StudyRunList):
    """The study's latest metric runs; start one (editors): 202 + status URL."""

    run_model = MetricRun
    serializer_class = MetricRunSerializer
    start_serializer_class = StartRunSerializer

    def start(self, study, data, *, actor, source):
        return metric_run_start(study=study, metrics=data.get("metrics"),
                                params=data.get("params"), model_path=data["model_path"],
                                actor=actor, source=source)


class MetricRunDetail(RunDetail):
    """One metric run's status and progress (viewers of its study)."""

    run_model = MetricRun
    serializer_class = MetricRunSerializer


class MetricResultRowSerializer(serializers.Serializer):
    item = serializers.CharField()
    system = serializers.CharField()
    scorer = serializers.CharField()
    scorer_version = serializers.CharField()
    config = serializers.CharField()
    signature = serializers.CharField(help_text="JSON of what the value depends on.")
    metric = serializers.CharField()
    value = serializers.JSONField(help_text='A number; "" when scoring this output failed.')
    error = serializers.CharField(allow_blank=True)


class StudyMetricResults(StudyScopedView):
    """Tidy rows (item, system, metric, value, scorer, config, ...), paginated by stored
    result (each result gives one row per value name)."""

    @extend_schema(
        parameters=[OpenApiParameter("metric", str, many=True,
                                     description="Only these metrics (repeatable)."),
                    *PAGE_PARAMETERS],
        responses={200: paginated(MetricResultRowSerializer, "MetricResultRow"),
                   **READ_ERRORS},
    )
    def get(self, request, slug):
        study = self.get_study()
        metrics = request.query_params.getlist("metric") or None
        paginator = PageNumberPagination()
        paginator.page_size = 200
        page = paginator.paginate_queryset(study_results(study, metrics=metrics), request,
                                           view=self)
        return paginator.get_paginated_response(
            [row for result in page for row in result_rows(result)]
        )
