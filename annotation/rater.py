"""Who the rater behind a request is: a logged-in user's Rater, or the one whose personal entry
link opened this browser session."""

from __future__ import annotations

from django.http import HttpRequest

from evalstudy.models import Rater

SESSION_KEY = "evalstudy_rater_id"


def current_rater(request: HttpRequest) -> Rater | None:
    """The session's bound rater (entry link or crowd URL) wins over the account's rater: a
    researcher testing a crowd link in their own browser must become that participant."""
    rater_id = request.session.get(SESSION_KEY)
    if rater_id:
        rater = Rater.objects.filter(pk=rater_id).first()
        if rater is not None:
            return rater
    if request.user.is_authenticated:
        return Rater.objects.filter(user=request.user).first()
    return None


def bind_rater(request: HttpRequest, rater: Rater) -> None:
    request.session.cycle_key()  # a new session id for a new identity (session fixation)
    request.session[SESSION_KEY] = rater.pk
