"""Who the rater behind a request is: a logged-in user's Rater, or the one whose personal entry
link opened this browser session."""

from __future__ import annotations

from django.http import HttpRequest

from evalstudy.models import Enrollment, Rater

SESSION_KEY = "evalstudy_rater_id"
# For a crowd participant: the crowd platform's session id the browser was bound under. When
# another platform session takes the participation over (before it started; see
# `flow.crowd_enter`), browsers bound under the old one no longer act as the participant.
PLATFORM_SESSION_KEY = "evalstudy_platform_session"


def current_rater(request: HttpRequest) -> Rater | None:
    """The session's bound rater (entry link or crowd URL) wins over the account's rater: a
    researcher testing a crowd link in their own browser must become that participant.

    A session may be bound only to a person without an account: an account holder's rater is
    reached by signing in as them, never through a bound session (sessions bound before entry
    links stopped signing in are ignored)."""
    rater_id = request.session.get(SESSION_KEY)
    if rater_id:
        rater = Rater.objects.filter(pk=rater_id).first()
        if rater is not None and rater.has_entry_link and _still_bound(request, rater):
            return rater
    if request.user.is_authenticated:
        return Rater.objects.filter(user=request.user).first()
    return None


def _still_bound(request: HttpRequest, rater: Rater) -> bool:
    if rater.origin != Rater.Origin.CROWD:
        return True
    bound = (Enrollment.objects.filter(rater=rater).values_list("platform_session_id", flat=True)
             .first())
    return bound is None or bound == request.session.get(PLATFORM_SESSION_KEY, "")


def bind_rater(request: HttpRequest, rater: Rater, *, platform_session: str = "") -> None:
    request.session.cycle_key()  # a new session id for a new identity (session fixation)
    request.session[SESSION_KEY] = rater.pk
    request.session[PLATFORM_SESSION_KEY] = platform_session
