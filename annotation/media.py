"""Media stimuli as raters meet them: the signed URLs of a slot's media, the listening log the
player reports to, and the study's rules on it (must finish, most plays) held on the server.

A media URL names a slot, the rater holding it and which of the slot's media (the item's, or
output A's or B's), signed with the installation's secret and a timestamp: it opens only for
that rater's session, for that slot, and for `EVALSTUDY_MEDIA_URL_MAX_AGE` seconds. It names
no file, item, output or system (annotation.media_views serves it).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from evalstudy.models import Assignment, AssignmentSlot, ItemMedia, Rater, Study

from .models import ListeningLog

SALT = "annotation.media.v1"
WHICH = tuple(ListeningLog.Which.values)  # item, a, b
# What the player may report at once, and the most it may claim: a report is a few hundred
# bytes; a rater replays a file a few times.
MAX_INTERVALS = 200
MAX_PLAYS_REPORTED = 1000
MAX_SEEKS_REPORTED = 100_000
MAX_STORED_INTERVALS = 1000  # disjoint stretches a log keeps (a player makes a few)
# Playback runs at most at 1x (the player offers 0.75x and 1x), so what was heard can never
# exceed the time since the first report; this much is allowed for the report's round trip.
REPORT_SLACK_SECONDS = 2.0


class ListeningRefused(Exception):  # noqa: N818 - reads as what happened
    """The report is not accepted (not the rater's slot, a play over the limit, ...)."""

    def __init__(self, message: str, *, status: int = 409, log: ListeningLog | None = None):
        super().__init__(message)
        self.status = status
        self.log = log


# --- signed URLs --------------------------------------------------------------------------------
def media_token(*, slot_id: int, rater_id: int, which: str) -> str:
    return signing.TimestampSigner(salt=SALT).sign_object(
        {"s": slot_id, "r": rater_id, "w": which})


def media_token_read(token: str) -> tuple[int, int, str]:
    """(slot id, rater id, which) of a token signed less than EVALSTUDY_MEDIA_URL_MAX_AGE ago;
    signing.BadSignature (SignatureExpired for an old one) otherwise."""
    value = signing.TimestampSigner(salt=SALT).unsign_object(
        token, max_age=settings.EVALSTUDY_MEDIA_URL_MAX_AGE)
    try:
        slot, rater, which = int(value["s"]), int(value["r"]), str(value["w"])
    except (KeyError, TypeError, ValueError):
        raise signing.BadSignature("not a media token") from None
    if which not in WHICH:
        raise signing.BadSignature("not a media token")
    return slot, rater, which


@dataclass
class MediaView:
    """One media file of a slot, as its page shows it (never its file, item or system)."""

    slot_id: int
    which: str
    kind: str  # audio, video
    mime: str
    duration_s: float
    url: str  # signed, expiring
    plays: int = 0  # played so far (the listening log)
    seeks: int = 0
    completed: bool = False

    @property
    def log_url(self) -> str:
        return reverse("annotation:listening", args=[self.slot_id, self.which])


def media_views(rows: Iterable[Mapping[str, Any]], *, slot_id: int,
                rater_id: int) -> list[MediaView]:
    """MediaViews of a slot from plain rows {which, kind, mime, duration, plays, seeks,
    done} (the loop's JSON, or `slot_media`'s), item first, then A, then B."""
    order = {which: index for index, which in enumerate(WHICH)}
    views = [
        MediaView(slot_id=slot_id, which=str(row["which"]), kind=str(row["kind"]),
                  mime=str(row["mime"]), duration_s=float(row["duration"]),
                  url=reverse("annotation:media", args=[media_token(
                      slot_id=slot_id, rater_id=rater_id, which=str(row["which"]))]),
                  plays=int(row.get("plays") or 0), seeks=int(row.get("seeks") or 0),
                  completed=bool(row.get("done")))
        for row in rows if row.get("which") in order
    ]
    return sorted(views, key=lambda view: order[view.which])


def _media_of(slot: AssignmentSlot) -> dict[str, ItemMedia]:
    """which -> the media shown with a target slot: its item's, and its outputs'."""
    if slot.kind != AssignmentSlot.Kind.TARGET or slot.output_id is None:
        return {}
    found: dict[str, ItemMedia] = {}
    rows = ItemMedia.objects.filter(item__outputs=slot.output_id).filter(
        Q(output__isnull=True) | Q(output_id__in=[slot.output_id, slot.output_b_id]))
    for media in rows:
        which = ("item" if media.output_id is None
                 else "a" if media.output_id == slot.output_id else "b")
        found[which] = media
    return found


def slot_media(slot: AssignmentSlot) -> list[MediaView]:
    """The slot's media with signed URLs for its rater, and what the log holds of each (the
    general path's page: annotation.selectors.slot_view)."""
    media = _media_of(slot)
    if not media:
        return []
    logs = {log.which: log for log in ListeningLog.objects.filter(slot=slot)}
    rater_id = slot.assignment.rater_id
    assert rater_id is not None, "a slot's media are signed for its seat's rater"
    return media_views(
        [{"which": which, "kind": row.kind, "mime": row.mime, "duration": row.duration_s,
          "plays": logs[which].plays if which in logs else 0,
          "seeks": logs[which].seeks if which in logs else 0,
          "done": which in logs and logs[which].completed}
         for which, row in media.items()],
        slot_id=slot.pk, rater_id=rater_id)


def media_for_rater(*, slot_id: int, rater_id: int, which: str) -> ItemMedia | None:
    """The media a signed URL names, when its rater holds the slot in a live seat of an open
    study; None otherwise."""
    slot = (AssignmentSlot.objects.select_related("assignment__study")
            .filter(pk=slot_id, assignment__rater_id=rater_id).first())
    if (slot is None or slot.assignment.state != Assignment.State.ACTIVE
            or slot.assignment.study.status != Study.Status.OPEN):
        return None
    return _media_of(slot).get(which)


# --- the listening log --------------------------------------------------------------------------
def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[list[float]]:
    """Played stretches [start, end] merged into disjoint, sorted ones."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 0.05:  # a timeupdate's granularity
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def heard_to_end(seconds: float, duration: float) -> bool:
    """Whether `seconds` heard of a file of `duration` covers it (within what a browser's
    rounding and an encoder's padding leave out: 2% of it, between 0.15 and 0.5 seconds)."""
    return seconds >= duration - min(0.5, max(0.15, 0.02 * duration))


def parse_report(data: Mapping[str, Any]) -> tuple[int, int, list[tuple[float, float]]]:
    """(plays, seeks, intervals) of a player's report; ValueError naming what is wrong.
    Bounded: whole numbers within reason, at most MAX_INTERVALS finite [start, end] pairs."""
    import json

    def whole(name: str, limit: int) -> int:
        raw = str(data.get(name) or "0")
        if not raw.isdigit() or len(raw) > 9 or int(raw) > limit:
            raise ValueError(f"{name}: expected a whole number up to {limit}")
        return int(raw)

    plays, seeks = whole("plays", MAX_PLAYS_REPORTED), whole("seeks", MAX_SEEKS_REPORTED)
    raw = str(data.get("intervals") or "[]")
    if len(raw) > 40 * MAX_INTERVALS:
        raise ValueError("intervals: too long")
    try:
        pairs = json.loads(raw)
    except ValueError:
        raise ValueError("intervals: not JSON") from None
    if not isinstance(pairs, list) or len(pairs) > MAX_INTERVALS:
        raise ValueError(f"intervals: expected a list of at most {MAX_INTERVALS} pairs")
    intervals = []
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, int | float) and not isinstance(v, bool)
                           and math.isfinite(v) for v in pair)
                or not 0 <= pair[0] <= pair[1]):
            raise ValueError("intervals: expected [start, end] pairs of seconds")
        intervals.append((float(pair[0]), float(pair[1])))
    return plays, seeks, intervals


