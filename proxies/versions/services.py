"""Versioned LLM-judge prompts that learn from the raters.

A `JudgePromptVersion` is one prompt of one judge method for one criterion of a study: its
template and its few-shot examples. Version 1 is created from a judge configuration (method,
template) and is zero-shot unless a run of that judge is given to learn from; each next version
(`judge_prompt_version_create(base_version=...)`) takes the answers of the previous version's
latest finished run, finds the units where they disagree with the human majority (the human
corrections), and adds some of them as examples, shown with the people's answer.

The guard, which is what keeps the reported agreement honest:

- Version 1 splits the study's items (seeded hash of their ids) into a development split,
  reserved for example-building, and the evaluation set; every later version inherits the
  split. Examples come only from development items: an example whose output (or whose item:
  another system's output for the same input is a near-duplicate) lies in the evaluation set
  is refused with a ValidationError naming it, whoever picked it.
- The evaluation of a version (`held_out_outputs`) leaves out every development output and
  every output of an item any example of the version or of its ancestors came from.

Runs of a version (`proxy_run_start(prompt_version=...)`) send the examples in every prompt
(`proxies.judges.fewshot`) and answer as their own rater (the version is in the signature), so
the analysis groups results by version (`analysis.extras.judge_versions`).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Judgment
from evalstudy.audit import SYSTEM, actor_user, audit_record
from evalstudy.criteria import (
    BINARY_KINDS,
    PAIR,
    binary_label,
    kind_of,
    kinds_where,
    strict_majority,
)
from evalstudy.criteria import pair_oriented as oriented
from evalstudy.models import AssignmentSlot, AuditEvent, Criterion, Output, Rater, Study
from proxies.methods import VERSIONED_METHOD_CHOICES, method_of
from proxies.models import JudgePromptVersion, ProxyRun

DEFAULT_DEV_FRACTION = 0.3
# Bounds on a prompt: every example is sent with every prompt of every run of the version.
MAX_EXAMPLES = 20
MAX_NOTE = 500
# The methods whose prompts can be versioned, in menu order.
VERSION_METHODS = tuple(name for name, _label in VERSIONED_METHOD_CHOICES)
GUARD_SENTENCE = (
    "Each prompt version is evaluated only on held-out outputs: the study's items were split "
    "once (seeded) into a development split, from which alone few-shot examples are taken, and "
    "an evaluation set; a version's figures leave out every development output and every "
    "output of an item any example of that version or of its ancestors came from, so no judge "
    "is scored on a case it was shown.")

Unit = tuple[int, int | None]


# --- the split -------------------------------------------------------------------------------

def _in_dev(external_id: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{external_id}".encode()).hexdigest()
    return int(digest[:12], 16) / float(16 ** 12) < fraction


def split_items(study: Study, *, seed: int, dev_fraction: float) -> list[int]:
    """The item ids of the development split: a seeded hash of each item's external id, so the
    same items are reserved whatever the order they were added in."""
    if isinstance(dev_fraction, bool) or not isinstance(dev_fraction, int | float) or not (
            0 < dev_fraction < 1):
        raise ValidationError(f"dev_fraction: must lie strictly between 0 and 1, got "
                              f"{dev_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValidationError(f"seed: must be an integer >= 0, got {seed!r}")
    items = list(study.items.values_list("id", "external_id"))
    dev = sorted(pk for pk, external in items if _in_dev(external, seed, float(dev_fraction)))
    if not dev or len(dev) == len(items):
        raise ValidationError(
            f"dev_fraction: {dev_fraction} leaves {len(dev)} of the study's {len(items)} items "
            "for example-building; both the development split and the evaluation set need at "
            "least one item")
    return dev


def lineage(version: JudgePromptVersion) -> list[JudgePromptVersion]:
    """The version and its ancestors, version 1 first."""
    chain = []
    current: JudgePromptVersion | None = version
    while current is not None:
        chain.append(current)
        current = current.parent
    return chain[::-1]


def excluded_items(version: JudgePromptVersion) -> set[int]:
    """Items a version may not be evaluated on: its development split and the items of every
    example of it and of its ancestors (they lie in the split unless data changed since)."""
    items = {int(pk) for pk in (version.split or {}).get("dev_items") or []}
    for ancestor in lineage(version):
        items |= {int(e["item_id"]) for e in ancestor.examples or [] if e.get("item_id")}
        items |= set(Output.objects.filter(pk__in=ancestor.example_outputs or [])
                     .values_list("item_id", flat=True))
    return items


def held_out_outputs(version: JudgePromptVersion) -> set[int]:
    """The outputs a version is evaluated on (see the module doc)."""
    return set(Output.objects.filter(item__study_id=version.study_id)
               .exclude(item_id__in=excluded_items(version)).values_list("id", flat=True))


def prompt_version_exclusions(version: JudgePromptVersion) -> dict[str, Any]:
    """What `analysis.selectors.proxy_raters` tells the analysis about a versioned judge: the
    outputs it may not be scored on (every output outside its held-out set)."""
    excluded = sorted(Output.objects.filter(item_id__in=excluded_items(version))
                      .values_list("id", flat=True))
    return {"exclude_scores": excluded, "prompt_version": version.number,
            "exclude_scores_because": (
                f"prompt version {version.number} takes its few-shot examples from a "
                f"development split of {len((version.split or {}).get('dev_items') or [])} "
                "items: every output of those items is left out")}


def examples_guard(study: Study, split: dict[str, Any], examples: Iterable[dict[str, Any]]
                   ) -> None:
    """Refuse (ValidationError naming each) an example whose output or item lies in the
    evaluation set, i.e. outside the development split."""
    dev = {int(pk) for pk in split.get("dev_items") or []}
    examples = list(examples)
    outputs = {int(o) for e in examples for o in (e.get("output"), e.get("output_b"))
               if o is not None}
    found = dict(Output.objects.filter(pk__in=outputs, item__study=study)
                 .values_list("id", "item_id"))
    names = dict(study.items.values_list("id", "external_id"))
    errors = []
    for output in sorted(outputs):
        if output not in found:
            errors.append(f"examples: output {output} is not an output of {study.slug!r}")
        elif found[output] not in dev:
            errors.append(
                f"examples: output {output} (item {names.get(found[output])!r}) is in the "
                "evaluation set; examples come only from the development split, so that no "
                "version is evaluated on an output (or an item) it was shown")
    if errors:
        raise ValidationError(errors)


# --- human corrections -----------------------------------------------------------------------

def _reading(kind: str, value: str) -> str | None:
    """What a judge and the humans are compared on: the binary reading (yes/no) for criteria
    that have one (as the validity section compares them), else the canonical value."""
    if kind in BINARY_KINDS:
        label = binary_label(kind, str(value))
        return None if label is None else ("yes" if label == 1.0 else "no")
    return str(value)




def human_answers(study: Study, criterion: Criterion) -> dict[Unit, list[str]]:
    """Per unit, the canonical answers of the human raters (target slots only). A pair shown
    the other way round counts for the same unit with its answer turned around (`oriented`)."""
    rows = (Judgment.objects
            .filter(slot__assignment__study=study, criterion=criterion,
                    slot__kind=AssignmentSlot.Kind.TARGET, rater__kind__in=Rater.HUMAN_KINDS)
            .values_list("slot__output_id", "slot__output_b_id", "value"))
    answers: dict[Unit, list[str]] = defaultdict(list)
    for output, output_b, value in rows:
        unit, answer = oriented(output, output_b, str(value))
        answers[unit].append(answer)
    return dict(answers)


def human_majority(kind: str, values: Sequence[str]) -> dict[str, Any]:
    """The human majority of one unit: on the compared reading (`reading`) and on the
    canonical value (`value`), each None on a tie; `n` raters."""
    readings = [r for r in (_reading(kind, v) for v in values) if r is not None]
    return {"reading": strict_majority(readings), "value": strict_majority(list(values)),
            "n": len(values),
            "agreeing": Counter(readings).most_common(1)[0][1] if readings else 0}


def judge_answers(run: ProxyRun, criterion: Criterion) -> dict[Unit, tuple[str, float | None]]:
    """The run's answers to `criterion`: unit -> (canonical value, score)."""
    # Keyed as the humans' answers are (`oriented`). The score only ranks corrections by its
    # distance from 0.5, which turning a pair around leaves as it is.
    return {unit: (answer, score) for unit, answer, score in (
        (*oriented(output, output_b, str(value)), score)
        for output, output_b, value, score in
        Judgment.objects.filter(rater=run.rater, criterion=criterion,
                                slot__assignment__study=run.study)
        .values_list("slot__output_id", "slot__output_b_id", "value", "numeric_value"))}


