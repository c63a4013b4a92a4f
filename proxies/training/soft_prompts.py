"""Soft prompts: LATTE's prompt tuning of a local judge on a study's human labels
(`soft_prompt_train`), saved as versioned directories under `soft_prompt_root()` for a LATTE
run to load as its backend's `soft_prompt` (proxies.runs.backends checks that path)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError

from evalstudy.audit import SYSTEM
from evalstudy.models import Study
from proxies.runs import (
    SOFT_PROMPT_LIMITS,
    SOFT_PROMPT_NAME,
    backend_clean,
    soft_prompt_root,
)


def _soft_prompt_params(params: dict[str, Any] | None) -> dict[str, Any]:
    from proxies.judges.prompt_tuning import TUNING_DEFAULTS

    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ValidationError("params: must be a JSON object")
    allowed = {*TUNING_DEFAULTS, "seed", "target_precision"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValidationError(f"params: {unknown} not understood by prompt tuning; known: "
                              f"{sorted(allowed)}")
    errors = []
    for name, bound in SOFT_PROMPT_LIMITS.items():
        value = params.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 < value <= bound):
            errors.append(f"params: {name} must be a number above 0 and at most {bound:g}, "
                          f"got {value!r}")
    seed = params.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        errors.append(f"params: seed must be an integer >= 0, got {seed!r}")
    precision = params.get("target_precision", 0.9)
    if isinstance(precision, bool) or not isinstance(precision, int | float) or not (
            0 < precision <= 1):
        errors.append(f"params: target_precision must lie in (0, 1], got {precision!r}")
    if errors:
        raise ValidationError(errors)
    return dict(params)


def _claim_soft_prompt_dir(base: Path) -> tuple[int, Path]:
    """The next free `v<N>` under `base`, claimed with an atomic mkdir."""
    base.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[1:]) for p in base.iterdir() if re.fullmatch(r"v[1-9][0-9]*", p.name)]
    number = max(taken, default=0) + 1
    while True:
        try:
            (base / f"v{number}").mkdir()
            return number, base / f"v{number}"
        except FileExistsError:  # another process claimed it first
            number += 1


def soft_prompt_train(*, study: Study, criterion_key: str, backend: dict[str, Any],
                      params: dict[str, Any] | None = None, name: str = "", template: str = "",
                      actor: Any = None, source: str = SYSTEM) -> dict[str, Any]:
    """Prompt-tune a local judge on the study's human labels (LATTE section 3) and save the
    soft prompt; returns its report, `path` included (give it to a LATTE run as the
    backend's `soft_prompt`).

    - Labels: `learned_examples` (per output, the human majority on the binary reading of one
      binary or severity criterion, ties left out), the learned proxies' training data; at
      least 20 outputs.
    - Splits: train/dev/test with no reference shared (`split_examples`, 15 % dev and test,
      `params["seed"]`); trained on train, the epoch kept by dev accuracy; the decision
      threshold picked on dev for `params["target_precision"]` (0.9); AUC-ROC on dev and
      test. The manifest lists each split's output ids (`split_keys`): judge the study's
      outputs outside train and dev only when measuring the tuned judge against humans.
    - `backend`: `{"backend": "hf", "model_path": ..., "device": ...}` (checked like a run's;
      no soft_prompt). `template`: the LATTE template (default the paper's).
    - Runs in this process (GPU when there is one). Audited as "start".
    """
    import time

    from evalstudy.audit import audit_record
    from evalstudy.models import AuditEvent
    from proxies.judges.backends.registry import backend_kind
    from proxies.judges.methods import LATTE_TEMPLATE, latte_prompts
    from proxies.judges.prompt_tuning import (
        latte_training_pairs,
        save_soft_prompt,
        score_with_soft_prompt,
        train_soft_prompt,
    )
    from proxies.learned import split_examples
    from proxies.quality import auc_with_ci, threshold_for_precision
    from proxies.training.services import learned_examples

    if not isinstance(backend, dict) or backend_kind(backend.get("backend")) != "hf":
        raise ValidationError("backend: prompt tuning needs a local Hugging Face judge "
                              "(backend 'hf' with model_path)")
    config = backend_clean(backend)
    if config.get("soft_prompt") is not None:
        raise ValidationError("backend: train from the model alone, without a soft_prompt")
    options = _soft_prompt_params(params)
    seed = int(options.pop("seed", 0))
    target_precision = float(options.pop("target_precision", 0.9))
    template = template or LATTE_TEMPLATE
    try:
        latte_prompts([("reference", "output")], template, contexts=["context"])
    except (KeyError, ValueError) as error:
        raise ValidationError(f"template: {error}") from None
    name = name or f"{criterion_key}-latte".replace("_", "-")
    if not SOFT_PROMPT_NAME.match(name):
        raise ValidationError("name: 1-100 letters, digits, '.', '_' or '-', starting with a "
                              "letter or digit")
    examples = learned_examples(study, criterion_key)
    if len(examples) < 20:
        raise ValidationError(f"only {len(examples)} outputs of {study.slug!r} have a clear "
                              f"human majority on {criterion_key!r}; at least 20 are needed")
    try:
        splits = split_examples(examples, dev=0.15, test=0.15, seed=seed)
    except ValueError as error:
        raise ValidationError(str(error)) from None
    pairs = {part: latte_training_pairs(getattr(splits, part), template)
             for part in ("train", "dev", "test")}
    model_path = str(config["model_path"])
    started = time.perf_counter()
    try:
        soft, report = train_soft_prompt(model_path, pairs["train"], pairs["dev"],
                                         params=options, seed=seed,
                                         device=config.get("device"))
    except ValueError as error:
        raise ValidationError(f"params: {error}") from None
    scoring: dict[str, Any] = {
        "device": config.get("device"), "batch_size": int(config.get("batch_size", 8)),
        "max_length": int(options.get("max_length", config.get("max_length", 512)))}
    metrics: dict[str, Any] = {"auc": {}}
    scores = {}
    for part in ("dev", "test"):
        scores[part] = score_with_soft_prompt(model_path, soft, [p for p, _ in pairs[part]],
                                              **scoring)
        labels = [y for _, y in pairs[part]]
        estimate = auc_with_ci(scores[part], labels)
        metrics["auc"][part] = {"value": estimate.auc.value, "ci_low": estimate.auc.ci_low,
                                "ci_high": estimate.auc.ci_high, "n": estimate.auc.n}
    choice = threshold_for_precision(scores["dev"], [y for _, y in pairs["dev"]],
                                     target_precision)
    threshold = 0.5  # as train_proxy: when no dev threshold reaches the target precision
    if choice.achieved and choice.threshold is not None:
        threshold = float(choice.threshold)
    number, directory = _claim_soft_prompt_dir(soft_prompt_root() / f"study-{study.pk}" / name)
    extra = {
        "name": name, "version": number, "study": {"id": study.pk, "slug": study.slug},
        "criterion": criterion_key, "template": template, "seed": seed,
        "split_sizes": {part: len(pairs[part]) for part in pairs},
        "split_keys": {part: [e.key for e in getattr(splits, part)]
                       for part in ("train", "dev", "test")},
        "metrics": metrics, "threshold": threshold, "target_precision": target_precision,
        "threshold_achieved": bool(choice.achieved),
        "seconds": time.perf_counter() - started,
    }
    save_soft_prompt(soft, directory, extra=extra)
    audit_record(actor=actor, source=source, action=AuditEvent.Action.START, study=study,
                 target=("soft prompt", number, f"{name} v{number}"),
                 changes={"criterion": criterion_key, "path": str(directory),
                          "examples": len(examples), "best_epoch": report.best_epoch})
    return {"path": str(directory), **extra, "training": report.to_dict()}
