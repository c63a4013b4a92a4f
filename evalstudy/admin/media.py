"""Media files on the item page: listed with what the probe found, added or replaced by upload
and removed, through the same checks and service as imports (evalstudy.media)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.template.defaultfilters import filesizeformat

from kit.admin import LabelledRowsMixin

from ..media import item_media_remove, item_media_upload, probe_limits
from ..media_fetch import MediaSourceError, copy_stream
from ..media_probe import MediaRefused, probe_file
from ..models import Item, ItemMedia, Output
from ..spec.errors import SpecInvalid
from .scoping import ADMIN, StudyRowChoices, StudyRowForm


class ItemMediaForm(StudyRowForm):
    upload = forms.FileField(
        required=False, label="file",
        help_text="Audio (WAV, FLAC, MP3, Ogg, WebM) or video (MP4, WebM); checked with "
                  "ffprobe before it is stored. On an existing row: replaces its file.")

    class Meta:
        model = ItemMedia
        fields = ("output",)

    def clean_upload(self):
        """Refused here with the probe's reason, so the page shows it by the field; the
        service checks the file again when it stores it."""
        upload = self.cleaned_data.get("upload")
        if upload is None:
            if self.instance.pk is None and self.has_changed():
                raise forms.ValidationError("Choose a file to upload.")
            return upload
        import tempfile
        from pathlib import Path

        limits = probe_limits()
        with tempfile.TemporaryDirectory(prefix="evalstudy-media-") as folder:
            path = Path(folder) / "upload"
            try:
                copy_stream(upload, path, limits.max_bytes)
                probe_file(path, limits)
            except (MediaSourceError, MediaRefused) as error:
                raise forms.ValidationError(f"{upload.name}: {error}") from None
        upload.seek(0)
        return upload


class ItemMediaInline(LabelledRowsMixin, StudyRowChoices, admin.TabularInline):
    model = ItemMedia
    form = ItemMediaForm
    extra = 1
    fields = ("output", "upload", "kind", "mime", "codec", "duration_s", "channels",
              "sample_rate", "size", "source")
    readonly_fields = ("kind", "mime", "codec", "duration_s", "channels", "sample_rate", "size",
                       "source")
    verbose_name = "media file"
    verbose_name_plural = "media files (audio or video raters hear with the item)"

    @admin.display(description="size")
    def size(self, media):
        return filesizeformat(media.size_bytes) if media.pk else "-"

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "output" and request.resolver_match.kwargs.get("object_id"):
            kwargs["queryset"] = Output.objects.filter(
                item_id=request.resolver_match.kwargs["object_id"]).select_related("system")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def save_media_formset(request, item: Item, formset) -> None:
    """The inline's changes through the service (checked, stored under a random name,
    audited); a refusal is reported and leaves the item's media as they were."""
    # What the admin's change message reads; the service's audit event says the rest.
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.forms:
        if not hasattr(form, "cleaned_data") or not form.cleaned_data:
            continue
        media = form.instance
        try:
            if form in formset.deleted_forms:
                if media.pk is not None:
                    item_media_remove(media=media, actor=request.user, source=ADMIN)
                continue
            upload = form.cleaned_data.get("upload")
            if upload is not None:
                item_media_upload(item=item, upload=upload, name=upload.name,
                                  output=form.cleaned_data.get("output"),
                                  actor=request.user, source=ADMIN)
        except SpecInvalid as error:
            for problem in error.errors:
                messages.error(request, f"Media not changed: {problem}")
