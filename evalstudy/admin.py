"""The researcher's side: every model, with inlines, filters, search and study actions.

Non-superusers see only the studies they own or collaborate on (and the rows under them).
Study actions call the services, so the admin enforces the same rules as the command line;
they act only on the selected studies the user may change (evalstudy.permissions), and foreign
keys offer only rows of such studies (`StudyRowChoices`).
"""

from __future__ import annotations

import functools
import io
import json

import yaml
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Count, Q
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils.html import format_html

from annotation.services import judgments_import

from . import permissions as perms
from . import services
from .audit import audit_record, form_changes, instance_changes, model_snapshot
from .forms import ItemsUploadForm, JudgmentsUploadForm, SpecUploadForm
from .importers import (
    items_import,
    spec_limits,
    spec_to_document,
    study_import_spec,
    study_to_spec,
)
from .models import (
    Assignment,
    AssignmentSlot,
    AttentionCheck,
    AuditEvent,
    CalibrationItem,
    Criterion,
    Enrollment,
    Item,
    Output,
    Rater,
    Study,
    StudyCollaborator,
    System,
)
from .selectors import design_write_csv, studies_visible_to
from .spec import (
    SpecInvalid,
    decode,
    parse_items_file,
    parse_judgments_csv,
    parse_study_spec,
    show_if_problems,
    study_setting_problems,
)

# Filter choices drawn from the rows the user may see: a plain related filter would list every
# study's (and system's) name to every researcher.
ONLY_VISIBLE = admin.RelatedOnlyFieldListFilter
ADMIN = AuditEvent.Source.ADMIN


class AuditedAdmin(admin.ModelAdmin):
    """Writes an audit event for every save and delete made through this admin page and its
    inlines (the admin view wraps each in a transaction, so a failed save leaves no event)."""

    def save_model(self, request, obj, form, change):
        before = model_snapshot(type(obj).objects.get(pk=obj.pk)) if change and obj.pk else None
        super().save_model(request, obj, form, change)
        changes = instance_changes(before, obj)
        # Many-to-many fields are saved after save_model: take them from the form.
        m2m = {f.name for f in obj._meta.many_to_many}
        changes.update({k: v for k, v in form_changes(form).items() if k in m2m})
        if change and not changes:
            return
        audit_record(actor=request.user, source=ADMIN, target=obj, changes=changes,
                     action=AuditEvent.Action.UPDATE if change else AuditEvent.Action.CREATE)

    def delete_model(self, request, obj):
        self._audit_delete(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self._audit_delete(request, obj)
        super().delete_queryset(request, queryset)

    def _audit_delete(self, request, obj):
        audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.DELETE,
                     target=obj, changes=instance_changes(obj, None))

    def save_formset(self, request, form, formset, change):
        deleted = [f.instance for f in formset.deleted_forms if f.instance.pk is not None]
        changed = [
            (f.instance, form_changes(f)) for f in formset.initial_forms
            if f.instance.pk is not None and f.has_changed() and f not in formset.deleted_forms
        ]
        for obj in deleted:
            self._audit_delete(request, obj)
        super().save_formset(request, form, formset, change)
        for obj, changes in changed:
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.UPDATE,
                         target=obj, changes=changes)
        for obj in formset.new_objects:
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.CREATE,
                         target=obj, changes=instance_changes(None, obj))


# --- rows of other studies -------------------------------------------------------------------
@functools.cache
def study_path_of(model) -> str | None:
    """The lookup from a row of `model` to its Study ("" for Study itself; e.g. "item__study"
    for Output), or None when the model does not belong to a study (users, raters, configs).
    Follows the first foreign key that leads to a study, so it covers the other apps' models."""
    return _study_path(model, frozenset())


def _study_path(model, seen: frozenset) -> str | None:
    if model is Study:
        return ""
    fields = [f for f in model._meta.fields
              if f.many_to_one and f.related_model not in seen | {model}]
    # A direct key to Study first (a Criterion's study, not its show_if_criterion's).
    for field in sorted(fields, key=lambda f: f.related_model is not Study):
        path = _study_path(field.related_model, seen | {model})
        if path is not None:
            return f"{field.name}__{path}" if path else field.name
    return None


