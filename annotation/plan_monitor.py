"""The monitor's view of an adaptive study's pre-registered stopping rule: the plan as
registered, the looks made under it so far, and whether the rule closed the study. Read from
the rows the checks wrote (`evalstudy.models.plans`); nothing is computed again here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from evalstudy.models import StoppingCheck, Study, StudyPlan


@dataclass
class PlanMonitor:
    plan: StudyPlan
    criterion: str  # its key, or what the rule reads when the plan names none
    contrasts: list[str]  # "a vs b"; empty: every pair of systems
    looks: list[StoppingCheck]
    # The look that met the rule (the checks then closed the study), if any.
    met_at: StoppingCheck | None

    @property
    def registered_at(self) -> datetime | None:
        return self.plan.registered_at

    @property
    def closed_by_rule(self) -> bool:
        return self.met_at is not None

    @property
    def closed_by_hand(self) -> bool:
        return self.met_at is None and self.plan.study.status == Study.Status.CLOSED


def plan_monitor(study: Study) -> PlanMonitor | None:
    """The adaptive plan of `study` and its looks (two queries); None for another design or
    an adaptive study with no plan yet."""
    if study.design != Study.Design.ADAPTIVE:
        return None
    plan = StudyPlan.objects.filter(study=study).select_related("criterion").first()
    if plan is None:
        return None
    plan.study = study
    looks = list(StoppingCheck.objects.filter(plan=plan).order_by("look"))
    return PlanMonitor(
        plan=plan,
        criterion=(plan.criterion.key if plan.criterion is not None
                   else "the first pairwise criterion"),
        contrasts=[f"{a} vs {b}" for a, b in plan.contrasts or []],
        looks=looks,
        met_at=next((look for look in looks if look.met), None),
    )
