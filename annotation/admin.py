from django.contrib import admin

from evalstudy.admin.scoping import ADMIN, ONLY_VISIBLE, StudyScopedAdmin
from evalstudy.forms import JudgmentsUploadForm
from evalstudy.spec.files import parse_judgments_csv
from kit.admin import LabelledRowsMixin

from .models import Judgment, JudgmentRevision
from .services import judgments_import


class RevisionInline(LabelledRowsMixin, admin.TabularInline):
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


# A page of the study admin (attached by AnnotationConfig.ready as
# "admin:evalstudy_study_import_judgments").
def import_judgments_view(study_admin, request, pk):
    study = study_admin.study_or_404(request, pk, change=True)

    def run(text, name, data):
        counts = judgments_import(study=study, rows=parse_judgments_csv(text, name),
                                  file_name=name, default_rater_kind=data["rater_kind"],
                                  actor=request.user, source=ADMIN)
        return study, (f"{counts.created} judgments created, {counts.revised} revised, "
                       f"{counts.unchanged} unchanged")

    return study_admin.upload(
        request, JudgmentsUploadForm, title=f"Import judgments into {study.slug}",
        study=study, run=run,
        help_text="Tidy CSV: rater,item,system,criterion,value (optional rater_kind; "
                  "system_b for pairwise criteria).",
    )
