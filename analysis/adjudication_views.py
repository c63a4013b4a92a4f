"""The adjudication queue's pages, and the soft-label download. The queue (filter by
criterion, reason and state; thresholds as GET parameters) and one unit (the item, the
outputs, every answer, the form for the expert's label). Viewers of a study read both; editors
and owners record labels; another owner's study is a 404 (evalstudy.permissions). Thin:
parse, check, call analysis.adjudication or analysis.soft_labels.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from evalstudy.audit import WEB
from evalstudy.permissions import EDITOR, VIEWER, has_role, study_for

from .adjudication import (
    STATES,
    UnitNotFound,
    adjudicable_criteria,
    adjudication_queue,
    adjudication_record,
    adjudication_unit,
    reason_label,
)
from .soft_labels import SOFT_LABEL_FORMATS, soft_labels_export
from .stats.disagreement import REASONS, Thresholds

DEFAULTS = Thresholds()


def _number(step: str) -> forms.NumberInput:
    return forms.NumberInput(attrs={"class": "wide", "step": step, "inputmode": "decimal"})


# The queue's states as the filter offers them (the page's heading names the chosen one).
STATE_CHOICES = [("open", "to adjudicate"), ("done", "adjudicated"), ("all", "all")]


class QueueForm(forms.Form):
    """The queue's filter and thresholds (GET parameters, all optional)."""

    criterion = forms.ChoiceField(required=False)
    reason = forms.ChoiceField(required=False, choices=[("", "any")] + [
        (reason, reason_label(reason)) for reason in REASONS])
    state = forms.ChoiceField(required=False, choices=STATE_CHOICES)
    majority = forms.FloatField(
        required=False, min_value=0.01, max_value=1.0, label="Majority share below",
        widget=_number("0.05"),
        help_text=f"nominal criteria (default {DEFAULTS.majority:g})")
    spread = forms.FloatField(
        required=False, min_value=0.0, max_value=1.0, label="Range above (share of the scale)",
        widget=_number("0.05"),
        help_text=f"ordinal criteria (default {DEFAULTS.spread:g})")
    sd = forms.FloatField(required=False, min_value=0.0, max_value=1.0,
                          label="SD above (share of the scale)", help_text="ordinal; blank: off",
                          widget=_number("0.05"))
    min_judgments = forms.IntegerField(
        required=False, min_value=2, max_value=1000, label="At least this many judgments",
        widget=_number("1"),
        help_text=f"default {DEFAULTS.min_judgments}")

    def __init__(self, data: Any, *, criteria: list[Any]):
        super().__init__(data)
        # `criterion` is a ChoiceField; `fields` is typed as any Field.
        cast(forms.ChoiceField, self.fields["criterion"]).choices = [("", "any")] + [
            (c.key, c.key) for c in criteria]

    def thresholds(self) -> Thresholds:
        data = self.cleaned_data
        return Thresholds(
            majority=data["majority"] if data.get("majority") is not None else DEFAULTS.majority,
            spread=data["spread"] if data.get("spread") is not None else DEFAULTS.spread,
            sd=data.get("sd"),
            min_judgments=data.get("min_judgments") or DEFAULTS.min_judgments)

    def threshold_query(self) -> str:
        """The thresholds in force as a query string (carried to the unit pages)."""
        return urlencode({name: self.data[name] for name in
                          ("majority", "spread", "sd", "min_judgments")
                          if self.data.get(name) not in (None, "")})


def unit_url(study_slug: str, criterion: str, output: int, output_b: int | None) -> str:
    if output_b is None:
        return reverse("analysis:adjudication_unit", args=[study_slug, criterion, output])
    return reverse("analysis:adjudication_pair", args=[study_slug, criterion, output, output_b])


@staff_member_required
def queue_view(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request.user, slug, VIEWER)
    form = QueueForm(request.GET, criteria=adjudicable_criteria(study))
    context: dict[str, Any] = {"study": study, "form": form,
                               "can_adjudicate": has_role(request.user, study, EDITOR)}
    if not form.is_valid():
        return render(request, "analysis/adjudication.html", context, status=400)
    data = form.cleaned_data
    state = data.get("state") or "open"
    entries = adjudication_queue(study, thresholds=form.thresholds(),
                                 criterion=data.get("criterion") or "",
                                 reason=data.get("reason") or "", state=state)
    query = form.threshold_query()
    rows = [(entry, unit_url(study.slug, entry.criterion.key, entry.output, entry.output_b)
             + (f"?{query}" if query else "")) for entry in entries]
    context.update(rows=rows, state=state, state_label=dict(
        STATE_CHOICES)[state], states=STATES)
    return render(request, "analysis/adjudication.html", context)


@staff_member_required
def unit_view(request: HttpRequest, slug: str, criterion: str, output: int,
              output_b: int | None = None) -> HttpResponse:
    """One unit; POST records the expert's label (editors and owners)."""
    study = study_for(request.user, slug, EDITOR if request.method == "POST" else VIEWER)
    form = QueueForm(request.GET, criteria=adjudicable_criteria(study))
    thresholds = form.thresholds() if form.is_valid() else DEFAULTS
    try:
        unit = adjudication_unit(study, criterion, output, output_b, thresholds)
    except UnitNotFound as error:
        raise Http404(str(error)) from None
    errors: dict[str, list[str]] = {}
    posted: dict[str, str] = {}
    if request.method == "POST":
        posted = {"value": request.POST.get("value", ""), "note": request.POST.get("note", "")}
        try:
            adjudication_record(
                study=study, criterion=unit.criterion, output=unit.output,
                output_b=unit.output_b, value=posted["value"] or None, note=posted["note"],
                reason="; ".join(unit.flag.why) if unit.flag else "",
                actor=request.user, source=WEB)
        except ValidationError as error:
            errors = error.message_dict
        else:
            messages.success(request, f"Label recorded for {unit.criterion.key} on item "
                                      f"{unit.item}.")
            back = reverse("analysis:adjudication", args=[study.slug])
            query = form.threshold_query() if form.is_valid() else ""
            return redirect(back + (f"?{query}" if query else ""))
    current = unit.adjudication
    return render(request, "analysis/adjudication_unit.html", {
        "study": study, "unit": unit, "errors": errors,
        "value": posted.get("value", current.value if current else ""),
        "note": posted.get("note", current.note if current else ""),
        "can_adjudicate": has_role(request.user, study, EDITOR),
        "back": reverse("analysis:adjudication", args=[study.slug]),
        "labels": study.labels,
    }, status=400 if errors else 200)


SOFT_LABEL_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


@staff_member_required
def soft_labels_download(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    """The study's soft labels (Dawid-Skene and MACE posteriors per unit) as CSV or JSONL:
    viewers and up, as the judgment browser's downloads."""
    study = study_for(request.user, slug, VIEWER)
    if fmt not in SOFT_LABEL_FORMATS:
        raise Http404(f"no format {fmt!r}: one of {', '.join(SOFT_LABEL_FORMATS)}")
    body = soft_labels_export(study=study, fmt=fmt, actor=request.user, source=WEB)
    response = HttpResponse(body, content_type=SOFT_LABEL_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-soft-labels.{fmt}"'
    return response
