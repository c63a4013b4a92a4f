"""Who takes part: the study's raters (invitations, entry links, personal data export and
erasure), its collaborators, and API tokens for scripts."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, Throttled
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from kit import login_throttle
from kit.openapi import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS, errors, paginated
from kit.throttles import TokenObtainThrottle

from .. import permissions as perms
from ..audit import API
from ..models import Rater, StudyCollaborator
from ..permissions import EDITOR, OWNER, VIEWER
from ..privacy import NotAPerson, OutsideYourStudies, rater_data_erase, rater_data_export
from ..services import collaborator_remove, collaborator_set, rater_invite
from ..tokens import api_token_create
from .base import StudyScopedView, absolute_url


# --- raters ---------------------------------------------------------------------------------
class RaterSerializer(serializers.ModelSerializer):
    entry_url = serializers.SerializerMethodField(
        help_text="The rater's personal link, for this study only (a secret: send it to the "
                  "rater only). Null for account holders, who sign in, and for proxies.")
    email = serializers.EmailField(write_only=True, required=False,
                                   help_text="Stored in the rater's metadata.")
    username = serializers.CharField(
        write_only=True, required=False,
        help_text="Invite the holder of this account instead of creating a personal-link "
                  "rater: they sign in and see the study on their page.")

    class Meta:
        model = Rater
        fields = ("id", "kind", "external_id", "display_name", "metadata", "email", "username",
                  "created_at", "entry_url")
        read_only_fields = ("created_at",)

    def get_entry_url(self, rater) -> str | None:
        if not rater.has_entry_link:
            return None
        return absolute_url(self.context["request"], "annotation:enter", rater.access_token)

    def validate_kind(self, kind):
        if kind not in Rater.HUMAN_KINDS:
            raise serializers.ValidationError("the API invites people: slp, crowd or expert")
        return kind

    def validate_username(self, username):
        # No error for an unknown name: the answer must not tell who has an account.
        return get_user_model().objects.filter(username=username, is_active=True).first()

    def to_representation(self, rater):
        data = super().to_representation(rater)
        request = self.context.get("request")
        if rater.user_id is not None and not (request and request.user.is_superuser):
            # An account's metadata is the installation's, not one study owner's.
            data["metadata"] = {}
        return data


class RaterSummarySerializer(serializers.ModelSerializer):
    """A rater as collaborators below the owner see them: no entry link (a secret that lets
    its holder rate as that person) and no metadata (personal data such as the email)."""

    class Meta:
        model = Rater
        fields = ("id", "kind", "external_id", "display_name", "created_at")
        read_only_fields = fields


class RaterList(StudyScopedView):
    """The study's raters; invite one (editors): a new rater of this study whose personal entry
    link (in the answer) works in this study only, or, with `username`, an account holder.

    Listing shows entry links and metadata (personal data) to the study's owner and admins
    only; viewers and editors get the summary without them."""

    study_roles = {"GET": VIEWER, "POST": EDITOR}

    @extend_schema(responses={200: paginated(RaterSerializer, "Rater"), **READ_ERRORS},
                   parameters=PAGE_PARAMETERS,
                   description="Owners and admins get every field; viewers and editors get "
                               "`id`, `kind`, `external_id`, `display_name`, `created_at`.")
    def get(self, request, slug):
        study = self.get_study()
        raters = perms.raters_of_study(study).order_by("pk")
        page = self.paginator.paginate_queryset(raters, request, view=self)
        serializer = (RaterSerializer if perms.has_role(request.user, study, OWNER)
                      else RaterSummarySerializer)
        return self.paginator.get_paginated_response(
            serializer(page, many=True, context={"request": request}).data)

    @extend_schema(request=RaterSerializer, responses={
        201: RaterSerializer,
        202: inline_serializer("AccountInvited", fields={"detail": serializers.CharField()}),
        **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        body = RaterSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        if "username" in request.data:
            # The same answer whether or not the account exists; the holder accepts first.
            rater_invite(study=study, kind=data["kind"], user=data.get("username"),
                         username=str(request.data.get("username")), actor=request.user,
                         source=API)
            return Response({"detail": "If an active account with this username exists, it "
                             "has been invited; it is listed among the study's raters once its "
                             "holder accepts."}, status=status.HTTP_202_ACCEPTED)
        metadata = dict(data.get("metadata") or {})
        if data.get("email"):
            metadata["email"] = data["email"]
        try:
            rater = rater_invite(
                study=study, kind=data["kind"], display_name=data.get("display_name", ""),
                external_id=data.get("external_id", ""), metadata=metadata,
                user=data.get("username"), actor=request.user, source=API)
        except DjangoValidationError as error:
            raise ApiValidationError({"external_id": error.messages}) from None
        except IntegrityError:
            raise ApiValidationError({"external_id": ["a rater with this id exists already"]}
                                     ) from None
        return Response(RaterSerializer(rater, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class RaterScopedView(StudyScopedView):
    def get_rater(self) -> Rater:
        return get_object_or_404(perms.raters_of_study(self.get_study()), pk=self.kwargs["pk"])


class RaterPersonalData(RaterScopedView):
    """Everything personal held about one rater (the study's owner or an admin). An owner gets
    what concerns their own studies only; an admin gets the whole installation's."""

    study_roles = {"GET": OWNER}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **READ_ERRORS})
    def get(self, request, slug, pk):
        rater = self.get_rater()
        data = rater_data_export(rater, studies=perms.privacy_scope(request.user),
                                 study=self.get_study(), actor=request.user, source=API)
        return Response(data)


