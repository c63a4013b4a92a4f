from django.contrib import admin
from django.utils.html import format_html

from evalstudy import permissions as perms
from evalstudy.admin.scoping import ONLY_VISIBLE, StudyScopedAdmin

from .models import MetricConfig, MetricResult, MetricRun
from .services import metric_run_start
from .templatetags.metric_tags import alignment


@admin.register(MetricConfig)
class MetricConfigAdmin(admin.ModelAdmin):
    """Configurations are shared by every study that computes the same metric the same way;
    a researcher sees those that runs of their own studies used (a signature names model
    directories and parameters another lab chose)."""

    list_display = ("metric", "version", "short_hash", "created_at")
    list_filter = ("metric",)
    readonly_fields = ("metric", "version", "config_hash", "params", "signature", "created_at")

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        used = MetricRun.objects.filter(
            study__in=perms.studies_visible_to(request.user).values("pk")).values("configs")
        return queryset.filter(pk__in=used)

    @admin.display(description="config")
    def short_hash(self, config):
        return config.config_hash[:12]

    def has_add_permission(self, request):
        return False


@admin.register(MetricRun)
class MetricRunAdmin(StudyScopedAdmin):
    list_display = ("pk", "study", "status", "progress", "failed_outputs", "created_at",
                    "finished_at")
    list_filter = ("status", ("study", ONLY_VISIBLE))
    readonly_fields = ("study", "metrics", "params", "model_path", "status", "total", "done",
                       "failed_outputs", "batches_total", "error", "timings", "created_by",
                       "created_at", "started_at", "heartbeat_at", "finished_at", "configs")

    @admin.display(description="progress")
    def progress(self, run):
        return format_html('<progress max="{}" value="{}"></progress> {} / {}', run.total,
                           run.done, run.done, run.total)

    def has_add_permission(self, request):
        return False  # started from the study page, the command line or the API


@admin.register(MetricResult)
class MetricResultAdmin(StudyScopedAdmin):
    study_path = "output__item__study"
    list_display = ("output", "metric", "headline", "error", "computed_at")
    list_filter = (("output__item__study", ONLY_VISIBLE), "config__metric")
    search_fields = ("output__item__external_id",)
    list_select_related = ("output__item", "output__system", "config")
    readonly_fields = ("output", "config", "values", "headline", "highlighted", "details",
                       "error", "computed_at")

    @admin.display(description="metric", ordering="config__metric")
    def metric(self, result):
        return result.config.metric

    @admin.display(description="alignment")
    def highlighted(self, result):
        return alignment(result.details)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# On the study list (attached by MetricsConfig.ready).
@admin.action(description="Compute the default automatic metrics (on the workers)")
def compute_metrics(study_admin, request, queryset):
    study_admin.each_study(request, queryset, metric_run_start,
                           "metric run started (see its Metrics page)")
