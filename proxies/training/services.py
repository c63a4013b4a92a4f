"""Learned proxies on a study: their training data (outputs with a clear human majority;
pairs with one for the pairwise proxy, `proxies.training.pairwise`), starting and running a training
on a worker, the checks on what a training may read, and failing at once a training whose
process ended without finishing (`learned_proxies_fail_dead`).
"""

from __future__ import annotations

import json
import os
import socket
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
from evalstudy.criteria import BINARY_KINDS, PAIR, binary_label, kind_of
from evalstudy.models import AuditEvent, Criterion, Rater, Study
from kit.jsonable import to_jsonable
from metrics.scorers.encoder import encoder_resolve
from metrics.services import model_dir_check
from proxies.methods import LEARNED_KINDS, learned_kind
from proxies.models import LearnedProxy

# Training a learned proxy holds a worker (the GPU one for the cross-encoder) for as long as
# these say: an editor's numbers stay within what a study needs.
TRAINING_LIMITS: dict[str, float] = {"epochs": 50, "batch_size": 512, "eval_batch_size": 1024,
                                     "max_length": 512, "learning_rate": 1.0,
                                     "weight_decay": 1.0, "warmup_ratio": 1.0, "C": 1e6,
                                     "folds": 100, "window_stride": 512}


def learned_examples(study: Study, criterion_key: str) -> list:
    """One Example per output with a clear human majority on the criterion's binary reading
    (ties are left out): the training data of a learned proxy."""
    from proxies.learned import Example

    try:
        criterion = study.criteria.get(key=criterion_key)
    except Criterion.DoesNotExist:
        raise ValidationError(f"criterion: {criterion_key!r} is not a criterion of "
                              f"{study.slug!r}") from None
    if criterion.kind not in BINARY_KINDS:
        pairwise = ", ".join(name for name, kind in LEARNED_KINDS.items() if kind.pairwise)
        extra = (f" (for a pairwise criterion, train kind {pairwise})"
                 if kind_of(criterion.kind).shows == PAIR else "")
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; a learned "
                              f"proxy of this kind needs a binary or severity criterion{extra}")
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
                                    group=reference, key=output, human_score=share))
    return examples


def learned_proxy_start(*, study: Study, criterion_key: str, kind: str, name: str = "",
                        params: dict[str, Any] | None = None, enqueue: bool = True,
                        actor: Any = None, source: str = SYSTEM) -> LearnedProxy:
    """Record a training request (checked now: criterion, kind, enough labelled outputs) and
    hand it to a worker (`gpu` queue for the cross-encoder, `cpu` otherwise). Audited as
    "start"."""
    try:
        spec = learned_kind(kind)
    except ValueError as error:
        raise ValidationError(str(error)) from None
    learned_proxy_check(study=study, params=params or {}, kind=kind)
    if spec.pairwise:
        from proxies.training.pairwise import MIN_LABELLED_PAIRS, labelled_pairs, pairwise_examples

        features = (params or {}).get("features")
        examples = pairwise_examples(study, criterion_key, features=features)
        labelled = labelled_pairs(examples)
        if labelled < MIN_LABELLED_PAIRS:
            raise ValidationError(
                f"only {labelled} pairs of {study.slug!r} have a human majority for A or B on "
                f"{criterion_key!r}; at least {MIN_LABELLED_PAIRS} are needed")
    else:
        examples = learned_examples(study, criterion_key)
        if len(examples) < 20:
            raise ValidationError(f"only {len(examples)} outputs of {study.slug!r} have a "
                                  f"clear human majority on {criterion_key!r}; at least 20 "
                                  "are needed")
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
            from proxies.training.tasks import (
                learned_proxy_train_cpu_task,
                learned_proxy_train_gpu_task,
            )

            task = (learned_proxy_train_gpu_task if spec.fine_tuned
                    else learned_proxy_train_cpu_task)
            transaction.on_commit(lambda: task.delay(proxy.pk))
    return proxy


