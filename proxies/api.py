"""REST endpoints for proxy judges (under /api/v1/): start a proxy run (202 + status URL),
follow it, resume it, choose its threshold, read its answers and LATTEScores; train learned
proxies. Viewers of a study read; editors start and change. Object checks are
evalstudy.permissions'; a refused request (the services' ValidationError) is answered with 400 in
the common error shape by the API's exception handler (kit.rest)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from evalstudy.api.runs import RunDetail, StudyRunList
from evalstudy.audit import API
from evalstudy.criteria import BINARY_KINDS
from evalstudy.permissions import EDITOR, VIEWER, check_study, studies_visible_to
from kit.rest import accepted

from .methods import METHOD_CHOICES, learned_kind_choices
from .models import LearnedProxy, ProxyRun
from .runs import (
    latte_scores,
    proxy_judgments,
    proxy_run_resume,
    proxy_run_start,
    proxy_threshold_choose,
)
from .training import learned_proxy_start

if TYPE_CHECKING:
    from evalstudy.models import Study


class ProxyRunSerializer(serializers.ModelSerializer):
    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    rater = serializers.CharField(source="rater.external_id", read_only=True)
    rater_kind = serializers.CharField(source="rater.kind", read_only=True)
    status_url = serializers.SerializerMethodField()
    results_url = serializers.SerializerMethodField()

    class Meta:
        model = ProxyRun
        fields = ("id", "study", "method", "rater", "rater_kind", "criteria", "backend",
                  "template", "params", "learned_proxy", "prompt_version", "signature",
                  "queue", "status",
                  "total", "done", "failed", "usage", "error", "created_at", "started_at",
                  "heartbeat_at", "finished_at", "status_url", "results_url")

    def _absolute(self, name: str, *args) -> str:
        return self.context["request"].build_absolute_uri(reverse(name, args=args))

    def get_status_url(self, run) -> str:
        return self._absolute("api-proxy-run", run.pk)

    def get_results_url(self, run) -> str:
        return self._absolute("api-proxy-run-results", run.pk)


class StartProxyRunSerializer(serializers.Serializer):
    method = serializers.ChoiceField(choices=METHOD_CHOICES)
    criteria = serializers.ListField(child=serializers.CharField(), required=False)
    backend = serializers.DictField(required=False, help_text=(
        'E.g. {"base_url": "http://host:8000/v1", "model": "m", "api_key_env": "KEY_VAR"} '
        'or {"backend": "hf", "model_path": "/models/x"}; keys are never accepted here. A key '
        "variable is sent only to the origin EVALSTUDY_JUDGE_KEY_ENVS binds it to; a model_path "
        "must lie inside EVALSTUDY_MODEL_DIRS; numbers have upper bounds (docs/guide/proxies.md)."))
    template = serializers.CharField(required=False, allow_blank=True, default="")
    params = serializers.DictField(required=False)
    learned_proxy = serializers.IntegerField(required=False, allow_null=True)
    prompt_version = serializers.IntegerField(required=False, allow_null=True, help_text=(
        "Id of a judge prompt version of this study: ask with its template and few-shot "
        "examples (/judge-versions/)."))


def _prompt_version_for(study, pk: int | None):
    """A prompt version of `study` only: another study's is as unknown as a missing one."""
    from .models import JudgePromptVersion

    if pk is None:
        return None
    version = (JudgePromptVersion.objects.select_related("criterion")
               .filter(pk=pk, study=study).first())
    if version is None:
        raise ValidationError({"prompt_version": [f"no prompt version {pk} of this study"]})
    return version


def _learned_for(user, pk: int | None) -> LearnedProxy | None:
    if pk is None:
        return None
    proxy = LearnedProxy.objects.filter(pk=pk, study__in=studies_visible_to(user)).first()
    if proxy is None and getattr(user, "is_superuser", False):
        proxy = LearnedProxy.objects.filter(pk=pk).first()
    if proxy is None:
        raise ValidationError({"learned_proxy": [f"no learned proxy {pk} you can see"]})
    return proxy


class StudyProxyRuns(StudyRunList):
    """The study's latest proxy runs; start one (editors): 202 + status URL."""

    run_model = ProxyRun
    serializer_class = ProxyRunSerializer
    start_serializer_class = StartProxyRunSerializer
    related = ("study", "rater")

    def start(self, study, data, *, actor, source):
        return proxy_run_start(
            study=study, method=data["method"], criteria=data.get("criteria"),
            backend=data.get("backend"), template=data.get("template", ""),
            params=data.get("params"),
            learned_proxy=_learned_for(actor, data.get("learned_proxy")),
            prompt_version=_prompt_version_for(study, data.get("prompt_version")),
            actor=actor, source=source)


class ProxyRunDetail(RunDetail):
    """One proxy run's status, progress and usage (viewers of its study)."""

    run_model = ProxyRun
    serializer_class = ProxyRunSerializer
    related = ("study", "rater")


def _run_for(request, pk: int, minimum: str) -> ProxyRun:
    run = get_object_or_404(ProxyRunDetail.runs(), pk=pk)
    check_study(request.user, run.study, minimum)
    return run


