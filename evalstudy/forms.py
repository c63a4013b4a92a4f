from django import forms

from .models import Rater

ALLOWED_SPEC_SUFFIXES = (".yaml", ".yml", ".json")
ALLOWED_ITEM_SUFFIXES = (".csv", ".jsonl")


class _UploadForm(forms.Form):
    suffixes: tuple[str, ...] = ()
    file = forms.FileField()

    def clean_file(self):
        upload = self.cleaned_data["file"]
        name = upload.name.lower()
        if not name.endswith(self.suffixes):
            raise forms.ValidationError(
                f"{upload.name}: expected a file ending in {', '.join(self.suffixes)}"
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
