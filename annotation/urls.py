from django.urls import path

from . import media_views, monitor_views, preview, views

app_name = "annotation"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("enter/<str:token>/", views.enter, name="enter"),
    path("c/<slug:slug>/", views.crowd_entry, name="crowd_entry"),
    path("invitations/<slug:slug>/", views.invitation, name="invitation"),
    path("s/<slug:slug>/", views.rate, name="rate"),
    path("s/<slug:slug>/consent/", views.consent, name="consent"),
    path("s/<slug:slug>/instructions/", views.instructions, name="instructions"),
    path("s/<slug:slug>/slots/<int:slot_id>/", views.submit, name="submit"),
    path("s/<slug:slug>/slots/<int:slot_id>/edit/", views.slot, name="slot"),
    path("s/<slug:slug>/slots/<int:slot_id>/feedback/", views.feedback, name="feedback"),
    # Media stimuli: a signed, expiring URL per rater, slot and file; the player's reports.
    path("m/<str:token>", media_views.media_file, name="media"),
    path("listening/<int:slot_id>/<str:which>/", media_views.listening, name="listening"),
    path("monitor/<slug:slug>/", monitor_views.monitor_page, name="monitor"),
    path("monitor/<slug:slug>/live/", monitor_views.monitor_fragment, name="monitor_fragment"),
    path("monitor/<slug:slug>/raters/<int:rater_id>/<str:action>/", monitor_views.rater_action,
         name="rater_action"),
    path("monitor/<slug:slug>/progress.csv", monitor_views.monitor_csv, name="monitor_csv"),
    # Preview as a rater: the first seat walked by a researcher, nothing stored.
    path("preview/<slug:slug>/", preview.preview_page, name="preview"),
    path("preview/<slug:slug>/start/", preview.preview_start, name="preview_start"),
    path("preview/<slug:slug>/feedback/", preview.preview_feedback_page,
         name="preview_feedback"),
    path("preview/<slug:slug>/media/<int:media_id>", preview.preview_media,
         name="preview_media"),
]
