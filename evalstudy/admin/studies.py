"""The study's admin page: its inlines, actions and extra pages (imports, exports). Other apps
add their own actions and pages to it from AppConfig.ready (`study_admin_action_register`,
`study_admin_page_register`)."""

from __future__ import annotations

import contextlib
import io
import json
import types
from collections.abc import Callable

import yaml
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Count, Q
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import NoReverseMatch, path, reverse
from django.utils.translation import gettext, ngettext

from kit.admin import AuditedAdmin, LabelledRowsMixin

from .. import permissions as perms
from .. import services
from ..blindness import identity_terms_clean
from ..forms import ItemsUploadForm, SpecUploadForm
from ..importers import (
    items_import,
    study_import_spec,
    study_spec_export,
)
from ..media import archive_source
from ..models import (
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Study,
    StudyCollaborator,
    System,
)
from ..permissions import studies_visible_to
from ..spec.errors import SpecInvalid
from ..spec.fields import rater_labels_clean
from ..spec.files import parse_items_file
from ..spec.limits import study_setting_problems
from ..spec.load import decode
from ..spec.study import parse_study_spec, show_if_problems
from .grid import items_grid_view
from .links import copy_field
from .plans import StudyPlanInline
from .row_fields import identity_terms_field, rater_labels_field
from .rows import CriterionRulesForm
from .scoping import ADMIN, StudyRowChoices, rows_with_role
from .study_actions import report_done, report_refusal, study_close_view, study_open_view
from .widgets import StructuredFieldsMixin


class SystemInlineFormSet(forms.BaseInlineFormSet):
    """An adaptive study's systems are frozen with its registered plan: the plan's contrasts
    name them, seats are built from them and the stopping rule reads them, so renaming, adding
    or deleting one after the study opened would change the pre-registered plan (and a renamed
    one left the seat builder unable to hand out seats)."""

    def clean(self):
        super().clean()
        from ..models import StudyPlan

        study = self.instance
        if study.pk is None or not StudyPlan.objects.filter(
                study=study, registered_at__isnull=False).exists():
            return
        for form in self.forms:
            added = form.instance.pk is None and form.has_changed()
            renamed = form.instance.pk is not None and "name" in form.changed_data
            if not (added or renamed or self._should_delete_form(form)):
                continue  # a description or aliases may still change
            raise forms.ValidationError(
                "The systems of an adaptive study cannot change after its plan was registered "
                "(the study opened): the plan's contrasts name them.")


class SystemInline(LabelledRowsMixin, StructuredFieldsMixin, admin.TabularInline):
    model = System
    formset = SystemInlineFormSet
    extra = 0
    fields = ("name", "description", "metadata")

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        # Narrow boxes: the inline's three columns fit a 1366 px screen beside the admin's menu.
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in ("description", "metadata") and field is not None:
            field.widget.attrs.update({"rows": 2, "cols": 36})
        return field


class CriterionInlineFormSet(forms.BaseInlineFormSet):
    """The study's criteria as a whole: at most EVALSTUDY_MAX_CRITERIA of them, and every
    show_if on a criterion that comes earlier in the (order, id) order raters answer in (see
    spec.study.show_if_problems). Errors of the formset, not of one form: they are about how the
    forms relate, and the fix may be in either."""

    def clean(self):
        super().clean()
        if any(self.errors):
            return  # a form's own errors first: its cleaned data is incomplete
        kept = [(index, form) for index, form in enumerate(self.forms)
                if form.cleaned_data and not self._should_delete_form(form)]
        problems = []
        limit = services.spec_limits().max_criteria
        if len(kept) > limit:
            problems.append(ngettext(
                "%(count)d criterion; a study may have at most %(limit)d "
                "(EVALSTUDY_MAX_CRITERIA).",
                "%(count)d criteria; a study may have at most %(limit)d "
                "(EVALSTUDY_MAX_CRITERIA).", len(kept)) % {"count": len(kept), "limit": limit})
        # New rows are saved after the existing ones, in form order, so their ids come last.
        kept.sort(key=lambda pair: (pair[1].cleaned_data.get("order") or 0,
                                    (0, pair[1].instance.pk) if pair[1].instance.pk
                                    else (1, pair[0])))
        key_of = {form.instance.pk: form.cleaned_data.get("key") for _, form in kept
                  if form.instance.pk}
        chain = []
        for _, form in kept:
            key, parent = form.cleaned_data.get("key"), form.cleaned_data.get("show_if_criterion")
            if parent is not None and parent.pk not in key_of:
                problems.append(f"Criterion {key!r}: show_if names {parent.key!r}, which is not "
                                "a criterion of this study (or is being deleted).")
                parent = None
            chain.append((key, key_of[parent.pk] if parent is not None else None))
        problems += [f"Criterion {chain[position][0]!r}: show_if {problem}."
                     for position, problem in show_if_problems(chain).items()]
        if problems:
            raise ValidationError(problems)


