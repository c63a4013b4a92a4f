"""The admin's criterion form shows only the fields of its kind (a yes/no question shows no
scale points, options, slider range or severity weights), and each kind says which fields
those are (`AnswerKind.settings`, evalstudy/criteria/kinds/).

Every field is in the page; those of other kinds are in it hidden (the `hidden` attribute on
their box, written by templates/admin/evalstudy/criterion/fieldset.html), so that switching
the kind swaps them at once in the browser (static/js/criterion_kind.js). Without JavaScript
the server shows the fields of the kind it renders, and a form posted with another kind than
the one whose fields it showed is not saved: it comes back with the new kind's fields and a
sentence saying so (the hidden `<kind>_shown` input says which kind's fields were shown; the
script keeps it up to date). The values of fields the kind does not have are dropped when it
is saved: a criterion that was a slider and became a yes/no question keeps no slider range.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models
from django.utils.html import format_html

from evalstudy import criteria as rules

from ..models import Criterion

KIND_FIELD = "kind"
SHOWN_SUFFIX = "_shown"


class KindSelect(forms.Select):
    """The kind menu, with the hidden input that says which kind's fields the form shows."""

    class Media:
        js = ("js/criterion_kind.js",)
        css = {"all": ("css/admin.css",)}

    def __init__(self, attrs: dict[str, Any] | None = None, choices: Any = ()) -> None:
        super().__init__({**(attrs or {}), "data-kind-select": ""}, choices)

    def render(self, name, value, attrs=None, renderer=None):
        menu = super().render(name, value, attrs, renderer)
        return format_html('{}<input type="hidden" name="{}" value="{}">', menu,
                           name + SHOWN_SUFFIX, value or "")


def kind_settings(name: str) -> tuple[str, ...]:
    """The criterion fields a kind has (none for a blank or unknown kind)."""
    try:
        return rules.kind_of(name).settings
    except ValueError:
        return ()


def unset_value(name: str) -> Any:
    """What a criterion field holds when its kind does not have it (the model's default)."""
    field = Criterion._meta.get_field(name)
    if not isinstance(field, models.Field):  # a relation's reverse side has no default
        raise TypeError(f"Criterion.{name} is not a concrete field")
    return field.get_default()


class KindFieldsForm(forms.ModelForm):
    """A criterion form that shows, checks and keeps only the fields of its kind."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields.get(KIND_FIELD)
        if field is None:
            return
        if not isinstance(field, forms.ChoiceField):  # the model field's choices make it one
            raise TypeError(f"the {KIND_FIELD!r} field is not a choice field")
        widget = KindSelect(attrs=field.widget.attrs, choices=field.choices)
        widget.is_required = field.widget.is_required
        field.widget = widget
        shown = set(kind_settings(self.shown_kind))
        for name in rules.SETTINGS:
            if name in self.fields:
                # Read by the fieldset template: which kinds have the field, and whether the
                # kind shown now is one of them.
                # Attributes of our own that forms.Field does not declare.
                self.fields[name].kinds = (  # type: ignore[attr-defined]
                    " ".join(rules.kinds_using(name)))
                self.fields[name].kind_hidden = name not in shown  # type: ignore[attr-defined]

    @property
    def shown_kind(self) -> str:
        """The kind whose fields the form shows: the one posted (so that a form sent back
        shows the fields of the kind chosen), else the criterion's own."""
        if self.is_bound:
            posted = self.data.get(self.add_prefix(KIND_FIELD)) or ""
            if posted in rules.KINDS:
                return posted
        if self.instance is not None and self.instance.kind:
            return self.instance.kind
        return str(self.initial.get(KIND_FIELD) or "")

    def kind_switch_problem(self, kind: str) -> str | None:
        """Why a form posted with `kind` is not saved yet: it showed another kind's fields and
        `kind` has fields that were not shown (None when it may be saved). A post without the
        hidden `_shown` input (a script, an old page) is checked as it is."""
        shown_name = self.add_prefix(KIND_FIELD) + SHOWN_SUFFIX
        if shown_name not in self.data:
            return None
        shown = self.data.get(shown_name) or ""
        unseen = set(kind_settings(kind)) - set(kind_settings(shown))
        if shown == kind or not unseen:
            return None
        label = rules.kind_of(kind).label
        return (f"The fields of a {label} question are shown now (the kind was changed): "
                "fill them in and save again.")

    def drop_unused_settings(self, data: dict[str, Any]) -> None:
        """Clear the fields the chosen kind does not have, so no stale value is stored."""
        used = set(kind_settings(data.get(KIND_FIELD) or ""))
        for name in rules.SETTINGS:
            if name in self.fields and name not in used:
                data[name] = unset_value(name)
                self.errors.pop(name, None)  # a hidden field's value is not the rater's
