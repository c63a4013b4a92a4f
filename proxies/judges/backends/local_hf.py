"""The local Hugging Face backend (no Django here): a causal or seq2seq model directory, loaded
lazily once per process and device; next-token logits for option scoring, greedy generation.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxies.judges.backends.base import (
    _TOKEN_WRAPPING,
    SOURCE_GENERATED,
    SOURCE_LOGITS,
    Completion,
    JudgeBackend,
    JudgeError,
    ResponseCache,
    check_options,
    error_completion,
    mean_or_none,
)

# --------------------------------------------------------------------------------------------
# Local Hugging Face models
# --------------------------------------------------------------------------------------------


@dataclass
class _LoadedModel:
    model: Any
    tokenizer: Any
    encoder_decoder: bool
    device: str
    dtype: Any
    accepts_position_ids: bool
    lock: threading.Lock = field(default_factory=threading.Lock)


_HF_MODELS: dict[tuple[str, str], _LoadedModel] = {}
_HF_MODELS_LOCK = threading.Lock()


def load_hf_model(model_path: str, device: str) -> _LoadedModel:
    """The process-wide (model, tokenizer) for a local directory and device, loaded once.

    Causal models get left padding (the answer position is then the last column of every row)
    and left truncation (a prompt too long loses its start, never the question at its end).
    """
    key = (model_path, device)
    with _HF_MODELS_LOCK:
        loaded = _HF_MODELS.get(key)
        if loaded is not None:
            return loaded
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import inspect

        import torch
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )
        from transformers.utils import logging as hf_logging

        if not Path(model_path).is_dir():
            raise JudgeError(f"model_path {model_path!r} is not a directory")
        config = AutoConfig.from_pretrained(model_path, local_files_only=True)
        encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        loader = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Loading weights" bar in worker logs
        try:
            # Typed as the torch module it is: transformers wraps `.to` in a way mypy misreads.
            model: torch.nn.Module = loader.from_pretrained(model_path, local_files_only=True,
                                                            dtype=dtype)
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        model.eval()
        model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token_id is None:
                raise JudgeError(f"the tokenizer in {model_path} has neither a pad nor an eos "
                                 "token; batching needs one")
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right" if encoder_decoder else "left"
        tokenizer.truncation_side = "left"
        accepts = "position_ids" in inspect.signature(model.forward).parameters
        loaded = _LoadedModel(model, tokenizer, encoder_decoder, device, dtype, accepts)
        _HF_MODELS[key] = loaded
        return loaded


class LocalHFBackend(JudgeBackend):
    """A local Hugging Face model directory (no hub: `local_files_only`).

    Causal models (`AutoModelForCausalLM`) read the logits after the prompt (left padded, with
    position ids from the attention mask so that padding does not shift positions: batched
    equals unbatched); seq2seq models (`config.is_encoder_decoder`, `AutoModelForSeq2SeqLM`)
    read the decoder's first logits after the decoder start token. An option's probability is
    the summed softmax probability of the first token of each of its spellings ("yes", " yes",
    "Yes", " Yes", "YES", " YES"), normalised over the options. Options whose spellings share a
    first token cannot be told apart and are refused.

    Device: `metrics.scorers.encoder.resolve_device` (cuda when available, fp16 there).
    Prompts longer than `max_length` tokens lose their beginning.
    """

    kind = "hf"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        device: str | None = None,
        batch_size: int = 8,
        max_length: int = 512,
        cache: ResponseCache | None = None,
    ) -> None:
        super().__init__(cache)
        from metrics.scorers.encoder import resolve_device

        if int(batch_size) < 1 or int(max_length) < 1:
            raise ValueError("batch_size and max_length must be >= 1")
        self.model_path = str(Path(model_path).resolve())
        self.device = resolve_device(device)
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)

    def __repr__(self) -> str:
        return f"LocalHFBackend({self.model_path!r}, device={self.device!r})"

    @property
    def loaded(self) -> _LoadedModel:
        return load_hf_model(self.model_path, self.device)

    def signature(self) -> dict[str, Any]:
        from metrics.scorers.encoder import model_signature

        return {
            "backend": self.kind,
            **model_signature(self.model_path),
            "device": self.device.split(":")[0],
            "dtype": "float16" if self.device.startswith("cuda") else "float32",
            "max_length": self.max_length,
        }

    def _cache_identity(self) -> tuple[str, str, str]:
        sig = self.signature()
        return self.model_path, f"{sig['model']}@{sig['model_sha']}", f"hf-{sig['dtype']}"

    def option_token_ids(self, options: Sequence[str]) -> dict[str, list[int]]:
        """Distinct first-token ids of each option's spellings (see the class doc)."""
        options = check_options(options)
        tokenizer = self.loaded.tokenizer
        unk = tokenizer.unk_token_id
        owner: dict[int, str] = {}
        ids: dict[str, list[int]] = {}
        for option in options:
            base = option.strip()
            spellings = {base, base.lower(), base.capitalize(), base.upper()}
            found: list[int] = []
            for spelling in sorted(spellings):
                for text in (spelling, " " + spelling):
                    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
                    # Skip tokens that carry no letter of the option (a lone space marker).
                    tokens = [t for t in tokens
                              if t != unk and tokenizer.decode([t]).strip(_TOKEN_WRAPPING)]
                    if not tokens:
                        continue
                    first = int(tokens[0])
                    if first in owner and owner[first] != option:
                        raise ValueError(
                            f"options {owner[first]!r} and {option!r} start with the same token "
                            f"{tokenizer.decode([first])!r}; the next-token logits cannot tell "
                            "them apart"
                        )
                    owner[first] = option
                    if first not in found:
                        found.append(first)
            if not found:
                raise ValueError(f"option {option!r} has no token in the model's vocabulary "
                                 "(only unknown tokens)")
            ids[option] = found
        return ids

    def _batches(self, prompts: list[str]) -> list[list[int]]:
        """Prompt indices in batches of similar length (less padding)."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def _encode(self, texts: list[str]):
        loaded = self.loaded
        encoded = loaded.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                                   max_length=self.max_length)
        return {name: tensor.to(loaded.device) for name, tensor in encoded.items()
                if name in ("input_ids", "attention_mask")}

    def score_options(self, prompts: Sequence[str], options: Sequence[str]) -> list[Completion]:
        options = check_options(options)
        params = {"task": "options", "options": options, "max_length": self.max_length}
        return self._cached_map(prompts, params, lambda missing: self._score(missing, options))

    def _score(self, prompts: list[str], options: list[str]) -> list[Completion]:
        import torch

        loaded = self.loaded
        option_ids = self.option_token_ids(options)
        results: list[Completion | None] = [None] * len(prompts)
        for batch in self._batches(prompts):
            started = time.perf_counter()
            try:
                with loaded.lock, torch.inference_mode():
                    inputs = self._encode([prompts[i] for i in batch])
                    self.usage.add(requests=len(batch))
                    mask = inputs["attention_mask"]
                    if loaded.encoder_decoder:
                        start = loaded.model.config.decoder_start_token_id
                        if start is None:
                            raise JudgeError("the seq2seq model's config has no "
                                             "decoder_start_token_id")
                        decoder = torch.full((len(batch), 1), int(start), dtype=torch.long,
                                             device=loaded.device)
                        logits = loaded.model(**inputs, decoder_input_ids=decoder).logits[:, 0]
                    else:
                        extra = {}
                        if loaded.accepts_position_ids:
                            extra["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
                        logits = loaded.model(**inputs, **extra).logits[:, -1]
                    probs = torch.softmax(logits.float(), dim=-1)
                    mass = torch.stack(
                        [probs[:, option_ids[o]].sum(dim=-1) for o in options], dim=-1
                    )
                    shares = (mass / mass.sum(dim=-1, keepdim=True)).cpu().tolist()
                    lengths = mask.sum(dim=-1).cpu().tolist()
            except (RuntimeError, ValueError) as exc:
                elapsed = time.perf_counter() - started
                for i in batch:
                    results[i] = error_completion(f"{type(exc).__name__}: {exc}",
                                                  latency_s=elapsed / len(batch))
                continue
            elapsed = time.perf_counter() - started
            for row, i in enumerate(batch):
                option_probs = dict(zip(options, shares[row], strict=True))
                results[i] = Completion(
                    text=max(option_probs, key=option_probs.__getitem__),
                    option_probs=option_probs, source=SOURCE_LOGITS,
                    tokens_in=int(lengths[row]), latency_s=elapsed / len(batch),
                )
        return results  # type: ignore[return-value]

    def generate(
        self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0
    ) -> list[Completion]:
        params = self._generation_params(max_tokens, temperature, max_length=self.max_length)
        return self._cached_map(
            prompts, params, lambda missing: self._generate(missing, int(max_tokens),
                                                            float(temperature))
        )

    def _generate(self, prompts: list[str], max_tokens: int, temperature: float
                  ) -> list[Completion]:
        import torch

        loaded = self.loaded
        tokenizer = loaded.tokenizer
        eos = tokenizer.eos_token_id
        results: list[Completion | None] = [None] * len(prompts)
        sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {
            "do_sample": False}
        for batch in self._batches(prompts):
            started = time.perf_counter()
            try:
                with loaded.lock, torch.inference_mode():
                    inputs = self._encode([prompts[i] for i in batch])
                    self.usage.add(requests=len(batch))
                    out = loaded.model.generate(
                        **inputs, max_new_tokens=max_tokens, pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=eos, return_dict_in_generate=True, output_logits=True,
                        **sampling,
                    )
                    width = inputs["input_ids"].shape[1]
                    # Decoder-only output repeats the prompt; seq2seq starts with the start token.
                    new = out.sequences[:, 1:] if loaded.encoder_decoder else (
                        out.sequences[:, width:])
                    steps = torch.stack(out.logits, dim=1).float().log_softmax(dim=-1)
                    steps = steps[:, : new.shape[1]]
                    chosen = steps.gather(-1, new[:, : steps.shape[1]].unsqueeze(-1)).squeeze(-1)
                    lengths = inputs["attention_mask"].sum(dim=-1).cpu().tolist()
                    new_ids = new.cpu().tolist()
                    chosen_lp = chosen.cpu().tolist()
            except (RuntimeError, ValueError) as exc:
                elapsed = time.perf_counter() - started
                for i in batch:
                    results[i] = error_completion(f"{type(exc).__name__}: {exc}",
                                                  latency_s=elapsed / len(batch))
                continue
            elapsed = time.perf_counter() - started
            for row, i in enumerate(batch):
                ids, lps = [], []
                for token, logprob in zip(new_ids[row], chosen_lp[row], strict=False):
                    # Rows that finished early are padded after their eos token.
                    if token == eos or (eos is None and token == tokenizer.pad_token_id):
                        break
                    ids.append(token)
                    lps.append(logprob)
                tokens = [(tokenizer.decode([t]), lp) for t, lp in zip(ids, lps, strict=True)]
                results[i] = Completion(
                    text=tokenizer.decode(ids, skip_special_tokens=True),
                    source=SOURCE_GENERATED, tokens_in=int(lengths[row]), tokens_out=len(ids),
                    latency_s=elapsed / len(batch), logprob_mean=mean_or_none(lps),
                    token_logprobs=tokens,
                )
        return results  # type: ignore[return-value]
