"""REST endpoints for analyses (under /api/v1/): start (202 + status URL), status, reports."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.selectors import studies_visible_to
from metrics.api import IsStaff

from .models import AnalysisRun
from .services import analysis_run_start


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

    def get_status_url(self, run):
        return self._absolute("api-analysis-run", run.pk)

    def get_report_urls(self, run):
        if run.status != AnalysisRun.Status.DONE:
            return {}
        return {"html": self._absolute("analysis:report", run.pk),
                "pdf": self._absolute("analysis:report_pdf", run.pk),
                "json": self._absolute("analysis:report_json", run.pk)}


class StudyAnalysisRuns(APIView):
    permission_classes = [IsStaff]

    def post(self, request, slug):
        study = get_object_or_404(studies_visible_to(request.user), slug=slug)
        options = request.data.get("options", {}) if isinstance(request.data, dict) else {}
        try:
            run = analysis_run_start(study=study, options=options, user=request.user)
        except ValidationError as error:
            return Response({"code": "invalid", "message": "; ".join(error.messages)},
                            status=status.HTTP_400_BAD_REQUEST)
        data = AnalysisRunSerializer(run, context={"request": request}).data
        return Response(data, status=status.HTTP_202_ACCEPTED,
                        headers={"Location": data["status_url"]})


class AnalysisRunDetail(APIView):
    permission_classes = [IsStaff]

    def get(self, request, pk):
        run = get_object_or_404(
            AnalysisRun.objects.filter(study__in=studies_visible_to(request.user))
            .defer("result", "report_html", "report_pdf"), pk=pk)
        return Response(AnalysisRunSerializer(run, context={"request": request}).data)
