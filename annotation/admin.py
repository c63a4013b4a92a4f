from django.contrib import admin

from evalstudy.admin import ONLY_VISIBLE, StudyScopedAdmin

from .models import Judgment, JudgmentRevision


class RevisionInline(admin.TabularInline):
    model = JudgmentRevision
    extra = 0
    can_delete = False
    readonly_fields = ("value", "submitted_at", "replaced_at")
    max_num = 0


@admin.register(Judgment)
class JudgmentAdmin(StudyScopedAdmin):
    """Judgments are evidence: visible and filterable, never edited by hand."""

    study_path = "criterion__study"
    list_display = ("criterion", "value", "rater", "slot", "served_at", "submitted_at",
                    "revision")
    list_filter = (("criterion__study", ONLY_VISIBLE), ("criterion", ONLY_VISIBLE), "rater__kind")
    search_fields = ("rater__external_id", "value")
    list_select_related = ("criterion", "rater", "slot")
    readonly_fields = ("slot", "criterion", "rater", "value", "numeric_value", "served_at",
                       "submitted_at", "revision")
    inlines = (RevisionInline,)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(JudgmentRevision)
class JudgmentRevisionAdmin(StudyScopedAdmin):
    study_path = "judgment__criterion__study"
    list_display = ("judgment", "value", "submitted_at", "replaced_at")
    readonly_fields = ("judgment", "value", "submitted_at", "replaced_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
