"""The rows under a study (systems, items, outputs, criteria, control items, collaborators,
seats) and the audit trail, each limited to the studies the user may see."""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Count, Q
from django.utils.html import format_html

from kit.admin import LabelledRowsMixin

from .. import criteria as rules
from .. import permissions as perms
from ..models import (
    Assignment,
    AssignmentSlot,
    AttentionCheck,
    AuditEvent,
    CalibrationItem,
    Criterion,
    Item,
    ItemMedia,
    Output,
    StudyCollaborator,
    System,
)
from ..permissions import studies_visible_to
from ..spec.study import show_if_problems
from .kind_fields import KindFieldsForm
from .media import ItemMediaInline, save_media_formset
from .scoping import ONLY_VISIBLE, StudyRowChoices, StudyRowForm, StudyScopedAdmin
from .widgets import StructuredFieldsMixin


@admin.register(System)
class SystemAdmin(StructuredFieldsMixin, StudyScopedAdmin):
    list_display = ("name", "study", "description")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("name", "description", "study__slug")


class OutputInline(LabelledRowsMixin, StudyRowChoices, admin.TabularInline):
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
class ItemAdmin(StructuredFieldsMixin, StudyScopedAdmin):
    list_display = ("external_id", "study", "short_reference", "metadata")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("external_id", "reference", "context")
    inlines = (OutputInline, ItemMediaInline)
    list_select_related = ("study",)

    def save_formset(self, request, form, formset, change):
        if formset.model is ItemMedia:  # through evalstudy.media, which audits
            save_media_formset(request, form.instance, formset)
            return
        super().save_formset(request, form, formset, change)

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


class CriterionRulesForm(KindFieldsForm, StudyRowForm):
    """A criterion refused at save when its kind's settings are wrong (a Likert criterion
    without scale points, a categorical one without options, an inverted slider range):
    `criteria.criterion_problems`, the rule that opening the study applies too. Each problem
    is shown on the field it names. It shows and keeps only its kind's fields
    (`KindFieldsForm`)."""

    # Where a problem is shown: the first of these its sentence names (else on the kind).
    problem_fields = (("allow_both", "allow_both"), ("scale_points", "scale_points"),
                      ("scale_min", "scale_min"),
                      ("scale_max", "scale_max"), ("severity_weights", "severity_weights"),
                      ("span_reference", "span_reference"), ("option", "options"),
                      ("categor", "options"), ("label", "labels"))

    def clean(self):
        data = super().clean()
        if data.get("kind"):
            problem = self.kind_switch_problem(data["kind"])
            if problem is not None:
                self.add_error("kind", problem)
                return data
            self.drop_unused_settings(data)
        if any(name in self.errors for name in rules.RULE_FIELDS) or not data.get("kind"):
            return data  # the field's own error first
        values = {name: data.get(name, getattr(self.instance, name, None))
                  for name in rules.RULE_FIELDS}
        for problem in rules.criterion_problems(values):
            field = next((name for word, name in self.problem_fields if word in problem),
                         "kind")
            self.add_error(field if field in self.fields else None, f"{problem[:1].upper()}"
                                                                    f"{problem[1:]}.")
        return data


class CriterionForm(CriterionRulesForm):
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
class CriterionAdmin(StructuredFieldsMixin, StudyScopedAdmin):
    form = CriterionForm
    list_display = ("key", "study", "kind", "required", "show_if_criterion", "order")
    list_filter = ("kind", ("study", ONLY_VISIBLE))
    search_fields = ("key", "prompt")


@admin.register(CalibrationItem)
class CalibrationItemAdmin(StructuredFieldsMixin, StudyScopedAdmin):
    list_display = ("key", "study", "order", "expected")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("key", "text", "reference")


@admin.register(AttentionCheck)
class AttentionCheckAdmin(StructuredFieldsMixin, StudyScopedAdmin):
    list_display = ("key", "study", "order", "expected")
    list_filter = (("study", ONLY_VISIBLE),)
    search_fields = ("key", "text", "reference")


@admin.register(StudyCollaborator)
class StudyCollaboratorAdmin(StudyScopedAdmin):
    list_display = ("study", "user", "role")
    list_filter = ("role",)
    study_role = perms.OWNER  # only owners (and admins) manage collaborators


class SlotInline(LabelledRowsMixin, admin.TabularInline):
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
