"""The study's items, outputs and criteria a row of an imported file names (judgments made
elsewhere, `services.judgments_import`; vote counts, `votes.vote_counts_import`): looked up
once per file, and each row resolved to its criterion and output (pair) with one located
problem per mistake."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalstudy.criteria import PAIR, kind_of
from evalstudy.models import Criterion, Item, Output, Study


@dataclass
class StudyRows:
    study: Study
    items: dict[str, int]  # external id -> item id
    outputs: dict[tuple[int, str], int]  # (item id, system name) -> output id
    criteria: dict[str, Criterion]

    @classmethod
    def of(cls, study: Study) -> StudyRows:
        return cls(study, dict(Item.objects.filter(study=study).values_list("external_id", "id")),
                   {(item_id, name): pk for pk, item_id, name in
                    Output.objects.filter(item__study=study).values_list("id", "item_id",
                                                                         "system__name")},
                   {c.key: c for c in study.criteria.all()})

    def resolve(self, row: Any, fail: Callable[[str, str], None],
                kind_problem: Callable[[Criterion], str | None]
                ) -> tuple[Criterion, int, int | None] | None:
        """(criterion, output, output B or None) of a row with `item`, `criterion`, `system`
        and `system_b`; None after `fail(column, why)` when the row names something this study
        lacks, a criterion `kind_problem` refuses, or a pair that is not one."""
        item_id, criterion = self.items.get(row.item), self.criteria.get(row.criterion)
        slug = self.study.slug
        if item_id is None:
            fail("item", f"no item {row.item!r} in study {slug!r}")
            return None
        if criterion is None:
            fail("criterion", f"no criterion {row.criterion!r} in study {slug!r}")
            return None
        if (problem := kind_problem(criterion)) is not None:
            fail("criterion", problem)
            return None
        output = self.outputs.get((item_id, row.system))
        if output is None:
            fail("system", f"no output of system {row.system!r} for item {row.item!r}")
            return None
        if kind_of(criterion.kind).shows != PAIR:
            if row.system_b:
                fail("system_b", f"criterion {criterion.key!r} is not pairwise")
                return None
            return criterion, output, None
        if not row.system_b:
            fail("system_b", "a pairwise criterion needs system_b (the output shown as B)")
            return None
        output_b = self.outputs.get((item_id, row.system_b))
        if output_b is None or output_b == output:
            fail("system_b", f"no other output of system {row.system_b!r} for {row.item!r}")
            return None
        return criterion, output, output_b
