"""The tidy tables every analysis starts from (pandas DataFrames, built in a few queries)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotation.models import Judgment
from evalstudy.models import AssignmentSlot, Enrollment, Output, Rater, Study

JUDGMENT_COLUMNS = (
    "judgment", "rater", "rater_kind", "is_human", "seat", "slot", "slot_kind", "output",
    "item", "system", "output_b", "system_b", "criterion", "criterion_kind", "value",
    "numeric", "served_at", "submitted_at", "seconds",
)


@dataclass(frozen=True)
class JudgmentFilter:
    """Which judgments enter an analysis. Defaults follow the methods literature: practice
    items are stored but never analysed; attention checks are never analysed as items."""

    include_calibration: bool = False
    exclude_attention_failed: bool = False  # raters stopped for failed attention checks
    exclude_incomplete: bool = False  # raters whose seat is not done
    raters: str = "all"  # "all" | "human" | "proxy"

    def describe(self) -> list[str]:
        return [
            "calibration items " + ("included" if self.include_calibration else "excluded"),
            "raters over the attention-check limit "
            + ("excluded" if self.exclude_attention_failed else "included"),
            "incomplete raters " + ("excluded" if self.exclude_incomplete else "included"),
            f"raters: {self.raters}",
        ]


def judgments_tidy(study: Study, filters: JudgmentFilter | None = None) -> pd.DataFrame:
    """One row per judgment (rater x slot x criterion) with rater kind, item, system, item
    metadata (columns `item.<field>`), system metadata (`system.<field>`) and timings."""
    filters = filters or JudgmentFilter()
    kinds = [AssignmentSlot.Kind.TARGET]
    if filters.include_calibration:
        kinds.append(AssignmentSlot.Kind.CALIBRATION)
    judgments = Judgment.objects.filter(slot__assignment__study=study, slot__kind__in=kinds)
    if filters.raters == "human":
        judgments = judgments.filter(rater__kind__in=Rater.HUMAN_KINDS)
    elif filters.raters == "proxy":
        judgments = judgments.exclude(rater__kind__in=Rater.HUMAN_KINDS)
    if filters.exclude_attention_failed:
        stopped = Enrollment.objects.filter(study=study, stop_reason="attention")
        judgments = judgments.exclude(rater__in=stopped.values("rater"))
    if filters.exclude_incomplete:
        judgments = judgments.filter(slot__assignment__state="done")
    rows = judgments.values_list(
        "id", "rater_id", "rater__kind", "slot__assignment_id", "slot_id", "slot__kind",
        "slot__output_id", "slot__output__item_id", "slot__output__system_id",
        "slot__output_b_id", "slot__output_b__system_id", "criterion__key", "criterion__kind",
        "value", "numeric_value", "served_at", "submitted_at",
    )
    frame = pd.DataFrame.from_records(list(rows), columns=[
        "judgment", "rater", "rater_kind", "seat", "slot", "slot_kind", "output", "item",
        "system", "output_b", "system_b", "criterion", "criterion_kind", "value", "numeric",
        "served_at", "submitted_at",
    ])
    frame["is_human"] = frame["rater_kind"].isin(list(Rater.HUMAN_KINDS))
    served = pd.to_datetime(frame["served_at"], utc=True)
    submitted = pd.to_datetime(frame["submitted_at"], utc=True)
    frame["seconds"] = (submitted - served).dt.total_seconds()
    # Readable keys instead of database ids, and metadata as columns.
    items = {pk: (ext, meta) for pk, ext, meta in
             study.items.values_list("id", "external_id", "metadata")}
    systems = {pk: (name, meta) for pk, name, meta in
               study.systems.values_list("id", "name", "metadata")}
    raters = {r.pk: str(r) for r in Rater.objects.filter(pk__in=frame["rater"].unique())}
    frame["rater"] = frame["rater"].map(raters)
    for field in sorted({key for _, meta in items.values() for key in meta}):
        frame[f"item.{field}"] = frame["item"].map(lambda pk, f=field: items[pk][1].get(f)
                                                   if pk in items else None)
    for field in sorted({key for _, meta in systems.values() for key in meta}):
        frame[f"system.{field}"] = frame["system"].map(
            lambda pk, f=field: systems[pk][1].get(f) if pk in systems else None)
    frame["item"] = frame["item"].map(lambda pk: items[pk][0] if pk in items else None)
    for column in ("system", "system_b"):
        frame[column] = frame[column].map(lambda pk: systems[pk][0] if pk in systems else None)
    return frame.sort_values(["criterion", "item", "system", "rater"]).reset_index(drop=True)


def metric_scores(study: Study) -> pd.DataFrame:
    """One row per output with item, system and every stored metric value (newest config per
    metric), for comparing metrics with human judgments."""
    from metrics.models import MetricResult
    from metrics.selectors import latest_configs

    configs = latest_configs(study)
    outputs = pd.DataFrame.from_records(
        list(Output.objects.filter(item__study=study).values_list(
            "id", "item__external_id", "system__name")),
        columns=["output", "item", "system"],
    )
    values: dict[int, dict[str, float]] = {}
    for output_id, result_values in MetricResult.objects.filter(
        config__in=configs.values(), output__item__study=study, error=""
    ).values_list("output_id", "values"):
        values.setdefault(output_id, {}).update(result_values)
    wide = pd.DataFrame.from_dict(values, orient="index")
    wide.index.name = "output"
    return outputs.merge(wide, left_on="output", right_index=True, how="left")