class ProxyRunResume(APIView):
    @extend_schema(request=None, responses={202: ProxyRunSerializer})
    def post(self, request, pk):
        run = proxy_run_resume(_run_for(request, pk, EDITOR), actor=request.user, source=API)
        data = ProxyRunSerializer(run, context={"request": request}).data
        return accepted(data, data["status_url"])


class ThresholdSerializer(serializers.Serializer):
    criterion = serializers.CharField()
    target_precision = serializers.FloatField(min_value=0.01, max_value=1.0, default=0.9)
    dev_fraction = serializers.FloatField(min_value=0.1, max_value=0.9, default=0.5)
    seed = serializers.IntegerField(default=0)


class ProxyRunThreshold(APIView):
    """Choose the decision threshold on a dev split of the human labels for a target
    precision, report dev and test precision/recall, and start a run of the same judge at that
    threshold (202; `Location` and `run_url` name it). Its answers come from the stored scores
    and the judge cache: no model call."""

    @extend_schema(request=ThresholdSerializer, responses={202: dict})
    def post(self, request, pk):
        run = _run_for(request, pk, EDITOR)
        body = ThresholdSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        report = proxy_threshold_choose(
            run, criterion_key=data["criterion"], target_precision=data["target_precision"],
            dev_fraction=data["dev_fraction"], seed=data["seed"], actor=request.user,
            source=API)
        report["run_url"] = request.build_absolute_uri(
            reverse("api-proxy-run", args=[report["run"]]))
        return accepted(report, report["run_url"])


class ProxyAnswerSerializer(serializers.Serializer):
    item = serializers.CharField()
    system = serializers.CharField()
    system_b = serializers.CharField(allow_null=True)
    criterion = serializers.CharField()
    value = serializers.CharField()
    score = serializers.FloatField(allow_null=True)


class ProxyRunResults(APIView):
    pagination_class = PageNumberPagination

    @extend_schema(responses=ProxyAnswerSerializer(many=True))
    def get(self, request, pk):
        run = _run_for(request, pk, VIEWER)
        rows = (proxy_judgments(run).order_by("slot__position", "criterion__order")
                .values_list("slot__output__item__external_id", "slot__output__system__name",
                             "slot__output_b__system__name", "criterion__key", "value",
                             "numeric_value"))
        paginator = PageNumberPagination()
        paginator.page_size = 200
        page = paginator.paginate_queryset(rows, request, view=self)
        answers = [{"item": item, "system": system, "system_b": system_b, "criterion": key,
                    "value": value, "score": score}
                   for item, system, system_b, key, value, score in page]
        return paginator.get_paginated_response(answers)


class ProxyRunLatteScores(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("criterion", str,
                                     description="default: the run's first binary or "
                                                 "severity criterion"),
                    OpenApiParameter("by", str, description="system, item or a metadata field")],
        responses={200: dict})
    def get(self, request, pk):
        run = _run_for(request, pk, VIEWER)
        decided = list(run.study.criteria.filter(key__in=run.criteria,
                                                 kind__in=BINARY_KINDS)
                       .values_list("key", flat=True))
        key = request.query_params.get("criterion") or (decided[0] if decided else "")
        if key not in decided:
            raise ValidationError({"criterion": [f"one of {decided}"]})
        by = request.query_params.get("by", "system")
        return Response({"criterion": key, "by": by,
                         "groups": latte_scores(run, criterion_key=key, by=by)})


class LearnedProxySerializer(serializers.ModelSerializer):
    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    status_url = serializers.SerializerMethodField()

    class Meta:
        model = LearnedProxy
        fields = ("id", "name", "kind", "study", "criterion_key", "params", "version",
                  "artifact_path", "report", "status", "total", "done", "error", "created_at",
                  "started_at", "finished_at", "status_url")

    def get_status_url(self, proxy) -> str:
        return self.context["request"].build_absolute_uri(
            reverse("api-learned-proxy", args=[proxy.pk]))


class TrainSerializer(serializers.Serializer):
    criterion = serializers.CharField()
    kind = serializers.ChoiceField(choices=learned_kind_choices())
    name = serializers.SlugField(required=False, allow_blank=True, default="")
    params = serializers.DictField(required=False)


class StudyLearnedProxies(StudyRunList):
    """The study's latest learned proxies; train one (editors): 202 + status URL."""

    run_model = LearnedProxy
    serializer_class = LearnedProxySerializer
    start_serializer_class = TrainSerializer

    def get(self, request, slug):
        from .training import learned_proxies_fail_dead

        learned_proxies_fail_dead(LearnedProxy.objects.filter(study=self.get_study()))
        return super().get(request, slug)

    def start(self, study, data, *, actor, source):
        return learned_proxy_start(study=study, criterion_key=data["criterion"],
                                   kind=data["kind"], name=data.get("name", ""),
                                   params=data.get("params"), actor=actor, source=source)


class LearnedProxyDetail(RunDetail):
    """One learned proxy's training status and report (viewers of its study)."""

    run_model = LearnedProxy
    serializer_class = LearnedProxySerializer

    def get_run(self, minimum: str = VIEWER) -> Any:
        # A training whose process died on this host is failed at once, not after the sweep.
        from .training import learned_proxies_fail_dead

        learned_proxies_fail_dead(LearnedProxy.objects.filter(pk=self.kwargs["pk"]))
        return super().get_run(minimum)
