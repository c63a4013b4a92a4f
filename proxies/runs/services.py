"""Proxy judges on a study: LLM judges (LATTE, rubric/G-Eval, DRPE) and learned proxies.

A proxy run answers criteria on every unit of a study (each output; for pairwise criteria each
pair of outputs the design shows) as a non-human Rater, through one seat (source "proxy") whose
slots hold the units. The answers are ordinary Judgments, so the analysis compares humans and
proxies through the same code: `value` in the criterion's canonical spelling, `numeric_value`
the proxy's score (P(yes), the G-Eval expected score, or P(A is better)).

Every step is idempotent: judgments are unique per (slot, criterion), a batch skips what is
stored, and judge answers are cached in the database per study (by endpoint, model, mode, prompt
and parameters), so a redelivered task or a re-run on the study costs nothing and misses
nothing. A run is resumable: `proxy_run_resume` sends what is still missing.

Judges reach the network under `judge_network_policy()` (settings EVALSTUDY_JUDGE_ALLOWED_*):
every backend built here gets it, so the check happens again on each connection a worker makes,
not only when the run is started.

This module starts, dispatches and refreshes runs and judges their batches; beside it,
`backends` checks and builds the judge backends, `answers` judges a batch through the run's
method (proxies.methods), and `thresholds` turns scores into decisions and LATTEScores;
proxies.training trains learned proxies.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.audit import SYSTEM, actor_user, audit_record
from evalstudy.criteria import PAIR, kind_of, kinds_where
from evalstudy.models import (
    Assignment,
    AssignmentSlot,
    AuditEvent,
    Criterion,
    Output,
    Rater,
    Study,
)
from metrics.services import model_dir_check
from proxies.methods import (
    DEFAULT_THRESHOLD,
    METHODS,
    THRESHOLD,
    ProxyMethod,
    answers_pairs,
    learned_kind,
    method_of,
)
from proxies.models import LearnedProxy, ProxyRun
from proxies.runs.answers import batch_answers, unit_texts
from proxies.runs.backends import (
    backend_build,
    backend_clean,
    base_url_check,
    key_env_check,
    limits_check,
)

# Bump when the way answers are turned into judgments changes: it enters every proxy
# signature, so new answers belong to a new proxy rater instead of mixing with old ones.
JUDGE_VERSION = "1"

# --- starting a run -------------------------------------------------------------------------

def shows_pair(criterion: Criterion) -> bool:
    """Whether one answer of `criterion` judges a pair of outputs (a unit with output_b)."""
    return kind_of(criterion.kind).shows == PAIR


def default_template(method: str) -> str:
    return method_of(method).default_template


def template_check(method: str, template: str) -> None:
    """ValidationError when `method` cannot ask with `template` ("" always passes)."""
    try:
        method_of(method).check_template(template)
    except (KeyError, ValueError) as error:
        raise ValidationError(f"template: {error}") from None


def _criteria_for(study: Study, method: ProxyMethod, keys: Sequence[str] | None,
                  learned: LearnedProxy | None = None) -> list[Criterion]:
    allowed = kinds_where(lambda kind: method.answers_for(kind, learned))
    criteria = {c.key: c for c in study.criteria.all()}
    if not keys:
        chosen = [c for c in criteria.values() if c.kind in allowed]
        if not chosen:
            raise ValidationError(f"criteria: study {study.slug!r} has no criterion a "
                                  f"{method.name} judge answers (kinds {sorted(allowed)})")
        return sorted(chosen, key=lambda c: (c.order, c.pk))
    errors = []
    for key in keys:
        if key not in criteria:
            errors.append(f"criteria: {key!r} is not a criterion of {study.slug!r} "
                          f"(known: {sorted(criteria)})")
        elif criteria[key].kind not in allowed:
            errors.append(f"criteria: {key!r} is {criteria[key].kind}; a {method.name} judge "
                          f"answers {sorted(allowed)}")
    if len(set(keys)) != len(keys):
        errors.append("criteria: a criterion is named twice")
    if errors:
        raise ValidationError(errors)
    return [criteria[key] for key in keys]


def _queue_for(method: ProxyMethod, backend: dict[str, Any],
               learned: LearnedProxy | None) -> str:
    return method.queue(backend, gpu=learned is not None
                        and learned_kind(learned.kind).fine_tuned)


def proxy_signature(*, method: str, backend_signature: dict[str, Any], template: str,
                    params: dict[str, Any]) -> dict[str, Any]:
    """Everything a proxy's answers depend on, the decision threshold included: two thresholds
    are two proxies (their scores come from the same cached model answers)."""
    return {
        "method": method, "judge_version": JUDGE_VERSION, "backend": backend_signature,
        "template": template, "params": dict(sorted(params.items())),
    }


def proxy_rater_for(*, study: Study, method: str, signature: dict[str, Any]) -> Rater:
    """The proxy's Rater in `study`: one per signature, so a changed prompt or model is another
    rater. A rater of this study only: another owner's study running the same judge gets its
    own row, so neither can rename or read the other's."""
    digest = hashlib.sha256(json.dumps(signature, sort_keys=True, default=str).encode())
    backend = signature["backend"]
    model = str(backend.get("model") or backend.get("name") or backend.get("model_path") or "")
    model = Path(model).name if "/" in model else model
    external_id = f"{method}:{model}:{digest.hexdigest()[:10]}"[:200]
    kind = Rater.Kind(method_of(method).rater)
    # Analyses name raters by display name: two prompts of one model must not share one.
    rater, _ = Rater.objects.get_or_create(
        study=study, kind=kind, external_id=external_id,
        defaults={"display_name": f"{method} {model} [{digest.hexdigest()[:6]}]"[:200],
                  "metadata": signature, "origin": Rater.Origin.PROXY},
    )
    return rater


