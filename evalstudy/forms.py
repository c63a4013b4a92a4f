from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from .models import Rater

ALLOWED_SPEC_SUFFIXES = (".yaml", ".yml", ".json")
ALLOWED_ITEM_SUFFIXES = (".csv", ".jsonl")


class _UploadForm(forms.Form):
    suffixes: tuple[str, ...] = ()
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
        limit = settings.EVALSTUDY_UPLOAD_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"{upload.name}: {filesizeformat(upload.size)} is over the upload limit of "
                f"{filesizeformat(limit)} (EVALSTUDY_UPLOAD_MAX_BYTES); split the file, or use "
                "the import command on the server"
            )
        return upload


class SpecUploadForm(_UploadForm):
    suffixes = ALLOWED_SPEC_SUFFIXES
    open_after_import = forms.BooleanField(required=False, label="Open the study after import")


class ItemsUploadForm(_UploadForm):
    suffixes = ALLOWED_ITEM_SUFFIXES


class JudgmentsUploadForm(_UploadForm):
    suffixes = (".csv",)
    rater_kind = forms.ChoiceField(choices=Rater.Kind.choices, initial=Rater.Kind.EXPERT,
                                   help_text="For rows without a rater_kind value.")