def listening_record(*, rater: Rater, slot_id: int, which: str, plays: int, seeks: int,
                     intervals: list[tuple[float, float]],
                     now: dt.datetime | None = None) -> ListeningLog:
    """Add a player's report to the slot's listening log (created on the first). Monotonic
    and idempotent: `plays` and `seeks` are the player's running totals (the log keeps the
    highest), `intervals` what it played (merged into what the log holds), so a repeated or
    late report changes nothing. Under the log row's lock.

    Refused (ListeningRefused; nothing of the report stored) when the slot is not the rater's
    in a live seat of an open study (404), when `plays` goes over the study's most plays, or
    when more would have been heard than time has passed since the log started (409; the
    player sends its totals again later)."""
    now = now or timezone.now()
    with transaction.atomic():
        slot = (AssignmentSlot.objects.select_related("assignment__study")
                .filter(pk=slot_id, assignment__rater=rater).first())
        media = _media_of(slot).get(which) if slot is not None else None
        if slot is None or media is None:
            raise ListeningRefused(gettext("This item is not in your list."), status=404)
        study = slot.assignment.study
        if (slot.assignment.state != Assignment.State.ACTIVE
                or study.status != Study.Status.OPEN):
            raise ListeningRefused(gettext("This study is not open."), status=409)
        ListeningLog.objects.bulk_create(
            [ListeningLog(slot=slot, which=which, duration_s=media.duration_s,
                          started_at=now, updated_at=now)], ignore_conflicts=True)
        log = ListeningLog.objects.select_for_update().get(slot=slot, which=which)
        limit = study.media_max_plays
        if limit is not None and plays > limit:
            raise ListeningRefused(gettext(
                "You have played this recording as many times as this study allows."), log=log)
        duration = log.duration_s
        clamped = [(min(start, duration), min(end, duration)) for start, end in intervals]
        merged = merge_intervals([(pair[0], pair[1]) for pair in log.intervals] + clamped)
        heard = round(sum(end - start for start, end in merged), 3)
        elapsed = (now - log.started_at).total_seconds()
        if heard > log.seconds_listened and heard > elapsed + REPORT_SLACK_SECONDS:
            raise ListeningRefused(gettext(
                "The player reported more listening than time has passed; it will report "
                "again."), log=log)
        if len(merged) > MAX_STORED_INTERVALS:
            raise ListeningRefused("too many separate stretches played", status=400, log=log)
        log.plays, log.seeks = max(log.plays, plays), max(log.seeks, seeks)
        if heard > log.seconds_listened:
            log.intervals, log.seconds_listened = merged, heard
        log.completed = log.completed or heard_to_end(log.seconds_listened, duration)
        log.updated_at = now
        log.save()
        return log


