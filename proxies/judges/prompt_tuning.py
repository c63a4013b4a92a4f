"""LATTE's prompt tuning for a local Hugging Face judge (no Django here).

Tomanek et al. (section 3, "Prompt-tuning details") prompt-tune FLAN-T5 XXL and a 62B decoder
on their human labels: a soft prompt of 5 virtual tokens (tuneable embeddings put in front of
the input's embeddings, the model frozen; Lester et al. 2021), trained so that the model
answers "yes" or "no" after the LATTE prompt, the best checkpoint picked by dev accuracy. At
inference the score is what the untuned judge reads: P(yes) = the softmax over the yes/no
answer tokens (`LocalHFBackend.score_options`), now with the soft prompt in front.

Built on `peft` (Apache-2.0): `PromptTuningConfig(task_type=CAUSAL_LM or SEQ_2_SEQ_LM,
num_virtual_tokens=5)` and `get_peft_model` create and freeze; the adapter is saved in peft's
own format (`adapter_config.json`, `adapter_model.safetensors`: loadable with
`PeftModel.from_pretrained(base, directory)`), beside `soft_prompt.json`, this module's
manifest. Forward passes go through `answer_logits` (the backend's own): the soft prompt in
front of the padding with position ids counted over the unmasked tokens, which is what peft
computes for an unpadded prompt (tested), while peft's own forward ignores position ids and
would shift left-padded rows.

Choices (the paper's, unless said):
- Data: (prompt, label) pairs, label 1 = meaning preserved -> target answer "yes", 0 -> "no".
  The prompt is the LATTE template filled with the pair (`latte_training_pairs`); the target
  is the first token of the answer word as the tokenizer spells it alone ("yes"/"no", as in
  the paper's Figure 1 "...ground truth: {" -> "no}").
- Loss: cross-entropy of that token over the whole vocabulary at the answer position (the
  language-model loss of prompt tuning), mean over the batch.
- Initialisation ("init": "vocab"): the soft prompt starts as the embeddings of 5 tokens drawn
  (seeded) from the first `init_vocab` (5,000) ids of the vocabulary, special tokens excluded:
  the paper samples from "the model's 5,000 most frequent tokens"; BPE and SentencePiece
  vocabularies number tokens roughly by frequency, so low ids stand in for frequency (no
  corpus counts are at hand). "random" keeps peft's random init.
- Optimiser: AdamW on the soft prompt only, linear warm-up over `warmup_ratio` of the steps to
  `learning_rate`, then linear decay to 0 (the paper: warm-up to a peak of 0.1 over 500 of 10k
  steps at batch 16, then linear decay; its optimiser is not named). Default peak 0.03, peft's
  documented value for AdamW prompt tuning; gradients clipped to norm 1.
- Checkpoint: after each epoch, dev accuracy of P(yes) >= 0.5; the best epoch is kept (ties:
  higher dev AUC, then the earlier epoch). Without dev examples the last epoch is kept.
- Seed: the init sample, the shuffling and torch's generator come from `seed`; on the CPU two
  runs with one seed give the same soft prompt bit for bit (tested). On a GPU the kernels may
  not be deterministic: same seed, differences in the last bits.
- Device: `device` or cuda when available (`metrics.scorers.encoder.resolve_device`). The model
  is loaded for training in float32 on the CPU and in bfloat16 on a GPU that supports it
  (float32 otherwise); the soft prompt itself is float32. Scoring loads the model as the
  backend always does (fp16 on a GPU).
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from proxies.judges.backends.base import JudgeError
from proxies.judges.backends.local_hf import answer_logits, option_first_tokens, option_shares
from proxies.judges.soft_prompt import (
    SOFT_PROMPT_FORMAT,
    SOFT_PROMPT_MANIFEST,
    SoftPrompt,
    embedding_probe,
    load_soft_prompt,
    probes_match,
    read_soft_prompt_manifest,
    save_soft_prompt,
)

ANSWERS = ("yes", "no")  # label 1, label 0

TUNING_DEFAULTS: dict[str, Any] = {
    "num_virtual_tokens": 5,
    "epochs": 10,
    "batch_size": 16,
    "learning_rate": 0.03,
    "warmup_ratio": 0.1,
    "weight_decay": 0.0,
    "init": "vocab",
    "init_vocab": 5000,
    "max_length": 512,
    "eval_batch_size": 32,
}
INITS = ("vocab", "random")


@dataclass
class TuningReport:
    """What training did: per-epoch `history` ({epoch, train_loss, dev_accuracy, dev_auc}),
    the kept `best_epoch`, sizes, seconds, device and dtype, the answer tokens trained."""

    n_train: int
    n_dev: int
    best_epoch: int
    history: list[dict[str, Any]]
    seconds: float
    device: str
    dtype: str
    steps: int
    answer_tokens: dict[str, int]
    params: dict[str, Any]
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def latte_training_pairs(examples: Sequence[Any], template: str | None = None
                         ) -> list[tuple[str, int]]:
    """(LATTE prompt, label) per example with `reference`, `output` and `label` attributes
    (`proxies.learned.Example`, as `learned_examples` builds them from a study's human
    majorities); unlabelled examples are refused."""
    from proxies.judges.methods import LATTE_TEMPLATE, latte_prompts

    labels = []
    for index, example in enumerate(examples):
        if example.label not in (0, 1):
            raise ValueError(f"example {index} (key {example.key!r}) has no 0/1 label")
        labels.append(int(example.label))
    prompts = latte_prompts([(e.reference, e.output) for e in examples],
                            template or LATTE_TEMPLATE)
    return list(zip(prompts, labels, strict=True))


def _checked_params(params: dict[str, Any] | None) -> dict[str, Any]:
    params = dict(params or {})
    unknown = sorted(set(params) - set(TUNING_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown prompt-tuning parameter(s) {unknown}; known: "
                         f"{sorted(TUNING_DEFAULTS)}")
    merged = {**TUNING_DEFAULTS, **params}
    for name in ("num_virtual_tokens", "epochs", "batch_size", "init_vocab", "max_length",
                 "eval_batch_size"):
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    for name in ("learning_rate", "warmup_ratio", "weight_decay"):
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        merged[name] = float(value)
    if merged["learning_rate"] <= 0 or merged["warmup_ratio"] > 1:
        raise ValueError("learning_rate must be > 0 and warmup_ratio at most 1")
    if merged["init"] not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {merged['init']!r}")
    return merged


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class _Model:
    model: Any
    tokenizer: Any
    encoder_decoder: bool
    accepts_position_ids: bool
    device: str
    dtype: Any


def _load_for_training(model_path: str, device: str) -> _Model:
    """A private copy of the model (the backend's shared one is left alone), frozen."""
    import inspect

    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    if not (Path(model_path) / "config.json").is_file():
        raise JudgeError(f"model_path {model_path!r} is not a model directory (no config.json)")
    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    dtype = torch.float32
    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        dtype = torch.bfloat16
    loader = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # Typed as the torch module it is: transformers wraps `.to` in a way mypy misreads.
        model: torch.nn.Module = loader.from_pretrained(model_path, local_files_only=True,
                                                        dtype=dtype)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model.to(device)
    model.eval()  # no dropout: the soft prompt is trained against the model as it scores
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise JudgeError(f"the tokenizer in {model_path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right" if encoder_decoder else "left"
    tokenizer.truncation_side = "left"
    accepts = "position_ids" in inspect.signature(model.forward).parameters
    return _Model(model, tokenizer, encoder_decoder, accepts, device, dtype)


def answer_token(tokenizer: Any, answer: str) -> int:
    """The training target for `answer`: the first token of the word as the tokenizer spells
    it alone (one of the tokens the judge counts for it)."""
    counted = option_first_tokens(tokenizer, list(ANSWERS))[answer]
    unk = tokenizer.unk_token_id
    tokens = [t for t in tokenizer(answer, add_special_tokens=False)["input_ids"] if t != unk]
    first = int(tokens[0]) if tokens else counted[0]
    return first if first in counted else counted[0]


def _init_ids(tokenizer: Any, vocab_size: int, count: int, limit: int, generator: Any) -> Any:
    import torch

    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    candidates = [i for i in range(min(limit, vocab_size)) if i not in special]
    if not candidates:
        raise ValueError("no ordinary token among the first init_vocab ids to initialise from")
    picks = torch.randint(0, len(candidates), (count,), generator=generator)
    return torch.tensor([candidates[int(i)] for i in picks], dtype=torch.long)


def _scores(loaded: _Model, prompts: Sequence[str], soft: Any, max_length: int,
            batch_size: int, option_ids: dict[str, list[int]]) -> list[float]:
    """P(yes) per prompt with `soft` in front, as the backend scores (in inference mode)."""
    import torch

    out: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            encoded = loaded.tokenizer(list(prompts[start:start + batch_size]),
                                       return_tensors="pt", padding=True, truncation=True,
                                       max_length=max_length)
            logits = answer_logits(
                loaded.model, encoded["input_ids"].to(loaded.device),
                encoded["attention_mask"].to(loaded.device),
                encoder_decoder=loaded.encoder_decoder,
                accepts_position_ids=loaded.accepts_position_ids, soft_prompt=soft)
            out += option_shares(logits, option_ids, list(ANSWERS))[:, 0].cpu().tolist()
    return out


def _accuracy_auc(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float | None]:
    correct = sum((s >= 0.5) == bool(y) for s, y in zip(scores, labels, strict=True))
    auc = None
    if len(set(labels)) == 2:
        from sklearn.metrics import roc_auc_score

        auc = float(roc_auc_score(list(labels), list(scores)))
    return correct / len(labels), auc


def train_soft_prompt(
    model_path: str | os.PathLike[str],
    train: Sequence[tuple[str, int]],
    dev: Sequence[tuple[str, int]] = (),
    *,
    params: dict[str, Any] | None = None,
    seed: int = 0,
    device: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[SoftPrompt, TuningReport]:
    """Train a soft prompt on (prompt, label) pairs (label 1 -> "yes", 0 -> "no") for the
    local model in `model_path`; returns it (the best epoch on `dev`) and the report.

    `params`: TUNING_DEFAULTS' keys. `progress(entry)` is called after each epoch with the
    history entry (a heartbeat for long trainings). ValueError for bad parameters or data.
    """
    import torch
    from peft import PromptTuningConfig, PromptTuningInit, TaskType, get_peft_model

    from metrics.scorers.encoder import resolve_device

    options = _checked_params(params)
    if not train:
        raise ValueError("no training examples")
    for name, part in (("train", train), ("dev", dev)):
        bad = [i for i, (_p, y) in enumerate(part) if y not in (0, 1)]
        if bad:
            raise ValueError(f"{name} example {bad[0]} has a label other than 0/1")
    device = resolve_device(device)
    started = time.perf_counter()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    loaded = _load_for_training(str(Path(model_path).resolve()), device)
    tokenizer = loaded.tokenizer
    option_ids = option_first_tokens(tokenizer, list(ANSWERS))
    targets = {answer: answer_token(tokenizer, answer) for answer in ANSWERS}
    n_virtual = int(options["num_virtual_tokens"])
    max_length = max(1, int(options["max_length"]) - n_virtual)
    config = PromptTuningConfig(
        task_type=TaskType.SEQ_2_SEQ_LM if loaded.encoder_decoder else TaskType.CAUSAL_LM,
        num_virtual_tokens=n_virtual,
        num_transformer_submodules=1,  # the encoder's input only (Lester et al.)
        prompt_tuning_init=PromptTuningInit.RANDOM,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecation notes
        peft_model = get_peft_model(loaded.model, config)
    encoder: Any = peft_model.prompt_encoder["default"].embedding
    if options["init"] == "vocab":
        embeddings: Any = loaded.model.get_input_embeddings()
        ids = _init_ids(tokenizer, int(embeddings.weight.shape[0]), n_virtual,
                        int(options["init_vocab"]), generator)
        with torch.no_grad():
            encoder.weight.copy_(embeddings.weight[ids.to(embeddings.weight.device)].float())
    parameter = encoder.weight
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    if len(trainable) != 1 or trainable[0] is not parameter:  # pragma: no cover - peft change
        raise JudgeError("peft left parameters other than the soft prompt trainable")

    batch_size = int(options["batch_size"])
    steps_per_epoch = math.ceil(len(train) / batch_size)
    total = steps_per_epoch * int(options["epochs"])
    warmup = int(round(options["warmup_ratio"] * total))
    optimizer = torch.optim.AdamW([parameter], lr=options["learning_rate"],
                                  weight_decay=options["weight_decay"])

    def factor(step: int) -> float:  # linear warm-up, then linear decay to 0
        if warmup and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    prompts = [p for p, _ in train]
    target_ids = torch.tensor([targets["yes" if y else "no"] for _, y in train])
    history: list[dict[str, Any]] = []
    best: tuple[tuple[float, float, int], Any] | None = None
    step = 0
    for epoch in range(1, int(options["epochs"]) + 1):
        order = torch.randperm(len(train), generator=generator).tolist()
        losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            encoded = tokenizer([prompts[i] for i in rows], return_tensors="pt", padding=True,
                                truncation=True, max_length=max_length)
            logits = answer_logits(
                loaded.model, encoded["input_ids"].to(device),
                encoded["attention_mask"].to(device), encoder_decoder=loaded.encoder_decoder,
                accepts_position_ids=loaded.accepts_position_ids, soft_prompt=parameter)
            loss = torch.nn.functional.cross_entropy(logits.float(),
                                                     target_ids[rows].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([parameter], 1.0)
            optimizer.step()
            schedule.step()
            step += 1
            losses.append(float(loss.detach()))
        entry: dict[str, Any] = {"epoch": epoch, "train_loss": sum(losses) / len(losses),
                                 "dev_accuracy": None, "dev_auc": None}
        snapshot = parameter.detach().float().cpu().clone()
        if dev:
            scores = _scores(loaded, [p for p, _ in dev], parameter.detach(), max_length,
                             int(options["eval_batch_size"]), option_ids)
            accuracy, auc = _accuracy_auc(scores, [y for _, y in dev])
            entry.update(dev_accuracy=accuracy, dev_auc=auc)
            rank = (accuracy, -1.0 if auc is None else auc, -epoch)
        else:
            rank = (0.0, 0.0, epoch)  # the last epoch
        if best is None or rank > best[0]:
            best = (rank, snapshot)
        history.append(entry)
        if progress is not None:
            progress(entry)
    assert best is not None
    best_epoch = abs(best[0][2])
    peft_config = json.loads(json.dumps(config.to_dict(), default=str))
    peft_config.update(token_dim=int(parameter.shape[1]),
                       base_model_name_or_path=str(Path(model_path).resolve()))
    report = TuningReport(
        n_train=len(train), n_dev=len(dev), best_epoch=best_epoch, history=history,
        seconds=time.perf_counter() - started, device=device.split(":")[0],
        dtype=str(loaded.dtype).replace("torch.", ""), steps=step, answer_tokens=targets,
        params=options, seed=seed,
    )
    soft = SoftPrompt(embeddings=best[1], peft_config=peft_config)
    soft.manifest = _manifest(soft, model_path, report, embedding_probe(loaded.model))
    # Keep the frozen copy out of memory once trained (the backend loads its own).
    del peft_model, loaded
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return soft, report


def _manifest(soft: SoftPrompt, model_path: str | os.PathLike[str], report: TuningReport,
              probe: list[float]) -> dict[str, Any]:
    from metrics.scorers.encoder import model_signature
    from proxies.learned.base import library_versions

    return {
        "format": SOFT_PROMPT_FORMAT,
        "kind": "latte_soft_prompt",
        "base_model": {**model_signature(str(Path(model_path).resolve())),
                       "embedding_probe": probe},
        "num_virtual_tokens": soft.num_virtual_tokens,
        "answers": list(ANSWERS),
        "training": report.to_dict(),
        "libraries": library_versions("peft", "torch", "transformers"),
    }


def score_with_soft_prompt(model_path: str | os.PathLike[str], soft: SoftPrompt,
                           prompts: Sequence[str], *, device: str | None = None,
                           batch_size: int = 32, max_length: int = 512) -> list[float]:
    """P(yes) per prompt (what `LocalHFBackend(model_path, soft_prompt=...)` gives, without
    its cache): for a held-out split right after training."""
    from proxies.judges.backends.local_hf import LocalHFBackend

    backend = LocalHFBackend(model_path, device=device, batch_size=batch_size,
                             max_length=max_length, soft_prompt=soft)
    completions = backend.score_options(list(prompts), list(ANSWERS))
    failed = [c.error for c in completions if c.p_yes is None]
    if failed:
        raise JudgeError(f"scoring with the soft prompt failed: {failed[0]}")
    return [float(c.p_yes) for c in completions if c.p_yes is not None]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


__all__ = [
    "ANSWERS", "SOFT_PROMPT_MANIFEST", "TUNING_DEFAULTS", "SoftPrompt", "TuningReport",
    "answer_token", "embedding_probe", "latte_training_pairs", "load_soft_prompt",
    "probes_match", "read_soft_prompt_manifest", "save_soft_prompt", "score_with_soft_prompt",
    "train_soft_prompt",
]