class CriterionInline(StructuredFieldsMixin, StudyRowChoices, admin.StackedInline):
    model = Criterion
    form = CriterionRulesForm
    formset = CriterionInlineFormSet
    # Each criterion shows only its kind's fields (admin/kind_fields.py).
    template = "admin/evalstudy/criterion/stacked.html"
    extra = 0
    fk_name = "study"
    fields = (
        ("key", "kind", "order", "required"), "prompt", "description",
        ("scale_points", "allow_tie", "allow_both"), ("labels", "options"),
        ("scale_min", "scale_max"), ("severity_weights", "span_reference"),
        ("show_if_criterion", "show_if_values"),
    )


class CalibrationInline(StructuredFieldsMixin, admin.StackedInline):
    model = CalibrationItem
    extra = 0
    fields = (("key", "order"), "reference", "context", "text", "text_b", "expected", "feedback")


class AttentionInline(StructuredFieldsMixin, admin.StackedInline):
    model = AttentionCheck
    extra = 0
    fields = (("key", "order"), "reference", "context", "text", "text_b", "expected")


class CollaboratorInline(LabelledRowsMixin, admin.TabularInline):
    """Only the study's owner (or an admin) adds, changes or removes collaborators."""

    model = StudyCollaborator
    extra = 0
    autocomplete_fields = ("user",)

    def _may_manage(self, request, study) -> bool:
        return study is None or perms.can_manage_collaborators(request.user, study)

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and self._may_manage(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._may_manage(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._may_manage(request, obj)


class StudyAdminForm(forms.ModelForm):
    """The design settings bounded as the spec reader and the API bound them (the model has no
    validators for this: they would need a migration, and the limits are settings)."""

    # Rows of inputs, not JSON (admin/row_fields.py); stored as the spec and the API store them.
    identity_terms = identity_terms_field()
    rater_labels = rater_labels_field()

    def clean_identity_terms(self):
        """Stored as the spec and the API store them (checked, spaces around a term removed)."""
        try:
            return identity_terms_clean(self.cleaned_data.get("identity_terms") or [])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_rater_labels(self):
        """What is stored is what the spec and the API would store: surrounding spaces removed,
        an empty box meaning no labels of the study's own."""
        try:
            return rater_labels_clean(self.cleaned_data.get("rater_labels") or {})
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self):
        data = super().clean()
        present = {name: value for name, value in data.items() if name in self.fields}
        for name, problem in study_setting_problems(present, services.spec_limits()).items():
            self.add_error(name, problem)
        return data


def _report_spec_errors(request, error: SpecInvalid) -> None:
    messages.error(request, ngettext("Nothing was imported (%(count)d problem).",
                                     "Nothing was imported (%(count)d problems).",
                                     len(error.errors)) % {"count": len(error.errors)})
    for problem in error.errors[:50]:
        messages.error(request, f"Problem in {problem}")
    if len(error.errors) > 50:
        messages.error(request, f"... and {len(error.errors) - 50} more.")


@admin.register(Study)
class StudyAdmin(AuditedAdmin):
    form = StudyAdminForm
    list_display = ("slug", "title", "status", "design", "n_systems", "n_items",
                    "ratings_per_output", "seats", "updated_at")
    list_filter = ("status", "design", "reference_shown")
    search_fields = ("slug", "title")
    readonly_fields = ("status", "seed", "created_at", "updated_at", "crowd_url")
    prepopulated_fields = {"slug": ("title",)}
    inlines = (SystemInline, CriterionInline, CalibrationInline, AttentionInline,
               CollaboratorInline, StudyPlanInline)
    # Other apps append theirs (`study_admin_action_register`).
    actions: tuple = ("open_studies", "close_studies", "build_assignments", "export_specs")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    change_form_template = "admin/evalstudy/study/change_form.html"
    change_list_template = "admin/evalstudy/study/change_list.html"
    fieldsets = (
        (None, {"fields": ("slug", "title", "status", "owner")}),
        ("Design", {"fields": ("design", "ratings_per_output", "items_per_rater",
                               "tuple_size", "randomise_order", "seed")}),
        ("Automatic metrics", {"fields": ("encoder_path",)}),
        ("What raters see", {"fields": ("reference_shown", "instructions", "consent_text",
                                        "allow_revision", "alignment_shown", "language",
                                        "rater_labels")}),
        ("Media player (items with audio or video)", {"fields": (
            "media_must_finish", "media_max_plays", "media_autoplay")}),
        ("Crowd platforms and quality", {"fields": (
            "crowd_url", "completion_url", "completion_code", "screen_out_url",
            "screen_out_code", "crowd_platform", "crowd_no_codes", "excluded_studies",
            "lease_minutes",
            "attention_check_every", "attention_fail_limit",
            "speeder_seconds", "calibration_pass_mark")}),
        ("Blindness audit", {"fields": ("identity_terms",)}),
        ("Timestamps", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    def get_fieldsets(self, request, obj=None):
        # The seed is drawn when the study is saved: on the Add form a read-only value would
        # be a number drawn for the page, not the one stored.
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None:
            return fieldsets
        return [(name, {**options, "fields": tuple(f for f in options["fields"] if f != "seed")})
                for name, options in fieldsets]

    def get_queryset(self, request):
        queryset = studies_visible_to(request.user) if not request.user.is_superuser else (
            super().get_queryset(request)
        )
        return queryset.annotate(
            n_systems_=Count("systems", distinct=True),
            n_items_=Count("items", distinct=True),
            seats_=Count("assignments", filter=Q(assignments__source="design"), distinct=True),
        )

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "excluded_studies":
            # Your own studies only: screening against a study tells who took part in it.
            kwargs["queryset"] = perms.studies_with_role(request.user, perms.OWNER)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    # Object-level rules from evalstudy.permissions: editors change, only the owner deletes.
    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or perms.can_edit_study(request.user, obj))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or perms.can_manage_collaborators(request.user, obj))

    def save_model(self, request, obj, form, change):
        if not change and obj.owner_id is None:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        study = self.get_object(request, object_id)
        links: dict[str, object] = {}
        if study is not None:
            # Pages of the annotation and analysis apps, linked when they are installed.
            for name, url_name in (("preview_url", "annotation:preview"),
                                   ("judgments_url", "analysis:judgments")):
                with contextlib.suppress(NoReverseMatch):
                    links[name] = reverse(url_name, args=[study.slug])
            # The Open/Close buttons (study_actions) and the invite page's link.
            links["can_change"] = self.has_change_permission(request, study)
            links["may_invite"] = links["can_change"]
        return super().change_view(request, object_id, form_url,
                                   extra_context={**links, **(extra_context or {})})

    @admin.display(description="crowd entry URL (paste into Prolific)")
    def crowd_url(self, study):
        if not study.pk:
            return "-"
        if study.crowd_platform == "none":
            return "none: choose a crowd platform below to get one"
        return copy_field(services.crowd_entry_url(study, settings.SITE_URL) or "",
                          gettext("Copy the crowd entry URL"))

    @admin.display(description="systems", ordering="n_systems_")
    def n_systems(self, study):
        return study.n_systems_

    @admin.display(description="items", ordering="n_items_")
    def n_items(self, study):
        return study.n_items_

    @admin.display(description="seats", ordering="seats_")
    def seats(self, study):
        return study.seats_

    # --- actions ------------------------------------------------------------------------
    def each_study(self, request, queryset, service, done: str, warnings=None) -> None:
        """Run `service(study=, actor=, source=)` on each selected study the user may change
        (editor or above); the others (a viewer's) are skipped and reported. The service
        records its audit event. A refusal lists its problems one message each, linked to their
        fix (study_actions.report_refusal); `warnings(study=)` (optional) gives what to point
        out after a success. For actions of other apps too."""
        for study in rows_with_role(request, queryset, perms.EDITOR, label=lambda s: s.slug):
            try:
                service(study=study, actor=request.user, source=ADMIN)
            except ValidationError as error:
                report_refusal(request, study, error, gettext("not done"))
            else:
                report_done(request, study, done, warnings(study=study) if warnings else ())

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        for warning in services.study_warnings(study=form.instance):
            messages.warning(request, warning)

    @admin.action(description="Open selected studies for raters")
    def open_studies(self, request, queryset):
        self.each_study(request, queryset, services.study_open, "opened",
                        warnings=services.study_warnings)

    @admin.action(description="Close selected studies")
    def close_studies(self, request, queryset):
        self.each_study(request, queryset, services.study_close, "closed")

    @admin.action(description="Build (or rebuild) the rater lists of selected studies")
    def build_assignments(self, request, queryset):
        self.each_study(request, queryset, services.study_build_assignments, "lists built")

    @admin.action(description="Export selected studies as spec (YAML)")
    def export_specs(self, request, queryset):
        # Reading: every study the user sees (viewers too), as the spec download on the page.
        documents = [study_spec_export(study=study, fmt="yaml", actor=request.user,
                                       source=ADMIN) for study in queryset]
        text = yaml.safe_dump_all(documents, sort_keys=False, allow_unicode=True, width=100)
        name = queryset.first().slug if len(documents) == 1 else "studies"
        response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.yaml"'
        return response

    # --- extra pages --------------------------------------------------------------------
    def get_urls(self):
        own = [
            path("import-spec/", self.admin_site.admin_view(self.import_spec_view),
                 name="evalstudy_study_import_spec"),
            path("<int:pk>/import-items/", self.admin_site.admin_view(self.import_items_view),
                 name="evalstudy_study_import_items"),
            path("<int:pk>/design.csv", self.admin_site.admin_view(self.design_csv_view),
                 name="evalstudy_study_design_csv"),
            path("<int:pk>/spec.<str:fmt>", self.admin_site.admin_view(self.spec_view),
                 name="evalstudy_study_spec"),
            path("<int:pk>/items-grid/", self.admin_site.admin_view(
                types.MethodType(items_grid_view, self)), name="evalstudy_study_items_grid"),
            path("<int:pk>/open/", self.admin_site.admin_view(
                types.MethodType(study_open_view, self)), name="evalstudy_study_open"),
            path("<int:pk>/close/", self.admin_site.admin_view(
                types.MethodType(study_close_view, self)), name="evalstudy_study_close"),
        ]
        own += [path(route, self.admin_site.admin_view(types.MethodType(view, self)), name=name)
                for route, view, name in _STUDY_PAGES]
        return own + super().get_urls()

    def study_or_404(self, request, pk, *, change: bool) -> Study:
        """The study of an extra page: 404 unless the user sees it, 403 unless they may change it
        (`change`) or view it."""
        study = get_object_or_404(self.get_queryset(request), pk=pk)
        allowed = self.has_change_permission(request, study) if change else (
            self.has_view_permission(request, study)
        )
        if not allowed:
            raise PermissionDenied
        return study

    def _upload_page(self, request, form, title, study=None, help_text=""):
        context = {
            **self.admin_site.each_context(request), "form": form, "title": title,
            "study": study, "opts": self.model._meta, "help_text": help_text,
        }
        return render(request, "admin/evalstudy/study/upload.html", context)

    def upload(self, request, form_class, *, title, help_text, run, study=None):
        """An upload page: `run(text, file name, cleaned form data)` imports the file and
        returns (study, success message); SpecInvalid problems are listed as messages. For
        other apps' pages too (`study_admin_page_register`)."""
        form = form_class(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                target, message = run(decode(upload.read(), upload.name), upload.name,
                                      form.cleaned_data)
            except SpecInvalid as error:
                _report_spec_errors(request, error)
            else:
                messages.success(request, message)
                return HttpResponseRedirect(
                    reverse("admin:evalstudy_study_change", args=[target.pk])
                )
        return self._upload_page(request, form, title, study, help_text=help_text)

    def import_spec_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied

        def run(text, name, data):
            spec = parse_study_spec(text, name, services.spec_limits())
            with archive_source(data.get("media")) as media_from:
                study, outcome = study_import_spec(spec=spec, file_name=name,
                                                   owner=request.user, actor=request.user,
                                                   source=ADMIN, media_from=media_from)
            if data["open_after_import"]:
                self.each_study(request, [study], services.study_open, "opened",
                                warnings=services.study_warnings)
            return study, f"{outcome} study {study.slug}"

        return self.upload(
            request, SpecUploadForm, title="Import a study spec", run=run,
            help_text="YAML or JSON; the manual's Study files page (docs/guide/study-spec.md) "
                      "gives the format. Re-importing the same "
                      "spec changes nothing.",
        )

    def import_items_view(self, request, pk):
        study = self.study_or_404(request, pk, change=True)

        def run(text, name, data):
            fmt = "jsonl" if name.lower().endswith(".jsonl") else "csv"
            limits = services.spec_limits()
            items = parse_items_file(text, name, fmt, limits)
            with archive_source(data.get("media")) as media_from:
                n_items, n_outputs = items_import(study=study, items=items, file_name=name,
                                                  limits=limits, actor=request.user,
                                                  source=ADMIN, media_from=media_from)
            return study, f"wrote {n_items} items and {n_outputs} outputs"

        return self.upload(
            request, ItemsUploadForm, title=f"Import items and outputs into {study.slug}",
            study=study, run=run,
            help_text="CSV with columns item,system,output (optional reference, context and "
                      "metadata columns), or JSONL with one item per line.",
        )

    def design_csv_view(self, request, pk):
        study = self.study_or_404(request, pk, change=False)
        buffer = io.StringIO()
        services.design_export(study=study, stream=buffer, actor=request.user, source=ADMIN)
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-design.csv"'
        return response

    def spec_view(self, request, pk, fmt):
        study = self.study_or_404(request, pk, change=False)
        if fmt not in ("json", "yaml"):
            raise Http404(f"no spec format {fmt!r}: json or yaml")
        document = study_spec_export(study=study, fmt=fmt, actor=request.user, source=ADMIN)
        if fmt == "json":
            text, content_type = json.dumps(document, indent=2, ensure_ascii=False), "json"
        else:
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
            content_type = "yaml"
        response = HttpResponse(text, content_type=f"application/{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}.{fmt}"'
        return response


# --- other apps' actions and pages ------------------------------------------------------------
# (route under the study admin's URLs, view(study_admin, request, **url kwargs), URL name)
_STUDY_PAGES: list[tuple[str, Callable[..., HttpResponse], str]] = []


def study_admin_action_register(action: Callable[..., HttpResponse | None]) -> None:
    """Offer `action` on the study list, after the study app's own: an admin action function
    `(study_admin, request, queryset)` (decorated with `admin.action`), named by its function
    name. For other apps, from their AppConfig.ready; `StudyAdmin.each_study` runs an audited
    service on each selected study the user may change."""
    if action not in StudyAdmin.actions:  # ready() may run twice in tests
        StudyAdmin.actions = (*StudyAdmin.actions, action)


def study_admin_page_register(route: str, view: Callable[..., HttpResponse], name: str) -> None:
    """Add a page under the study admin's URLs (e.g. "<int:pk>/import-judgments/", reversed as
    "admin:<name>"): `view(study_admin, request, **url kwargs)`, behind the admin's login. For
    other apps, from their AppConfig.ready (before the first request resolves a URL);
    `StudyAdmin.study_or_404` and `StudyAdmin.upload` do the usual parts."""
    if all(name != known for _, _, known in _STUDY_PAGES):  # ready() may run twice in tests
        _STUDY_PAGES.append((route, view, name))
