"""Reading metric results: the tidy table and per-output views."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO

from evalstudy.models import Study
from kit.csvsafe import SafeDictWriter

from .models import MetricConfig, MetricResult

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
    return page_obj, by_output, list(configs)
