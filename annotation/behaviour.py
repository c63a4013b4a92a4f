"""Integrity signals of a study's judgments, read and written with the database: the rating
page's counters stored per slot (`slot_behaviour_record`), every answered slot's flags and
each rater's shares (`study_integrity`, for the monitor, its CSV and API and the analysis), and
each rater's agreement over time (`study_drift`). The rules are `annotation.integrity` and
`annotation.drift` (Django-free cores); nothing here rejects or excludes anyone.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from evalstudy import criteria as rules
from evalstudy.models import AssignmentSlot, ItemMedia, Rater, Study

from . import drift, integrity, quality
from .models import Judgment, ListeningLog, SlotBehaviour
from .rater_quality import compared_as_labels, judged_unit

log = logging.getLogger(__name__)

# The form field the rating page posts its counters in (JSON), beside the answers; the API
# takes them as the `behaviour` object. No criterion key can start with "_".
# A name no criterion key can take (keys are [A-Za-z0-9_-]+, evalstudy.spec.study.KEY_RE),
# so the counters never collide with an answer.
BEHAVIOUR_FIELD = "integrity.behaviour"


def slot_behaviour_record(*, slot_id: int, raw: object,
                          now: dt.datetime | None = None) -> SlotBehaviour | None:
    """Store the page's counters for an answer to `slot_id` that was just stored (the caller
    checked the slot is the rater's and that the answer was new or a revision). Counters that
    are missing or unreadable record nothing, and a database failure here is logged, never
    raised: the answer itself is already stored and must not be lost over its evidence."""
    try:
        behaviour = integrity.behaviour_parse(raw)
    except Exception:  # whatever a crafted field does, the stored answer stands
        log.warning("behaviour of slot %s unreadable", slot_id, exc_info=True)
        return None
    if behaviour is None:
        return None
    now = now or timezone.now()
    try:
        with transaction.atomic():
            row = SlotBehaviour.objects.select_for_update().filter(slot_id=slot_id).first()
            if row is None:
                return SlotBehaviour.objects.create(slot_id=slot_id, recorded_at=now,
                                                    updated_at=now, **behaviour.as_dict())
            total = integrity.behaviour_add(
                integrity.Behaviour(**{f: getattr(row, f) for f in integrity.BEHAVIOUR_FIELDS}),
                behaviour)
            for name, value in total.as_dict().items():
                setattr(row, name, value)
            row.submissions += 1
            row.updated_at = now
            row.save()
            return row
    except (IntegrityError, DatabaseError):
        log.warning("behaviour of slot %s not recorded", slot_id, exc_info=True)
        return None


@dataclass
class StudyIntegrity:
    speeder_seconds: float | None
    slots: dict[int, integrity.SlotFlags] = field(default_factory=dict)  # slot id -> flags
    raters: dict[int, integrity.RaterIntegrity] = field(default_factory=dict)  # rater id ->


def _speeder_seconds(study: Study) -> float | None:
    """The study's speeder threshold as the monitor computes it (its setting, else 0.3 x the
    median seconds of the answered target slots of raters' seats)."""
    # Both times are set on these rows (the filter says so; the stubs cannot know it).
    answered = cast("Iterable[tuple[dt.datetime, dt.datetime]]", AssignmentSlot.objects.filter(
        assignment__study=study, assignment__rater__isnull=False,
        kind=AssignmentSlot.Kind.TARGET, completed_at__isnull=False,
        served_at__isnull=False).values_list("served_at", "completed_at"))
    timings = [(completed - served).total_seconds() for served, completed in answered]
    return quality.speeder_threshold([max(t, 0.0) for t in timings],
                                     fixed=study.speeder_seconds)