def media_unfinished(slot: AssignmentSlot, study: Study) -> bool:
    """Whether `study` makes raters hear a slot's media to the end first, and some of this
    slot's media was not heard to the end (the general path's check; the loop reads the same
    in its context statement)."""
    if not study.media_must_finish:
        return False
    media = _media_of(slot)
    if not media:
        return False
    done = set(ListeningLog.objects.filter(slot=slot, completed=True)
               .values_list("which", flat=True))
    return not set(media) <= done


def must_finish_message() -> str:
    return gettext("Please listen to (or watch) the whole recording before you answer.")


# --- the monitor --------------------------------------------------------------------------------
@dataclass
class ListeningSummary:
    """One seat's listening: answered items that had media, how many of them it heard to the
    end, and the median seconds heard per such item."""

    media_slots: int = 0
    heard_to_end: int = 0
    median_seconds: float | None = None


def listening_by_seat(study: Study) -> dict[int, ListeningSummary]:
    """seat id -> ListeningSummary, for the answered target slots of seats with a rater."""
    item_media = set(ItemMedia.objects.filter(item__study=study, output__isnull=True)
                     .values_list("item_id", flat=True))
    output_media = set(ItemMedia.objects.filter(item__study=study, output__isnull=False)
                       .values_list("output_id", flat=True))
    if not item_media and not output_media:
        return {}
    logs: dict[int, dict[str, tuple[float, bool]]] = defaultdict(dict)
    for slot_id, which, listened, completed in ListeningLog.objects.filter(
            slot__assignment__study=study).values_list("slot_id", "which", "seconds_listened",
                                                       "completed"):
        logs[slot_id][which] = (listened, completed)
    seconds: dict[int, list[float]] = defaultdict(list)
    summaries: dict[int, ListeningSummary] = defaultdict(ListeningSummary)
    for slot_id, seat_id, item_id, output_id, output_b_id in AssignmentSlot.objects.filter(
            assignment__study=study, assignment__rater__isnull=False,
            kind=AssignmentSlot.Kind.TARGET, completed_at__isnull=False,
    ).values_list("id", "assignment_id", "output__item_id", "output_id", "output_b_id"):
        expected = ({"item"} if item_id in item_media else set()) | (
            {"a"} if output_id in output_media else set()) | (
            {"b"} if output_b_id in output_media else set())
        if not expected:
            continue
        heard = logs.get(slot_id, {})
        summary = summaries[seat_id]
        summary.media_slots += 1
        summary.heard_to_end += all(heard.get(which, (0, False))[1] for which in expected)
        seconds[seat_id].append(sum(heard.get(which, (0.0, False))[0] for which in expected))
    for seat_id, values in seconds.items():
        summaries[seat_id].median_seconds = statistics.median(values)
    return dict(summaries)
