"""Who the rater behind a request is: a logged-in user's Rater, or the one whose personal entry
link opened this browser session."""

from __future__ import annotations

from django.http import HttpRequest

from evalstudy.models import Rater

SESSION_KEY = "evalstudy_rater_id"


def current_rater(request: HttpRequest) -> Rater | None:
    if request.user.is_authenticated:
        rater = Rater.objects.filter(user=request.user).first()
        if rater is not None:
            return rater
    rater_id = request.session.get(SESSION_KEY)
    return Rater.objects.filter(pk=rater_id).first() if rater_id else None
