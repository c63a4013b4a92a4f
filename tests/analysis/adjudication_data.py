"""A small study whose judgments put known units in the adjudication queue (used by the
adjudication, soft-label and adjudicated-analysis tests and the browser test).

Systems sys-a and sys-b; items i1..i4, an output of each system on each; criteria `usable`
(binary), `quality` (5-point likert) and `preference` (pairwise, sys-a vs sys-b). Raters r1-r3
are experts (imported, human), `judge` an LLM proxy.

Queued with the default thresholds:
- usable on i1/sys-a: r1 yes, r2 no (majority 50% < 60%): "raters";
- usable on i2/sys-a: r1-r3 yes, judge no: "proxy";
- quality on i1/sys-a: 1 and 5 (range the whole scale): "raters";
- preference on i1: r1 chose A with sys-a shown as A, r2 chose A with sys-b shown as A: they
  disagree once the pair is read one way round: "raters".
Not queued: usable on i3 (all yes, judge yes), on i4 (2 yes, 1 no: 67%), quality on i2 (3, 4),
preference on i2 (r1 A with sys-a as A, r2 B with sys-b as A: both chose sys-a).
"""

from __future__ import annotations

from annotation.services import judgments_import
from evalstudy.models import Output, Study
from evalstudy.spec.files import JudgmentRow
from tests.factories import CriterionFactory, ItemFactory, StudyFactory, SystemFactory

ANSWERS = [
    # rater, item, system, criterion, value, rater_kind, system_b
    ("r1", "i1", "sys-a", "usable", "yes", "", ""),
    ("r2", "i1", "sys-a", "usable", "no", "", ""),
    ("r1", "i2", "sys-a", "usable", "yes", "", ""),
    ("r2", "i2", "sys-a", "usable", "yes", "", ""),
    ("r3", "i2", "sys-a", "usable", "yes", "", ""),
    ("judge", "i2", "sys-a", "usable", "no", "llm", ""),
    ("r1", "i3", "sys-a", "usable", "yes", "", ""),
    ("r2", "i3", "sys-a", "usable", "yes", "", ""),
    ("judge", "i3", "sys-a", "usable", "yes", "llm", ""),
    ("r1", "i4", "sys-a", "usable", "yes", "", ""),
    ("r2", "i4", "sys-a", "usable", "yes", "", ""),
    ("r3", "i4", "sys-a", "usable", "no", "", ""),
    ("r1", "i1", "sys-a", "quality", "1", "", ""),
    ("r2", "i1", "sys-a", "quality", "5", "", ""),
    ("r1", "i2", "sys-a", "quality", "3", "", ""),
    ("r2", "i2", "sys-a", "quality", "4", "", ""),
    ("r1", "i1", "sys-a", "preference", "A", "", "sys-b"),
    ("r2", "i1", "sys-b", "preference", "A", "", "sys-a"),
    ("r1", "i2", "sys-a", "preference", "A", "", "sys-b"),
    ("r2", "i2", "sys-b", "preference", "B", "", "sys-a"),
]


def disagreement_study(*, slug: str = "disagree", owner=None) -> Study:
    study = StudyFactory(slug=slug, owner=owner, reference_shown=True)
    systems = [SystemFactory(study=study, name=name) for name in ("sys-a", "sys-b")]
    items = [ItemFactory(study=study, external_id=f"i{n}", reference=f"reference {n}",
                         context=f"context {n}") for n in range(1, 5)]
    Output.objects.bulk_create(
        Output(item=item, system=system, text=f"{system.name} says {item.external_id}")
        for item in items for system in systems)
    CriterionFactory(study=study, key="usable", kind="binary", order=0)
    CriterionFactory(study=study, key="quality", kind="likert", scale_points=5,
                     order=1)
    CriterionFactory(study=study, key="preference", kind="pairwise", order=2)
    rows = [JudgmentRow(line, rater, item, system, criterion, value, kind, system_b)
            for line, (rater, item, system, criterion, value, kind, system_b)
            in enumerate(ANSWERS, start=2)]
    judgments_import(study=study, rows=rows, file_name="disagreement.csv")
    return study


def output_of(study: Study, item: str, system: str) -> Output:
    return Output.objects.get(item__study=study, item__external_id=item, system__name=system)
