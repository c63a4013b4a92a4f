from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from .models import Rater

ALLOWED_SPEC_SUFFIXES = (".yaml", ".yml", ".json")
ALLOWED_ITEM_SUFFIXES = (".csv", ".jsonl")


class _UploadForm(forms.Form):
    suffixes: tuple[str, ...] = ()
    # Settings bounding the file's size, checked in turn: (setting, what it limits, advice).
    size_limits: tuple[tuple[str, str, str], ...] = (
        ("EVALSTUDY_UPLOAD_MAX_BYTES", "upload",
         "split the file, or use the import command on the server"),
    )
    file = forms.FileField()

    def clean_file(self):
        """Refuse by name and size before anything reads the file; the content (UTF-8 text,
        CSV/JSONL/YAML shape) is checked by the parsers, with file:line:field errors."""
        upload = self.cleaned_data["file"]
        name = upload.name.lower()
        if not name.endswith(self.suffixes):
            raise forms.ValidationError(
                f"{upload.name}: expected a file ending in {', '.join(self.suffixes)}"
            )
        # Django's DATA_UPLOAD_MAX_MEMORY_SIZE does not count file parts: limit them here.
        for setting, what, advice in self.size_limits:
            limit = getattr(settings, setting)
            if upload.size > limit:
                raise forms.ValidationError(
                    f"{upload.name}: {filesizeformat(upload.size)} is over the {what} limit of "
                    f"{filesizeformat(limit)} ({setting}); {advice}"
                )
        return upload


class MediaArchiveField(forms.FileField):
    """An optional zip archive of the media files an import names by relative path."""

    def __init__(self, **kwargs):
        super().__init__(required=False, label="Media archive (zip)", help_text=(
            "The audio or video files the items name in their media / output_media fields, "
            "by their paths inside this archive. Each is checked with ffprobe; any problem "
            "imports nothing."), **kwargs)

    def clean(self, data, initial=None):
        upload = super().clean(data, initial)
        if upload is None:
            return upload
        if not upload.name.lower().endswith(".zip"):
            raise forms.ValidationError(f"{upload.name}: expected a .zip archive")
        limit = settings.EVALSTUDY_MEDIA_ARCHIVE_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"{upload.name}: {filesizeformat(upload.size)} is over the media archive limit "
                f"of {filesizeformat(limit)} (EVALSTUDY_MEDIA_ARCHIVE_MAX_BYTES)")
        return upload


class SpecUploadForm(_UploadForm):
    suffixes = ALLOWED_SPEC_SUFFIXES
    # A spec is parsed in the request: its own, smaller limit (evalstudy.spec.limits.SpecLimits).
    size_limits = (
        ("EVALSTUDY_SPEC_MAX_BYTES", "spec",
         "keep the study, systems and criteria in the spec and import the items from a CSV or "
         "JSONL file on the study's page"),
        *_UploadForm.size_limits,
    )
    open_after_import = forms.BooleanField(required=False, label="Open the study after import")
    # The form's metaclass moves declared fields out of the class, so this field does not hide
    # Form.media at run time; the stubs see the class attribute only.
    media = MediaArchiveField()  # type: ignore[assignment]


class ItemsUploadForm(_UploadForm):
    suffixes = ALLOWED_ITEM_SUFFIXES
    media = MediaArchiveField()  # type: ignore[assignment]  # as in SpecUploadForm


class JudgmentsUploadForm(_UploadForm):
    suffixes = (".csv",)
    rater_kind = forms.ChoiceField(choices=Rater.Kind.choices, initial=Rater.Kind.EXPERT,
                                   help_text="For rows without a rater_kind value.")
