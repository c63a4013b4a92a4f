from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from evalstudy.admin.scoping import ONLY_VISIBLE, StudyScopedAdmin

from .models import AnalysisRun
from .services import analysis_run_start


@admin.register(AnalysisRun)
class AnalysisRunAdmin(StudyScopedAdmin):
    list_display = ("pk", "study", "status", "progress", "step", "created_at", "finished_at",
                    "report")
    list_filter = ("status", ("study", ONLY_VISIBLE))
    readonly_fields = ("study", "options", "status", "step", "done", "total", "error",
                       "created_by", "created_at", "started_at", "heartbeat_at", "finished_at",
                       "report")
    exclude = ("result", "report_html", "report_pdf")

    @admin.display(description="progress")
    def progress(self, run):
        return format_html('<progress max="{}" value="{}"></progress>', run.total or 1, run.done)

    @admin.display(description="report")
    def report(self, run):
        if run.status != AnalysisRun.Status.DONE:
            return "-"
        return format_html('<a href="{}">HTML</a> · <a href="{}">PDF</a> · <a href="{}">JSON</a>',
                           reverse("analysis:report", args=[run.pk]),
                           reverse("analysis:report_pdf", args=[run.pk]),
                           reverse("analysis:report_json", args=[run.pk]))

    def has_add_permission(self, request):
        return False


# On the study list (attached by AnalysisConfig.ready).
@admin.action(description="Run the analysis (on the workers)")
def run_analysis(study_admin, request, queryset):
    study_admin.each_study(request, queryset, analysis_run_start,
                           "analysis started (see its Analysis page)")
