"""Form fields for the typed parameters of `kit.params`: one input per parameter, so that
nobody types a component's parameters as JSON."""

from __future__ import annotations

from typing import Any

from django import forms

from .params import BOOL, CHOICE, FLOAT, INT, RECORDS, Param
from .row_fields import records_field


def param_formfield(param: Param, **kwargs: Any) -> forms.Field:
    """The input of `param`: a box, a whole or decimal number within its bounds, a menu (its
    first entry: the default), rows of inputs (RECORDS) or a line of text; never required
    (blank: the default)."""
    kwargs = {"label": param.title, "help_text": param.help, "required": False, **kwargs}
    bounds: dict[str, Any] = {key: value for key, value in (("min_value", param.minimum),
                                            ("max_value", param.maximum)) if value is not None}
    if param.kind == BOOL:
        return forms.BooleanField(initial=param.default, **kwargs)
    if param.kind == INT:
        whole: dict[str, Any] = {k: int(v) for k, v in bounds.items()}
        return forms.IntegerField(initial=param.default, **whole, **kwargs)
    if param.kind == FLOAT:
        return forms.FloatField(initial=param.default, **bounds, **kwargs)
    if param.kind == RECORDS:
        return records_field(param.columns, **kwargs)
    if param.kind == CHOICE:
        default = "" if param.default is None else param.default
        first = [("", "(default)")] if param.default is None else []
        return forms.ChoiceField(choices=[*first, *((c, c) for c in param.choices)],
                                 initial=default, **kwargs)
    return forms.CharField(initial=param.default or "", **kwargs)