class RaterErase(RaterScopedView):
    """Erase one rater's personal data; their pseudonymous judgments stay (owner or admin).
    An owner may erase only raters whose whole participation is in studies they own (not
    account holders: their accounts span the installation, an admin erases them)."""

    study_roles = {"POST": OWNER}

    @extend_schema(request=None, responses={200: inline_serializer("Erased", fields={
        "erased": serializers.BooleanField(), "rater": serializers.IntegerField()}),
        **WRITE_ERRORS})
    def post(self, request, slug, pk):
        rater = self.get_rater()
        try:
            rater_data_erase(rater, actor=request.user, source=API,
                             studies=perms.privacy_scope(request.user))
        except NotAPerson as error:
            raise ApiValidationError({"detail": [str(error)]}) from None
        except OutsideYourStudies as error:
            raise PermissionDenied(str(error)) from None
        return Response({"erased": True, "rater": rater.pk})


# --- collaborators --------------------------------------------------------------------------
class CollaboratorSerializer(serializers.ModelSerializer):
    username = serializers.SlugRelatedField(source="user", slug_field="username",
                                            queryset=get_user_model().objects.all())

    class Meta:
        model = StudyCollaborator
        fields = ("username", "role")


class CollaboratorList(StudyScopedView):
    """Who else works on the study; add or change one (the owner or an admin)."""

    study_roles = {"GET": VIEWER, "POST": OWNER}

    @extend_schema(responses={200: CollaboratorSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug):
        rows = StudyCollaborator.objects.filter(study=self.get_study()).select_related("user")
        return Response(CollaboratorSerializer(rows.order_by("pk"), many=True).data)

    @extend_schema(request=CollaboratorSerializer,
                   responses={201: CollaboratorSerializer, **WRITE_ERRORS})
    def post(self, request, slug):
        study = self.get_study()
        body = CollaboratorSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = collaborator_set(study=study, user=body.validated_data["user"],
                               role=body.validated_data["role"], actor=request.user, source=API)
        return Response(CollaboratorSerializer(row).data, status=status.HTTP_201_CREATED)


class CollaboratorDetail(StudyScopedView):
    """Remove a collaborator (the owner or an admin)."""

    study_roles = {"DELETE": OWNER}

    @extend_schema(responses={204: None, **WRITE_ERRORS})
    def delete(self, request, slug, username):
        if not collaborator_remove(study=self.get_study(), username=username,
                                   actor=request.user, source=API):
            raise Http404(f"{username!r} is no collaborator of this study.")
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- tokens ---------------------------------------------------------------------------------
class LockedOut(Throttled):
    default_code = "locked_out"
    default_detail = ("Too many failed sign-in attempts for this username; try again later "
                      "(see Retry-After).")


class TokenObtain(APIView):
    """Exchange a username and password for an API token (shown once). Throttled per client
    address, and locked out per username after repeated failures like the sign-in page
    (LOGIN_FAILURE_LIMIT, LOGIN_LOCKOUT_SECONDS): 429 with code "locked_out"."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [TokenObtainThrottle]
    throttle_scope = "token_obtain"

    @extend_schema(
        request=inline_serializer("TokenRequest", fields={
            "username": serializers.CharField(), "password": serializers.CharField(),
            "name": serializers.CharField(required=False, help_text="What it is for")}),
        responses={201: inline_serializer("TokenCreated", fields={
            "token": serializers.CharField(), "prefix": serializers.CharField(),
            "name": serializers.CharField(), "created_at": serializers.DateTimeField()}),
            **errors(400, 429)},
    )
    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        missing = {name: ["This field is required."] for name in ("username", "password")
                   if not data.get(name)}
        if missing:
            raise ApiValidationError(missing)
        username = str(data["username"])
        # The same per-username and per-address lockout as the sign-in pages: the API must
        # not be the unthrottled way to guess a password.
        if login_throttle.is_locked_out(request, username):
            raise LockedOut(wait=settings.LOGIN_LOCKOUT_SECONDS)
        user = authenticate(request._request, username=username,
                            password=str(data["password"]))
        if user is None:
            login_throttle.record_failure(request, username)
            raise ApiValidationError({"detail": ["Wrong username or password."]},
                                     code="invalid_credentials")
        login_throttle.record_success(request, username)
        token, raw = api_token_create(user=user, name=str(data.get("name", "")), actor=user,
                                      source=API)
        return Response({"token": raw, "prefix": token.prefix, "name": token.name,
                         "created_at": token.created_at}, status=status.HTTP_201_CREATED)
