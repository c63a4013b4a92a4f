"""Raters and their enrollments: invitations, entry links, and the personal data that only
the owner of a study they take part in (or an admin) sees, exports or erases."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext, ngettext

from kit.admin import AuditedAdmin

from .. import permissions as perms
from .. import services
from ..models import Enrollment, Rater
from ..privacy import NotAPerson, OutsideYourStudies, rater_data_erase, rater_data_export
from .links import COPY_JS, copy_field
from .scoping import ADMIN, ONLY_VISIBLE, StudyScopedAdmin
from .widgets import StructuredFieldsMixin


class RaterInviteForm(forms.ModelForm):
    """Inviting someone to a study: a new rater of that study with a personal entry link, or,
    with a username, the account holder (who signs in)."""

    username = forms.CharField(
        required=False, help_text="Invite the holder of this account instead: they sign in "
                                  "(no entry link). Leave empty for a personal-link rater.")

    class Meta:
        model = Rater
        fields = ("study", "kind", "display_name", "external_id", "metadata")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["study"].required = True
        self.fields["kind"].choices = [(k, label) for k, label in Rater.Kind.choices
                                       if k in Rater.HUMAN_KINDS]

    def clean_username(self):
        username = self.cleaned_data.get("username", "").strip()
        if not username:
            return ""
        # No error for an unknown name: the page must not tell who has an account.
        return get_user_model().objects.filter(username=username, is_active=True).first()

    def clean(self):
        data = super().clean()
        study, external_id = data.get("study"), data.get("external_id")
        if (study is not None and external_id and not self.cleaned_data.get("username")
                and Rater.objects.filter(study=study, kind=data.get("kind"),
                                         external_id=external_id).exists()):
            self.add_error("external_id", f"This study already has a rater {external_id!r}.")
        return data


@admin.register(Rater)
class RaterAdmin(StructuredFieldsMixin, AuditedAdmin):
    """Researchers see the raters of their studies only (entered, invited or holding a seat).

    A rater belongs to one study (account holders excepted): adding one here invites it to a
    study on which the user is an editor. Its personal data (entry link, metadata; changing,
    deleting, exporting, erasing it) is for the owner of that study; account holders, whose
    accounts span the installation, are managed by admins."""

    list_display = ("__str__", "kind", "study", "user", "external_id", "created_at",
                    "entry_link")
    list_filter = ("kind",)
    search_fields = ("external_id", "display_name", "user__username")
    readonly_fields = ("study", "user", "entry_link", "created_at")
    actions = ("export_personal_data", "erase_personal_data")
    list_select_related = ("study", "user")

    class Media:
        js = (COPY_JS,)

    def get_queryset(self, request):
        return perms.raters_visible_to(request.user).select_related("study", "user")

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = RaterInviteForm
            kwargs["fields"] = None
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("study", "kind", "display_name", "external_id", "metadata", "username")
        fields = ["kind", "study", "user", "external_id", "display_name", "metadata",
                  "entry_link", "created_at"]
        if not self.may_manage(request, obj):
            return [name for name in fields if name not in self.PERSONAL]
        return fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "study":
            kwargs["queryset"] = perms.studies_with_role(request.user, perms.EDITOR)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        if form.cleaned_data.get("username") != "":
            # An account holder: an invitation they accept on their page. The same message
            # whether or not the account exists.
            services.rater_invite(study=obj.study, kind=obj.kind,
                                  user=form.cleaned_data.get("username"),
                                  username=form.data.get("username", ""), actor=request.user,
                                  source=ADMIN)
            request._account_invited = True
            return None
        invited = services.rater_invite(
            study=obj.study, kind=obj.kind, display_name=obj.display_name,
            external_id=obj.external_id, metadata=obj.metadata, actor=request.user, source=ADMIN)
        # The admin goes on with `obj` (its log entry, the redirect): make it the invited row.
        obj.__dict__.update({k: v for k, v in invited.__dict__.items() if k != "_state"})
        obj._state = invited._state
        return None

    def log_addition(self, request, obj, message):
        if not getattr(request, "_account_invited", False):
            super().log_addition(request, obj, message)

    def response_add(self, request, obj, post_url_continue=None):
        if getattr(request, "_account_invited", False):
            messages.success(request, "If an active account with this username exists, it has "
                                      "been invited; it is listed among the study's raters once "
                                      "its holder accepts.")
            return HttpResponseRedirect(reverse("admin:evalstudy_rater_changelist"))
        return super().response_add(request, obj, post_url_continue)

    def may_manage(self, request, rater) -> bool:
        """Change, delete, see the entry link and metadata: an admin, or the owner of the
        study the rater belongs to (never an account holder's row: it spans studies)."""
        if request.user.is_superuser:
            return True
        if rater.user_id is not None or rater.study_id is None:
            return False
        return perms.has_role(request.user, rater.study, perms.OWNER)

    def may_see_personal_data(self, request, rater) -> bool:
        """Export (scoped to their studies) and erase (refused beyond them, see privacy):
        an admin, or the owner of a study the rater took part in."""
        if request.user.is_superuser:
            return True
        return perms.studies_with_role(request.user, perms.OWNER).filter(
            Q(enrollments__rater=rater) | Q(assignments__rater=rater)).exists()

    def _managed(self, request, queryset) -> list[Rater]:
        allowed = [rater for rater in queryset if self.may_see_personal_data(request, rater)]
        skipped = len(queryset) - len(allowed)
        if skipped:
            messages.warning(request, ngettext(
                "%(count)d rater skipped: their personal data is for the owner of a study "
                "they take part in only.",
                "%(count)d raters skipped: their personal data is for the owner of a study "
                "they take part in only.", skipped) % {"count": skipped})
        return allowed

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or self.may_manage(request, obj))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or self.may_manage(request, obj))

    # The entry link is a secret that lets its holder act as the rater, and metadata may hold
    # an email: both are for those who manage the rater's personal data only.
    PERSONAL = ("entry_link", "metadata")

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return shown if request.user.is_superuser else [
            name for name in shown if name not in self.PERSONAL]

    @admin.display(description="personal entry link")
    def entry_link(self, rater):
        if not rater.pk or not rater.has_entry_link:
            return "-" if not rater.pk or not rater.is_human else "none: signs in with account"
        # Absolute, to paste into an email (the invite page lists a study's links with the
        # address the researcher's browser used; here, with no request, the site's).
        url = settings.SITE_URL.rstrip("/") + reverse("annotation:enter", args=[rater.access_token])
        return copy_field(url, gettext("Copy the entry link of %(rater)s") % {"rater": rater})

    @admin.action(description="Export personal data of selected raters (JSON)",
                  permissions=("view",))
    def export_personal_data(self, request, queryset):
        exported = []
        scope = perms.privacy_scope(request.user)
        for rater in self._managed(request, queryset):
            exported.append(rater_data_export(rater, studies=scope, study=rater.study,
                                              actor=request.user, source=ADMIN))
        if not exported:
            return None
        document = exported[0] if len(exported) == 1 else exported
        name = f"rater-{exported[0]['rater']['id']}" if len(exported) == 1 else "raters"
        response = HttpResponse(json.dumps(document, indent=2, ensure_ascii=False),
                                content_type="application/json; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}-personal-data.json"'
        return response

    @admin.action(description="Erase personal data of selected raters (keeps judgments)",
                  permissions=("change",))
    def erase_personal_data(self, request, queryset):
        """Asks for confirmation first (a second POST with `confirm`), as deleting does."""
        queryset = self._managed(request, queryset)
        if not queryset:
            return None
        if request.POST.get("confirm") != "yes":
            context = {
                **self.admin_site.each_context(request), "raters": queryset,
                "opts": self.model._meta, "title": "Erase personal data?",
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            }
            return render(request, "admin/evalstudy/rater/erase_confirmation.html", context)
        for rater in queryset:
            try:
                rater_data_erase(rater, actor=request.user, source=ADMIN,
                                 studies=perms.privacy_scope(request.user))
            except (NotAPerson, OutsideYourStudies) as error:
                messages.error(request, str(error))
            else:
                messages.success(request, f"Personal data of rater {rater.pk} erased.")
        return None


@admin.register(Enrollment)
class EnrollmentAdmin(StudyScopedAdmin):
    """Participation records: consent and stop times are evidence, so they are read-only."""

    list_display = ("rater", "study", "entered_at", "consented_at", "instructions_seen_at",
                    "stopped_at", "stop_reason", "invitation_pending", "platform_study_id",
                    "platform_session_id")
    list_filter = ("stop_reason", ("study", ONLY_VISIBLE))
    search_fields = ("rater__external_id", "rater__display_name", "platform_session_id")
    readonly_fields = ("study", "rater", "entered_at", "consented_at", "instructions_seen_at",
                       "stopped_at", "stop_reason", "invitation_pending", "platform_study_id",
                       "platform_session_id")
    list_select_related = ("rater", "study")
    # The crowd platform's session id is what resumes a participation (with the participant
    # id): a secret for the study's owner, as entry links are.
    SECRET = "platform_session_id"  # noqa: S105 - a field name, not a password

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return shown if request.user.is_superuser else [n for n in shown if n != self.SECRET]

    def get_search_fields(self, request):
        fields = super().get_search_fields(request)
        return fields if request.user.is_superuser else [f for f in fields if f != self.SECRET]

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if obj is not None and perms.has_role(request.user, obj.study, perms.OWNER):
            return fields
        return [name for name in fields if name != self.SECRET]

    def has_add_permission(self, request):
        return False
