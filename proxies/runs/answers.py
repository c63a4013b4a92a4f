"""Judging one batch of units: the run's method (proxies.methods) answers them as (slot,
canonical value, score, error, source) for one criterion.

`value` is the criterion's canonical spelling, `score` the proxy's number (P(yes), the G-Eval
expected score, or P(A is better)); a unit whose answer cannot be read yields value None and
the reason (recorded in the run's `unreadable`, not stored as a judgment).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from evalstudy.criteria import kind_of
from evalstudy.models import AssignmentSlot, Criterion, Study
from proxies.methods import Answer, Batch, method_of
from proxies.models import ProxyRun


def unit_texts(slot_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per slot the texts a judge reads and the ids of what it shows."""
    texts: dict[int, dict[str, Any]] = {}
    for pk, reference, context, metadata, text, text_b, output, output_b, item in (
        AssignmentSlot.objects.filter(pk__in=slot_ids).values_list(
            "id", "output__item__reference", "output__item__context", "output__item__metadata",
            "output__text", "output_b__text", "output_id", "output_b_id", "output__item_id")
    ):
        texts[pk] = {"reference": reference, "context": context, "metadata": metadata,
                     "output": text, "output_b": text_b, "output_id": output,
                     "output_b_id": output_b, "item_id": item}
    return texts


def stored_values(study: Study, outputs: Sequence[int] | None = None
                  ) -> dict[int, dict[str, float]]:
    """Output id -> every value the study's metrics stored for it (the newest configuration
    of each metric, results without an error), as `analysis.selectors.metric_scores` reads
    them. Nothing is computed."""
    from metrics.models import MetricResult
    from metrics.selectors import latest_configs

    results = MetricResult.objects.filter(config__in=latest_configs(study).values(),
                                          output__item__study=study, error="")
    if outputs is not None:
        results = results.filter(output_id__in=list(outputs))
    values: dict[int, dict[str, float]] = {}
    for output_id, result_values in results.values_list("output_id", "values"):
        values.setdefault(output_id, {}).update(
            {k: v for k, v in (result_values or {}).items()
             if isinstance(v, int | float) and not isinstance(v, bool)})
    return values


def batch_answers(run: ProxyRun, backend: Any, criterion: Criterion, units: Sequence[int],
                  texts: dict[int, dict[str, Any]]) -> Iterator[Answer]:
    """The run's method's answers of `criterion` on `units`."""
    batch = Batch(run=run, backend=backend, criterion=criterion, kind=kind_of(criterion.kind),
                  units=units, texts=texts,
                  stored_values=lambda outputs: stored_values(run.study, outputs))
    return method_of(run.method).answer(batch)
