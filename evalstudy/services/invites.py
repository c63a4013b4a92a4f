"""The entry links of a study, as its invite page lists them: each personal-link rater's link
(with where their seat stands) and the crowd URL, absolute, and their download (audited as an
export: the links are secrets that let their holder act as the rater)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q
from django.urls import reverse

from ..audit import SYSTEM, audit_export
from ..models import Assignment, Rater, Study

# The crowd platform fills these in (Prolific's names; the entry reads PROLIFIC_PID, STUDY_ID
# and SESSION_ID).
CROWD_QUERY = ("?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}"
               "&SESSION_ID={{%SESSION_ID%}}")


@dataclass(frozen=True)
class EntryLink:
    rater_id: int
    name: str
    kind: str
    url: str
    seat: str  # "no seat yet", "seat 3: 4 of 10 done", ...


def _base(base_url: str) -> str:
    return base_url.rstrip("/")


def crowd_entry_url(study: Study, base_url: str) -> str | None:
    """The URL to paste into the crowd platform (None when the study takes no crowd)."""
    if study.crowd_platform == "none":
        return None
    return _base(base_url) + reverse("annotation:crowd_entry", args=[study.slug]) + CROWD_QUERY


def entry_links(study: Study, base_url: str) -> list[EntryLink]:
    """Every personal-link rater invited to `study`, oldest first, with the absolute URL of
    their link under `base_url` and where their seat stands (three queries, whatever the
    number of raters)."""
    raters = list(Rater.objects.filter(study=study, user__isnull=True,
                                       kind__in=Rater.HUMAN_KINDS,
                                       origin=Rater.Origin.INVITED).order_by("id"))
    seats = {
        seat.rater_id: seat for seat in Assignment.objects.filter(
            study=study, rater__in=[r.pk for r in raters]).annotate(
            n_slots=Count("slots"),
            n_done=Count("slots", filter=Q(slots__completed_at__isnull=False)))
    }
    links = []
    for rater in raters:
        seat = seats.get(rater.pk)
        if seat is None:
            where = "no seat yet"
        else:
            where = (f"seat {seat.seat_index if seat.seat_index is not None else seat.pk}: "
                     f"{seat.n_done} of {seat.n_slots} done")
        links.append(EntryLink(
            rater_id=rater.pk, name=str(rater), kind=rater.get_kind_display(),
            url=_base(base_url) + reverse("annotation:enter", args=[rater.access_token]),
            seat=where))
    return links


def entry_links_export(*, study: Study, base_url: str, actor: Any = None,
                       source: str = SYSTEM) -> list[EntryLink]:
    """`entry_links` for a download. Audited as "export" with the row count."""
    links = entry_links(study, base_url)
    audit_export(actor=actor, source=source, what="entry links", fmt="csv", target=study,
                 rows=len(links))
    return links
