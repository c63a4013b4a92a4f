from django.urls import path

from . import adjudication_views, browser, views

app_name = "analysis"

urlpatterns = [
    path("studies/<slug:slug>/analysis/", views.analysis_page, name="page"),
    path("studies/<slug:slug>/analysis/runs/", views.runs_fragment, name="runs"),
    path("studies/<slug:slug>/analysis/start/", views.start, name="start"),
    # The judgment browser: filters as GET parameters, downloads of the filtered set.
    path("studies/<slug:slug>/judgments/", browser.judgments_view, name="judgments"),
    path("studies/<slug:slug>/judgments/download.<str:fmt>", browser.judgments_download,
         name="judgments_download"),
    path("studies/<slug:slug>/judgments/<int:pk>/", browser.judgment_item_view,
         name="judgment_item"),
    # The adjudication queue (analysis.adjudication) and the soft labels (analysis.soft_labels).
    path("studies/<slug:slug>/adjudication/", adjudication_views.queue_view,
         name="adjudication"),
    path("studies/<slug:slug>/adjudication/<slug:criterion>/<int:output>/",
         adjudication_views.unit_view, name="adjudication_unit"),
    path("studies/<slug:slug>/adjudication/<slug:criterion>/<int:output>/<int:output_b>/",
         adjudication_views.unit_view, name="adjudication_pair"),
    path("studies/<slug:slug>/exports/soft-labels.<str:fmt>",
         adjudication_views.soft_labels_download, name="soft_labels"),
    path("analysis/<int:pk>/report/", views.report, name="report"),
    path("analysis/<int:pk>/report.pdf", views.report_pdf, name="report_pdf"),
    path("analysis/<int:pk>/result.json", views.report_json, name="report_json"),
]