def study_of_row(row) -> Study | None:
    """The study `row` belongs to (None for rows that belong to none)."""
    path = study_path_of(type(row))
    if path is None:
        return None
    for part in filter(None, path.split("__")):
        row = getattr(row, part, None)
    return row


def rows_usable_by(model, user, minimum: str) -> models.QuerySet | None:
    """Rows of `model` that `user` may point a new or changed row at: those of studies on which
    they hold `minimum` (raters: of those studies). None when `model` is not study-owned or the
    user is a superuser (no limit)."""
    if user.is_superuser:
        return None
    studies = perms.studies_with_role(user, minimum).values("pk")
    if model is Rater:
        return perms.raters_in(studies)
    path = study_path_of(model)
    if path is None:
        return None
    return model._default_manager.filter(**{f"{path or 'pk'}__in": studies})


class StudyRowForm(forms.ModelForm):
    """The admin's form for study-owned rows: refuses a row that points at rows of a study the
    user may not change, or at rows of two different studies (an item of one study with a
    system of another). `study_user` and `study_role` are set per request by
    `StudyRowChoices` (the class it is set on is built afresh for each request)."""

    study_user = None
    study_role = perms.EDITOR

    def clean(self):
        data = super().clean()
        if self.study_user is None:
            return data
        studies = {}
        for name, value in data.items():
            if isinstance(value, Rater) and value.study_id is None:
                continue  # an account holder belongs to no single study
            if isinstance(value, models.Model) and study_path_of(type(value)) is not None:
                studies[name] = study_of_row(value)
        for name, study in studies.items():
            if study is not None and study.pk is not None and not perms.has_role(
                    self.study_user, study, self.study_role):
                self.add_error(name, f"Choose only rows of studies on which you have the "
                                     f"{self.study_role} role (or above).")
        if len({study.pk if study else None for study in studies.values()}) > 1:
            self.add_error(None, "These must all belong to the same study: " + ", ".join(
                f"{name} ({study.slug if study else 'none'})" for name, study in studies.items()))
        return data


class StudyRowChoices:
    """For ModelAdmins and inlines: every foreign key to a study-owned row (or to a rater)
    offers and accepts only rows of the studies on which the user holds `study_role`, whether
    it is a dropdown or a raw-id box, and the form refuses a row that mixes studies; else a
    researcher could read other studies' system names or add rows to studies they cannot see."""

    study_role = perms.EDITOR
    form = StudyRowForm

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        usable = rows_usable_by(db_field.related_model, request.user, self.study_role)
        if formfield is not None and usable is not None:
            formfield.queryset = formfield.queryset.filter(pk__in=usable.values("pk"))
            formfield.error_messages["invalid_choice"] = (
                f"Choose among the {db_field.related_model._meta.verbose_name_plural} of the "
                f"studies on which you have the {self.study_role} role (or above).")
        return formfield

    def _checked(self, form_class, request):
        if issubclass(form_class, StudyRowForm):
            form_class.study_user = request.user
            form_class.study_role = self.study_role
        return form_class

    def get_form(self, request, obj=None, **kwargs):
        return self._checked(super().get_form(request, obj, **kwargs), request)

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        self._checked(formset.form, request)
        return formset


def rows_with_role(request, rows, minimum: str, *, label=str, study_of=study_of_row) -> list:
    """The rows (of an admin action) whose study the user holds `minimum` on. Each row left out
    is reported as a warning naming it and the role needed (rows come from the admin's own
    queryset, so the user can see every one of them)."""
    allowed = []
    for row in rows:
        study = study_of(row)
        if study is not None and perms.has_role(request.user, study, minimum):
            allowed.append(row)
        else:
            where = f"study {study.slug}" if study is not None else "its study"
            messages.warning(request, f"{label(row)}: skipped; this needs the {minimum} role "
                                      f"(or above) on {where}.")
    return allowed


