"""What this app holds about a rater, for their export and erasure (`evalstudy.privacy`): the
Prolific submissions matched to them. On erasure their participant id is replaced by the
rater's pseudonym (and a later sync keeps it so). Registered by ProlificConfig.ready."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from evalstudy.models import Rater
from evalstudy.privacy import PrivacyContribution, Scrub

from .models import ProlificSubmission


def submissions_export(rater: Rater, studies: Collection[int] | None) -> dict[str, Any]:
    rows = ProlificSubmission.objects.filter(enrollment__rater=rater)
    if studies is not None:
        rows = rows.filter(link__study__in=studies)
    return {"prolific_submissions": [
        {"study": slug, "submission_id": sid, "participant_id": pid, "status": status,
         "bonus_minor": bonus}
        for slug, sid, pid, status, bonus in rows.order_by("link__study__slug", "id").values_list(
            "link__study__slug", "submission_id", "participant_id", "status", "bonus_minor")]}


def submissions_scrub(studies: set[int], scrub: Scrub | None) -> dict[str, Any]:
    if scrub is None:
        return {}
    changed = 0
    for sub in ProlificSubmission.objects.filter(link__study__in=studies):
        new = scrub(sub.participant_id)[:64]
        if new != sub.participant_id:
            sub.participant_id = new
            sub.save(update_fields=["participant_id"])
            changed += 1
    return {"prolific_submissions_scrubbed": changed} if changed else {}


CONTRIBUTION = PrivacyContribution(export=submissions_export, scrub=submissions_scrub)
