"""A researcher's home: the admin's index page opens on their studies (each with its status,
seats taken and done, judgments, last activity, what stops a draft from opening, and the next
thing to do as a button) above Django's list of models.

Here rather than in evalstudy because it counts judgments (this app's) and links the monitor;
the study app's own rules decide the rest: which studies a user sees
(evalstudy.permissions), what stops opening (evalstudy.services.study_validate, the check the
Open button runs) and where each problem is fixed (evalstudy.admin.study_actions)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.contrib import admin
from django.db.models import Count, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.translation import gettext

from evalstudy import permissions as perms
from evalstudy.admin.study_actions import problem_fix
from evalstudy.models import Assignment, Study, StudyCollaborator
from evalstudy.services import study_validate

from .models import Judgment

PROBLEMS_SHOWN = 3
DESIGN = Assignment.Source.DESIGN


@dataclass(frozen=True)
class NextAction:
    label: str
    url: str
    post: bool = False  # a form button (opening), not a link


@dataclass
class HomeStudy:
    study: Study
    seats: int
    seats_taken: int
    seats_done: int
    judgments: int
    last_activity: dt.datetime
    can_change: bool
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (text, url, link text)
    more_problems: int = 0
    next_action: NextAction | None = None


def _editable_study_ids(user) -> set[int] | None:
    """The studies among the user's on which they may open and close (editor or above), in
    one query; None: all of them (a superuser)."""
    if user.is_superuser:
        return None
    if not user.has_perm("evalstudy.change_study"):
        return set()
    owned = set(Study.objects.filter(owner=user).values_list("pk", flat=True))
    return owned | set(StudyCollaborator.objects.filter(
        user=user, role__in=[perms.EDITOR, perms.OWNER]).values_list("study_id", flat=True))


def _next_action(row: HomeStudy) -> NextAction | None:
    study = row.study
    if study.status == Study.Status.DRAFT:
        if row.problems:
            _, url, label = row.problems[0]
            return NextAction(label, url)
        if not row.can_change:
            return None
        return NextAction(gettext("Open study"),
                          reverse("admin:evalstudy_study_open", args=[study.pk]), post=True)
    if study.status == Study.Status.OPEN:
        if row.seats_taken == 0 and row.can_change:
            return NextAction(gettext("Invite raters"),
                              reverse("admin:evalstudy_study_invite", args=[study.pk]))
        return NextAction(gettext("Monitor"), reverse("annotation:monitor", args=[study.slug]))
    return NextAction(gettext("Run analysis"), reverse("analysis:page", args=[study.slug]))


def studies_home(user) -> list[HomeStudy]:
    """The user's studies (those they may see), the most recently changed first, with their
    counts in one query; a draft's problems cost the open check's queries for that draft."""
    judgments = Judgment.objects.filter(slot__assignment__study=OuterRef("pk"))
    studies = perms.studies_visible_to(user).annotate(
        n_seats=Count("assignments", filter=Q(assignments__source=DESIGN)),
        n_taken=Count("assignments", filter=Q(assignments__source=DESIGN,
                                              assignments__rater__isnull=False)),
        n_done=Count("assignments", filter=Q(assignments__source=DESIGN,
                                             assignments__state=Assignment.State.DONE)),
        n_judgments=Coalesce(Subquery(judgments.order_by().values("slot__assignment__study")
                                      .annotate(n=Count("pk")).values("n")), 0),
        last_judgment=Subquery(judgments.order_by().values("slot__assignment__study")
                               .annotate(last=Max("submitted_at")).values("last")),
    ).order_by("-updated_at", "-pk")
    editable = _editable_study_ids(user)
    rows = []
    for study in studies:
        row = HomeStudy(
            study=study, seats=study.n_seats, seats_taken=study.n_taken,
            seats_done=study.n_done, judgments=study.n_judgments,
            last_activity=max(filter(None, (study.last_judgment, study.updated_at))),
            can_change=editable is None or study.pk in editable)
        if study.status == Study.Status.DRAFT:
            problems = study_validate(study=study)
            row.problems = [(problem, *problem_fix(study, problem))
                            for problem in problems[:PROBLEMS_SHOWN]]
            row.more_problems = max(0, len(problems) - PROBLEMS_SHOWN)
        row.next_action = _next_action(row)
        rows.append(row)
    return rows


def admin_index(request: HttpRequest, extra_context=None) -> HttpResponse:
    """The admin's index (/admin/): the studies above the models (the site's index template,
    admin/studies_home.html)."""
    return admin.site.index(request, extra_context={
        "home_studies": studies_home(request.user),
        "may_add_study": request.user.has_perm("evalstudy.add_study"),
        **(extra_context or {})})
