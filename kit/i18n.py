"""Every request starts and ends in the installation's language (settings.LANGUAGE_CODE).

The rater pages speak their study's language (`annotation.views` activates it once the study
is known); Django keeps an activated language per thread, so without this a worker thread
would answer its next request, a researcher's page or another study's, in the language the
previous one chose. Unlike Django's LocaleMiddleware, the browser's Accept-Language is not
consulted: the study decides what its raters read, and the researcher pages stay in English.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation


class DefaultLanguageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        translation.activate(settings.LANGUAGE_CODE)
        try:
            response = self.get_response(request)  # rendered by now (TemplateResponse too)
            response.headers.setdefault("Content-Language", translation.get_language())
            return response
        finally:
            # ...and ends in it: what the thread does next outside a request (a log line, a
            # test) does not speak the last study's language either.
            translation.activate(settings.LANGUAGE_CODE)
