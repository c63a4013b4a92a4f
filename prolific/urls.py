from django.urls import path

from . import views

app_name = "prolific"
urlpatterns = [
    path("monitor/<slug:slug>/prolific/sync/", views.sync_now, name="sync"),
]
