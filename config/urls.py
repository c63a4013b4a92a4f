from django.contrib import admin
from django.urls import include, path

from analysis import api as analysis_api
from metrics import api as metrics_api

admin.site.site_header = "evalstudy"
admin.site.site_title = "evalstudy admin"
admin.site.index_title = "Studies, raters and results"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("studies/", include("metrics.urls")),
    path("", include("analysis.urls")),
    path("api/v1/studies/<slug:slug>/metric-runs/", metrics_api.StudyMetricRuns.as_view(),
         name="api-study-metric-runs"),
    path("api/v1/metric-runs/<int:pk>/", metrics_api.MetricRunDetail.as_view(),
         name="api-metric-run"),
    path("api/v1/studies/<slug:slug>/metric-results/", metrics_api.StudyMetricResults.as_view(),
         name="api-metric-results"),
    path("api/v1/studies/<slug:slug>/analysis-runs/", analysis_api.StudyAnalysisRuns.as_view(),
         name="api-study-analysis-runs"),
    path("api/v1/analysis-runs/<int:pk>/", analysis_api.AnalysisRunDetail.as_view(),
         name="api-analysis-run"),
    path("", include("annotation.urls")),
]
