"""A study's invite page: every way in for its raters, absolute and with a Copy button (the
crowd URL to paste into the platform, each personal-link rater's link with where their seat
stands), a form that adds personal links, and the links as a CSV.

Personal links are secrets that let their holder act as the rater: like the rater admin, the
page shows them to the study's owner (and admins) only; editors see the crowd URL and may add
links. Registered on the study admin as its other pages are (`study_admin_page_register`)."""

from __future__ import annotations

import io

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy, ngettext

from kit.csvsafe import SafeDictWriter

from .. import permissions as perms
from .. import services
from ..models import Rater, Study
from .links import copy_field
from .scoping import ADMIN
from .studies import study_admin_page_register

MAX_NEW_LINKS = 200


class NewLinksForm(forms.Form):
    count = forms.IntegerField(label=gettext_lazy("How many"), min_value=1,
                               max_value=MAX_NEW_LINKS, initial=5)
    kind = forms.ChoiceField(label=gettext_lazy("Rater kind"), choices=[
        (kind, label) for kind, label in Rater.Kind.choices if kind in Rater.HUMAN_KINDS],
        initial=Rater.Kind.EXPERT)


def _may_see_links(request, study: Study) -> bool:
    return request.user.is_superuser or perms.has_role(request.user, study, perms.OWNER)


def _base_url(request) -> str:
    return request.build_absolute_uri("/")


def invite_view(study_admin, request, pk: int) -> HttpResponse:
    """GET: the page; POST: add `count` personal-link raters (editors of the study)."""
    study = study_admin.study_or_404(request, pk, change=True)
    form = NewLinksForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        count = form.cleaned_data["count"]
        try:
            for _ in range(count):
                services.rater_invite(study=study, kind=form.cleaned_data["kind"],
                                      actor=request.user, source=ADMIN)
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
        else:
            messages.success(request, ngettext("Added %(count)d personal link.",
                                               "Added %(count)d personal links.",
                                               count) % {"count": count})
        return HttpResponseRedirect(reverse("admin:evalstudy_study_invite", args=[study.pk]))
    may_see = _may_see_links(request, study)
    links = services.entry_links(study, _base_url(request)) if may_see else []
    crowd = services.crowd_entry_url(study, _base_url(request))
    context = {
        **study_admin.admin_site.each_context(request), "opts": study_admin.model._meta,
        "title": gettext("Invite raters to %(study)s") % {"study": study.title or study.slug},
        "study": study, "form": form, "may_see_links": may_see,
        "crowd": copy_field(crowd, gettext("Copy the crowd URL")) if crowd else None,
        "links": [(link, copy_field(link.url, gettext("Copy the link of %(rater)s")
                                     % {"rater": link.name})) for link in links],
    }
    return render(request, "admin/evalstudy/study/invite.html", context)


def invite_csv_view(study_admin, request, pk: int) -> HttpResponse:
    """Every entry link of the study as CSV: the crowd URL first (when the study takes a
    crowd), then one row per personal-link rater. The study's owner (and admins) only."""
    study = study_admin.study_or_404(request, pk, change=True)
    if not _may_see_links(request, study):
        raise PermissionDenied
    links = services.entry_links_export(study=study, base_url=_base_url(request),
                                        actor=request.user, source=ADMIN)
    buffer = io.StringIO()
    writer = SafeDictWriter(buffer, ["rater_id", "rater", "kind", "seat", "url"])
    writer.writeheader()
    crowd = services.crowd_entry_url(study, _base_url(request))
    if crowd:
        writer.writerow({"kind": "crowd (any participant)", "url": crowd})
    for link in links:
        writer.writerow({"rater_id": link.rater_id, "rater": link.name, "kind": link.kind,
                         "seat": link.seat, "url": link.url})
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-entry-links.csv"'
    return response


study_admin_page_register("<int:pk>/invite/", invite_view, "evalstudy_study_invite")
study_admin_page_register("<int:pk>/entry-links.csv", invite_csv_view,
                          "evalstudy_study_invite_csv")