class StudyScopedAdmin(StudyRowChoices, AuditedAdmin):
    """Limits rows to the studies the user may see; `study_path` leads from the row to Study."""

    study_path = "study"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        visible = studies_visible_to(request.user).values("pk")
        return queryset.filter(**{f"{self.study_path}__in": visible})

    # Object-level checks (evalstudy.permissions) on top of Django's model permissions: a
    # viewer collaborator sees a study's rows read-only.
    study_role = perms.EDITOR

    def study_of(self, obj) -> Study | None:
        for part in self.study_path.split("__"):
            obj = getattr(obj, part, None)
        return obj

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        if obj is None or not allowed:
            return allowed
        return perms.has_role(request.user, self.study_of(obj), self.study_role)

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        if obj is None or not allowed:
            return allowed
        return perms.has_role(request.user, self.study_of(obj), self.study_role)


class SystemInline(admin.TabularInline):
    model = System
    extra = 0
    fields = ("name", "description", "metadata")


class CriterionInlineFormSet(forms.BaseInlineFormSet):
    """The study's criteria as a whole: at most EVALSTUDY_MAX_CRITERIA of them, and every
    show_if on a criterion that comes earlier in the (order, id) order raters answer in (see
    spec.show_if_problems). Errors of the formset, not of one form: they are about how the
    forms relate, and the fix may be in either."""

    def clean(self):
        super().clean()
        if any(self.errors):
            return  # a form's own errors first: its cleaned data is incomplete
        kept = [(index, form) for index, form in enumerate(self.forms)
                if form.cleaned_data and not self._should_delete_form(form)]
        problems = []
        limit = spec_limits().max_criteria
        if len(kept) > limit:
            problems.append(f"{len(kept)} criteria; a study may have at most {limit} "
                            "(EVALSTUDY_MAX_CRITERIA).")
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


class CriterionInline(StudyRowChoices, admin.StackedInline):
    model = Criterion
    formset = CriterionInlineFormSet
    extra = 0
    fk_name = "study"
    fields = (
        ("key", "kind", "order", "required"), "prompt", "description",
        ("scale_points", "allow_tie"), ("labels", "options"),
        ("show_if_criterion", "show_if_values"),
    )


class CalibrationInline(admin.StackedInline):
    model = CalibrationItem
    extra = 0
    fields = (("key", "order"), "reference", "context", "text", "text_b", "expected", "feedback")


class AttentionInline(admin.StackedInline):
    model = AttentionCheck
    extra = 0
    fields = (("key", "order"), "reference", "context", "text", "text_b", "expected")


class CollaboratorInline(admin.TabularInline):
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

    def clean(self):
        data = super().clean()
        present = {name: value for name, value in data.items() if name in self.fields}
        for name, problem in study_setting_problems(present, spec_limits()).items():
            self.add_error(name, problem)
        return data