def learned_proxy_train(proxy_id: int) -> LearnedProxy:
    """Train, pick the threshold on dev, test, and save the versioned artefact; the row gets
    the artefact's path, version and manifest (split sizes, threshold, AUCs) as its report.

    The manifest's `split_keys` are the output ids of each split (`learned_examples` keys
    its examples by output): the analysis scores the proxy only on outputs outside train and
    dev (`analysis.selectors.proxy_raters`).

    A pairwise proxy (kind pairwise_logistic) is cross-validated by reference instead
    (`proxies.learned.pairwise`), and its out-of-fold answers are then stored at once as a
    proxy run on the study (`proxies.training.pairwise.pairwise_store_answers`; the run's id is in
    the report's `answers_run`).

    The row records the process training it (`pid`, `host`, `pid_started`): a process that
    dies (killed, out of memory) leaves a run that `learned_proxies_fail_dead` fails at once
    on this host."""
    from proxies.learned import save_artifact, train_proxy

    proxy = LearnedProxy.objects.select_related("study").get(pk=proxy_id)
    if proxy.status == LearnedProxy.Status.DONE:
        return proxy  # redelivered: trained already
    learned_proxies_fail_dead(LearnedProxy.objects.filter(pk=proxy.pk))
    # Training may outlast the broker's visibility timeout, which then hands the task to a
    # second worker: while the first one's heartbeat is fresh, leave the training to it.
    fresh = timezone.now() - timedelta(minutes=5)
    claimed = LearnedProxy.objects.filter(pk=proxy.pk).exclude(
        status=LearnedProxy.Status.RUNNING, heartbeat_at__gte=fresh).update(
        status=LearnedProxy.Status.RUNNING, started_at=timezone.now(),
        heartbeat_at=timezone.now(), **process_identity())
    if not claimed:
        return proxy
    study = proxy.study
    assert study is not None, "a proxy is trained on the study it was started on"
    # Checked again here, before a file of it is read: the study's encoder_path may have
    # changed, and a proxy recorded before the check existed was never checked.
    learned_proxy_check(study=study, params=proxy.params, kind=proxy.kind)
    params = dict(proxy.params)
    seed = int(params.pop("seed", 0))
    target_precision = float(params.pop("target_precision", 0.9))
    spec = learned_kind(proxy.kind)
    pairwise = spec.pairwise
    if spec.reads_encoder:
        params.setdefault("model_path", encoder_resolve(study=study))
    if spec.fine_tuned and _pertinence_style(study):
        # A history and its completion: keep the history's most recent tokens.
        params.setdefault("truncation", "history_left")
    try:
        with _heartbeat(LearnedProxy, proxy.pk):
            if pairwise:
                from proxies.training.pairwise import pairwise_train

                trained = pairwise_train(proxy, params, seed)
            else:
                trained = train_proxy(proxy.kind,
                                      learned_examples(study, proxy.criterion_key),
                                      params=params, seed=seed,
                                      target_precision=target_precision)
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
    if pairwise:
        from proxies.training.pairwise import pairwise_store_answers

        run = pairwise_store_answers(proxy)
        proxy.report = {**proxy.report, "answers_run": run.pk,
                        "answers_rater": str(run.rater), "answers_status": run.status}
        proxy.save(update_fields=["report"])
    return proxy


def _pertinence_style(study: Study) -> bool:
    """Whether the study's items are histories (context, no reference): what the
    cross-encoder then reads is a history and the completion that continues it."""
    items = study.items.all()
    return (items.exists() and not items.exclude(reference="").exists()
            and items.exclude(context="").exists())


# --- a training whose process died ------------------------------------------------------

def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process from /proc (Linux), or None
    where /proc does not say (another system, or no such process)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def process_identity() -> dict[str, Any]:
    """This process as a LearnedProxy row records it (`pid`, `host`, `pid_started`)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return {"pid": pid, "host": socket.gethostname()[:255],
            "pid_started": stat[1] if stat else None}


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` of this host still runs (a zombie does not; nor a process that
    reused the id, when `started` is known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc here: os.kill is all we know
    state, ticks = stat
    if state in ("Z", "X"):
        return False
    return started is None or ticks == started


def learned_proxies_fail_dead(queryset=None) -> int:
    """Fail every running training (of `queryset`, default all) whose recorded process ran on
    this host and has ended: killed (SIGKILL, out of memory) or exited without finishing.
    Returns how many were failed. A training on another host is left to the stale-run sweep
    (`evalstudy.services.runs_fail_stale`): its process cannot be seen from here."""
    rows = (LearnedProxy.objects.all() if queryset is None else queryset).filter(
        status=LearnedProxy.Status.RUNNING, pid__isnull=False, host=socket.gethostname()[:255])
    failed = 0
    for pk, pid, started in rows.values_list("pk", "pid", "pid_started"):
        if pid is None or pid == os.getpid() or process_alive(pid, started):
            continue
        failed += LearnedProxy.objects.filter(
            pk=pk, status=LearnedProxy.Status.RUNNING, pid=pid).update(
            status=LearnedProxy.Status.FAILED, finished_at=timezone.now(),
            error=(f"the process running it (pid {pid} on {socket.gethostname()}) ended "
                   "without finishing; start the training again"))
    return failed


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


def learned_proxy_check(*, study: Study, params: dict[str, Any], kind: str = "") -> None:
    """The encoder a learned proxy would train from (`params["model_path"]`, else the study's
    encoder_path) must be a model directory an operator allows: checked when training is
    requested (`learned_proxy_start`, the admin form) and again before it starts. A pairwise
    proxy (kind pairwise_logistic) reads no encoder: only its numbers are checked."""
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
    if kind in LEARNED_KINDS and not learned_kind(kind).reads_encoder:
        return
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
