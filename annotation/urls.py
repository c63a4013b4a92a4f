from django.urls import path

from . import views

app_name = "annotation"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("enter/<str:token>/", views.enter, name="enter"),
    path("s/<slug:slug>/", views.rate, name="rate"),
    path("s/<slug:slug>/slots/<int:slot_id>/", views.submit, name="submit"),
]
