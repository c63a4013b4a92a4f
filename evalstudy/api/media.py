"""An item's media files (audio, video): listed, uploaded (multipart) and removed, through the
same checks and service as imports (evalstudy.media)."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import parsers, serializers, status
from rest_framework.response import Response

from kit.openapi import READ_ERRORS, WRITE_ERRORS
from kit.rest import SafeJSONParser

from ..audit import API
from ..media import item_media_remove, item_media_upload
from ..models import Item, ItemMedia
from ..permissions import EDITOR, VIEWER
from ..spec.errors import SpecError, SpecInvalid
from .base import MULTIPART_SLACK, StudyScopedView


class ItemMediaSerializer(serializers.ModelSerializer):
    system = serializers.SerializerMethodField(
        help_text="The system whose output the file belongs to; null: the item's own.")

    class Meta:
        model = ItemMedia
        fields = ("id", "system", "kind", "mime", "container", "codec", "duration_s",
                  "channels", "sample_rate", "width", "height", "size_bytes", "sha256", "source",
                  "created_at")

    def get_system(self, media) -> str | None:
        return media.output.system.name if media.output_id else None


SYSTEM_PARAMETER = OpenApiParameter(
    "system", str, description="The system whose output's media this is (leave out for the "
                               "item's own media).")
UPLOAD = inline_serializer("MediaUpload", fields={
    "file": serializers.FileField(help_text="WAV, FLAC, MP3, Ogg, WebM audio; MP4 or WebM "
                                            "video. Checked with ffprobe before it is stored."),
    "system": serializers.CharField(required=False, help_text="For an output's media."),
})


class ItemMediaView(StudyScopedView):
    """The media files of one item (by external id): GET lists them; POST a multipart `file`
    (and `system` for an output's file) adds or replaces one while the study is a draft (an
    editor or the owner); DELETE `?system=` removes one. A file ffprobe refuses stores nothing
    (400 with the reason)."""

    study_roles = {"GET": VIEWER, "POST": EDITOR, "DELETE": EDITOR}
    # JSON too: a body without a file is answered with what to send, not a 415.
    parser_classes = [parsers.MultiPartParser, SafeJSONParser]

    def get_item(self) -> Item:
        return get_object_or_404(Item, study=self.get_study(),
                                 external_id=self.kwargs["external_id"])

    def _output(self, item: Item, system: str | None):
        if not system:
            return None
        output = item.outputs.select_related("system").filter(system__name=system).first()
        if output is None:
            raise SpecInvalid([SpecError("request", None, "system",
                                         f"item {item.external_id!r} has no output of system "
                                         f"{system!r}")])
        return output

    @extend_schema(responses={200: ItemMediaSerializer(many=True), **READ_ERRORS})
    def get(self, request, slug, external_id):
        rows = self.get_item().media.select_related("output__system").order_by("id")
        return Response(ItemMediaSerializer(rows, many=True).data)

    @extend_schema(request={"multipart/form-data": UPLOAD},
                   responses={201: ItemMediaSerializer, **WRITE_ERRORS})
    def post(self, request, slug, external_id):
        item = self.get_item()
        limit = settings.EVALSTUDY_MEDIA_MAX_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit + MULTIPART_SLACK:  # refused before the body is read
            raise SpecInvalid([SpecError("request", None, "file", (
                f"{declared:,} bytes is over the media limit of {limit:,} bytes "
                "(EVALSTUDY_MEDIA_MAX_BYTES)"))])
        upload = request.FILES.get("file")
        if upload is None:
            raise SpecInvalid([SpecError("request", None, "file",
                                         "send the media file as a multipart field 'file'")])
        output = self._output(item, request.data.get("system"))
        media = item_media_upload(item=item, upload=upload, name=upload.name, output=output,
                                  actor=request.user, source=API)
        return Response(ItemMediaSerializer(media).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[SYSTEM_PARAMETER], responses={204: None, **WRITE_ERRORS})
    def delete(self, request, slug, external_id):
        item = self.get_item()
        output = self._output(item, request.query_params.get("system"))
        media = get_object_or_404(ItemMedia, item=item, output=output)
        item_media_remove(media=media, actor=request.user, source=API)
        return Response(status=status.HTTP_204_NO_CONTENT)
