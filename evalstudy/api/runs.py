"""The two views every kind of background run shares (metric runs, proxy runs, learned proxies,
analyses): a study's latest runs with starting one (202 + `Location`), and one run's status.

A subclass names its run model, serializers and, for the list, how a validated request starts a
run (an audited service, called with `actor` and `source`); its OpenAPI description is derived
from those names, so the documentation cannot drift from what the view does."""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any, ClassVar

from django.db import models
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from kit.openapi import READ_ERRORS, WRITE_ERRORS
from kit.rest import accepted

from ..audit import API
from ..models import Study
from ..permissions import EDITOR, VIEWER, check_study
from .base import StudyScopedView

# How many runs the list shows, newest first.
LATEST_RUNS = 50


class _RunQuery:
    run_model: ClassVar[type[models.Model]]
    serializer_class: ClassVar[type[serializers.Serializer]]
    # Columns never shown in a run's status (results, rendered reports): not read.
    deferred: ClassVar[tuple[str, ...]] = ()
    related: ClassVar[tuple[str, ...]] = ("study",)

    @classmethod
    def runs(cls) -> models.QuerySet:
        # _default_manager: a run model's only manager, known to the stubs on any model.
        return cls.run_model._default_manager.select_related(*cls.related).defer(*cls.deferred)


class StudyRunList(_RunQuery, StudyScopedView, metaclass=ABCMeta):
    """The study's latest runs (viewers); start one (editors): 202 with the run and `Location`
    naming its status URL."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}
    start_serializer_class: ClassVar[type[serializers.Serializer]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "run_model" in cls.__dict__:
            extend_schema_view(
                get=extend_schema(responses={200: cls.serializer_class(many=True),
                                             **READ_ERRORS}),
                post=extend_schema(request=cls.start_serializer_class,
                                   responses={202: cls.serializer_class, **WRITE_ERRORS}),
            )(cls)

    def get(self, request, slug):
        runs = (self.runs().filter(study=self.get_study())
                .order_by("-created_at", "-pk")[:LATEST_RUNS])
        return Response(self.serializer_class(runs, many=True, context={"request": request}).data)

    def post(self, request, slug):
        study = self.get_study()
        body = self.start_serializer_class(data=request.data)
        body.is_valid(raise_exception=True)
        # A refused request is the service's ValidationError: 400 in the common error shape.
        run = self.start(study, body.validated_data, actor=request.user, source=API)
        data = self.serializer_class(run, context={"request": request}).data
        return accepted(data, data["status_url"])

    @abstractmethod
    def start(self, study: Study, data: dict[str, Any], *, actor: Any,
              source: str) -> models.Model:
        """Start a run from the validated request `data` through the app's audited service."""


class RunDetail(_RunQuery, APIView):
    """One run's status and progress (viewers of its study: 404 to anyone else)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "run_model" in cls.__dict__:
            extend_schema_view(get=extend_schema(responses={200: cls.serializer_class,
                                                            **READ_ERRORS}))(cls)

    def get_run(self, minimum: str = VIEWER) -> Any:
        """The run of the URL's `pk`, checked against the asker's role on its study."""
        run = get_object_or_404(self.runs(), pk=self.kwargs["pk"])
        check_study(self.request.user, run.study, minimum)
        return run

    def get(self, request, pk):
        return Response(self.serializer_class(self.get_run(),
                                              context={"request": request}).data)
