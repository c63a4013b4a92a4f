"""Turning a proxy's scores into decisions: a threshold chosen on a dev split for a target
precision (recorded on the rater, so the analysis leaves the dev outputs out of every decision
a rater deciding at it makes), the identity of a proxy's decisions, and LATTEScores.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.audit import SYSTEM, audit_record
from evalstudy.criteria import binary_label, kind_of
from evalstudy.models import AuditEvent, Rater
from proxies.methods import DEFAULT_THRESHOLD, method_of
from proxies.models import ProxyRun
from proxies.quality import latte_score, threshold_for_precision
from proxies.runs.services import proxy_judgments, proxy_run_start


def proxy_scores_with_labels(run: ProxyRun, criterion_key: str):
    """(output, item reference, proxy score, human majority label) for every output that both
    the proxy scored and the humans judged with a clear majority."""
    import pandas as pd

    criterion = run.study.criteria.get(key=criterion_key)
    human = (Judgment.objects.filter(slot__assignment__study=run.study, criterion=criterion,
                                     rater__kind__in=Rater.HUMAN_KINDS,
                                     slot__output__isnull=False)
             .values_list("slot__output_id", "value"))
    labels = pd.DataFrame(list(human), columns=["output", "value"])
    labels["label"] = labels["value"].map(lambda v: binary_label(criterion.kind, v))
    share = labels.dropna(subset=["label"]).groupby("output")["label"].mean()
    majority = share[share != 0.5].gt(0.5).astype(int).rename("label")
    scores = pd.DataFrame(list(
        proxy_judgments(run).filter(criterion=criterion).values_list(
            "slot__output_id", "slot__output__item__reference", "numeric_value")),
        columns=["output", "reference", "score"]).dropna().set_index("output")
    return scores.join(majority, how="inner")


def proxy_threshold_choose(run: ProxyRun, *, criterion_key: str, target_precision: float = 0.9,
                           dev_fraction: float = 0.5, seed: int = 0, apply: bool = True,
                           enqueue: bool = True, actor: Any = None,
                           source: str = SYSTEM) -> dict[str, Any]:
    """Pick the decision threshold on a dev split (no reference shared with the test split)
    for `target_precision` and report precision/recall on the held-out test split (LATTE: 0.85
    gave 90 % precision).

    With `apply`, start a new run of the same judge at that threshold on this criterion
    (`report["run"]`): the decision is part of a proxy's identity, so the first run's answers
    stay as they were, and the new one costs no model call (stored scores, cached answers).

    The choice is recorded (`threshold_choice_record`) on the new run's rater, or without
    `apply` on this run's: the dev outputs took part in choosing the threshold, so the
    analysis leaves them out of every decision-based figure of a rater deciding at it.

    Audited as "update" of this run (the threshold chosen, on which criterion, for which
    precision, and the run started at it, itself audited as "start"), in one transaction with
    the new run and the recorded choice."""
    import numpy as np

    if criterion_key not in run.criteria:
        raise ValidationError(f"criterion: {criterion_key!r} is not one of this run's "
                              f"criteria {run.criteria}")
    criterion = run.study.criteria.get(key=criterion_key)
    method, kind = method_of(run.method), kind_of(criterion.kind)
    if not kind.binary_reading or not method.thresholded:
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; a threshold "
                              "needs a binary or severity criterion")
    if not method.decides_at_threshold(kind):
        raise ValidationError(f"criterion: a {method.name} judge answers the most likely "
                              f"{criterion.kind} level; a threshold applies to its binary "
                              "criteria only")
    table = proxy_scores_with_labels(run, criterion_key)
    references = sorted(table["reference"].unique())
    if len(references) < 4 or table["label"].nunique() < 2:
        raise ValidationError("too few human-labelled outputs (or one class only) to choose a "
                              "threshold")
    rng = np.random.default_rng(seed)
    rng.shuffle(references)
    dev_refs = set(references[: max(1, round(len(references) * dev_fraction))])
    dev = table[table["reference"].isin(dev_refs)]
    test = table[~table["reference"].isin(dev_refs)]
    choice = threshold_for_precision(dev["score"].to_numpy(), dev["label"].to_numpy(),
                                     target_precision=target_precision)
    if choice.threshold is None:
        raise ValidationError(f"no threshold reaches precision {target_precision} on the dev "
                              f"split ({len(dev)} outputs); lower the target")
    threshold = float(choice.threshold)

    def rates(frame):
        predicted = frame["score"] >= threshold
        tp = int((predicted & (frame["label"] == 1)).sum())
        fp = int((predicted & (frame["label"] == 0)).sum())
        fn = int((~predicted & (frame["label"] == 1)).sum())
        return {"n": len(frame), "precision": tp / (tp + fp) if tp + fp else None,
                "recall": tp / (tp + fn) if tp + fn else None}

    dev_outputs = sorted(int(pk) for pk in dev.index)
    report: dict[str, Any] = {
        "criterion": criterion_key, "target_precision": target_precision,
        "threshold": threshold, "dev": rates(dev), "test": rates(test),
        "dev_references": len(dev_refs), "test_references": len(references) - len(dev_refs),
        "dev_outputs": dev_outputs}
    decided_signature = {**run.signature,
                         "params": {**(run.signature.get("params") or {}), "threshold": threshold}}
    record = {
        "criterion": criterion_key, "threshold": threshold, "target_precision": target_precision,
        "dev_fraction": dev_fraction, "seed": seed, "dev_outputs": dev_outputs,
        "from_run": run.pk, "chosen_at": timezone.now().isoformat(),
        "identity": decision_identity(decided_signature),
    }
    rater_id = run.rater_id
    with transaction.atomic():
        if apply:
            decided = proxy_run_start(
                study=run.study, method=run.method, criteria=[criterion_key],
                backend=run.backend or None, template=run.template,
                params={**run.params, "threshold": threshold}, learned_proxy=run.learned_proxy,
                prompt_version=run.prompt_version, enqueue=enqueue, actor=actor, source=source)
            report["run"] = decided.pk
            rater_id = decided.rater_id
        threshold_choice_record(rater_id=rater_id, record=record)
        audit_record(actor=actor, source=source, action=AuditEvent.Action.UPDATE, target=run,
                     changes={"threshold": [None, threshold], "criterion": criterion_key,
                              "target_precision": target_precision,
                              "decided_run": report.get("run")})
    return report


# The signature fields a proxy's decisions depend on (a rater's metadata may hold more).
_SIGNATURE_FIELDS = ("method", "judge_version", "backend", "template", "params")


def decision_identity(signature: dict[str, Any]) -> str:
    """A digest of what a proxy's decisions depend on: its signature with the threshold it
    decides at (DEFAULT_THRESHOLD where the run named none). A threshold choice records the
    identity of the decisions it produced, and the analysis finds it again on whichever rater
    decides that way: the new run's, or a later run started by hand at that threshold."""
    fields = {name: signature.get(name) for name in _SIGNATURE_FIELDS}
    params = dict(fields.get("params") or {})
    params["threshold"] = float(params.get("threshold", DEFAULT_THRESHOLD))
    fields["params"] = params
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def threshold_choice_record(*, rater_id: int, record: dict[str, Any]) -> None:
    """Append a threshold choice (criterion, threshold, dev outputs, identity) to the rater's
    metadata["threshold_choices"]. Under a row lock: two choices at once both stay."""
    with transaction.atomic():
        rater = Rater.objects.select_for_update().get(pk=rater_id)
        metadata = dict(rater.metadata or {})
        metadata["threshold_choices"] = [*(metadata.get("threshold_choices") or []), record]
        rater.metadata = metadata
        rater.save(update_fields=["metadata"])


def latte_scores(run: ProxyRun, *, criterion_key: str, by: str = "system") -> list[dict]:
    """LATTEScore per group = 100 x share of the group's outputs the proxy judged meaning-
    preserved. `by`: "system", "item", or any item metadata field (e.g. "speaker")."""
    criterion = run.study.criteria.get(key=criterion_key)
    groups: dict[str, list[float]] = defaultdict(list)
    rows = proxy_judgments(run).filter(criterion=criterion).values_list(
        "value", "slot__output__system__name", "slot__output__item__external_id",
        "slot__output__item__metadata")
    for value, system, item, metadata in rows:
        if by == "system":
            group = system
        elif by == "item":
            group = item
        else:
            group = (metadata or {}).get(by)
            if group is None:
                continue
        label = binary_label(criterion.kind, value)
        if label is not None:
            groups[str(group)].append(label)
    return [{"group": group, "n": len(labels), "latte_score": round(latte_score(labels), 2)}
            for group, labels in sorted(groups.items())]