def _media_per_slot(study: Study, slots: list[tuple]) -> dict[int, tuple[int, int]]:
    """slot id -> (media files shown, heard to the end), for slots with media."""
    item_media: set[int] = set()
    output_media: set[int] = set()
    for item_id, output_id in ItemMedia.objects.filter(item__study=study).values_list(
            "item_id", "output_id"):
        if output_id is None:
            item_media.add(item_id)
        else:
            output_media.add(output_id)
    if not item_media and not output_media:
        return {}
    heard: dict[int, set[str]] = defaultdict(set)
    for slot_id, which in ListeningLog.objects.filter(
            slot__assignment__study=study, completed=True).values_list("slot_id", "which"):
        heard[slot_id].add(which)
    found = {}
    for slot_id, _rater, _served, _completed, item_id, output_id, output_b_id, *_ in slots:
        expected = ({"item"} if item_id in item_media else set()) | (
            {"a"} if output_id in output_media else set()) | (
            {"b"} if output_b_id in output_media else set())
        if expected:
            found[slot_id] = (len(expected), len(expected & heard[slot_id]))
    return found


def study_integrity(study: Study, *, speeder_seconds: float | None = None,
                    threshold_known: bool = False, media: bool = True) -> StudyIntegrity:
    """Every answered target slot's flags and each human rater's shares (annotation.integrity),
    in a handful of queries. `speeder_seconds` with `threshold_known`: the threshold the
    caller already computed (the monitor), else the study's, computed here. `media` False:
    the caller knows no answered slot had media (the monitor's listening summary)."""
    if not threshold_known:
        speeder_seconds = _speeder_seconds(study)
    # One query: each slot with its counters (a LEFT JOIN) and whether it has free text.
    free_text = Judgment.objects.filter(slot=OuterRef("pk"), criterion__kind__in=list(
        rules.kinds_where(lambda kind: kind.free_text))).exclude(value="")
    slots = list(AssignmentSlot.objects.filter(
        assignment__study=study, kind=AssignmentSlot.Kind.TARGET, completed_at__isnull=False,
        assignment__rater__kind__in=list(Rater.HUMAN_KINDS),
    ).annotate(free_text=Exists(free_text)).values_list(
        "id", "assignment__rater_id", "served_at", "completed_at", "output__item_id",
        "output_id", "output_b_id", "free_text", "behaviour__id",
        *(f"behaviour__{name}" for name in integrity.BEHAVIOUR_FIELDS)))
    media_of = _media_per_slot(study, slots) if media else {}
    result = StudyIntegrity(speeder_seconds=speeder_seconds)
    by_rater: dict[int, list[integrity.SlotFlags]] = defaultdict(list)
    for slot_id, rater_id, served, completed, _i, _o, _b, text, recorded, *counts in slots:
        seconds = (max((completed - served).total_seconds(), 0.0)
                   if served is not None and completed is not None else None)
        shown, heard = media_of.get(slot_id, (0, 0))
        behaviour = integrity.Behaviour(*counts) if recorded is not None else None
        flags = integrity.slot_flags(integrity.SlotEvidence(
            behaviour=behaviour, seconds=seconds, free_text=bool(text),
            media=shown, media_heard=heard), speeder_seconds=speeder_seconds)
        result.slots[slot_id] = flags
        by_rater[rater_id].append(flags)
    result.raters = {rater: integrity.rater_integrity(flags)
                     for rater, flags in by_rater.items()}
    return result


def study_drift(study: Study) -> dict[int, list[drift.Window]]:
    """rater id -> their windows of agreement with the other raters (annotation.drift), over
    the study's `agreement_window` and `agreement_alert_threshold`."""
    kinds = {pk: rules.kind_of(name) for pk, name in study.criteria.values_list("id", "kind")}
    criteria = {pk: kind for pk, kind in kinds.items() if compared_as_labels(kind)}
    votes: list[drift.Vote[int]] = []
    for pk, rater, criterion, output, output_b, value, at in Judgment.objects.filter(
        slot__assignment__study=study, slot__kind=AssignmentSlot.Kind.TARGET,
        rater__kind__in=list(Rater.HUMAN_KINDS), criterion_id__in=list(criteria),
    ).values_list("id", "rater_id", "criterion_id", "slot__output_id", "slot__output_b_id",
                  "value", "submitted_at"):
        unit, value = judged_unit(output, output_b, criteria[criterion], value)
        votes.append(drift.Vote(rater, (unit, criterion), value, (at, pk)))
    return drift.agreement_windows(votes, window=study.agreement_window,
                                   threshold=study.agreement_alert_threshold)
