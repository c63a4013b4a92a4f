"""Learned proxies on a study: their training data (outputs with a clear human majority),
starting and running a training on a worker, and the checks on what a training may read.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.audit import SYSTEM, actor_user, audit_record
from evalstudy.criteria import BINARY_KINDS, binary_label
from evalstudy.models import AuditEvent, Criterion, Rater, Study
from kit.jsonable import to_jsonable
from metrics.scorers.encoder import encoder_resolve
from metrics.services import model_dir_check

from .models import LearnedProxy

# Training a learned proxy holds a worker (the GPU one for the cross-encoder) for as long as
# these say: an editor's numbers stay within what a study needs.
TRAINING_LIMITS: dict[str, float] = {"epochs": 50, "batch_size": 512, "eval_batch_size": 1024,
                                     "max_length": 512, "learning_rate": 1.0,
                                     "weight_decay": 1.0, "warmup_ratio": 1.0, "C": 1e6}


def learned_examples(study: Study, criterion_key: str) -> list:
    """One Example per output with a clear human majority on the criterion's binary reading
    (ties are left out): the training data of a learned proxy."""
    from .learned import Example

    try:
        criterion = study.criteria.get(key=criterion_key)
    except Criterion.DoesNotExist:
        raise ValidationError(f"criterion: {criterion_key!r} is not a criterion of "
                              f"{study.slug!r}") from None
    if criterion.kind not in BINARY_KINDS:
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; a learned "
                              "proxy needs a binary or severity criterion")
    votes: dict[int, list[float]] = defaultdict(list)
    texts = {}
    for output, reference, context, text, value in (
        Judgment.objects.filter(slot__assignment__study=study, criterion=criterion,
                                rater__kind__in=Rater.HUMAN_KINDS, slot__output__isnull=False)
        .values_list("slot__output_id", "slot__output__item__reference",
                     "slot__output__item__context", "slot__output__text", "value")
    ):
        label = binary_label(criterion.kind, value)
        if label is not None:
            votes[output].append(label)
            texts[output] = (reference or context, text)
    examples = []
    for output, labels in sorted(votes.items()):
        share = sum(labels) / len(labels)
        if share != 0.5:
            reference, text = texts[output]
            examples.append(Example(reference=reference, output=text, label=int(share > 0.5),
                                    group=reference, key=output))
    return examples


def learned_proxy_start(*, study: Study, criterion_key: str, kind: str, name: str = "",
                        params: dict[str, Any] | None = None, enqueue: bool = True,
                        actor: Any = None, source: str = SYSTEM) -> LearnedProxy:
    """Record a training request (checked now: criterion, kind, enough labelled outputs) and
    hand it to a worker (`gpu` queue for the cross-encoder, `cpu` otherwise). Audited as
    "start"."""
    if kind not in LearnedProxy.Kind.values:
        raise ValidationError(f"kind: {kind!r} is not one of {LearnedProxy.Kind.values}")
    learned_proxy_check(study=study, params=params or {})
    examples = learned_examples(study, criterion_key)
    if len(examples) < 20:
        raise ValidationError(f"only {len(examples)} outputs of {study.slug!r} have a clear "
                              f"human majority on {criterion_key!r}; at least 20 are needed")
    name = name or f"{study.slug}-{criterion_key}-{kind}".replace("_", "-")
    with transaction.atomic():
        proxy = LearnedProxy.objects.create(
            name=name, kind=kind, study=study, criterion_key=criterion_key,
            params=params or {}, total=len(examples),
            created_by=actor_user(actor),
        )
        audit_record(actor=actor, source=source, action=AuditEvent.Action.START, target=proxy,
                     changes={"kind": kind, "criterion": criterion_key, "name": name,
                              "examples": len(examples)})
        if enqueue:
            from .tasks import learned_proxy_train_cpu_task, learned_proxy_train_gpu_task

            task = (learned_proxy_train_gpu_task if kind == LearnedProxy.Kind.CROSS_ENCODER
                    else learned_proxy_train_cpu_task)
            transaction.on_commit(lambda: task.delay(proxy.pk))
    return proxy


def learned_proxy_train(proxy_id: int) -> LearnedProxy:
    """Train, pick the threshold on dev, test, and save the versioned artefact; the row gets
    the artefact's path, version and manifest (split sizes, threshold, AUCs) as its report.

    The manifest's `split_keys` are the output ids of each split (`learned_examples` keys
    its examples by output): the analysis scores the proxy only on outputs outside train and
    dev (`analysis.selectors.proxy_raters`)."""
    from .learned import save_artifact, train_proxy

    proxy = LearnedProxy.objects.select_related("study").get(pk=proxy_id)
    if proxy.status == LearnedProxy.Status.DONE:
        return proxy  # redelivered: trained already
    # Training may outlast the broker's visibility timeout, which then hands the task to a
    # second worker: while the first one's heartbeat is fresh, leave the training to it.
    fresh = timezone.now() - timedelta(minutes=5)
    claimed = LearnedProxy.objects.filter(pk=proxy.pk).exclude(
        status=LearnedProxy.Status.RUNNING, heartbeat_at__gte=fresh).update(
        status=LearnedProxy.Status.RUNNING, started_at=timezone.now(),
        heartbeat_at=timezone.now())
    if not claimed:
        return proxy
    # Checked again here, before a file of it is read: the study's encoder_path may have
    # changed, and a proxy recorded before the check existed was never checked.
    learned_proxy_check(study=proxy.study, params=proxy.params)
    params = dict(proxy.params)
    seed = int(params.pop("seed", 0))
    target_precision = float(params.pop("target_precision", 0.9))
    params.setdefault("model_path", encoder_resolve(study=proxy.study))
    try:
        with _heartbeat(LearnedProxy, proxy.pk):
            trained = train_proxy(proxy.kind,
                                  learned_examples(proxy.study, proxy.criterion_key),
                                  params=params, seed=seed, target_precision=target_precision)
    except ValueError as error:  # bad parameter, too few groups, a one-class split
        raise ValidationError(str(error)) from None
    path = save_artifact(trained, settings.EVALSTUDY_PROXY_DIR, proxy.name)
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    now = timezone.now()
    LearnedProxy.objects.filter(pk=proxy.pk).update(
        artifact_path=str(path), version=trained.version,
        report=_jsonable({**manifest, "signature": trained.signature()}), done=proxy.total,
        status=LearnedProxy.Status.DONE, error="", finished_at=now, heartbeat_at=now)
    proxy.refresh_from_db()
    return proxy


@contextmanager
def _heartbeat(model, pk: int, every_seconds: float = 60.0):
    """Beat a BackgroundRun's heartbeat from a thread while one long call runs (training has
    no batches to beat between), so the stale-run check does not fail it."""
    stop = threading.Event()

    def beat() -> None:
        from django.db import connection

        try:
            while not stop.wait(every_seconds):
                model.objects.filter(pk=pk).update(heartbeat_at=timezone.now())
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"heartbeat-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def learned_proxy_check(*, study: Study, params: dict[str, Any]) -> None:
    """The encoder a learned proxy would train from (`params["model_path"]`, else the study's
    encoder_path) must be a model directory an operator allows: checked when training is
    requested (`learned_proxy_start`, the admin form) and again before it starts."""
    if not isinstance(params, dict):
        raise ValidationError("params: must be a JSON object")
    for name, bound in TRAINING_LIMITS.items():
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                0 < value <= bound):
            raise ValidationError(f"params: {name} must be a number above 0 and at most "
                                  f"{bound:g}, got {value!r}")
    path = params.get("model_path")
    if path not in (None, ""):  # unset: the study's encoder, else the embedded default
        if not isinstance(path, str):
            raise ValidationError("params: model_path must be a string")
        model_dir_check(path, field="params: model_path")
    elif study.encoder_path:
        model_dir_check(study.encoder_path, field="encoder_path (the study's)")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(to_jsonable(value), default=str))


def learned_proxy_fail(*, proxy_id: int, error: str) -> None:
    LearnedProxy.objects.filter(pk=proxy_id).update(
        status=LearnedProxy.Status.FAILED, error=error[:5000], finished_at=timezone.now())
