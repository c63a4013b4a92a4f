from django.urls import path

from . import views

app_name = "metrics"

urlpatterns = [
    path("<slug:slug>/metrics/", views.metrics_page, name="page"),
    path("<slug:slug>/metrics/runs/", views.runs_fragment, name="runs"),
    path("<slug:slug>/metrics/start/", views.start_run, name="start"),
    path("<slug:slug>/metrics.csv", views.results_csv, name="csv"),
]
