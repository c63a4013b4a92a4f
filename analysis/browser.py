"""The judgment browser: a study's judgments, filtered in the database (rater, system, item,
criterion, value, time, slot kind, revised), a page at a time; each judgment's item as its
rater saw it; the filtered set as CSV, JSONL or Parquet (analysis.exports); and the list of
every export of the study.

Views are thin: parse the filter (`BrowseForm`), check who asks (`evalstudy.permissions`:
viewers and up; another owner's study is a 404), call one selector or export, render.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlencode

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Page, Paginator
from django.db.models import BooleanField, ExpressionWrapper, Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from annotation.models import Judgment, JudgmentRevision
from annotation.selectors import slot_texts, tuple_panes
from evalstudy.audit import WEB
from evalstudy.models import AssignmentSlot, ItemMedia, Rater, Study
from evalstudy.permissions import VIEWER, study_for

from .exports import JUDGMENT_FORMATS, judgments_browse_export
from .models import AnalysisRun

PAGE_SIZE = 50
KINDS = [("", "any"), ("target", "target"), ("calibration", "calibration (practice)"),
         ("attention", "attention check")]
KIND_ALIASES = {"practice": "calibration"}
EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson",
                "parquet": "application/vnd.apache.parquet"}
# The GET parameters a filter is made of (the form's fields; `page` is not part of it).
FILTER_FIELDS = ("rater", "system", "item", "criterion", "value", "from", "to", "kind",
                 "revised")


class BrowseForm(forms.Form):
    """The browser's filter, from GET parameters; every field optional. `from`/`to` take a
    date (`to`: that whole day) or a date and time (the installation's time zone)."""

    rater = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    system = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    item = forms.CharField(required=False, max_length=200,
                           help_text="item id (or a practice or check item's key)")
    criterion = forms.ChoiceField(required=False)
    value = forms.CharField(required=False, max_length=500)
    kind = forms.ChoiceField(required=False, choices=KINDS)
    revised = forms.ChoiceField(required=False,
                                choices=[("", "any"), ("yes", "revised"), ("no", "never revised")])

    def __init__(self, data: Any, *, study: Study):
        data = data.copy() if data is not None else {}
        if data.get("kind") in KIND_ALIASES:
            data["kind"] = KIND_ALIASES[data["kind"]]
        super().__init__(data)
        # `from` is a keyword: the field is added by name.
        self.fields["from"] = forms.CharField(required=False, max_length=20, label="From")
        self.fields["to"] = forms.CharField(required=False, max_length=20, label="To")
        # The fields declared above are ChoiceFields; `fields` is typed as any Field.
        cast(forms.ChoiceField, self.fields["rater"]).choices = [("", "any")] + [
            (pk, label) for pk, label in rater_choices(study)]
        cast(forms.ChoiceField, self.fields["system"]).choices = [
            ("", "any"), *study.systems.order_by("name").values_list("id", "name")]
        cast(forms.ChoiceField, self.fields["criterion"]).choices = [("", "any")] + [
            (key, key) for key in study.criteria.order_by("order", "id")
            .values_list("key", flat=True)]
        self.order_fields(FILTER_FIELDS)

    def _moment(self, name: str, *, end: bool) -> dt.datetime | None:
        raw = (self.cleaned_data.get(name) or "").strip()
        if not raw:
            return None
        for pattern in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
            try:
                moment = dt.datetime.strptime(raw, pattern)  # noqa: DTZ007 - made aware below
            except ValueError:
                continue
            if end and pattern == "%Y-%m-%d":
                moment += dt.timedelta(days=1)  # a date "to" takes in that whole day
            return timezone.make_aware(moment)
        self.add_error(name, "a date (YYYY-MM-DD) or a date and time (YYYY-MM-DDTHH:MM)")
        return None

    def clean(self) -> dict[str, Any]:
        # Form.clean returns cleaned_data (the stubs allow a subclass's None).
        data = cast("dict[str, Any]", super().clean())
        data["from_at"] = self._moment("from", end=False)
        data["to_at"] = self._moment("to", end=True)
        return data

    def applied(self) -> dict[str, str]:
        """The filters in force, as {name: value} (what the download and the audit record)."""
        return {name: str(self.data.get(name)) for name in FILTER_FIELDS
                if self.data.get(name) not in (None, "")}


def rater_choices(study: Study) -> list[tuple[int, str]]:
    """(id, name) of every rater with a judgment in `study`, by name: one query."""
    seats = Judgment.objects.filter(slot__assignment__study=study).values("rater_id")
    raters = Rater.objects.filter(pk__in=seats).order_by("display_name", "external_id", "pk")
    return [(rater.pk, str(rater)) for rater in
            raters.only("id", "display_name", "external_id")]


def judgments_browse(study: Study, data: dict[str, Any]) -> QuerySet[Judgment]:
    """The study's judgments that `data` (a valid BrowseForm's cleaned data) keeps, newest
    first: every condition is a WHERE clause, nothing is filtered in Python."""
    found = Judgment.objects.filter(slot__assignment__study=study)
    if data.get("rater") is not None:
        found = found.filter(rater_id=data["rater"])
    if data.get("system") is not None:
        found = found.filter(Q(slot__output__system_id=data["system"])
                             | Q(slot__output_b__system_id=data["system"]))
    if data.get("item"):
        item = data["item"].strip()
        found = found.filter(Q(slot__output__item__external_id=item)
                             | Q(slot__calibration_item__key=item)
                             | Q(slot__attention_check__key=item))
    if data.get("criterion"):
        found = found.filter(criterion__key=data["criterion"])
    if data.get("value"):
        found = found.filter(value=data["value"])
    if data.get("from_at") is not None:
        found = found.filter(submitted_at__gte=data["from_at"])
    if data.get("to_at") is not None:
        found = found.filter(submitted_at__lt=data["to_at"])
    if data.get("kind"):
        found = found.filter(slot__kind=data["kind"])
    if data.get("revised") == "yes":
        found = found.filter(revision__gt=0)
    elif data.get("revised") == "no":
        found = found.filter(revision=0)
    return found.order_by("-submitted_at", "-id")


@dataclass
class BrowseRow:
    judgment: Judgment
    rater: str
    item: str
    systems: str
    kind: str
    history: list[JudgmentRevision] = field(default_factory=list)


def judgments_page(study: Study, data: dict[str, Any], number: Any) -> tuple[Page, list[BrowseRow]]:
    """One page (PAGE_SIZE rows) of `judgments_browse`: a count, the rows with what they show
    joined in, and their revisions: three queries whatever the page holds."""
    rows = judgments_browse(study, data).select_related(
        "rater", "criterion", "slot", "slot__output__item", "slot__output__system",
        "slot__output_b__system", "slot__calibration_item", "slot__attention_check",
    ).prefetch_related(Prefetch("history", queryset=JudgmentRevision.objects.order_by(
        "replaced_at", "id")))
    page = Paginator(rows, PAGE_SIZE).get_page(number)
    shown = []
    for judgment in page.object_list:
        slot = judgment.slot
        if slot.kind == AssignmentSlot.Kind.TARGET:
            item = slot.output.item.external_id
            systems = slot.output.system.name + (
                f" vs {slot.output_b.system.name}" if slot.output_b_id else "")
            if len(slot.shown_outputs) > 2:
                systems += f" (+{len(slot.shown_outputs) - 2} more)"
        else:
            control = slot.calibration_item or slot.attention_check
            item, systems = (control.key if control else ""), ""
        shown.append(BrowseRow(judgment=judgment, rater=str(judgment.rater), item=item,
                               systems=systems, kind=slot.get_kind_display(),
                               history=list(judgment.history.all())))
    return page, shown


# --- the item as its rater saw it ---------------------------------------------------------------
@dataclass
class SeenPane:
    label: str  # what the rater saw it called ("Output", "A", the study's own label)
    text: str
    system: str  # for the researcher only: the rater never saw it
    media_url: str = ""
    media_kind: str = ""


@dataclass
class SeenItem:
    study: Study
    slot: AssignmentSlot
    rater: Rater
    kind: str
    item: str
    context: str
    reference: str  # as shown: blank when the study hides the reference
    reference_hidden: bool
    panes: list[SeenPane]
    item_media_url: str
    item_media_kind: str
    judgments: list[Judgment]


def judgment_seen(study: Study, pk: int) -> SeenItem:
    """The slot of judgment `pk` of `study` as its rater saw it: the texts (the reference only
    where the study shows it), the outputs under the labels the rater saw (blinded; the system
    beside each is for the researcher), the media, and every answer to the slot with its
    revisions. Http404 for a judgment of another study."""
    judgment = get_object_or_404(
        Judgment.objects.select_related(
            "rater", "slot__assignment", "slot__output__item", "slot__output__system",
            "slot__output_b__system", "slot__calibration_item", "slot__attention_check"),
        pk=pk, slot__assignment__study=study)
    slot = judgment.slot
    slot.assignment.study = study
    reference, context, text, text_b = slot_texts(slot)
    labels = study.labels
    media = {}
    if slot.kind == AssignmentSlot.Kind.TARGET:
        assert slot.output is not None, "a target slot shows an output"
        for row in ItemMedia.objects.filter(item_id=slot.output.item_id).filter(
                Q(output__isnull=True) | Q(output_id__in=[slot.output_id, slot.output_b_id])):
            media[row.output_id] = row
    panes: list[SeenPane] = []
    if slot.shown_outputs:
        assert slot.output is not None, "a slot showing several outputs shows the first"
        systems = dict(slot.output.item.outputs.values_list("id", "system__name"))
        for pane, output in zip(tuple_panes(slot, study), slot.shown_outputs, strict=False):
            panes.append(SeenPane(f"{pane.label}", pane.text, systems.get(output, "")))
    else:
        pairs = [(labels["output_a"] if text_b else labels["output"], text, slot.output)]
        if text_b:
            pairs.append((labels["output_b"], text_b, slot.output_b))
        for label, shown, output in pairs:
            seen = SeenPane(label, shown, output.system.name if output is not None
                            else "(practice or check item: no system)")
            if output is not None and output.pk in media:
                seen.media_url = _media_url(study, media[output.pk])
                seen.media_kind = media[output.pk].kind
            panes.append(seen)
    item_media = media.get(None)
    control = slot.calibration_item or slot.attention_check
    answers = list(Judgment.objects.filter(slot=slot).select_related("criterion")
                   .prefetch_related(Prefetch("history", queryset=JudgmentRevision.objects
                                              .order_by("replaced_at", "id")))
                   .order_by("criterion__order", "criterion_id"))
    return SeenItem(
        study=study, slot=slot, rater=judgment.rater, kind=slot.get_kind_display(),
        item=slot.output.item.external_id if slot.output else (control.key if control else ""),
        context=context, reference=reference if study.reference_shown else "",
        reference_hidden=bool(reference) and not study.reference_shown, panes=panes,
        item_media_url=_media_url(study, item_media) if item_media else "",
        item_media_kind=item_media.kind if item_media else "", judgments=answers)


def _media_url(study: Study, media: ItemMedia) -> str:
    return reverse("annotation:preview_media", args=[study.slug, media.pk])


# --- every export of a study --------------------------------------------------------------------
def study_exports(study: Study) -> dict[str, Any]:
    """What the exports block lists: the study and its latest finished analysis (one query)."""
    latest = (AnalysisRun.objects.filter(study=study, status=AnalysisRun.Status.DONE)
              .only("id", "finished_at")
              .annotate(has_pdf=ExpressionWrapper(Q(report_pdf__isnull=False) & ~Q(report_pdf=b""),
                                                  output_field=BooleanField()))
              .order_by("-finished_at", "-id").first())
    return {"study": study, "latest_report": latest}


# --- views ----------------------------------------------------------------------------------------
@staff_member_required
def judgments_view(request: HttpRequest, slug: str) -> HttpResponse:
    """The browser: the filter form, a page of judgments, downloads of the filtered set."""
    study = study_for(request.user, slug, VIEWER)
    form = BrowseForm(request.GET, study=study)
    context: dict[str, Any] = {"form": form, "formats": JUDGMENT_FORMATS,
                               **study_exports(study)}
    if not form.is_valid():
        return render(request, "analysis/judgments.html", context, status=400)
    page, rows = judgments_page(study, form.cleaned_data, request.GET.get("page"))
    query = urlencode(form.applied())
    context.update(page=page, rows=rows, query=query, filtered=bool(form.applied()))
    return render(request, "analysis/judgments.html", context)


@staff_member_required
def judgments_download(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    """The filtered judgments (the browser's GET parameters) as CSV, JSONL or Parquet."""
    study = study_for(request.user, slug, VIEWER)
    if fmt not in JUDGMENT_FORMATS:
        return HttpResponse(f"no format {fmt!r}: one of {', '.join(JUDGMENT_FORMATS)}",
                            status=404, content_type="text/plain")
    form = BrowseForm(request.GET, study=study)
    if not form.is_valid():
        return HttpResponse("; ".join(f"{name}: {' '.join(map(str, errors))}" for name, errors
                                      in form.errors.items()),
                            status=400, content_type="text/plain; charset=utf-8")
    body = judgments_browse_export(
        study=study, judgments=judgments_browse(study, form.cleaned_data),
        filters=form.applied(), fmt=fmt, actor=request.user, source=WEB)
    response = HttpResponse(body, content_type=EXPORT_TYPES[fmt])
    suffix = "-filtered" if form.applied() else ""
    response["Content-Disposition"] = (
        f'attachment; filename="{study.slug}-judgments{suffix}.{fmt}"')
    return response


@staff_member_required
def judgment_item_view(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """The item of one judgment as its rater saw it, read-only, with the slot's answers."""
    study = study_for(request.user, slug, VIEWER)
    seen = judgment_seen(study, pk)
    return render(request, "analysis/judgments_item.html", {
        "seen": seen, "study": study, "labels": study.labels, "judgment_id": pk,
        "back": reverse("analysis:judgments", args=[study.slug])})