def proxy_run_prepare(
    *, study: Study, method: str, criteria: Sequence[str] | None = None,
    backend: dict[str, Any] | None = None, template: str = "",
    params: dict[str, Any] | None = None, learned_proxy: LearnedProxy | None = None,
    prompt_version: Any = None,
) -> dict[str, Any]:
    """Check a proxy-run request and return the run's fields; writes nothing.

    `prompt_version` (a `JudgePromptVersion` of this study): ask with that version's template
    and few-shot examples (`proxies.versions`); the run answers its criterion only, with
    the version's method, and the version enters the signature (a rater per version).

    Raises ValidationError naming the field for an unknown method, criterion, parameter or
    backend setting, an invalid template, or a learned proxy that is not trained.
    """
    if method not in METHODS:
        raise ValidationError(f"method: {method!r} is not one of {sorted(METHODS)}")
    spec = method_of(method)
    params = dict(params or {})
    unknown = set(params) - spec.param_names
    if unknown:
        raise ValidationError(f"params: {sorted(unknown)} not understood by {method}; known: "
                              f"{sorted(spec.param_names)}")
    if THRESHOLD in params:
        try:
            threshold = float(params[THRESHOLD])
        except (TypeError, ValueError):
            threshold = None
        if threshold is None or isinstance(params[THRESHOLD], bool) or not 0 <= threshold <= 1:
            raise ValidationError("params: threshold must lie in [0, 1]")
    limits_check({}, params)
    if prompt_version is not None:
        criteria, template = _version_request(study, method, criteria, template, prompt_version)
    chosen = _criteria_for(study, spec, criteria, learned_proxy)
    if spec.learned:
        if learned_proxy is None or learned_proxy.status != LearnedProxy.Status.DONE:
            raise ValidationError("learned_proxy: a trained learned proxy is required")
        if template or backend:
            raise ValidationError("a learned proxy takes no backend or template")
        if answers_pairs(learned_proxy) and THRESHOLD in params:
            raise ValidationError("params: a pairwise learned proxy takes no threshold (its "
                                  "answers follow its tie_band)")
        config: dict[str, Any] = {}
        backend_signature = learned_proxy.report.get("signature") or {
            "name": learned_proxy.name, "kind": learned_proxy.kind,
            "version": learned_proxy.version, "artifact": learned_proxy.artifact_path}
        backend_signature = {**backend_signature, "name": f"{learned_proxy.name}-v"
                             f"{learned_proxy.version}"}
        if not answers_pairs(learned_proxy):
            params.setdefault(THRESHOLD, learned_proxy.report.get(THRESHOLD, DEFAULT_THRESHOLD))
    else:
        config = backend_clean(backend)
        template_check(method, template)
        template = template or default_template(method)
        # The key is read where the judging happens (the `llm` workers); this process may not
        # hold it, and it never enters the signature.
        backend_signature = backend_build(
            {k: v for k, v in config.items() if k != "api_key_env"}).signature()
    signature = proxy_signature(method=method, backend_signature=backend_signature,
                                template=template, params=params)
    if prompt_version is not None:
        from proxies.runs.prompts import version_signature

        signature["prompt_version"] = version_signature(prompt_version)
    units = proxy_units(study, chosen)
    return {
        "study": study, "method": method, "criteria": [c.key for c in chosen],
        "backend": config, "template": template, "params": params,
        "learned_proxy": learned_proxy, "signature": signature,
        "prompt_version": prompt_version,
        "queue": _queue_for(spec, config, learned_proxy),
        "total": sum(len(units[shows_pair(c)]) for c in chosen),
    }


