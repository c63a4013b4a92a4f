"""Reading metric results: the tidy table and per-output views."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from evalstudy.models import Study
from kit.csvsafe import SafeDictWriter

from .models import MetricConfig, MetricResult
from .scorers import registry


def metric_direction(name: str) -> str:
    """"lower" or "higher" (which way metric `name`'s headline is better), or "" for a metric
    no scorer has (a result stored under a name since removed: shown without an arrow)."""
    found = registry.SPECS.get(name)
    return found.direction if found is not None else ""


def metrics_in_display_order(names: Iterable[str]) -> list[str]:
    """WER, CER, PER, then the others in the registry's order; unknown names last, by name."""
    order = {name: i for i, name in enumerate(registry.SPECS)}
    return sorted(set(names), key=lambda name: (order.get(name, len(order)), name))


@dataclass
class SystemSummary:
    """One system's mean headline value per metric over the outputs that have one."""

    system: str
    outputs: int
    means: dict[str, float | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    best: set[str] = field(default_factory=set)  # metrics on which this system is best


def system_summaries(study: Study, configs: dict[str, MetricConfig],
                     shown: list[str]) -> list[SystemSummary]:
    """Per system, the mean of each shown metric's headline (the latest configuration) and
    how many outputs it covers, with the best system per metric marked by its direction.
    One query for the results, one for the systems' output counts."""
    from django.db.models import Avg, Count, Q

    from evalstudy.models import Output

    rows = {
        row["system_id"]: SystemSummary(system=row["system__name"], outputs=row["n"])
        for row in Output.objects.filter(item__study=study)
        .values("system_id", "system__name").annotate(n=Count("id")).order_by()
    }
    for row in (MetricResult.objects.filter(config__in=configs.values(),
                                            output__item__study=study)
                .values("output__system_id", "config__metric")
                .annotate(mean=Avg("headline", filter=Q(error="")),
                          n=Count("id", filter=Q(error="", headline__isnull=False)),
                          failed=Count("id", filter=~Q(error="")))):
        summary = rows.get(row["output__system_id"])
        if summary is None:
            continue
        metric = row["config__metric"]
        summary.means[metric] = row["mean"]
        summary.counts[metric] = row["n"]
        summary.errors[metric] = row["failed"]
    for metric in shown:
        scored = [s for s in rows.values() if s.means.get(metric) is not None]
        if len(scored) < 2:
            continue
        direction = metric_direction(metric)
        if not direction:
            continue  # a metric of unknown direction gets no "best"
        pick = min if direction == "lower" else max
        best = pick(mean for s in scored if (mean := s.means[metric]) is not None)
        for s in scored:
            if s.means[metric] == best:
                s.best.add(metric)
    return sorted(rows.values(), key=lambda s: s.system)


TIDY_COLUMNS = (
    "item", "system", "metric", "value", "scorer", "scorer_version", "config", "error",
    "signature",
)


def study_results(study: Study, *, metrics: list[str] | None = None):
    results = (
        MetricResult.objects.filter(output__item__study=study)
        .select_related("config", "output__item", "output__system")
        .order_by("output__item_id", "output__system_id", "config__metric", "config_id")
    )
    if metrics:
        results = results.filter(config__metric__in=metrics)
    return results


def result_rows(result: MetricResult) -> list[dict]:
    """One tidy row per value name (e.g. wer, sub_rate, bertscore_f) of one stored result."""
    config = result.config
    base = {
        "item": result.output.item.external_id, "system": result.output.system.name,
        "scorer": config.metric, "scorer_version": config.version,
        "config": config.config_hash[:12],
        "signature": json.dumps(config.signature, sort_keys=True),
    }
    if result.error:
        return [{**base, "metric": config.metric, "value": "", "error": result.error}]
    return [{**base, "metric": name, "value": value, "error": ""}
            for name, value in result.values.items()]


def metric_rows(study: Study, *, metrics: list[str] | None = None) -> Iterator[dict]:
    for result in study_results(study, metrics=metrics).iterator(chunk_size=2000):
        yield from result_rows(result)


def metrics_write_csv(study: Study, stream: IO[str], **filters) -> int:
    writer = SafeDictWriter(stream, fieldnames=TIDY_COLUMNS)
    writer.writeheader()
    count = 0
    for row in metric_rows(study, **filters):
        writer.writerow(row)
        count += 1
    return count


def latest_configs(study: Study) -> dict[str, MetricConfig]:
    """For each metric, the configuration of the newest run that computed it."""
    from .models import MetricRun

    chosen: dict = {}
    for run in MetricRun.objects.filter(study=study).order_by("-created_at").prefetch_related(
        "configs"
    ):
        for config in run.configs.all():
            chosen.setdefault(config.metric, config)
    return chosen


def output_results_page(study: Study, *, page: int = 1, per_page: int = 50):
    """(page of outputs, {output id: {metric: MetricResult}}, metric names shown)."""
    from django.core.paginator import Paginator

    from evalstudy.models import Output

    configs = latest_configs(study)
    outputs = Output.objects.filter(item__study=study).select_related("item", "system").order_by(
        "item_id", "system_id"
    )
    page_obj = Paginator(outputs, per_page).get_page(page)
    ids = [output.pk for output in page_obj]
    by_output: dict[int, dict[str, MetricResult]] = {pk: {} for pk in ids}
    for result in MetricResult.objects.filter(output_id__in=ids,
                                              config__in=configs.values()).select_related(
        "config"
    ):
        by_output[result.output_id][result.config.metric] = result
    return page_obj, by_output, metrics_in_display_order(configs)
