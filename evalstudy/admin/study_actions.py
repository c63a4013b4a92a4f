"""Opening and closing one study from its page (and from the monitor), and how the admin words
what a study action did: the study called by its name (the admin capitalises a message's first
letter, which turned a slug into "Newc-trial"), one error message per problem that stops a
study from opening, each with a link to the admin page that fixes it.

The buttons post here (CSRF-checked by the admin's views); the services record the audit event,
as for the bulk actions of the study list."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, ngettext

from .. import services
from ..models import Study
from .scoping import ADMIN

# Where each kind of problem is fixed, by the place its Problem names (`where`, one of the
# places of evalstudy.services.checks; tests/evalstudy/test_study_actions_fixes.py checks
# that every place has a fix): a page of the study's admin and an anchor on it (Django names
# an inline's block "<prefix>-group"), with the link's words.
_FIXES = {
    "items": ("admin:evalstudy_study_items_grid", "", "Edit the items"),
    "systems": ("admin:evalstudy_study_change", "#systems-group", "Edit the systems"),
    "criteria": ("admin:evalstudy_study_change", "#criteria-group", "Edit the criteria"),
    "calibration": ("admin:evalstudy_study_change", "#calibration_items-group",
                         "Edit the practice items"),
    "attention": ("admin:evalstudy_study_change", "#attention_checks-group",
                       "Edit the attention checks"),
    "plan": ("admin:evalstudy_study_change", "#plan-group", "Edit the adaptive plan"),
    "design": ("admin:evalstudy_study_change", "", "Edit the design settings"),
    "settings": ("admin:evalstudy_study_change", "", "Edit the settings"),
}


def study_name(study: Study) -> str:
    """The study as a message names it: its title in quotes (typed as the researcher typed it,
    whatever the admin does to a message's first letter), else its slug."""
    return f"“{study.title or study.slug}”"


def problem_fix(study: Study, problem: str) -> tuple[str, str]:
    """(URL, link text) of the page that fixes `problem` (a Problem of the open check; any other
    sentence is fixed on the study's page)."""
    name, anchor, label = _FIXES.get(getattr(problem, "where", "settings"),
                                     _FIXES["settings"])
    return reverse(name, args=[study.pk]) + anchor, gettext(label)


def report_refusal(request: HttpRequest, study: Study, error: ValidationError,
                   heading: str) -> None:
    """A refused action as error messages: `heading` with the number of problems, then each
    problem in a message of its own (a list inside one message showed the admin's green tick
    inside the red box), linked to where it is fixed when the service says where."""
    problems = getattr(error, "problems", None) or error.messages
    messages.error(request, ngettext("%(study)s: %(heading)s (%(count)d problem).",
                                     "%(study)s: %(heading)s (%(count)d problems).",
                                     len(problems)) % {
        "study": study_name(study), "heading": heading, "count": len(problems)})
    for problem in problems:
        if getattr(problem, "where", None) is None:
            messages.error(request, problem)
            continue
        url, label = problem_fix(study, problem)
        messages.error(request, format_html('{} <a href="{}">{}</a>', problem, url, label))


def report_done(request: HttpRequest, study: Study, done: str, warnings=()) -> None:
    messages.success(request, f"{study_name(study)}: {done}.")
    for warning in warnings:
        messages.warning(request, f"{study_name(study)}: {warning}")


def _back(request: HttpRequest, study: Study) -> HttpResponseRedirect:
    """Back where the button was (the study's page or its monitor), never to another site."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return HttpResponseRedirect(wanted)
    return HttpResponseRedirect(reverse("admin:evalstudy_study_change", args=[study.pk]))


def study_open_view(study_admin, request: HttpRequest, pk: int) -> HttpResponse:
    """The Open button: editors of the study only (else 403, or 404 for a study they cannot
    see). A refusal lists what stops the study, each problem linked to its fix."""
    if request.method != "POST":  # a method of the study admin: Django's decorator cannot wrap it
        return HttpResponseNotAllowed(["POST"])
    study = study_admin.study_or_404(request, pk, change=True)
    try:
        services.study_open(study=study, actor=request.user, source=ADMIN)
    except ValidationError as error:
        report_refusal(request, study, error, gettext("not opened"))
    else:
        report_done(request, study, gettext("opened; raters can start"),
                    services.study_warnings(study=study))
    return _back(request, study)


def study_close_view(study_admin, request: HttpRequest, pk: int) -> HttpResponse:
    """The Close button: no new seats are handed out; judgments already given are kept."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    study = study_admin.study_or_404(request, pk, change=True)
    services.study_close(study=study, actor=request.user, source=ADMIN)
    report_done(request, study, gettext("closed; no rater is served new items"))
    return _back(request, study)
