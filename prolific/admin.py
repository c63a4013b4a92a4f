"""The Prolific link and synced submissions in the admin. The token is entered in a password
field that never shows it back (the list and form say "set" or "not set"); linking reads the
study from Prolific first, through the same service as the API."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import F

from evalstudy.admin.scoping import ADMIN, ONLY_VISIBLE, StudyScopedAdmin, rows_with_role
from evalstudy.admin.study_actions import study_name
from evalstudy.permissions import EDITOR

from . import services
from .client import ProlificError
from .models import ProlificLink, ProlificSubmission


class ProlificLinkForm(forms.ModelForm):
    api_token = forms.CharField(
        required=False, strip=True, max_length=500,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Stored and never shown again. Leave empty to keep the current one "
                  "(or to use token_env / PROLIFIC_API_TOKEN).",
    )

    class Meta:
        model = ProlificLink
        fields = ("study", "prolific_study_id", "token_env", "api_token")

    def clean(self):
        data = super().clean()
        if problem := services.token_env_problem(data.get("token_env") or ""):
            self.add_error("token_env", problem)
        if self.errors:
            return data
        study = self.instance.study if self.instance.pk else data.get("study")
        if services.link_taken(data.get("prolific_study_id") or "", study):
            raise forms.ValidationError("This Prolific study is already linked to another study.")
        # Ask Prolific before anything is stored: a wrong id or token is a form error.
        # The installation-wide token links only this study's own Prolific study (its internal
        # name): the same check as the service's.
        probe = ProlificLink(token_env=data.get("token_env", self.instance.token_env) or "",
                             api_token=data.get("api_token") or (
                                 self.instance.api_token if self.instance.pk else ""))
        if study is None:
            return data
        try:
            services.link_check(study, data.get("prolific_study_id") or "", probe)
        except ProlificError as exc:
            raise forms.ValidationError(f"Prolific: {exc}") from exc
        return data


@admin.register(ProlificLink)
class ProlificLinkAdmin(StudyScopedAdmin):
    form = ProlificLinkForm
    list_display = ("study", "prolific_study_id", "prolific_name", "prolific_status",
                    "token_status", "last_synced_at")
    list_filter = (("study", ONLY_VISIBLE),)
    readonly_fields = ("token_status", "prolific_name", "prolific_status", "linked_at",
                       "last_synced_at")
    actions = ["sync_now"]

    @admin.display(description="API token")
    def token_status(self, link: ProlificLink) -> str:
        return "set" if services.token_for(link) else "not set"

    def get_fields(self, request, obj=None):
        return ["study", "prolific_study_id", "token_env", "api_token", *self.readonly_fields]

    def get_readonly_fields(self, request, obj=None):
        # A link stays with its study (relink by changing the Prolific id). Only an
        # administrator names a server environment variable (services.token_env_refusal).
        fields = (*self.readonly_fields, "study") if obj is not None else self.readonly_fields
        return fields if request.user.is_superuser else (*fields, "token_env")

    def save_model(self, request, obj, form, change):
        # Through the service (it reads the study from Prolific and records the audit event):
        # not the audited admin's generic row save.
        data = form.cleaned_data
        link = services.prolific_link(
            study=obj.study if change else data["study"],
            prolific_study_id=data["prolific_study_id"],
            api_token=data.get("api_token") or None,
            # Read-only for editors (not in the form): the link keeps the one it has.
            token_env=(data.get("token_env") or "") if "token_env" in data else None,
            actor=request.user, source=ADMIN)
        obj.pk = link.pk

    @admin.action(description="Sync submissions from Prolific (frees returned/timed-out seats)")
    def sync_now(self, request, queryset):
        for link in rows_with_role(request, queryset.select_related("study"), EDITOR):
            try:
                counts = services.prolific_sync(study=link.study, actor=request.user,
                                                source=ADMIN)
            except ProlificError as exc:
                messages.error(request, f"{study_name(link.study)}: {exc}")
                continue
            messages.success(request, f"{study_name(link.study)}: "
                                      f"{services.sync_summary(counts)}")


@admin.register(ProlificSubmission)
class ProlificSubmissionAdmin(StudyScopedAdmin):
    study_path = "link__study"
    list_display = ("submission_id", "participant_id", "status", "link", "enrollment",
                    "seat_freed_at", "bonus_minor", "synced_at")
    list_filter = ("status",)
    search_fields = ("participant_id", "submission_id")
    readonly_fields = ("link", "submission_id", "participant_id", "status", "enrollment",
                       "started_at", "completed_at", "study_code", "seat_freed_at",
                       "bonus_minor", "synced_at")
    actions = ["approve"]

    def has_add_permission(self, request):
        return False

    def get_queryset(self, request):
        # Only the study's own participants' submissions, as the API and the monitor list
        # them (services.own_submissions); a row stored for someone who never enrolled
        # (before sync stopped storing them) stays hidden.
        return super().get_queryset(request).filter(
            enrollment__study=F("link__study"), enrollment__rater__study=F("link__study"))

    @admin.action(description="Approve on Prolific")
    def approve(self, request, queryset):
        rows = rows_with_role(request, queryset.select_related("link__study"), EDITOR,
                              study_of=lambda sub: sub.link.study)
        for sub in rows:
            try:
                services.prolific_approve(study=sub.link.study, submission_id=sub.submission_id,
                                          actor=request.user, source=ADMIN)
            except (ProlificError, services.UnknownSubmission) as exc:
                messages.error(request, f"{sub.submission_id}: {exc}")
