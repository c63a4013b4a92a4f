from django.urls import path

from . import views

app_name = "analysis"

urlpatterns = [
    path("studies/<slug:slug>/analysis/", views.analysis_page, name="page"),
    path("studies/<slug:slug>/analysis/runs/", views.runs_fragment, name="runs"),
    path("studies/<slug:slug>/analysis/start/", views.start, name="start"),
    path("analysis/<int:pk>/report/", views.report, name="report"),
    path("analysis/<int:pk>/report.pdf", views.report_pdf, name="report_pdf"),
    path("analysis/<int:pk>/result.json", views.report_json, name="report_json"),
]