def _version_request(study: Study, method: str, criteria: Sequence[str] | None,
                     template: str, version: Any) -> tuple[list[str], str]:
    """The criteria and template of a run of a prompt version; ValidationError when the
    request asks for anything else (another study's version, method, criterion or template)."""
    if version.study_id != study.pk:
        raise ValidationError("prompt_version: not a prompt version of this study")
    if method != version.method:
        raise ValidationError(f"prompt_version: version {version.number} is a {version.method} "
                              f"prompt; the run's method is {method}")
    key = version.criterion.key
    if criteria and list(criteria) != [key]:
        raise ValidationError(f"criteria: a run of a prompt version answers its criterion "
                              f"{key!r} only")
    if template and template != version.template:
        raise ValidationError("template: a run of a prompt version uses the version's template")
    return [key], version.template


def proxy_run_start(*, enqueue: bool = True, actor: Any = None, source: str = SYSTEM,
                    **request: Any) -> ProxyRun:
    """Validate the request (`proxy_run_prepare`'s arguments), record the run under its proxy
    rater, and (after commit) hand it to the workers. Audited as "start" (method, criteria,
    queue and the judge's signature; never a key, which no request carries)."""
    fields = proxy_run_prepare(**request)
    with transaction.atomic():
        rater = proxy_rater_for(study=fields["study"], method=fields["method"],
                                signature=fields["signature"])
        run = ProxyRun.objects.create(rater=rater, created_by=actor_user(actor), **fields)
        audit_record(actor=actor, source=source, action=AuditEvent.Action.START, target=run,
                     changes={"method": run.method, "criteria": run.criteria,
                              "queue": run.queue, "rater": rater.external_id,
                              "signature": run.signature,
                              "prompt_version": run.prompt_version_id})
        if enqueue:
            from proxies.runs.tasks import proxy_run_dispatch_task

            transaction.on_commit(lambda: proxy_run_dispatch_task.delay(run.pk))
    return run


# --- units, seat and dispatch ---------------------------------------------------------------