def _example_answer(method: str, majority: dict[str, Any]) -> str | None:
    """The people's answer as the method's judge answers: their binary reading (yes/no) for
    a judge answering yes or no (LATTE), else the canonical value (a scale value, A/B/tie)."""
    if method_of(method).example_reads_binary:
        return majority["reading"]
    return majority["value"]


def _tiebreak(seed: int, unit: Unit) -> str:
    return hashlib.sha256(f"{seed}:{unit[0]}:{unit[1]}".encode()).hexdigest()


def corrections(*, study: Study, criterion: Criterion, run: ProxyRun | None,
                dev_items: set[int], seed: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The development units where `run`'s judge disagrees with the human majority, most
    confidently wrong first (the distance of its score from 0.5; then a seeded order), and
    counts of what was compared."""
    if run is None:
        return [], {"dev_units": 0, "disagreements": 0}
    item_of = dict(Output.objects.filter(item__study=study).values_list("id", "item_id"))
    answers = judge_answers(run, criterion)
    found: list[dict[str, Any]] = []
    compared = 0
    for unit, values in human_answers(study, criterion).items():
        if item_of.get(unit[0]) not in dev_items or unit not in answers:
            continue
        majority = human_majority(criterion.kind, values)
        value, score = answers[unit]
        judged = _reading(criterion.kind, value)
        if majority["reading"] is None or judged is None:
            continue
        compared += 1
        if judged != majority["reading"]:
            found.append({"unit": unit, "majority": majority, "judge": value, "score": score})
    found.sort(key=lambda c: (-(abs(c["score"] - 0.5) if c["score"] is not None else 0.0),
                              _tiebreak(seed, c["unit"])))
    return found, {"dev_units": compared, "disagreements": len(found)}


def _example(unit: Unit, *, method: str, criterion: Criterion, majority: dict[str, Any],
             judge: str | None, why: str) -> dict[str, Any] | None:
    answer = _example_answer(method, majority)
    if answer is None:
        return None
    output = Output.objects.select_related("item").get(pk=unit[0])
    text_b = (Output.objects.values_list("text", flat=True).get(pk=unit[1])
              if unit[1] is not None else None)
    if not why:
        why = (f"{majority['agreeing']} of {majority['n']} raters answered {answer}"
               + (f"; the judge answered {judge}" if judge is not None else ""))
    return {"output": unit[0], "output_b": unit[1], "item_id": output.item_id,
            "item": output.item.external_id, "reference": output.item.reference,
            "context": output.item.context, "text": output.text, "text_b": text_b,
            "answer": answer, "human": majority["value"], "judge": judge, "why": why[:MAX_NOTE]}


# --- the service -----------------------------------------------------------------------------

def _bounded_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name}: must be an integer from {low} to {high}, got {value!r}")
    return value


def _latest_run(version: JudgePromptVersion) -> ProxyRun:
    run = (ProxyRun.objects.filter(prompt_version=version, status=ProxyRun.Status.DONE)
           .select_related("rater", "study").order_by("-finished_at", "-pk").first())
    if run is None:
        raise ValidationError(f"base_version: version {version.number} has no finished run; "
                              "run it first, its disagreements with the raters become the next "
                              "version's examples")
    return run


def root_settings_check(study: Study, criterion_key: Any, method: Any, run: ProxyRun | None
                        ) -> tuple[Criterion, str]:
    """The criterion and method of a version 1, checked (ValidationError naming the field):
    a versioned method, a criterion of the study it answers, a run of that judge."""
    if method not in VERSION_METHODS:
        raise ValidationError(f"method: must be one of {list(VERSION_METHODS)}, got {method!r}")
    criterion = study.criteria.filter(key=criterion_key).first()
    if criterion is None:
        raise ValidationError(f"criterion: {criterion_key!r} is not a criterion of "
                              f"{study.slug!r}")
    answered = kinds_where(method_of(method).answers)
    if criterion.kind not in answered:
        raise ValidationError(f"criterion: {criterion.key!r} is {criterion.kind}; a {method} "
                              f"judge answers {sorted(answered)}")
    if run is not None and (run.study_id != study.pk or run.method != method
                            or criterion.key not in run.criteria):
        raise ValidationError(f"run: proxy run {run.pk} is not a {method} run of "
                              f"{study.slug!r} answering {criterion.key!r}")
    return criterion, method


def judge_prompt_version_create(
    *, study: Study, base_version: JudgePromptVersion | None = None,
    criterion_key: str | None = None, method: str | None = None, run: ProxyRun | None = None,
    template: str | None = None, n_examples: int = 4, outputs: Sequence[int] | None = None,
    notes: dict[Any, str] | None = None, dev_fraction: float = DEFAULT_DEV_FRACTION,
    seed: int = 0, note: str = "", actor: Any = None, source: str = SYSTEM,
) -> JudgePromptVersion:
    """Create the next prompt version of a judge; audited as "create".

    - `base_version`: the version to improve. The corrections are the development units where
      its latest finished run disagrees with the human majority; up to `n_examples` of them,
      one per item first and most confidently wrong first, join the base's examples. Template,
      split and criterion are the base's (`template` may replace a LATTE template).
    - Without it, version 1 of (`criterion_key`, `method`) with `template` (blank: the
      method's default) and a new split of the items (`dev_fraction`, `seed`); zero-shot
      unless `run` (a finished run of that judge on this study) gives corrections.
    - `outputs`: the researcher's own pick of units (output ids) instead of the automatic one,
      each with a human majority; `notes` {output id: why} replaces the default explanation.

    ValidationError (naming the field) for another study's version or run, an example from
    the evaluation set (the guard), no correction to learn from, or bad numbers."""
    from proxies.runs import template_check

    n_examples = _bounded_int("n_examples", n_examples, 0, MAX_EXAMPLES)
    if base_version is not None:
        if base_version.study_id != study.pk:
            raise ValidationError("base_version: not a prompt version of this study")
        if run is not None and run.prompt_version_id != base_version.pk:
            raise ValidationError(f"run: proxy run {run.pk} is not a run of version "
                                  f"{base_version.number}")
        run = run or _latest_run(base_version)
        criterion, method = base_version.criterion, base_version.method
        split = dict(base_version.split)
        inherited = list(base_version.examples)
        template = base_version.template if template is None else template
    else:
        criterion, method = root_settings_check(study, criterion_key, method, run)
        if run is not None and run.prompt_version_id is not None:
            raise ValidationError("run: that run belongs to a prompt version; give it as "
                                  "base_version")
        if run is not None and run.status != ProxyRun.Status.DONE:
            raise ValidationError(f"run: proxy run {run.pk} has not finished")
        split = {"seed": seed, "dev_fraction": dev_fraction,
                 "dev_items": split_items(study, seed=seed, dev_fraction=dev_fraction)}
        inherited = []
        template = template or ""
    if template and template != base_version_template(base_version):
        template_check(method, template)
    dev_items = {int(pk) for pk in split["dev_items"]}
    found, counts = corrections(study=study, criterion=criterion, run=run, dev_items=dev_items,
                                seed=int(split.get("seed", 0)))
    used = {(e["output"], e.get("output_b")) for e in inherited}
    if notes is not None and not isinstance(notes, dict):
        raise ValidationError("notes: must be an object {output id: why}")
    try:
        notes = {int(k): str(v) for k, v in (notes or {}).items()}
    except (TypeError, ValueError):
        raise ValidationError("notes: each key must be an output id (a whole number), e.g. "
                              '{"12": "the judge missed the dropped negation"}') from None
    judged = judge_answers(run, criterion) if run is not None else {}
    new: list[dict[str, Any]] = []
    if outputs is not None:
        if not isinstance(outputs, list | tuple) or not all(
                isinstance(o, int) and not isinstance(o, bool) for o in outputs):
            raise ValidationError("outputs: must be a list of output ids")
        # The guard first, on the researcher's own pick: it names every offending output.
        examples_guard(study, split, [{"output": o} for o in outputs])
        majorities = human_answers(study, criterion)
        for output in outputs:
            # A pairwise criterion's unit is a pair (lower output id first, `oriented`): the
            # first one (in id order) that holds the output.
            unit = ((output, None) if kind_of(criterion.kind).shows != PAIR else
                    next((u for u in sorted(majorities, key=str) if output in u), None))
            unit = unit if unit in majorities else None
            majority = (human_majority(criterion.kind, majorities[unit])
                        if unit is not None else None)
            example = None if unit is None or majority is None else _example(
                unit, method=method, criterion=criterion, majority=majority,
                judge=judged[unit][0] if unit in judged else None, why=notes.get(output, ""))
            if unit is None or example is None:
                raise ValidationError(f"outputs: output {output} has no human majority on "
                                      f"{criterion.key!r} to show as the answer")
            if unit not in used:
                new.append(example)
                used.add(unit)
    elif n_examples:
        if run is None:
            raise ValidationError("run: version 1 learns from corrections only when a finished "
                                  "run of the judge is given; or ask for n_examples 0")
        items_taken: set[int] = set()
        item_of = dict(Output.objects.filter(item__study=study).values_list("id", "item_id"))
        # One per item first: two systems' outputs for one input teach the same case.
        first: list[dict[str, Any]] = []
        rest: list[dict[str, Any]] = []
        for correction in found:
            item = item_of[correction["unit"][0]]
            (rest if item in items_taken else first).append(correction)
            items_taken.add(item)
        ordered = first + rest
        for correction in ordered:
            if len(new) >= n_examples:
                break
            if correction["unit"] in used:
                continue
            example = _example(correction["unit"], method=method, criterion=criterion,
                               majority=correction["majority"], judge=correction["judge"],
                               why=notes.get(correction["unit"][0], ""))
            if example is not None:
                new.append(example)
                used.add(correction["unit"])
        if not new:
            raise ValidationError(
                f"n_examples: no correction to learn from: on the {counts['dev_units']} "
                f"development units with a human majority, run {run.pk}'s judge agrees with "
                "the raters (or nothing could be shown as an answer)")
    examples = inherited + new
    if len(examples) > MAX_EXAMPLES:
        raise ValidationError(f"n_examples: a prompt holds at most {MAX_EXAMPLES} examples; "
                              f"this version would hold {len(examples)}")
    examples_guard(study, split, examples)
    with transaction.atomic():
        Study.objects.select_for_update().filter(pk=study.pk).first()
        number = 1 + max(JudgePromptVersion.objects.filter(
            study=study, criterion=criterion, method=method)
            .values_list("number", flat=True), default=0)
        if base_version is None and number > 1:
            raise ValidationError(f"base_version: {method} on {criterion.key!r} already has "
                                  f"{number - 1} version(s); create the next from one of them")
        version = JudgePromptVersion.objects.create(
            study=study, criterion=criterion, method=method, number=number,
            parent=base_version, template=template, examples=examples,
            example_outputs=sorted({o for e in examples for o in (e["output"], e["output_b"])
                                    if o is not None}),
            split=split, source_run=run, note=str(note or "")[:MAX_NOTE],
            corrections={**counts, "picked": len(new), "inherited": len(inherited),
                         "picked_by": "researcher" if outputs is not None else "disagreement"},
            created_by=actor_user(actor))
        audit_record(actor=actor, source=source, action=AuditEvent.Action.CREATE, study=study,
                     target=("judge prompt version", version.pk, str(version)),
                     changes={"criterion": criterion.key, "method": method, "number": number,
                              "parent": base_version.number if base_version else None,
                              "examples": [[e["output"], e["output_b"]] for e in examples],
                              "source_run": run.pk if run else None})
    return version


def base_version_template(version: JudgePromptVersion | None) -> str:
    return version.template if version is not None else ""


def judge_prompt_versions(study: Study):
    """The study's prompt versions (selector), oldest first per judge."""
    return (JudgePromptVersion.objects.filter(study=study)
            .select_related("criterion", "parent", "created_by")
            .order_by("criterion__order", "criterion__key", "method", "number"))
