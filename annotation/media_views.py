"""Media for raters: the file behind a signed URL (with HTTP ranges, so the player can seek),
and the listening log the player reports to. Thin: check who asks, call annotation.media."""

from __future__ import annotations

import re
from collections.abc import Iterator

from django.conf import settings
from django.core import signing
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseForbidden,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.utils import translation
from django.views.decorators.http import require_GET, require_POST

from evalstudy.models import AssignmentSlot, ItemMedia

from .media import (
    WHICH,
    ListeningRefused,
    heard_to_end,
    listening_record,
    media_for_rater,
    media_token_read,
    parse_report,
)
from .models import ListeningLog
from .rater import current_rater

CHUNK = 64 * 1024
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _private(response: HttpResponseBase) -> HttpResponseBase:
    # Only this rater's browser may keep it; never shared caches, never sniffed as another
    # type, never named (a file name could say what the stimulus is).
    response["Cache-Control"] = "private, max-age=3600"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = "inline"
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    return response


def _chunks(media: ItemMedia, start: int, length: int) -> Iterator[bytes]:
    with media.file.storage.open(media.file.name, "rb") as stream:
        stream.seek(start)
        while length > 0:
            block = stream.read(min(CHUNK, length))
            if not block:
                return
            length -= len(block)
            yield block


def media_response(request: HttpRequest, media: ItemMedia) -> HttpResponseBase:
    """The response serving a media file to whoever may see it (a rater's signed URL, a
    researcher's preview): the file, or the one byte range asked for (206). Several ranges in
    one request are answered with the whole file (allowed, and no player asks for them)."""
    size = media.size_bytes
    match = _RANGE.fullmatch(request.headers.get("Range", "").strip())
    start, end, status = 0, size - 1, 200
    if match and (match[1] or match[2]):
        if match[1]:
            start = int(match[1])
            end = min(int(match[2]), size - 1) if match[2] else size - 1
        else:  # the last N bytes
            start, end = max(size - int(match[2]), 0), size - 1
        if start >= size or end < start:
            refused = HttpResponse(status=416)
            refused["Content-Range"] = f"bytes */{size}"
            return _private(refused)
        status = 206
    response = StreamingHttpResponse(_chunks(media, start, end - start + 1), status=status,
                                     content_type=media.mime)
    response["Content-Length"] = str(end - start + 1)
    response["Accept-Ranges"] = "bytes"
    if status == 206:
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
    return _private(response)


@require_GET
def media_file(request: HttpRequest, token: str) -> HttpResponseBase:
    """A media file behind a signed URL: only for the session's rater named in it, who must
    still hold the slot in a live seat of an open study. A bad or expired signature is 403,
    anything else that does not match 404 (nothing says whether a file exists)."""
    try:
        slot_id, rater_id, which = media_token_read(token)
    except signing.BadSignature:  # SignatureExpired included
        return HttpResponseForbidden("This media link is not valid (or no longer): reload "
                                     "the page.")
    rater = current_rater(request)
    if rater is None or rater.pk != rater_id:
        return HttpResponseForbidden("This media link is for another rater.")
    media = media_for_rater(slot_id=slot_id, rater_id=rater_id, which=which)
    if media is None:
        raise Http404("No such media.")
    if settings.EVALSTUDY_MEDIA_REDIRECT:
        return _private(HttpResponseRedirect(_storage_url(media)))
    return media_response(request, media)


def _storage_url(media: ItemMedia) -> str:
    """The storage's own short-lived URL of the file (S3 through django-storages: presigned,
    served with the probed Content-Type); other storages' plain url()."""
    storage = media.file.storage
    try:
        return storage.url(media.file.name, expire=300, parameters={
            "ResponseContentType": media.mime, "ResponseCacheControl": "private",
            "ResponseContentDisposition": "inline"})
    except TypeError:  # a storage whose url() takes the name only
        return storage.url(media.file.name)


def _log_answer(log: ListeningLog | None, *, limit: int | None, status: int = 200,
                message: str = "") -> JsonResponse:
    body: dict = {"accepted": status == 200, "message": message, "max_plays": limit}
    if log is not None:
        body.update(plays=log.plays, seeks=log.seeks, seconds_listened=log.seconds_listened,
                    completed=log.completed or heard_to_end(log.seconds_listened,
                                                            log.duration_s))
    return JsonResponse(body, status=status)


@require_POST
def listening(request: HttpRequest, slot_id: int, which: str) -> HttpResponse:
    """The player's report for one media file of a slot (form fields plays, seeks, intervals:
    see annotation.media.listening_record). CSRF-protected like every form post; answers
    JSON with what the log now holds."""
    rater = current_rater(request)
    if rater is None or which not in WHICH:
        raise Http404("No such media.")
    language = (AssignmentSlot.objects.filter(pk=slot_id, assignment__rater=rater)
                .values_list("assignment__study__language", flat=True).first())
    if language is None:
        raise Http404("No such media.")
    translation.activate(language)  # refusals are read to the rater
    try:
        plays, seeks, intervals = parse_report(request.POST)
    except ValueError as error:
        return JsonResponse({"accepted": False, "message": str(error)}, status=400)
    try:
        log = listening_record(rater=rater, slot_id=slot_id, which=which, plays=plays,
                               seeks=seeks, intervals=intervals)
    except ListeningRefused as refused:
        if refused.status == 404:
            raise Http404(str(refused)) from None
        study_limit = refused.log.slot.assignment.study.media_max_plays if refused.log else None
        return _log_answer(refused.log, limit=study_limit, status=refused.status,
                           message=str(refused))
    return _log_answer(log, limit=log.slot.assignment.study.media_max_plays)
