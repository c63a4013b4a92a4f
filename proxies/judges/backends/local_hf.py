"""The local Hugging Face backend (no Django here): a causal or seq2seq model directory, loaded
lazily once per process and device; next-token logits for option scoring (optionally behind a
prompt-tuned soft prompt), greedy generation.
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
    SOURCE_GENERATED,
    SOURCE_LOGITS,
    TOKEN_WRAPPING,
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


def option_first_tokens(tokenizer: Any, options: Sequence[str]) -> dict[str, list[int]]:
    """Distinct first-token ids of each option's spellings ("yes", " yes", "Yes", " Yes",
    "YES", " YES"); ValueError when two options share a first token or an option has none."""
    options = check_options(options)
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
                          if t != unk and tokenizer.decode([t]).strip(TOKEN_WRAPPING)]
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


def answer_logits(model: Any, input_ids: Any, attention_mask: Any, *, encoder_decoder: bool,
                  accepts_position_ids: bool, soft_prompt: Any = None) -> Any:
    """The logits of the answer's first token for a batch: after the prompt (causal models,
    left padded: the last column) or the decoder's first position after its start token
    (seq2seq). No gradient handling here: the caller decides (inference_mode or training).

    `soft_prompt`: [n_virtual, hidden] embeddings put in front of every prompt (prompt tuning,
    `proxies.judges.prompt_tuning`), as peft's PeftModel does for an unpadded prompt: the
    inputs become [soft prompt, padding, prompt] with the padding masked and position ids
    counted over the unmasked tokens, so a padded row scores exactly as it would alone
    (peft itself drops position ids and would shift a left-padded row).
    """
    import torch

    if soft_prompt is not None:
        embeds = model.get_input_embeddings()(input_ids)
        batch, n_virtual = input_ids.shape[0], soft_prompt.shape[0]
        prefix = soft_prompt.to(embeds.dtype).unsqueeze(0).expand(batch, -1, -1)
        inputs: dict[str, Any] = {"inputs_embeds": torch.cat([prefix, embeds], dim=1)}
        attention_mask = torch.cat(
            [torch.ones(batch, n_virtual, dtype=attention_mask.dtype,
                        device=attention_mask.device), attention_mask], dim=1)
    else:
        inputs = {"input_ids": input_ids}
    inputs["attention_mask"] = attention_mask
    if encoder_decoder:
        start = model.config.decoder_start_token_id
        if start is None:
            raise JudgeError("the seq2seq model's config has no decoder_start_token_id")
        decoder = torch.full((input_ids.shape[0], 1), int(start), dtype=torch.long,
                             device=input_ids.device)
        return model(**inputs, decoder_input_ids=decoder).logits[:, 0]
    if accepts_position_ids:
        inputs["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return model(**inputs).logits[:, -1]


def option_shares(logits: Any, option_ids: dict[str, list[int]], options: Sequence[str]) -> Any:
    """[batch, n_options] probabilities: each option's summed softmax probability over its
    first tokens, normalised over the options (LATTE's P(yes) for ["yes", "no"])."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    mass = torch.stack([probs[:, option_ids[o]].sum(dim=-1) for o in options], dim=-1)
    return mass / mass.sum(dim=-1, keepdim=True)


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

    `soft_prompt`: a soft prompt trained on human labels (LATTE's prompt tuning,
    `proxies.judges.prompt_tuning`), put in front of every prompt when scoring options; it
    enters the signature and the cache key. Such a judge generates no text.
    """

    kind = "hf"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        device: str | None = None,
        batch_size: int = 8,
        max_length: int = 512,
        cache: ResponseCache | None = None,
        soft_prompt: str | os.PathLike[str] | Any = None,
    ) -> None:
        super().__init__(cache)
        from metrics.scorers.encoder import resolve_device

        if int(batch_size) < 1 or int(max_length) < 1:
            raise ValueError("batch_size and max_length must be >= 1")
        self.model_path = str(Path(model_path).resolve())
        self.device = resolve_device(device)
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        # A trained soft prompt (`proxies.judges.prompt_tuning`): a saved directory, or a
        # `SoftPrompt` in memory. Loaded and checked against the model on first use.
        self.soft_prompt_path: str | None = None
        self._soft: Any = None
        self._soft_tensor: Any = None
        self._soft_lock = threading.Lock()
        if soft_prompt is not None:
            if isinstance(soft_prompt, str | os.PathLike):
                self.soft_prompt_path = str(Path(soft_prompt).resolve())
            else:
                self._soft = soft_prompt

    def __repr__(self) -> str:
        soft = f", soft_prompt={self.soft_prompt_path!r}" if self.soft_prompt_path else ""
        return f"LocalHFBackend({self.model_path!r}, device={self.device!r}{soft})"

    @property
    def loaded(self) -> _LoadedModel:
        return load_hf_model(self.model_path, self.device)

    @property
    def has_soft_prompt(self) -> bool:
        return self.soft_prompt_path is not None or self._soft is not None

    def _soft_manifest(self) -> dict[str, Any]:
        """The soft prompt's manifest, read without loading its weights."""
        if self._soft is not None:
            return dict(self._soft.manifest)
        from proxies.judges.soft_prompt import read_soft_prompt_manifest

        try:
            return read_soft_prompt_manifest(str(self.soft_prompt_path))
        except ValueError as error:
            raise JudgeError(f"soft_prompt: {error}") from None

    def soft_prompt_tensor(self) -> Any:
        """The soft prompt on this backend's device and dtype (None without one), loaded once
        and checked: trained on this very model (same fingerprint), same embedding size and
        model kind (causal / seq2seq). JudgeError naming the mismatch otherwise."""
        if not self.has_soft_prompt:
            return None
        with self._soft_lock:
            if self._soft_tensor is not None:
                return self._soft_tensor
            from metrics.scorers.encoder import model_fingerprint
            from proxies.judges.soft_prompt import (
                embedding_probe,
                load_soft_prompt,
                probes_match,
            )

            if self._soft is None:
                try:
                    self._soft = load_soft_prompt(str(self.soft_prompt_path))
                except (OSError, ValueError) as error:
                    raise JudgeError(f"soft_prompt: {error}") from None
            soft = self._soft
            base = (soft.manifest or {}).get("base_model") or {}
            here = model_fingerprint(self.model_path)
            if base.get("model_sha") != here:
                raise JudgeError(
                    f"soft_prompt: trained on model {base.get('model')!r} (fingerprint "
                    f"{base.get('model_sha')}), but this judge's model_path has fingerprint "
                    f"{here}: a soft prompt only works with the model it was trained on")
            loaded = self.loaded
            width = int(loaded.model.get_input_embeddings().weight.shape[1])
            if int(soft.embeddings.shape[1]) != width:
                raise JudgeError(f"soft_prompt: {soft.embeddings.shape[1]}-dimensional "
                                 f"embeddings for a model with {width}")
            probe = base.get("embedding_probe")
            if probe is not None and not probes_match(probe, embedding_probe(loaded.model)):
                raise JudgeError(
                    f"soft_prompt: trained on other weights than those in {self.model_path} "
                    "(same files and sizes, different input embeddings): a soft prompt only "
                    "works with the model it was trained on")
            task = str(soft.peft_config.get("task_type", ""))
            wanted = "SEQ_2_SEQ_LM" if loaded.encoder_decoder else "CAUSAL_LM"
            if task and task != wanted:
                raise JudgeError(f"soft_prompt: trained for {task}, this model is {wanted}")
            self._soft_tensor = soft.embeddings.to(device=loaded.device, dtype=loaded.dtype)
            return self._soft_tensor

    def signature(self) -> dict[str, Any]:
        from metrics.scorers.encoder import model_signature

        sig = {
            "backend": self.kind,
            **model_signature(self.model_path),
            "device": self.device.split(":")[0],
            "dtype": "float16" if self.device.startswith("cuda") else "float32",
            "max_length": self.max_length,
        }
        if self.has_soft_prompt:
            manifest = self._soft_manifest()
            digest = manifest.get("embeddings_sha256") or (
                self._soft.sha256 if self._soft is not None else "")
            sig["soft_prompt"] = {
                "embeddings_sha256": str(digest)[:16],
                "num_virtual_tokens": manifest.get("num_virtual_tokens"),
                "name": manifest.get("name") or (
                    Path(self.soft_prompt_path).name if self.soft_prompt_path else ""),
                "version": manifest.get("version"),
            }
        return sig

    def _cache_identity(self) -> tuple[str, str, str]:
        sig = self.signature()
        mode = f"hf-{sig['dtype']}"
        if "soft_prompt" in sig:  # another soft prompt, other answers
            mode += f"+soft-{sig['soft_prompt']['embeddings_sha256']}"
        return self.model_path, f"{sig['model']}@{sig['model_sha']}", mode

    def option_token_ids(self, options: Sequence[str]) -> dict[str, list[int]]:
        """Distinct first-token ids of each option's spellings (see the class doc)."""
        return option_first_tokens(self.loaded.tokenizer, options)

    def _batches(self, prompts: list[str]) -> list[list[int]]:
        """Prompt indices in batches of similar length (less padding)."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def _encode(self, texts: list[str], reserve: int = 0):
        loaded = self.loaded
        encoded = loaded.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                                   max_length=max(1, self.max_length - reserve))
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
        soft = self.soft_prompt_tensor()  # JudgeError (whole call) when it does not fit
        reserve = 0 if soft is None else int(soft.shape[0])
        results: list[Completion | None] = [None] * len(prompts)
        for batch in self._batches(prompts):
            started = time.perf_counter()
            try:
                with loaded.lock, torch.inference_mode():
                    inputs = self._encode([prompts[i] for i in batch], reserve)
                    self.usage.add(requests=len(batch))
                    mask = inputs["attention_mask"]
                    logits = answer_logits(
                        loaded.model, inputs["input_ids"], mask,
                        encoder_decoder=loaded.encoder_decoder,
                        accepts_position_ids=loaded.accepts_position_ids, soft_prompt=soft)
                    shares = option_shares(logits, option_ids, options).cpu().tolist()
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
        if self.has_soft_prompt:
            # Trained to answer yes/no after the LATTE prompt; its free text means nothing.
            return [error_completion("this judge has a soft prompt, trained for answer options "
                                     "(LATTE); it does not generate text") for _ in prompts]
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