def _report_spec_errors(request, error: SpecInvalid) -> None:
    messages.error(request, f"Nothing was imported ({len(error.errors)} problem(s)).")
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
               CollaboratorInline)
    actions = ("open_studies", "close_studies", "build_assignments", "export_specs",
               "compute_metrics", "run_analysis")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    change_form_template = "admin/evalstudy/study/change_form.html"
    change_list_template = "admin/evalstudy/study/change_list.html"
    fieldsets = (
        (None, {"fields": ("slug", "title", "status", "owner")}),
        ("Design", {"fields": ("design", "ratings_per_output", "items_per_rater",
                               "randomise_order", "seed")}),
        ("Automatic metrics", {"fields": ("encoder_path",)}),
        ("What raters see", {"fields": ("reference_shown", "instructions", "consent_text",
                                        "allow_revision")}),
        ("Crowd platforms and quality", {"fields": (
            "crowd_url", "completion_url", "completion_code", "screen_out_url",
            "screen_out_code", "excluded_studies", "lease_minutes", "attention_check_every",
            "attention_fail_limit")}),
        ("Timestamps", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

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

    @admin.display(description="crowd entry URL (paste into Prolific)")
    def crowd_url(self, study):
        if not study.pk:
            return "-"
        path = reverse("annotation:crowd_entry", args=[study.slug])
        return (f"{settings.SITE_URL.rstrip('/')}{path}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
                "&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}")

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
    def _each(self, request, queryset, service, done: str, action: str) -> None:
        """Run `service` on each selected study the user may change (editor or above); the
        others (a viewer's) are skipped and reported."""
        for study in rows_with_role(request, queryset, perms.EDITOR, label=lambda s: s.slug):
            status = study.status
            try:
                outcome = service(study=study)
            except ValidationError as error:
                messages.error(request, f"{study.slug}: " + " ".join(error.messages))
            else:
                study.refresh_from_db(fields=["status"])
                changes = {"status": [status, study.status]} if status != study.status else {}
                if isinstance(outcome, models.Model) and not isinstance(outcome, Study):
                    changes["run"] = [None, f"{outcome._meta.label_lower} {outcome.pk}"]
                audit_record(actor=request.user, source=ADMIN, action=action, study=study,
                             target=study, changes=changes)
                messages.success(request, f"{study.slug}: {done}")

    @admin.action(description="Open selected studies for raters")
    def open_studies(self, request, queryset):
        self._each(request, queryset, services.study_open, "opened", AuditEvent.Action.OPEN)

    @admin.action(description="Close selected studies")
    def close_studies(self, request, queryset):
        self._each(request, queryset, services.study_close, "closed", AuditEvent.Action.CLOSE)

    @admin.action(description="Build (or rebuild) the rater lists of selected studies")
    def build_assignments(self, request, queryset):
        self._each(request, queryset, services.study_build_assignments, "lists built",
                   AuditEvent.Action.BUILD)

    @admin.action(description="Compute the default automatic metrics (on the workers)")
    def compute_metrics(self, request, queryset):
        from metrics.services import metric_run_start

        def start(*, study):
            return metric_run_start(study=study, user=request.user)

        self._each(request, queryset, start, "metric run started (see its Metrics page)",
                   AuditEvent.Action.START)

    @admin.action(description="Run the analysis (on the workers)")
    def run_analysis(self, request, queryset):
        from analysis.services import analysis_run_start

        def start(*, study):
            return analysis_run_start(study=study, user=request.user)

        self._each(request, queryset, start, "analysis started (see its Analysis page)",
                   AuditEvent.Action.START)

    @admin.action(description="Export selected studies as spec (YAML)")
    def export_specs(self, request, queryset):
        # Reading: every study the user sees (viewers too), as the spec download on the page.
        documents = []
        for study in queryset:
            documents.append(spec_to_document(study_to_spec(study)))
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.EXPORT,
                         target=study, changes={"what": "spec", "format": "yaml"})
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
            path("<int:pk>/import-judgments/",
                 self.admin_site.admin_view(self.import_judgments_view),
                 name="evalstudy_study_import_judgments"),
            path("<int:pk>/design.csv", self.admin_site.admin_view(self.design_csv_view),
                 name="evalstudy_study_design_csv"),
            path("<int:pk>/spec.<str:fmt>", self.admin_site.admin_view(self.spec_view),
                 name="evalstudy_study_spec"),
        ]
        return own + super().get_urls()

    def _study_or_404(self, request, pk, *, change: bool) -> Study:
        study = get_object_or_404(self.get_queryset(request), pk=pk)
        allowed = self.has_change_permission(request, study) if change else (
            self.has_view_permission(request, study)
        )
        if not allowed:
            raise admin.sites.PermissionDenied
        return study

    def _upload_page(self, request, form, title, study=None, help_text=""):
        context = {
            **self.admin_site.each_context(request), "form": form, "title": title,
            "study": study, "opts": self.model._meta, "help_text": help_text,
        }
        return render(request, "admin/evalstudy/study/upload.html", context)

    def _upload(self, request, form_class, *, title, help_text, run, study=None):
        """An upload page: `run(text, file name, cleaned form data)` imports the file and
        returns (study, success message); SpecInvalid problems are listed as messages."""
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
            raise admin.sites.PermissionDenied

        def run(text, name, data):
            spec = parse_study_spec(text, name, spec_limits())
            study, outcome = study_import_spec(spec=spec, source=name, owner=request.user)
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.IMPORT,
                         target=study, changes={"what": "spec", "file": name, "outcome": outcome})
            if data["open_after_import"]:
                self._each(request, [study], services.study_open, "opened",
                           AuditEvent.Action.OPEN)
            return study, f"{outcome} study {study.slug}"

        return self._upload(
            request, SpecUploadForm, title="Import a study spec", run=run,
            help_text="YAML or JSON; see the README for the format. Re-importing the same "
                      "spec changes nothing.",
        )

    def import_items_view(self, request, pk):
        study = self._study_or_404(request, pk, change=True)

        def run(text, name, data):
            fmt = "jsonl" if name.lower().endswith(".jsonl") else "csv"
            limits = spec_limits()
            items = parse_items_file(text, name, fmt, limits)
            n_items, n_outputs = items_import(study=study, items=items, source=name,
                                              limits=limits)
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.IMPORT,
                         target=study, changes={"what": "items", "file": name,
                                                "items": n_items, "outputs": n_outputs})
            return study, f"wrote {n_items} items and {n_outputs} outputs"

        return self._upload(
            request, ItemsUploadForm, title=f"Import items and outputs into {study.slug}",
            study=study, run=run,
            help_text="CSV with columns item,system,output (optional reference, context and "
                      "metadata columns), or JSONL with one item per line.",
        )

    def import_judgments_view(self, request, pk):
        study = self._study_or_404(request, pk, change=True)

        def run(text, name, data):
            counts = judgments_import(study=study, rows=parse_judgments_csv(text, name),
                                      source=name, default_rater_kind=data["rater_kind"])
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.IMPORT,
                         target=study, changes={
                             "what": "judgments", "file": name, "created": counts.created,
                             "revised": counts.revised, "unchanged": counts.unchanged})
            return study, (f"{counts.created} judgments created, {counts.revised} revised, "
                           f"{counts.unchanged} unchanged")

        return self._upload(
            request, JudgmentsUploadForm, title=f"Import judgments into {study.slug}",
            study=study, run=run,
            help_text="Tidy CSV: rater,item,system,criterion,value (optional rater_kind; "
                      "system_b for pairwise criteria).",
        )

    def design_csv_view(self, request, pk):
        study = self._study_or_404(request, pk, change=False)
        buffer = io.StringIO()
        rows = design_write_csv(study, buffer)
        audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.EXPORT,
                     target=study, changes={"what": "design", "format": "csv", "rows": rows})
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-design.csv"'
        return response

    def spec_view(self, request, pk, fmt):
        study = self._study_or_404(request, pk, change=False)
        document = spec_to_document(study_to_spec(study))
        if fmt == "json":
            text, content_type = json.dumps(document, indent=2, ensure_ascii=False), "json"
        else:
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
            content_type = "yaml"
        audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.EXPORT,
                     target=study, changes={"what": "spec", "format": fmt})
        response = HttpResponse(text, content_type=f"application/{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}.{fmt}"'
        return response


@admin.register(System)
class SystemAdmin(StudyScopedAdmin):
    list_display = ("name", "study", "description")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("name", "description", "study__slug")


class OutputInline(StudyRowChoices, admin.TabularInline):
    model = Output
    extra = 0
    fields = ("system", "text")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "system" and request.resolver_match.kwargs.get("object_id"):
            item = Item.objects.filter(pk=request.resolver_match.kwargs["object_id"]).first()
            if item is not None:
                kwargs["queryset"] = System.objects.filter(study_id=item.study_id)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Item)
