"""The study's Prolific endpoints, under /api/v1/studies/<slug>/prolific/: the link (read by
viewers, made by editors), sync, the synced submissions, approve, reject and bonus (editors).
They parse, check the caller's role on the study (evalstudy.api.base.StudyScopedView: another
study's owner gets 404) and call one service. The token is write-only: never returned."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response

from evalstudy.api.base import Conflict, StudyScopedView
from evalstudy.audit import API
from evalstudy.models import Study
from evalstudy.permissions import EDITOR, VIEWER
from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS, errors, paginated

from . import services
from .client import ProlificError, ProlificNotFound, ProlificRejected
from .models import ProlificLink, ProlificSubmission


class ProlificFailed(APIException):
    """Prolific refused or did not answer: its message is passed on."""

    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "prolific_error"
    default_detail = "Prolific refused the request or did not answer."


PROLIFIC_ERRORS = {**WRITE_ERRORS, 502: OpenApiResponse(
    errors(400)[400].response, description="Prolific refused the request or did not answer")}


class _Calls:
    """Prolific's and the services' refusals as API errors."""

    @staticmethod
    def run(call, *args, linking: bool = False, **kwargs):
        """`linking`: every Prolific failure is a 400 (the id or token given did not work,
        nothing was stored); elsewhere Prolific refusing the content is a 400 and a token it
        refuses or no answer a 502."""
        try:
            return call(*args, **kwargs)
        except services.NotLinked as exc:
            raise Conflict(str(exc)) from exc
        except services.UnknownSubmission as exc:
            raise NotFound(str(exc)) from exc
        except ProlificError as exc:
            if linking or isinstance(exc, ProlificRejected | ProlificNotFound):
                raise ValidationError({"prolific": [str(exc)]}) from exc
            raise ProlificFailed(str(exc)) from exc


class LinkSerializer(serializers.ModelSerializer):
    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    token_set = serializers.SerializerMethodField()

    class Meta:
        model = ProlificLink
        fields = ("study", "prolific_study_id", "prolific_name", "prolific_status", "token_env",
                  "token_set", "linked_at", "last_synced_at")

    def get_token_set(self, link: ProlificLink) -> bool:
        return bool(services.token_for(link))


class LinkInput(serializers.Serializer):
    prolific_study_id = serializers.CharField(max_length=64)
    api_token = serializers.CharField(max_length=500, required=False, write_only=True,
                                      trim_whitespace=True)
    token_env = serializers.CharField(max_length=100, required=False, allow_blank=True)


class SubmissionSerializer(serializers.ModelSerializer):
    rater = serializers.IntegerField(source="enrollment.rater_id", allow_null=True,
                                     read_only=True, default=None)

    class Meta:
        model = ProlificSubmission
        fields = ("submission_id", "participant_id", "status", "rater", "started_at",
                  "completed_at", "study_code", "seat_freed_at", "bonus_minor", "synced_at")


class ProlificLinkView(StudyScopedView):
    """The study's Prolific link (viewers); link or relink it (editors): Prolific is asked for
    the study first, so a wrong id or token stores nothing."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: LinkSerializer, **READ_ERRORS})
    def get(self, request, slug):
        link = ProlificLink.objects.filter(study=self.get_study()).first()
        if link is None:
            raise NotFound("This study is not linked to Prolific.")
        return Response(LinkSerializer(link).data)

    @extend_schema(request=LinkInput, responses={200: LinkSerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        data = LinkInput(data=request.data)
        data.is_valid(raise_exception=True)
        link = _Calls.run(services.prolific_link, study=study, actor=request.user, source=API,
                          linking=True, **data.validated_data)
        return Response(LinkSerializer(link).data)


SyncResult = inline_serializer("ProlificSyncResult", fields={
    name: serializers.IntegerField()
    for name in ("submissions", "matched", "unmatched", "seats_freed", "skipped")})


class ProlificSyncView(StudyScopedView):
    """Read the submissions from Prolific now (editors); 409 when the study is not linked."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=None, responses={200: SyncResult, **PROLIFIC_ERRORS})
    def post(self, request, slug):
        counts = _Calls.run(services.prolific_sync, study=self.get_study(), actor=request.user,
                            source=API)
        return Response(counts)


class ProlificSubmissionList(StudyScopedView):
    """The submissions as last synced (viewers), optionally `?status=AWAITING REVIEW`."""

    study_roles = {"GET": VIEWER}

    @extend_schema(parameters=PAGE_PARAMETERS, responses={
        200: paginated(SubmissionSerializer, "ProlificSubmission"), **READ_ERRORS})
    def get(self, request, slug):
        rows = (services.own_submissions(self.get_study())
                .select_related("enrollment").order_by("id"))
        if request.query_params.get("status"):
            rows = rows.filter(status=request.query_params["status"])
        page = self.paginator.paginate_queryset(rows, request, view=self)
        return self.paginator.get_paginated_response(SubmissionSerializer(page, many=True).data)


class RejectInput(serializers.Serializer):
    message = serializers.CharField(min_length=services.REJECTION_MESSAGE_MIN, max_length=2000)
    rejection_category = serializers.ChoiceField(choices=services.REJECTION_CATEGORIES)


class BonusInput(serializers.Serializer):
    amount_minor = serializers.IntegerField(min_value=1, help_text="Pence or cents.")


class _SubmissionAction(StudyScopedView):
    study_roles = {"POST": EDITOR}


class ProlificApprove(_SubmissionAction):
    """Approve the submission on Prolific (editors)."""

    @extend_schema(request=None, responses={200: SubmissionSerializer, **PROLIFIC_ERRORS})
    def post(self, request, slug, submission_id):
        sub = _Calls.run(services.prolific_approve, study=self.get_study(),
                         submission_id=submission_id, actor=request.user, source=API)
        return Response(SubmissionSerializer(sub).data)


class ProlificReject(_SubmissionAction):
    """Reject the submission on Prolific with a message (100+ characters) and a category."""

    @extend_schema(request=RejectInput, responses={200: SubmissionSerializer, **PROLIFIC_ERRORS})
    def post(self, request, slug, submission_id):
        study = self.get_study()
        data = RejectInput(data=request.data)
        data.is_valid(raise_exception=True)
        sub = _Calls.run(services.prolific_reject, study=study, submission_id=submission_id,
                         message=data.validated_data["message"],
                         category=data.validated_data["rejection_category"],
                         actor=request.user, source=API)
        return Response(SubmissionSerializer(sub).data)


class ProlificBonus(_SubmissionAction):
    """Pay the participant a bonus (pence/cents, at most PROLIFIC_MAX_BONUS_MINOR)."""

    @extend_schema(request=BonusInput, responses={200: SubmissionSerializer, **PROLIFIC_ERRORS})
    def post(self, request, slug, submission_id):
        study = self.get_study()
        data = BonusInput(data=request.data)
        data.is_valid(raise_exception=True)
        sub = _Calls.run(services.prolific_bonus, study=study, submission_id=submission_id,
                         amount_minor=data.validated_data["amount_minor"],
                         actor=request.user, source=API)
        return Response(SubmissionSerializer(sub).data)


class MessageInput(serializers.Serializer):
    body = serializers.CharField(max_length=services.MESSAGE_MAX)


class ProlificMessage(_SubmissionAction):
    """Send the participant a message through Prolific, about this study (editors)."""

    @extend_schema(request=MessageInput, responses={200: SubmissionSerializer, **PROLIFIC_ERRORS})
    def post(self, request, slug, submission_id):
        study = self.get_study()
        data = MessageInput(data=request.data)
        data.is_valid(raise_exception=True)
        sub = _Calls.run(services.prolific_message, study=study, submission_id=submission_id,
                         body=data.validated_data["body"], actor=request.user, source=API)
        return Response(SubmissionSerializer(sub).data)


class CreateInput(serializers.Serializer):
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True,
                                        default="")
    reward_minor = serializers.IntegerField(min_value=1, help_text="Pence or cents.")
    minutes = serializers.IntegerField(min_value=1, help_text="Estimated completion time.")
    places = serializers.IntegerField(min_value=1, required=False,
                                      help_text="Default: one per seat of the design.")
    api_token = serializers.CharField(max_length=500, required=False, write_only=True)
    token_env = serializers.CharField(max_length=100, required=False, allow_blank=True)


class ProlificCreate(StudyScopedView):
    """Create the study's Prolific study as a draft (title, crowd URL, completion and
    screen-out codes, places) and link it (editors). 400 with nothing stored when the study
    is not a Prolific crowd study, has no completion code, is linked already, or Prolific
    refuses."""

    study_roles = {"POST": EDITOR}

    @extend_schema(request=CreateInput, responses={201: LinkSerializer, **PROLIFIC_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        data = CreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        link = _Calls.run(services.prolific_create, study=study, actor=request.user, source=API,
                          linking=True, **data.validated_data)
        return Response(LinkSerializer(link).data, status=status.HTTP_201_CREATED)
