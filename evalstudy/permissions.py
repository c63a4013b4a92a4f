"""Who may do what with a study: every object-level check lives here.

Roles on one study, weakest first: viewer < editor < owner < admin.
- admin: a superuser; every study.
- owner: `Study.owner` (the researcher who created it); may also manage collaborators and the
  personal data of the study's raters.
- editor / viewer: a `StudyCollaborator` row with that role.
A rater is not a role on a study: raters reach only their own slots (annotation endpoints).

Outcomes that every caller (API, HTML pages, admin) follows:
- a study the user has no role on does not exist for them (404, never revealing it);
- a study they can see but not change with their role is 403.

Creating studies (API, admin imports) needs a researcher account: an active staff user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from rest_framework import permissions as drf_permissions

from .models import Rater, Study, StudyCollaborator

if TYPE_CHECKING:
    from django.db.models import QuerySet

VIEWER = "viewer"
EDITOR = "editor"
OWNER = "owner"
ADMIN = "admin"
ROLE_RANK = {VIEWER: 1, EDITOR: 2, OWNER: 3, ADMIN: 4}


def _signed_in(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def is_researcher(user: Any) -> bool:
    """Whether `user` may create studies: an active staff user (researchers use the admin)."""
    return _signed_in(user) and bool(user.is_superuser or user.is_staff)


def study_access(user: Any, study: Study) -> str | None:
    """The user's role on `study` ("admin", "owner", "editor", "viewer") or None."""
    if not _signed_in(user):
        return None
    if user.is_superuser:
        return ADMIN
    if study.owner_id is not None and study.owner_id == user.pk:
        return OWNER
    return (
        StudyCollaborator.objects.filter(study=study, user=user)
        .values_list("role", flat=True).first()
    )


def has_role(user: Any, study: Study, minimum: str) -> bool:
    role = study_access(user, study)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[minimum]


def can_edit_study(user: Any, study: Study) -> bool:
    """Change the study's configuration, items, outputs, raters; start runs."""
    return has_role(user, study, EDITOR)


def can_manage_collaborators(user: Any, study: Study) -> bool:
    """Add or remove collaborators, and export or erase raters' personal data."""
    return has_role(user, study, OWNER)


def studies_visible_to(user: Any) -> QuerySet[Study]:
    """Studies the user has any role on (all for superusers, none for anonymous users)."""
    if not _signed_in(user):
        return Study.objects.none()
    if user.is_superuser:
        return Study.objects.all()
    shared = StudyCollaborator.objects.filter(user=user).values("study_id")
    return Study.objects.filter(Q(owner=user) | Q(pk__in=shared))


def studies_with_role(user: Any, minimum: str) -> QuerySet[Study]:
    """Studies on which the user has at least role `minimum`."""
    if not _signed_in(user):
        return Study.objects.none()
    if user.is_superuser:
        return Study.objects.all()
    roles = [role for role, rank in ROLE_RANK.items() if rank >= ROLE_RANK[minimum]]
    shared = StudyCollaborator.objects.filter(user=user, role__in=roles).values("study_id")
    if ROLE_RANK[minimum] <= ROLE_RANK[OWNER]:
        return Study.objects.filter(Q(owner=user) | Q(pk__in=shared))
    return Study.objects.none()


def check_study(user: Any, study: Study | None, minimum: str) -> Study:
    """`study` if the user has role `minimum` on it; Http404 when they have no role (or there
    is no study), PermissionDenied when their role is too weak."""
    role = study_access(user, study) if study is not None else None
    if study is None or role is None:
        raise Http404("No such study.")
    if ROLE_RANK[role] < ROLE_RANK[minimum]:
        raise PermissionDenied(
            f"Your role on study {study.slug!r} is {role}; this needs {minimum} or above."
        )
    return study


def study_for(user: Any, slug: str, minimum: str = VIEWER) -> Study:
    """The study with `slug`, checked as in `check_study`."""
    return check_study(user, Study.objects.filter(slug=slug).first(), minimum)


def raters_in(studies: Any) -> QuerySet[Rater]:
    """Raters who entered one of `studies` (a queryset of pks or ids) or hold a seat there.
    An account holder who has not accepted an invitation is not among them."""
    # Subqueries rather than joins: no duplicate rows, so no DISTINCT (the admin deletes
    # from this queryset, which DISTINCT would forbid).
    from .models import Assignment, Enrollment

    return Rater.objects.filter(
        Q(pk__in=Enrollment.objects.filter(study__in=studies, invitation_pending=False)
          .values("rater_id"))
        | Q(pk__in=Assignment.objects.filter(study__in=studies, rater__isnull=False)
            .values("rater_id"))
    )


def raters_of_study(study: Study) -> QuerySet[Rater]:
    """Raters who entered the study or hold (or held) a seat in it."""
    return raters_in([study.pk])


def raters_visible_to(user: Any) -> QuerySet[Rater]:
    """Raters of the studies the user can see (every rater for superusers)."""
    if not _signed_in(user):
        return Rater.objects.none()
    if user.is_superuser:
        return Rater.objects.all()
    return raters_in(studies_visible_to(user).values("pk"))


def privacy_scope(user: Any) -> set[int] | None:
    """The studies whose raters' personal data `user` may export or erase: None (every study)
    for an admin, else the ids of the studies they own. Collaborators never do."""
    if _signed_in(user) and user.is_superuser:
        return None
    return set(studies_with_role(user, OWNER).values_list("pk", flat=True))


# --- DRF ------------------------------------------------------------------------------------
class IsResearcher(drf_permissions.BasePermission):
    """An active staff user (may create studies)."""

    message = "This needs a researcher account."

    def has_permission(self, request, view) -> bool:
        return is_researcher(request.user)


class StudyRole(drf_permissions.BasePermission):
    """Object-level access to the study a view works on.

    The view gives `study_roles` (HTTP method -> minimum role; methods not listed are refused)
    and `get_study()`, which must call `check_study` (or `study_for`) so that an invisible study
    is a 404 and a too-weak role a 403. Anonymous requests fail before any lookup (401; 403
    for a rater token, which reaches only the rater endpoints).
    """

    message = "This needs a researcher's account; rater tokens reach only /api/v1/rater/."

    def has_permission(self, request, view) -> bool:
        if not _signed_in(request.user):
            return False
        view.get_study()
        return True


def study_role_for(view: Any, method: str) -> str:
    """The minimum role `view` asks for `method` (HEAD and OPTIONS as GET)."""
    from rest_framework.exceptions import MethodNotAllowed

    method = "GET" if method in ("HEAD", "OPTIONS") else method
    if method not in view.study_roles:
        raise MethodNotAllowed(method)
    return view.study_roles[method]