class ItemAdmin(StudyScopedAdmin):
    list_display = ("external_id", "study", "short_reference", "metadata")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("external_id", "reference", "context")
    inlines = (OutputInline,)
    list_select_related = ("study",)

    @admin.display(description="reference")
    def short_reference(self, item):
        return item.reference[:80]


@admin.register(Output)
class OutputAdmin(StudyScopedAdmin):
    study_path = "item__study"
    list_display = ("item", "system", "short_text")
    list_filter = (("system__study", ONLY_VISIBLE), ("system", ONLY_VISIBLE))
    search_fields = ("item__external_id", "text")
    list_select_related = ("item", "system")
    raw_id_fields = ("item",)

    @admin.display(description="text")
    def short_text(self, output):
        return output.text[:100]


class CriterionForm(StudyRowForm):
    """One criterion edited on its own page: with it changed, the study's criteria must still
    form a forward chain (see CriterionInlineFormSet), else its show_if is refused."""

    def clean(self):
        data = super().clean()
        study = data.get("study") or getattr(self.instance, "study", None)
        if study is None or self.errors:
            return data
        me = self.instance.pk
        rows = [(c.order, c.pk, c.key, c.show_if_criterion_id)
                for c in Criterion.objects.filter(study=study).exclude(pk=me)]
        parent = data.get("show_if_criterion")
        rows.append((data.get("order") or 0, me if me else float("inf"), data.get("key"),
                     parent.pk if parent else None))
        rows.sort(key=lambda row: (row[0], row[1]))
        key_of = {row[1]: row[2] for row in rows}
        chain = [(key, key_of.get(parent_pk) if parent_pk else None)
                 for _, _, key, parent_pk in rows]
        for position, problem in show_if_problems(chain).items():
            self.add_error("show_if_criterion" if chain[position][0] == data.get("key")
                           else None, f"Criterion {chain[position][0]!r}: show_if {problem}.")
        return data


