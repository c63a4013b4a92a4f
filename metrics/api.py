"""REST endpoints for metric runs (under /api/v1/): start one (202 + status URL), follow its
progress, and page through the tidy results. Researchers reach only their studies' runs."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from django.urls import reverse
from rest_framework import permissions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.selectors import studies_visible_to

from .models import MetricRun
from .selectors import result_rows, study_results
from .services import metric_run_start


class IsStaff(permissions.BasePermission):
    def has_permission(self, request, view):
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)


class MetricRunSerializer(serializers.ModelSerializer):
    study = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    status_url = serializers.SerializerMethodField()
    results_url = serializers.SerializerMethodField()

    class Meta:
        model = MetricRun
        fields = ("id", "study", "metrics", "params", "model_path", "status", "total", "done",
                  "failed_outputs", "error", "timings", "created_at", "started_at",
                  "heartbeat_at", "finished_at", "status_url", "results_url")

    def _absolute(self, name, *args):
        return self.context["request"].build_absolute_uri(reverse(name, args=args))

    def get_status_url(self, run):
        return self._absolute("api-metric-run", run.pk)

    def get_results_url(self, run):
        return self._absolute("api-metric-results", run.study.slug)


class StartRunSerializer(serializers.Serializer):
    metrics = serializers.ListField(child=serializers.CharField(), required=False)
    params = serializers.DictField(child=serializers.DictField(), required=False)
    model_path = serializers.CharField(required=False, allow_blank=True, default="")


class StudyMetricRuns(APIView):
    permission_classes = [IsStaff]

    def get(self, request, slug):
        study = get_object_or_404(studies_visible_to(request.user), slug=slug)
        runs = MetricRun.objects.filter(study=study).select_related("study")[:50]
        return Response(MetricRunSerializer(runs, many=True, context={"request": request}).data)

    def post(self, request, slug):
        study = get_object_or_404(studies_visible_to(request.user), slug=slug)
        body = StartRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            run = metric_run_start(study=study, metrics=body.validated_data.get("metrics"),
                                   params=body.validated_data.get("params"),
                                   model_path=body.validated_data["model_path"],
                                   user=request.user)
        except ValidationError as error:
            return Response({"code": "invalid", "message": "; ".join(error.messages)},
                            status=status.HTTP_400_BAD_REQUEST)
        data = MetricRunSerializer(run, context={"request": request}).data
        return Response(data, status=status.HTTP_202_ACCEPTED,
                        headers={"Location": data["status_url"]})


class MetricRunDetail(APIView):
    permission_classes = [IsStaff]

    def get(self, request, pk):
        run = get_object_or_404(
            MetricRun.objects.select_related("study")
            .filter(study__in=studies_visible_to(request.user)), pk=pk,
        )
        return Response(MetricRunSerializer(run, context={"request": request}).data)


class StudyMetricResults(APIView):
    """Tidy rows (item, system, metric, value, scorer, config, ...), paginated by stored
    result (each result gives one row per value name)."""

    permission_classes = [IsStaff]

    def get(self, request, slug):
        study = get_object_or_404(studies_visible_to(request.user), slug=slug)
        metrics = request.query_params.getlist("metric") or None
        paginator = PageNumberPagination()
        paginator.page_size = 200
        page = paginator.paginate_queryset(study_results(study, metrics=metrics), request,
                                           view=self)
        return paginator.get_paginated_response(
            [row for result in page for row in result_rows(result)]
        )