def proxy_units(study: Study, criteria: Sequence[Criterion]
                ) -> dict[bool, list[tuple[int, int | None]]]:
    """{pairwise?: [(output, output_b)]}: every output for item criteria; for pairwise ones the
    ordered pairs the design shows humans (so both judge the same units), else every pair per
    item."""
    units: dict[bool, list[tuple[int, int | None]]] = {False: [], True: []}
    if not all(shows_pair(c) for c in criteria):
        units[False] = [(pk, None) for pk in Output.objects.filter(item__study=study)
                        .order_by("item_id", "system_id").values_list("id", flat=True)]
    if any(shows_pair(c) for c in criteria):
        from annotation.models import VoteCount

        shown = (AssignmentSlot.objects
                 .filter(assignment__study=study, kind=AssignmentSlot.Kind.TARGET,
                         output_b__isnull=False)
                 .exclude(assignment__source=Assignment.Source.PROXY)
                 .values_list("output_id", "output_b_id").distinct())
        # As shown to humans (A, B), both orientations where the design shows both: the
        # analysis' unit is the ordered pair, and DRPE judges both orders of each anyway.
        # Pairs people judged only as counts (`VoteCount`, e.g. HATS) are units too, in
        # the order they were imported in (unless shown the other way round already).
        pairs_shown = set(shown)
        counted = (VoteCount.objects
                   .filter(study=study, output_b__isnull=False,
                           criterion__in=[c for c in criteria if shows_pair(c)])
                   .values_list("output_id", "output_b_id").distinct())
        pairs_shown |= {(o, ob) for o, ob in counted if (ob, o) not in pairs_shown}
        pairs: list[tuple[int, int | None]] = sorted(pairs_shown)
        if not pairs:
            by_item: dict[int, list[int]] = defaultdict(list)
            for pk, item in (Output.objects.filter(item__study=study)
                             .order_by("item_id", "system_id").values_list("id", "item_id")):
                by_item[item].append(pk)
            pairs = [pair for outputs in by_item.values() for pair in combinations(outputs, 2)]
        units[True] = pairs
    return units


def proxy_seat_prepare(run: ProxyRun) -> Assignment:
    """The proxy's seat on the study with one slot per unit; creates what is missing only."""
    now = timezone.now()
    with transaction.atomic():
        seat, _ = Assignment.objects.get_or_create(
            study=run.study, rater=run.rater,
            defaults={"source": Assignment.Source.PROXY, "state": Assignment.State.ACTIVE,
                      "claimed_at": now},
        )
        # Two dispatches of one proxy (a resume, a second run) must not number slots alike.
        seat = Assignment.objects.select_for_update().get(pk=seat.pk)
        _add_missing_slots(run, seat)
    return seat


def _add_missing_slots(run: ProxyRun, seat: Assignment) -> None:
    criteria = list(run.study.criteria.filter(key__in=run.criteria))
    wanted = [unit for units in proxy_units(run.study, criteria).values() for unit in units]
    existing = set(seat.slots.values_list("output_id", "output_b_id"))
    last = (seat.slots.order_by("-position").values_list("position", flat=True).first()
            if existing else None)
    position = -1 if last is None else last
    new = []
    for output, output_b in wanted:
        if (output, output_b) not in existing:
            position += 1
            new.append(AssignmentSlot(assignment=seat, position=position, output_id=output,
                                      output_b_id=output_b, kind=AssignmentSlot.Kind.TARGET))
    AssignmentSlot.objects.bulk_create(new, batch_size=2000)


def _missing(run: ProxyRun, seat: Assignment, slot_ids: Sequence[int] | None = None
             ) -> dict[int, list[Criterion]]:
    """slot id -> the run's criteria it still lacks a judgment for."""
    criteria = list(run.study.criteria.filter(key__in=run.criteria))
    slots = seat.slots.all()
    if slot_ids is not None:
        slots = slots.filter(pk__in=slot_ids)
    slot_pairs = list(slots.values_list("id", "output_b_id"))
    have = set(Judgment.objects.filter(slot__in=[pk for pk, _ in slot_pairs],
                                       criterion__in=criteria)
               .values_list("slot_id", "criterion_id"))
    missing: dict[int, list[Criterion]] = {}
    for pk, output_b in slot_pairs:
        lacking = [c for c in criteria if shows_pair(c) == (output_b is not None)
                   and (pk, c.pk) not in have]
        if lacking:
            missing[pk] = lacking
    return missing


