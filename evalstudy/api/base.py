"""What the study API's views share: the study they work on and the role it needs, the upload
parsers and size limits, the 409 of a study that is no longer a draft. (The services they call
record the audit trail: evalstudy.audit.)"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from rest_framework import parsers, serializers, status
from rest_framework.exceptions import APIException
from rest_framework.views import APIView

from kit.rest import PageNumberPagination, SafeJSONParser

from .. import permissions as perms
from ..models import Study
from ..permissions import VIEWER, StudyRole, check_study
from ..spec.errors import SpecError, SpecInvalid
from ..spec.load import decode


class RawTextParser(parsers.BaseParser):
    """Lets a file be posted as the raw body (`curl --data-binary @items.csv`)."""

    media_type = "text/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read()


class CsvParser(RawTextParser):
    media_type = "text/csv"


class JsonLinesParser(RawTextParser):
    media_type = "application/x-ndjson"


class YamlParser(RawTextParser):
    media_type = "application/yaml"


UPLOAD_PARSERS = [SafeJSONParser, parsers.MultiPartParser, CsvParser, JsonLinesParser,
                  YamlParser, RawTextParser]
# What a multipart envelope (boundaries, part headers) may add to the file it carries.
MULTIPART_SLACK = 64 * 1024


def uploaded_text(request, default_name: str, *, what: str = "upload",
                  limit_setting: str = "EVALSTUDY_UPLOAD_MAX_BYTES") -> tuple[str, str] | None:
    """(text, file name) of a multipart `file` or a raw text body; None for a JSON body.

    Refused (SpecInvalid naming the limit and `limit_setting`) when over that setting, and
    before anything is read when the declared length already is: DRF reads a body through the
    request stream, where Django's DATA_UPLOAD_MAX_MEMORY_SIZE is not checked, and the raw-body
    parsers would hold it all in memory."""
    limit = getattr(settings, limit_setting)

    def refuse(size: int, name: str) -> SpecInvalid:
        return SpecInvalid([SpecError(name, None, "", (
            f"{size:,} bytes is over the {what} limit of {limit:,} bytes ({limit_setting}); "
            + ("import the items from a CSV or JSONL file" if what == "spec"
               else "split the file")))])

    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit + MULTIPART_SLACK:
        raise refuse(declared, default_name)
    upload = request.FILES.get("file") if hasattr(request, "FILES") else None
    if upload is not None:
        if upload.size > limit:
            raise refuse(upload.size, upload.name)
        return decode(upload.read(), upload.name), upload.name
    if isinstance(request.data, bytes | str):
        data = request.data
        if len(data) > limit:
            raise refuse(len(data), default_name)
        return (decode(data, default_name) if isinstance(data, bytes) else data), default_name
    return None


def no_content_type_error(what: str) -> SpecInvalid:
    return SpecInvalid([SpecError("request", None, "", f"send {what}")])


class StudyScopedView(APIView):
    """A view on one study (URL kwarg `slug`); `study_roles` maps HTTP methods to the minimum
    role (see evalstudy.permissions)."""

    permission_classes = [StudyRole]
    study_roles = {"GET": VIEWER}

    @property
    def paginator(self) -> PageNumberPagination:
        if not hasattr(self, "_paginator"):
            self._paginator = PageNumberPagination()
        return self._paginator

    def get_study(self) -> Study:
        if not hasattr(self, "_study"):
            minimum = perms.study_role_for(self, self.request.method or "")
            study = Study.objects.filter(slug=self.kwargs["slug"]).first()
            self._study = check_study(self.request.user, study, minimum)
        return self._study


def require_draft(study: Study) -> None:
    if study.status != Study.Status.DRAFT:
        raise Conflict(f"Study {study.slug!r} is {study.status}; only a draft study can change.")


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "Conflicts with the study's state."


def absolute_url(request, name: str, *args) -> str:
    return request.build_absolute_uri(reverse(name, args=args))


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField()