@admin.register(Criterion)
class CriterionAdmin(StudyScopedAdmin):
    form = CriterionForm
    list_display = ("key", "study", "kind", "required", "show_if_criterion", "order")
    list_filter = ("kind", ("study", ONLY_VISIBLE))
    search_fields = ("key", "prompt")


@admin.register(CalibrationItem)
class CalibrationItemAdmin(StudyScopedAdmin):
    list_display = ("key", "study", "order", "expected")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("key", "text", "reference")


@admin.register(AttentionCheck)
class AttentionCheckAdmin(StudyScopedAdmin):
    list_display = ("key", "study", "order", "expected")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("key", "text", "reference")


@admin.register(StudyCollaborator)
class StudyCollaboratorAdmin(StudyScopedAdmin):
    list_display = ("study", "user", "role")
    list_filter = ("role",)
    study_role = perms.OWNER  # only owners (and admins) manage collaborators


class RaterInviteForm(forms.ModelForm):
    """Inviting someone to a study: a new rater of that study with a personal entry link, or,
    with a username, the account holder (who signs in)."""

    username = forms.CharField(
        required=False, help_text="Invite the holder of this account instead: they sign in "
                                  "(no entry link). Leave empty for a personal-link rater.")

    class Meta:
        model = Rater
        fields = ("study", "kind", "display_name", "external_id", "metadata")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["study"].required = True
        self.fields["kind"].choices = [(k, label) for k, label in Rater.Kind.choices
                                       if k in Rater.HUMAN_KINDS]

    def clean_username(self):
        username = self.cleaned_data.get("username", "").strip()
        if not username:
            return ""
        # No error for an unknown name: the page must not tell who has an account.
        return get_user_model().objects.filter(username=username, is_active=True).first()

    def clean(self):
        data = super().clean()
        study, external_id = data.get("study"), data.get("external_id")
        if (study is not None and external_id and not self.cleaned_data.get("username")
                and Rater.objects.filter(study=study, kind=data.get("kind"),
                                         external_id=external_id).exists()):
            self.add_error("external_id", f"This study already has a rater {external_id!r}.")
        return data