def proxy_run_dispatch(run: ProxyRun, *, send: Callable[[str, list[int]], None]) -> int:
    """Prepare the seat, mark the run started and send the batches still to judge with
    `send(queue, slot_ids)`; returns the number of batches. Finishes at once when complete."""
    seat = proxy_seat_prepare(run)
    todo = sorted(_missing(run, seat))
    size = settings.EVALSTUDY_PROXY_BATCH_SIZE
    now = timezone.now()
    # A resumed run tries its unreadable answers again.
    ProxyRun.objects.filter(pk=run.pk).update(
        status=ProxyRun.Status.RUNNING, started_at=run.started_at or now, heartbeat_at=now,
        error="", unreadable={}, finished_at=None,
    )
    batches = [todo[start:start + size] for start in range(0, len(todo), size)]
    for batch in batches:
        send(run.queue, batch)
    proxy_run_refresh(run)
    return len(batches)


# --- judging one batch ----------------------------------------------------------------------

def proxy_batch_judge(*, run_id: int, slot_ids: Sequence[int]) -> int:
    """Judge the slots' missing (slot, criterion) answers; returns the judgments stored.

    Safe to run twice and concurrently with itself: stored judgments are skipped, inserts
    ignore conflicts on (slot, criterion), and answers come from the cache the second time.
    An answer that cannot be read is recorded in `unreadable`, not stored.
    """
    run = ProxyRun.objects.select_related("study", "rater", "learned_proxy",
                                          "prompt_version").get(pk=run_id)
    ProxyRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())
    seat = Assignment.objects.get(study=run.study, rater=run.rater)
    missing = _missing(run, seat, slot_ids)
    if not missing:
        proxy_run_refresh(run)
        return 0
    # Settings may have changed since the run was started, and a run stored before a check
    # existed was never checked: a URL the policy now refuses, a key bound to another origin
    # or a model directory no longer allowed fails the run with the reason, before the key is
    # read or a file of the model opened, not every answer with the same one. (Each connection
    # is checked against the policy again anyway, which is what stops DNS rebinding.)
    try:
        _check_run_on_worker(run)
    except ValidationError as error:
        proxy_run_fail(run_id=run.pk, error=" ".join(error.messages))
        return 0
    texts = unit_texts(list(missing))
    backend = (None if method_of(run.method).learned
               else backend_build(run.backend, study=run.study))
    if backend is not None and run.prompt_version is not None:
        from proxies.judges.fewshot import FewShotBackend
        from proxies.runs.prompts import version_prefix

        # The version's few-shot examples go before every prompt the judge is sent.
        prefix = version_prefix(run.prompt_version)
        if prefix:
            backend = FewShotBackend(backend, prefix)
    by_criterion: dict[int, list[int]] = defaultdict(list)
    criteria = {}
    for pk, lacking in missing.items():
        for criterion in lacking:
            by_criterion[criterion.pk].append(pk)
            criteria[criterion.pk] = criterion
    now = timezone.now()
    rows, failures = [], {}
    # Where answers came from ("logprobs", "logits", or "parsed" when the server gave no
    # probabilities and the answer text was read): reported with the run's usage.
    sources: dict[str, int] = defaultdict(int)
    for criterion_pk, units in by_criterion.items():
        criterion = criteria[criterion_pk]
        answers = batch_answers(run, backend, criterion, units, texts)
        for pk, value, score, problem, source in answers:
            sources[f"answers_{source}"] += 1
            if value is None:
                failures[f"{pk}:{criterion.key}"] = problem[:300]
                continue
            rows.append(Judgment(slot_id=pk, criterion=criterion, rater=run.rater, value=value,
                                 numeric_value=score, submitted_at=now))
    Judgment.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    _complete_slots(seat, run)
    _record_usage(run.pk, {**(backend.usage.as_dict() if backend else {}), **sources},
                  failures)
    proxy_run_refresh(run)
    return len(rows)


