"""What this app holds about a rater, for their export and erasure (`evalstudy.privacy`): the
judgments, the rating page's integrity counters, recalibration rounds and agreement alerts,
and the listening log of media (kept on erasure: they are pseudonymous once the rater
row is) and the browser sessions an entry link bound to the rater. Registered by
AnnotationConfig.ready."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django.db.models import Count

from evalstudy.models import Rater
from evalstudy.privacy import PrivacyContribution

from .models import (
    AgreementAlert,
    Judgment,
    JudgmentRevision,
    ListeningLog,
    RecalibrationRound,
    SlotBehaviour,
)
from .rater import SESSION_KEY


def judgments_export(rater: Rater, studies: Collection[int] | None) -> dict[str, Any]:
    """How many judgments the rater gave per study, and how many they revised."""
    judgments = Judgment.objects.filter(rater=rater)
    revisions = JudgmentRevision.objects.filter(judgment__rater=rater)
    if studies is not None:
        judgments = judgments.filter(slot__assignment__study__in=studies)
        revisions = revisions.filter(judgment__slot__assignment__study__in=studies)
    per_study = (judgments.values("slot__assignment__study__slug")
                 .annotate(n=Count("id")).order_by("slot__assignment__study__slug"))
    listening = ListeningLog.objects.filter(slot__assignment__rater=rater)
    behaviour = SlotBehaviour.objects.filter(slot__assignment__rater=rater)
    rounds = RecalibrationRound.objects.filter(rater=rater)
    alerts = AgreementAlert.objects.filter(rater=rater)
    if studies is not None:
        listening = listening.filter(slot__assignment__study__in=studies)
        behaviour = behaviour.filter(slot__assignment__study__in=studies)
        rounds, alerts = rounds.filter(study__in=studies), alerts.filter(study__in=studies)
    return {
        "judgments_per_study": {row["slot__assignment__study__slug"]: row["n"]
                                for row in per_study},
        "judgment_revisions": revisions.count(),
        # How they played media stimuli: per file of an item, plays, seconds heard, seeks.
        "media_listening": [
            {"study": slug, "position": position, "media": which, "plays": plays,
             "seconds_listened": seconds, "seeks": seeks, "heard_to_end": completed}
            for slug, position, which, plays, seconds, seeks, completed in listening.order_by(
                "slot__assignment__study__slug", "slot__position", "which").values_list(
                "slot__assignment__study__slug", "slot__position", "which", "plays",
                "seconds_listened", "seeks", "completed")],
        # What the rating page counted while they answered (annotation.integrity).
        "answer_behaviour": [
            {"study": slug, "position": position, "pastes": pastes,
             "focus_losses": losses, "seconds_away": away, "keystrokes": keys,
             "inputs": inputs}
            for slug, position, pastes, losses, away, keys, inputs in behaviour.order_by(
                "slot__assignment__study__slug", "slot__position").values_list(
                "slot__assignment__study__slug", "slot__position", "pastes", "focus_losses",
                "seconds_away", "keystrokes", "inputs")],
        "recalibration_rounds": [
            {"study": slug, "round": number, "started_at": started.isoformat(),
             "reason": reason}
            for slug, number, started, reason in rounds.order_by("study__slug", "number")
            .values_list("study__slug", "number", "started_at", "reason")],
        "agreement_alerts": [
            {"study": slug, "window": window, "agreement": agreement,
             "raised_at": raised.isoformat()}
            for slug, window, agreement, raised in alerts.order_by("study__slug", "window")
            .values_list("study__slug", "window", "agreement", "raised_at")],
    }


def judged_studies(rater: Rater) -> Iterable[int]:
    return (Judgment.objects.filter(rater=rater)
            .values_list("slot__assignment__study_id", flat=True).distinct())


def session_bound(data: Mapping[str, Any], rater: Rater) -> bool:
    return data.get(SESSION_KEY) == rater.pk


CONTRIBUTION = PrivacyContribution(export=judgments_export, studies_of=judged_studies,
                                   session_bound=session_bound)
