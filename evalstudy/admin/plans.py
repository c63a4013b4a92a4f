"""The adaptive design's pre-registered plan, inline on the study's page: edited while the study
is a draft, read-only from the moment it opens (the plan is registered then; see
`evalstudy.services.adaptive`), with the stopping checks made under it listed below it."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils.html import format_html_join

from ..models import StudyPlan
from .scoping import StudyRowChoices, StudyRowForm


class ContrastsField(forms.CharField):
    """The plan's contrasts, one a line: `system A, system B` (blank: every pair)."""

    widget = forms.Textarea(attrs={"rows": 3})

    def prepare_value(self, value):
        if isinstance(value, list):
            return "\n".join(f"{a}, {b}" for a, b in value)
        return value

    def to_python(self, value):
        text = super().to_python(value) or ""
        pairs = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            parts = [part.strip() for part in line.split(",")]
            if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
                raise forms.ValidationError(
                    f"Line {number}: write a contrast as two different system names separated "
                    f"by a comma, e.g. 'ours, baseline' (got {line.strip()!r}).")
            pairs.append(parts)
        return pairs


class StudyPlanForm(StudyRowForm):
    contrasts = ContrastsField(
        required=False, help_text="One contrast a line: 'system A, system B' (blank: every "
                                  "pair of systems).")

    class Meta:
        model = StudyPlan
        fields = StudyPlan.PLAN_FIELDS

    def clean(self):
        """The stopping target in words, on its field (the model's constraint alone would show
        Django's "Constraint ... is violated")."""
        data = super().clean()
        editable = "target_ci_width" in self.fields  # read-only once registered
        if editable and data.get("target_ci_width") is None \
                and not data.get("stop_on_decision") and not self.errors:
            self.add_error("target_ci_width", "A plan needs a stopping target: a CI width, or "
                                              "'stop on decision', or both.")
        return data


class StudyPlanInline(StudyRowChoices, admin.StackedInline):
    model = StudyPlan
    form = StudyPlanForm
    fk_name = "study"
    extra = 0
    max_num = 1
    verbose_name = "adaptive plan (pre-registered stopping rule)"
    verbose_name_plural = "adaptive plan (pre-registered stopping rule)"
    fields = ("criterion", "contrasts", ("target_ci_width", "stop_on_decision"),
              ("alpha", "spending"), ("check_every", "max_looks", "max_judgments"),
              "registered_at", "checks_made")
    readonly_fields = ("registered_at", "checks_made")

    @staticmethod
    def _registered(study) -> bool:
        return study is not None and StudyPlan.objects.filter(
            study=study, registered_at__isnull=False).exists()

    def get_readonly_fields(self, request, obj=None):
        if self._registered(obj):
            return ("criterion", "contrasts", "target_ci_width", "stop_on_decision", "alpha",
                    "spending", "check_every", "max_looks", "max_judgments", "registered_at",
                    "checks_made")
        return self.readonly_fields

    def has_add_permission(self, request, obj=None):
        return not self._registered(obj) and super().has_add_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not self._registered(obj) and super().has_delete_permission(request, obj)

    @admin.display(description="stopping checks")
    def checks_made(self, plan):
        if plan is None or not plan.pk:
            return "-"
        checks = list(plan.checks.order_by("look"))
        if not checks:
            return "none yet"
        return format_html_join(
            "\n", "<div>look {}: {} judgments, fraction {}, boundary |z| {}, {}</div>",
            ((c.look, c.judgments, f"{c.information_fraction:.3f}",
              f"{c.boundary:.3f}" if c.boundary is not None else "none",
              f"met ({c.reason})" if c.met else "not met") for c in checks))