def _check_run_on_worker(run: ProxyRun) -> None:
    """The start's checks of what a run will reach, again with this worker's settings:
    network policy, key origin, model directories (ValidationError saying which failed)."""
    from proxies.judges.backends.registry import backend_kind

    backend = run.backend or {}
    kind = backend_kind(backend.get("backend"))
    if kind == "openai" and backend.get("base_url"):
        base_url_check(str(backend["base_url"]), require_resolvable=False)
    if backend:
        key_env_check(backend)
    if kind == "hf" and backend.get("model_path"):
        model_dir_check(str(backend["model_path"]), field="backend: model_path")
    learned = run.learned_proxy
    if method_of(run.method).learned and learned is not None:
        encoder = (learned.report.get("params") or {}).get("model_path")
        if encoder and not learned_kind(learned.kind).fine_tuned:
            try:
                model_dir_check(str(encoder), field="the learned proxy's model_path")
            except ValidationError:
                # A regression proxy reads the encoder it was trained on where that exists
                # here, else the default (proxies.learned.artifacts): an artefact trained on
                # another host names that host's directory, which is no concern here.
                if (Path(str(encoder)) / "config.json").is_file():
                    raise


def _complete_slots(seat: Assignment, run: ProxyRun) -> None:
    """Mark the slots that now hold every answer of the run as completed."""
    still_missing = list(_missing(run, seat))
    seat.slots.filter(completed_at__isnull=True).exclude(pk__in=still_missing).update(
        completed_at=timezone.now())


def _record_usage(run_id: int, usage: dict[str, Any], failures: dict[str, str]) -> None:
    with transaction.atomic():
        run = ProxyRun.objects.select_for_update().get(pk=run_id)
        merged = dict(run.usage)
        for name, amount in usage.items():
            if isinstance(amount, int | float):
                merged[name] = round(merged.get(name, 0) + amount, 4)
        run.usage = merged
        run.unreadable = {**run.unreadable, **failures}
        run.heartbeat_at = timezone.now()
        run.save(update_fields=["usage", "unreadable", "heartbeat_at"])


def proxy_judgments(run: ProxyRun):
    """The run's judgments: its rater's answers to its criteria on this study."""
    return Judgment.objects.filter(rater=run.rater, slot__assignment__study=run.study,
                                   criterion__key__in=run.criteria)


def proxy_run_refresh(run: ProxyRun) -> ProxyRun:
    """Recount progress from the stored judgments (the truth); finish the run when every unit
    has an answer or a recorded failure."""
    answered = set(proxy_judgments(run).values_list("slot_id", "criterion__key"))
    done = len(answered)
    with transaction.atomic():
        run = ProxyRun.objects.select_for_update().get(pk=run.pk)
        # A unit that failed once and was answered later (a redelivered batch) is done.
        failed = sum(1 for key in run.unreadable
                     if (int(key.split(":", 1)[0]), key.split(":", 1)[1]) not in answered)
        run.done, run.failed = done, failed
        fields = ["done", "failed"]
        if done + failed >= run.total and run.status == ProxyRun.Status.RUNNING:
            run.status = ProxyRun.Status.DONE
            run.finished_at = timezone.now()
            fields += ["status", "finished_at"]
            if failed:
                run.error = f"{failed} answers could not be read; resume the run to retry them"
                fields.append("error")
        run.save(update_fields=fields)
    return run


@transaction.atomic
def proxy_run_resume(run: ProxyRun, *, actor: Any = None, source: str = SYSTEM) -> ProxyRun:
    """Send what is still missing (after a failure, a stop, or unreadable answers). Audited as
    "start" (a resumption, with the status it resumed from)."""
    from proxies.runs.tasks import proxy_run_dispatch_task

    run = ProxyRun.objects.select_for_update().get(pk=run.pk)
    if run.status == ProxyRun.Status.RUNNING:
        raise ValidationError(f"proxy run {run.pk} is still running; resume it once it is done "
                              "or failed (a stalled run is failed by the beat scheduler)")
    before = run.status
    run.status = ProxyRun.Status.PENDING
    run.save(update_fields=["status"])
    audit_record(actor=actor, source=source, action=AuditEvent.Action.START, target=run,
                 changes={"resumed": True, "status": [before, run.status]})
    transaction.on_commit(lambda: proxy_run_dispatch_task.delay(run.pk))
    return run


def proxy_run_fail(*, run_id: int, error: str) -> None:
    ProxyRun.objects.filter(pk=run_id).update(
        status=ProxyRun.Status.FAILED, error=error[:5000], finished_at=timezone.now())
