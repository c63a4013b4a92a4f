"""What this app holds about a rater, for their export and erasure (`evalstudy.privacy`): the
judgments (kept on erasure: they are pseudonymous once the rater row is) and the browser
sessions an entry link bound to the rater. Registered by AnnotationConfig.ready."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django.db.models import Count

from evalstudy.models import Rater
from evalstudy.privacy import PrivacyContribution

from .models import Judgment, JudgmentRevision
from .rater import SESSION_KEY


def judgments_export(rater: Rater, studies: Collection[int] | None) -> dict[str, Any]:
    """How many judgments the rater gave per study, and how many they revised."""
    judgments = Judgment.objects.filter(rater=rater)
    revisions = JudgmentRevision.objects.filter(judgment__rater=rater)
    if studies is not None:
        judgments = judgments.filter(slot__assignment__study__in=studies)
        revisions = revisions.filter(judgment__slot__assignment__study__in=studies)
    judgments = (judgments.values("slot__assignment__study__slug")
                 .annotate(n=Count("id")).order_by("slot__assignment__study__slug"))
    return {
        "judgments_per_study": {row["slot__assignment__study__slug"]: row["n"]
                                for row in judgments},
        "judgment_revisions": revisions.count(),
    }


def judged_studies(rater: Rater) -> Iterable[int]:
    return (Judgment.objects.filter(rater=rater)
            .values_list("slot__assignment__study_id", flat=True).distinct())


def session_bound(data: Mapping[str, Any], rater: Rater) -> bool:
    return data.get(SESSION_KEY) == rater.pk


CONTRIBUTION = PrivacyContribution(export=judgments_export, studies_of=judged_studies,
                                   session_bound=session_bound)