@admin.register(Rater)
class RaterAdmin(AuditedAdmin):
    """Researchers see the raters of their studies only (entered, invited or holding a seat).

    A rater belongs to one study (account holders excepted): adding one here invites it to a
    study on which the user is an editor. Its personal data (entry link, metadata; changing,
    deleting, exporting, erasing it) is for the owner of that study; account holders, whose
    accounts span the installation, are managed by admins."""

    list_display = ("__str__", "kind", "study", "user", "external_id", "created_at",
                    "entry_link")
    list_filter = ("kind",)
    search_fields = ("external_id", "display_name", "user__username")
    readonly_fields = ("study", "user", "entry_link", "created_at")
    actions = ("export_personal_data", "erase_personal_data")
    list_select_related = ("study", "user")

    def get_queryset(self, request):
        return perms.raters_visible_to(request.user).select_related("study", "user")

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = RaterInviteForm
            kwargs["fields"] = None
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("study", "kind", "display_name", "external_id", "metadata", "username")
        fields = ["kind", "study", "user", "external_id", "display_name", "metadata",
                  "entry_link", "created_at"]
        if not self.may_manage(request, obj):
            return [name for name in fields if name not in self.PERSONAL]
        return fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "study":
            kwargs["queryset"] = perms.studies_with_role(request.user, perms.EDITOR)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        if form.cleaned_data.get("username") != "":
            # An account holder: an invitation they accept on their page. The same message
            # whether or not the account exists.
            account = form.cleaned_data.get("username")
            if account is not None:
                services.rater_invite(study=obj.study, kind=obj.kind, user=account)
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.CREATE,
                         study=obj.study, changes={"invitation": [
                             None, f"account {form.data.get('username', '')!r}"]})
            request._account_invited = True
            return None
        invited = services.rater_invite(
            study=obj.study, kind=obj.kind, display_name=obj.display_name,
            external_id=obj.external_id, metadata=obj.metadata)
        # The admin goes on with `obj` (its log entry, the redirect): make it the invited row.
        obj.__dict__.update({k: v for k, v in invited.__dict__.items() if k != "_state"})
        obj._state = invited._state
        audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.CREATE,
                     study=obj.study if obj.study_id else form.cleaned_data["study"],
                     target=obj, changes={"invited": [None, form.cleaned_data["study"].slug]})
        return None

    def log_addition(self, request, obj, message):
        if not getattr(request, "_account_invited", False):
            super().log_addition(request, obj, message)

    def response_add(self, request, obj, post_url_continue=None):
        if getattr(request, "_account_invited", False):
            messages.success(request, "If an active account with this username exists, it has "
                                      "been invited; it is listed among the study's raters once "
                                      "its holder accepts.")
            return HttpResponseRedirect(reverse("admin:evalstudy_rater_changelist"))
        return super().response_add(request, obj, post_url_continue)

    def may_manage(self, request, rater) -> bool:
        """Change, delete, see the entry link and metadata: an admin, or the owner of the
        study the rater belongs to (never an account holder's row: it spans studies)."""
        if request.user.is_superuser:
            return True
        if rater.user_id is not None or rater.study_id is None:
            return False
        return perms.has_role(request.user, rater.study, perms.OWNER)

    def may_see_personal_data(self, request, rater) -> bool:
        """Export (scoped to their studies) and erase (refused beyond them, see privacy):
        an admin, or the owner of a study the rater took part in."""
        if request.user.is_superuser:
            return True
        return perms.studies_with_role(request.user, perms.OWNER).filter(
            Q(enrollments__rater=rater) | Q(assignments__rater=rater)).exists()

    def _managed(self, request, queryset) -> list[Rater]:
        allowed = [rater for rater in queryset if self.may_see_personal_data(request, rater)]
        skipped = len(queryset) - len(allowed)
        if skipped:
            messages.warning(request, f"{skipped} rater(s) skipped: their personal data is for "
                                      "the owner of a study they take part in only.")
        return allowed

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or self.may_manage(request, obj))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or self.may_manage(request, obj))

    # The entry link is a secret that lets its holder act as the rater, and metadata may hold
    # an email: both are for those who manage the rater's personal data only.
    PERSONAL = ("entry_link", "metadata")

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return shown if request.user.is_superuser else [
            name for name in shown if name not in self.PERSONAL]

    @admin.display(description="personal entry link")
    def entry_link(self, rater):
        if not rater.pk or not rater.has_entry_link:
            return "-" if not rater.pk or not rater.is_human else "none: signs in with account"
        url = reverse("annotation:enter", args=[rater.access_token])
        return format_html('<a href="{}">{}</a>', url, url)

    @admin.action(description="Export personal data of selected raters (JSON)",
                  permissions=("view",))
    def export_personal_data(self, request, queryset):
        from .privacy import rater_data_export

        exported = []
        scope = perms.privacy_scope(request.user)
        for rater in self._managed(request, queryset):
            exported.append(rater_data_export(rater, studies=scope))
            audit_record(actor=request.user, source=ADMIN, action=AuditEvent.Action.EXPORT,
                         target=("evalstudy.rater", rater.pk, f"rater {rater.pk}"),
                         changes={"what": "personal data", "format": "json"})
        if not exported:
            return None
        document = exported[0] if len(exported) == 1 else exported
        name = f"rater-{exported[0]['rater']['id']}" if len(exported) == 1 else "raters"
        response = HttpResponse(json.dumps(document, indent=2, ensure_ascii=False),
                                content_type="application/json; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}-personal-data.json"'
        return response

    @admin.action(description="Erase personal data of selected raters (keeps judgments)",
                  permissions=("change",))
    def erase_personal_data(self, request, queryset):
        """Asks for confirmation first (a second POST with `confirm`), as deleting does."""
        from .privacy import NotAPerson, OutsideYourStudies, rater_data_erase

        queryset = self._managed(request, queryset)
        if not queryset:
            return None
        if request.POST.get("confirm") != "yes":
            context = {
                **self.admin_site.each_context(request), "raters": queryset,
                "opts": self.model._meta, "title": "Erase personal data?",
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            }
            return render(request, "admin/evalstudy/rater/erase_confirmation.html", context)
        for rater in queryset:
            try:
                rater_data_erase(rater, actor=request.user, source=ADMIN,
                                 studies=perms.privacy_scope(request.user))
            except (NotAPerson, OutsideYourStudies) as error:
                messages.error(request, str(error))
            else:
                messages.success(request, f"rater {rater.pk}: personal data erased")
        return None


@admin.register(Enrollment)
class EnrollmentAdmin(StudyScopedAdmin):
    """Participation records: consent and stop times are evidence, so they are read-only."""

    list_display = ("rater", "study", "entered_at", "consented_at", "instructions_seen_at",
                    "stopped_at", "stop_reason", "invitation_pending", "platform_study_id",
                    "platform_session_id")
    list_filter = ("stop_reason", ("study", ONLY_VISIBLE))
    search_fields = ("rater__external_id", "rater__display_name", "platform_session_id")
    readonly_fields = ("study", "rater", "entered_at", "consented_at", "instructions_seen_at",
                       "stopped_at", "stop_reason", "invitation_pending", "platform_study_id",
                       "platform_session_id")
    list_select_related = ("rater", "study")
    # The crowd platform's session id is what resumes a participation (with the participant
    # id): a secret for the study's owner, as entry links are.
    SECRET = "platform_session_id"

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return shown if request.user.is_superuser else [n for n in shown if n != self.SECRET]

    def get_search_fields(self, request):
        fields = super().get_search_fields(request)
        return fields if request.user.is_superuser else [f for f in fields if f != self.SECRET]

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if obj is not None and perms.has_role(request.user, obj.study, perms.OWNER):
            return fields
        return [name for name in fields if name != self.SECRET]

    def has_add_permission(self, request):
        return False


class SlotInline(admin.TabularInline):
    model = AssignmentSlot
    extra = 0
    can_delete = False
    fields = ("position", "kind", "output", "output_b", "calibration_item", "attention_check",
              "served_at", "completed_at")
    readonly_fields = fields
    max_num = 0
    show_change_link = False


@admin.register(Assignment)
class AssignmentAdmin(StudyScopedAdmin):
    list_display = ("study", "seat_index", "list_index", "part_index", "replica", "rater",
                    "state", "progress", "lease_expires_at")
    list_filter = ("state", "source", ("study", ONLY_VISIBLE))
    search_fields = ("rater__external_id", "rater__display_name", "study__slug")
    raw_id_fields = ("rater", "replaces")
    readonly_fields = ("seed", "claimed_at", "completed_at")
    inlines = (SlotInline,)
    list_select_related = ("study", "rater")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            n_slots=Count("slots"),
            n_done=Count("slots", filter=Q(slots__completed_at__isnull=False)),
        )

    @admin.display(description="done")
    def progress(self, seat):
        return f"{seat.n_done} of {seat.n_slots}"


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit trail, read-only. Researchers see the events of their studies only."""

    list_display = ("at", "actor_repr", "action", "study_slug", "target_type", "target_repr",
                    "source")
    list_filter = ("action", "source", ("study", ONLY_VISIBLE), ("actor", ONLY_VISIBLE))
    search_fields = ("study_slug", "target_repr", "actor_repr")
    date_hierarchy = "at"
    readonly_fields = ("at", "actor", "actor_repr", "action", "study", "study_slug",
                       "target_type", "target_id", "target_repr", "pretty_changes", "source")
    exclude = ("changes",)
    list_select_related = ("study", "actor")

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(study__in=studies_visible_to(request.user).values("pk"))

    @admin.display(description="changes")
    def pretty_changes(self, event):
        return format_html("<pre>{}</pre>", json.dumps(event.changes, indent=2,
                                                       ensure_ascii=False))

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
