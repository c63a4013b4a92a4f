from django.urls import path

from . import views

app_name = "evalstudy"

urlpatterns = [
    path("studies/<slug:slug>/blindness/", views.blindness_page, name="blindness"),
]
