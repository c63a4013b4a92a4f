"""The tidy tables every analysis starts from (pandas DataFrames, built in a few queries)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from annotation.models import Judgment, ListeningLog
from evalstudy.criteria import BINARY_KINDS, TUPLE, kind_of, kinds_where, span_weights
from evalstudy.models import AssignmentSlot, Enrollment, ItemMedia, Output, Rater, Study

if TYPE_CHECKING:  # pandas loads with the tables (1-2 s), not with every page
    import pandas as pd

JUDGMENT_COLUMNS = (
    "judgment", "rater", "rater_kind", "is_human", "seat", "slot", "slot_kind", "output",
    "item", "system", "output_b", "system_b", "criterion", "criterion_kind", "value",
    "numeric", "served_at", "submitted_at", "seconds", "rater_id",
)


@dataclass(frozen=True)
class JudgmentFilter:
    """Which judgments enter an analysis. Defaults follow the methods literature: practice
    items are stored but never analysed; attention checks are never analysed as items."""

    include_calibration: bool = False
    exclude_attention_failed: bool = False  # raters stopped for failed attention checks
    exclude_incomplete: bool = False  # raters whose seat is not done
    # Judgments of slots with audio or video that the rater did not hear (or watch) to the end.
    exclude_unheard: bool = False
    raters: str = "all"  # "all" | "human" | "proxy"
    # Raters a researcher excluded from the analysis (annotation.rater_actions) are left out
    # unless this is set; their judgments stay stored either way.
    include_excluded: bool = False
    # Leave out human raters whose MACE competence (annotation.rater_quality.rater_competences,
    # the mean over the study's categorical criteria) is below this, 0..1 (None: keep everyone).
    min_competence: float | None = None

    def __post_init__(self) -> None:
        # A TypeError, as for an unknown filter: analysis_run_start reports it as invalid.
        value = self.min_competence
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0.0 <= value <= 1.0):
            raise TypeError("min_competence must be a number from 0 to 1")

    def describe(self) -> list[str]:
        return [
            "raters excluded by the researcher "
            + ("included" if self.include_excluded else "excluded"),
            *([f"raters with a MACE competence below {self.min_competence:g} excluded"]
              if self.min_competence is not None else []),
            "calibration items " + ("included" if self.include_calibration else "excluded"),
            "raters over the attention-check limit "
            + ("excluded" if self.exclude_attention_failed else "included"),
            "incomplete raters " + ("excluded" if self.exclude_incomplete else "included"),
            *(["judgments of media not heard to the end excluded"] if self.exclude_unheard
              else []),
            f"raters: {self.raters}",
        ]


def judgments_tidy(study: Study, filters: JudgmentFilter | None = None) -> pd.DataFrame:
    """One row per judgment (rater x slot x criterion) with rater kind, item, system, item
    metadata (columns `item.<field>`), system metadata (`system.<field>`) and timings.

    Keys: `rater` is the rater's name (what reports show) and `rater_id` its database id;
    `output`/`output_b` are output ids. The analysis keys raters and units on these integers
    (factorising a million integers is several times faster than a million names, and two
    raters sharing a display name stay apart)."""
    import pandas as pd

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
    if not filters.include_excluded:
        excluded = Enrollment.objects.filter(study=study, excluded_at__isnull=False)
        judgments = judgments.exclude(rater__in=excluded.values("rater"))
    if filters.min_competence is not None:
        judgments = judgments.exclude(
            rater__in=less_competent_raters(study, float(filters.min_competence)))
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
    frame = _with_listening(study, frame, exclude_unheard=filters.exclude_unheard)
    served = pd.to_datetime(frame["served_at"], utc=True)
    submitted = pd.to_datetime(frame["submitted_at"], utc=True)
    frame["seconds"] = (submitted - served).dt.total_seconds()
    # Readable keys instead of database ids, and metadata as columns.
    items = {pk: (ext, meta) for pk, ext, meta in
             study.items.values_list("id", "external_id", "metadata")}
    systems = {pk: (name, meta) for pk, name, meta in
               study.systems.values_list("id", "name", "metadata")}
    raters = rater_labels({r.pk: str(r) for r in
                            Rater.objects.filter(pk__in=frame["rater"].unique())})
    frame["rater_id"] = frame["rater"].astype("int64")
    frame["rater"] = frame["rater"].map(raters)
    for field in sorted({key for _, meta in items.values() for key in meta}):
        frame[f"item.{field}"] = frame["item"].map(lambda pk, f=field: items[pk][1].get(f)
                                                   if pk in items else None)
    for field in sorted({key for _, meta in systems.values() for key in meta}):
        frame[f"system.{field}"] = frame["system"].map(
            lambda pk, f=field: systems[pk][1].get(f) if pk in systems else None)
    tuples = frame["criterion_kind"].isin(kinds_where(lambda kind: kind.shows == TUPLE))
    if tuples.any():
        # Ranking and best-worst answers name outputs by the letter they were shown under:
        # the systems shown, in display order (A first), as a JSON list.
        names = dict(study.systems.values_list("id", "name"))
        slots = frame.loc[tuples, "slot"]
        output_system = dict(Output.objects.filter(item__study=study)
                             .values_list("id", "system_id"))
        shown_systems = {
            pk: json.dumps([names[output_system[o]] for o in shown_ids])
            for pk, shown_ids in AssignmentSlot.objects.filter(pk__in=slots.unique().tolist())
            .values_list("id", "shown_outputs")}
        frame["shown"] = frame["slot"].map(shown_systems)
    spans = frame["criterion_kind"].isin(kinds_where(lambda kind: "spans" in kind.analysis))
    if spans.any():
        # What span agreement compares over: every character of each text a span could mark.
        spanned = frame.loc[spans, "output"].unique().tolist()
        lengths = {pk: (len(text), len(reference)) for pk, text, reference in
                   Output.objects.filter(pk__in=spanned)
                   .values_list("id", "text", "item__reference")}
        frame["output_chars"] = frame["output"].map(lambda pk: lengths.get(pk, (None,))[0])
        frame["reference_chars"] = frame["output"].map(
            lambda pk: lengths[pk][1] if pk in lengths else None)
    frame["item"] = frame["item"].map(lambda pk: items[pk][0] if pk in items else None)
    for column in ("system", "system_b"):
        frame[column] = frame[column].map(lambda pk: systems[pk][0] if pk in systems else None)
    return frame.sort_values(["criterion", "item", "system", "rater"]).reset_index(drop=True)


def exclusions_describe(study: Study, filters: JudgmentFilter) -> list[str]:
    """What the report's Exclusions row says: the filters (`JudgmentFilter.describe`) with the
    number of raters each rater-level exclusion actually left out, the researcher's reasons and
    the MACE competences below the bar, so a reader can judge how much was removed and why."""
    lines = filters.describe()
    excluded = list(Enrollment.objects.filter(study=study, excluded_at__isnull=False)
                    .order_by("excluded_at").values_list("excluded_reason", flat=True))
    if excluded:
        reasons = sorted({reason for reason in excluded if reason})
        lines[0] = (f"{len(excluded)} rater{'s' if len(excluded) != 1 else ''} excluded by the "
                    "researcher on the monitor: "
                    + ("included (include_excluded)" if filters.include_excluded else "left out")
                    + (f" (reasons given: {'; '.join(reasons)})" if reasons else ""))
    else:
        lines[0] = "no rater excluded by the researcher"
    if filters.min_competence is not None:
        below = sorted(theta for theta in rater_competences(study).values()
                       if theta < filters.min_competence)
        lines[1] = (f"{len(below)} rater{'s' if len(below) != 1 else ''} with a MACE competence "
                    f"below {filters.min_competence:g} left out"
                    + (f" (competences {', '.join(f'{theta:.2f}' for theta in below)})"
                       if below else ""))
    return lines


def rater_competences(study: Study) -> dict[int, float]:
    """rater id -> MACE competence (0..1) of the study's human raters on its categorical
    criteria, as the monitor shows it; raters with no shared categorical judgment are absent."""
    from annotation.rater_quality import rater_competences as competences

    return competences(study)


def less_competent_raters(study: Study, minimum: float) -> list[int]:
    """Ids of the raters whose MACE competence is below `minimum`."""
    return sorted(rater for rater, theta in rater_competences(study).items() if theta < minimum)


def _with_listening(study: Study, frame: pd.DataFrame, *, exclude_unheard: bool
                    ) -> pd.DataFrame:
    """Listening behaviour (annotation.media) beside each judgment of a study with media:
    `seconds_listened` (of the slot's media, what was heard, not wall time) and `media_heard`
    (every medium of the slot heard, or watched, to the end; empty for slots without media).
    With `exclude_unheard`, judgments of slots whose media were not all heard are left out."""
    media = list(ItemMedia.objects.filter(item__study=study).values_list("item_id", "output_id"))
    if not media or frame.empty:
        return frame
    item_media = {item for item, output in media if output is None}
    output_media = {output for _, output in media if output is not None}
    heard: dict[int, set[str]] = {}
    seconds: dict[int, float] = {}
    for slot, which, listened, completed in ListeningLog.objects.filter(
            slot__in=frame["slot"].unique().tolist()).values_list(
            "slot", "which", "seconds_listened", "completed"):
        seconds[slot] = seconds.get(slot, 0.0) + listened
        if completed:
            heard.setdefault(slot, set()).add(which)

    def needed(item: Any, output: Any, output_b: Any) -> set[str]:
        return ({"item"} if item in item_media else set()) | (
            {"a"} if output in output_media else set()) | (
            {"b"} if output_b in output_media else set())

    wanted = [needed(i, o, b) for i, o, b in zip(frame["item"], frame["output"],
                                                 frame["output_b"], strict=True)]
    frame = frame.assign(
        seconds_listened=[seconds.get(slot, 0.0) if want else None
                          for slot, want in zip(frame["slot"], wanted, strict=True)],
        media_heard=[(want <= heard.get(slot, set())) if want else None
                     for slot, want in zip(frame["slot"], wanted, strict=True)])
    if exclude_unheard:
        frame = frame[frame["media_heard"].map(lambda h: h is not False)]
    return frame


def rater_labels(names: dict[int, str]) -> dict[int, str]:
    """Each rater's name, made unique: raters who share a display name (two invitees both
    called "Anna") get their id beside it, so that every statistic grouping by name (a model's
    random effect, a count of raters, a report's table) still sees two raters."""
    shared = {name for name, count in Counter(names.values()).items() if count > 1}
    return {pk: f"{name} (#{pk})" if name in shared else name for pk, name in names.items()}


def metric_scores(study: Study) -> pd.DataFrame:
    """One row per output with item, system and every stored metric value (newest config per
    metric), for comparing metrics with human judgments."""
    import pandas as pd

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


def proxy_raters(study: Study) -> dict[str, dict[str, Any]]:
    """What the analysis must know about each proxy rater of `study` that its judgments do not
    say, by the name `judgments_tidy` gives the rater (the pipeline's
    `options["proxy_raters"]`; see `analysis.stats.pipeline.proxy_scores`):

    - `thresholds[criterion key]`: {threshold, source, rule}, the decision threshold its run
      applied to P(yes) (the judge's default 0.5 where the run named none; none for a rubric
      judge's severity levels, whose answer is the most likely level).
    - `exclude_scores`: outputs a learned proxy saw, its train and dev splits as its artefact's
      manifest records them (`split_keys`: output ids), and every output of this study sharing
      a reference with them (LATTE splits by ground truth, and filtered its real-conversation
      test set the same way). A learned proxy trained on this study before splits were
      recorded is left out entirely: nothing says which outputs it saw.
    - `exclude_decisions`: the dev split a threshold was chosen on (`proxy_threshold_choose`,
      recorded in a rater's metadata["threshold_choices"]) when the rater decides at that
      threshold, with the outputs sharing a reference with it.
    - For a judge asking with a prompt version (`proxies.versions`), `exclude_scores`
      holds every output of its development split (its few-shot examples come from there).
    """
    from proxies.models import ProxyRun
    from proxies.runs import decision_identity

    raters = list(Rater.objects.filter(judgments__slot__assignment__study=study)
                  .exclude(kind__in=Rater.HUMAN_KINDS).distinct())
    if not raters:
        return {}
    outputs = {pk: reference or context or "" for pk, reference, context in
               Output.objects.filter(item__study=study).values_list(
                   "id", "item__reference", "item__context")}
    criteria = list(study.criteria.filter(kind__in=BINARY_KINDS))
    latest: dict[int, ProxyRun] = {}
    for each in (ProxyRun.objects.filter(rater__in=raters)
                 .select_related("learned_proxy__study", "prompt_version")
                 .order_by("created_at", "pk")):
        latest[each.rater_id] = each  # every run of a rater has its signature: the last one
    choices: dict[str, list[dict[str, Any]]] = {}
    holders = {r.pk: r for r in raters}
    holders.update({r.pk: r for r in Rater.objects.filter(study=study)
                    .exclude(kind__in=Rater.HUMAN_KINDS)})
    for holder in holders.values():
        for record in (holder.metadata or {}).get("threshold_choices") or []:
            choices.setdefault(str(record.get("identity")), []).append(record)

    def sharing_references(seen: set[int]) -> set[int]:
        """The outputs of this study that are `seen` or share a reference with one."""
        references = {reference or context or "" for reference, context in
                      Output.objects.filter(pk__in=seen).values_list("item__reference",
                                                                     "item__context")}
        references.discard("")
        return {pk for pk, reference in outputs.items() if pk in seen or reference in references}

    info: dict[str, dict[str, Any]] = {}
    for rater in raters:
        run = latest.get(rater.pk)
        metadata = rater.metadata or {}
        signature = run.signature if run is not None else metadata
        method = run.method if run is not None else str(metadata.get("method") or "")
        params = dict((run.params if run is not None else metadata.get("params")) or {})
        learned = run.learned_proxy if run is not None else None
        entry: dict[str, Any] = {"kind": rater.kind, "method": method, "thresholds": {}}
        matched = choices.get(decision_identity(signature), []) if method else []
        for criterion in criteria:
            setting = _threshold_setting(method, criterion.kind, params, learned)
            chosen = [r for r in matched if r.get("criterion") == criterion.key]
            if setting is not None and chosen:
                last = chosen[-1]
                setting["source"] = (
                    f"chosen on a dev split of this study by proxy_threshold_choose "
                    f"(precision >= {last.get('target_precision')} on "
                    f"{len(last.get('dev_outputs') or [])} dev outputs, seed {last.get('seed')})")
            if setting is not None:
                entry["thresholds"][criterion.key] = setting
        if matched:
            dev = {int(pk) for record in matched for pk in record.get("dev_outputs") or []}
            entry["exclude_decisions"] = sorted(sharing_references(dev))
            entry["exclude_decisions_because"] = (
                f"the {len(dev)} dev outputs its threshold was chosen on, and the outputs "
                "sharing a reference with them")
        if learned is not None:
            entry.update(_learned_exclusions(learned, study, outputs, sharing_references))
        if run is not None and run.prompt_version is not None:
            # A versioned judge was shown examples from its development split: it is scored
            # on the held-out outputs only (proxies.versions).
            from proxies.versions import prompt_version_exclusions

            entry.update(prompt_version_exclusions(run.prompt_version))
        info[str(rater)] = entry
    return info


def _threshold_setting(method: str, kind: str, params: dict[str, Any],
                       learned: Any) -> dict[str, Any] | None:
    """The rule a proxy's stored answers follow (proxies.methods: its score read at a
    threshold, `decide`, or the most likely level where the method answers one); None for
    raters without a run (imported judgments) and methods reading no threshold."""
    from proxies.methods import DEFAULT_THRESHOLD, METHODS, THRESHOLD, method_of

    if method not in METHODS:
        return None
    spec = method_of(method)
    if spec.thresholded and spec.answers_level(kind_of(kind)):
        return {"threshold": None, "rule": f"the judge's most likely {kind} level (0 or 1: "
                "preserved)", "source": f"none: a {method} judge answers a {kind} level"}
    if not spec.thresholded:
        return None
    threshold = float(params.get(THRESHOLD, DEFAULT_THRESHOLD))
    source = ("run parameter" if THRESHOLD in params
              else f"the judge's default ({DEFAULT_THRESHOLD:g}; the run named none)")
    report = getattr(learned, "report", None) or {}
    if learned is not None and report.get("threshold") == threshold:
        source = ("chosen on the learned proxy's own dev split: "
                  f"{report.get('threshold_rule') or 'see its report'}")
    score = "the proxy's P(preserved)" if spec.learned else "P(yes)"
    return {"threshold": threshold, "source": source,
            "rule": f"predicted preserved when {score} >= {threshold:g}"}


def _learned_exclusions(learned: Any, study: Study, outputs: dict[int, str],
                        sharing_references: Any) -> dict[str, Any]:
    """`exclude_scores` (and its reason) for a learned proxy, from its recorded splits."""
    split = (learned.report or {}).get("split_keys")
    trained_here = learned.study_id == study.pk
    where = "this study" if trained_here else (
        f"study {learned.study.slug!r}" if learned.study is not None else "a deleted study")
    if split and "out_of_fold" in split:
        # A pairwise proxy cross-validated by reference: on its own study each stored answer
        # comes from a model that never saw that pair's reference; elsewhere it leaves
        # unanswered every pair whose reference it was trained on. Every answer is fair.
        return {"note": f"learned proxy {learned}: " + (
            "out-of-fold predictions (cross-validated by reference), scored on every pair"
            if trained_here else f"trained on {where}; pairs sharing a reference with its "
            "training are left unanswered")}
    if not split:
        if trained_here:
            return {"exclude_scores": sorted(outputs),
                    "exclude_scores_because": (
                        f"learned proxy {learned} was trained on this study before training "
                        "splits were recorded, so every output may have been seen: retrain it "
                        "to evaluate it here")}
        return {"note": f"learned proxy {learned} was trained on {where} before training splits "
                        "were recorded: outputs sharing a reference with its training outputs "
                        "cannot be left out"}
    train = [k for k in split.get("train") or [] if isinstance(k, int)]
    dev = [k for k in split.get("dev") or [] if isinstance(k, int)]
    return {"exclude_scores": sorted(sharing_references(set(train) | set(dev))),
            "exclude_scores_because": (
                f"learned proxy {learned} was trained on {len(train)} outputs and its threshold "
                f"chosen on {len(dev)} outputs of {where} (its train and dev splits); those "
                "outputs and every output sharing a reference with them are left out")}


def vote_counts(study: Study) -> pd.DataFrame:
    """Aggregated judgments (`annotation.models.VoteCount`): one row per unit and answer with
    the number of people who gave it. No rater column: they are counts, not raters."""
    import pandas as pd

    from annotation.models import VoteCount

    records = list(VoteCount.objects.filter(study=study).values_list(
        "criterion__key", "criterion__kind", "output__item__external_id", "output_id",
        "output__system__name", "output_b_id", "output_b__system__name", "value", "count",
        "position_known"))
    from .stats.votes import VOTE_COLUMNS

    return pd.DataFrame.from_records(records, columns=VOTE_COLUMNS)


def criteria_specs(study: Study) -> list[dict[str, Any]]:
    """The study's criteria as the analysis reads them (plain dicts, in order): what
    `analysis.stats.pipeline.analyse` and the option checks take."""
    return [
        {"key": c.key, "kind": c.kind, "scale_points": c.scale_points,
         "options": list(c.options or []), "labels": c.labels, "prompt": c.prompt,
         "allow_tie": c.allow_tie, "allow_both": c.allow_both,
         "scale_min": c.scale_min, "scale_max": c.scale_max,
         "severity_weights": span_weights(c.rule) if "severity_weights" in c.rule.spec.settings
         else None,
         "span_reference": c.span_reference}
        for c in study.criteria.order_by("order", "id")
    ]


def metadata_fields(study: Study) -> list[str]:
    """The item and system metadata fields the study's rows carry, as the analysis names its
    columns (`item.speaker`, `system.size`): what a researcher may group or model by."""
    fields = {f"item.{key}" for meta in study.items.values_list("metadata", flat=True)
              for key in (meta or {})}
    fields |= {f"system.{key}" for meta in study.systems.values_list("metadata", flat=True)
               for key in (meta or {})}
    return sorted(fields)
