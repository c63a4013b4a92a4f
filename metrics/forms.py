"""The metrics page's "Start a metric run" form: the metrics to compute and each one's
parameters as inputs built from its scorer's declared `params` (metrics/scorers/specs.py), so
nobody types JSON. What it hands to `metric_run_start` is the `{metric: {param: value}}` the
JSON box held: only the parameters set away from their defaults, only for the metrics ticked.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms

from kit.param_fields import param_formfield
from kit.params import params_given

from .scorers.registry import DEFAULT_METRICS, spec


def param_field_name(metric: str, param: str) -> str:
    return f"{metric}__{param}"


class MetricRunForm(forms.Form):
    metrics = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every metric listed.")
    model_path = forms.CharField(
        required=False, max_length=500,
        label="Encoder model directory (blank: the default, all-MiniLM-L6-v2)")

    def __init__(self, *args: Any, metrics: tuple[str, ...] = DEFAULT_METRICS, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.metric_names = metrics
        # `metrics` is a MultipleChoiceField; `fields` is typed as any Field.
        cast(forms.MultipleChoiceField, self.fields["metrics"]).choices = [
            (name, name) for name in metrics]
        self.fields["metrics"].initial = list(metrics)
        for name in metrics:
            for param in spec(name).params:
                self.fields[param_field_name(name, param.name)] = param_formfield(param)

    def by_metric(self) -> list[tuple[str, list[forms.BoundField]]]:
        """(metric, the bound inputs of its parameters), in the page's order."""
        return [(name, [self[param_field_name(name, p.name)] for p in spec(name).params])
                for name in self.metric_names]

    def run_params(self) -> dict[str, dict[str, Any]]:
        """`{metric: {param: value}}` of the ticked metrics (of every one when none is)."""
        chosen = self.cleaned_data.get("metrics") or list(self.metric_names)
        params = {}
        for name in chosen:
            declared = spec(name).params
            given = params_given(declared, {
                p.name: self.cleaned_data.get(param_field_name(name, p.name)) for p in declared})
            if given:
                params[name] = given
        return params
