from django.urls import path

from . import views

app_name = "prolific"
urlpatterns = [
    path("monitor/<slug:slug>/prolific/sync/", views.sync_now, name="sync"),
    path("monitor/<slug:slug>/prolific/create/", views.create_study, name="create"),
    path("monitor/<slug:slug>/prolific/submissions/<str:submission_id>/",
         views.submission_action, name="submission_action"),
]
