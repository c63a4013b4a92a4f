"""What every judge backend shares (no Django here): the `JudgeBackend` interface, `Completion`
and `Usage` results, the response cache protocol and key, and reading answer options from
tokens and text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

SOURCE_LOGPROBS = "logprobs"  # probabilities from the server's log-probabilities
SOURCE_LOGITS = "logits"  # probabilities from a local model's next-token logits
SOURCE_PARSED = "parsed"  # no probabilities: the answer was read from the generated text
SOURCE_UNPARSED = "unparsed"  # no probabilities and no answer could be read from the text
SOURCE_GENERATED = "generated"  # free generation (`generate`), no options asked for
SOURCE_ERROR = "error"  # the request failed (see `Completion.error`)
SOURCES = (
    SOURCE_LOGPROBS, SOURCE_LOGITS, SOURCE_PARSED, SOURCE_UNPARSED, SOURCE_GENERATED, SOURCE_ERROR
)

# Token markers that tokenizers put in front of a word (GPT-2 BPE, SentencePiece, byte newline)
# and wrapping punctuation that does not change the answer ("1." or "{yes" still answer 1 / yes).
_TOKEN_MARKERS = "\u0120\u2581\u010a"  # noqa: S105 - tokenizer markers
TOKEN_WRAPPING = " \t\r\n\"'`{}[]().,:;*_" + _TOKEN_MARKERS


class JudgeError(RuntimeError):
    """A judge request or configuration failed; the message says what and why."""


# --------------------------------------------------------------------------------------------
# Results and accounting
# --------------------------------------------------------------------------------------------


@dataclass
class Completion:
    """One prompt's answer.

    `option_probs`: normalised probabilities over the options asked for (`score_options`); a
    one-hot dict when `source == "parsed"` (read from the text, no probabilities), None when
    `source` is "unparsed", "error" or "generated". `logprob_mean`: the mean log-probability of
    the generated tokens (length-normalised; DRPE's vote confidence), None when the backend gave
    none. `token_logprobs`: (token text, log-probability) of each generated token when known.
    `tokens_in`/`tokens_out`/`latency_s` describe the request that produced the answer; for a
    cache hit (`cached=True`) they are the original request's figures, while `Usage` counts
    nothing for it.
    """

    text: str = ""
    option_probs: dict[str, float] | None = None
    source: str = SOURCE_ERROR
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cached: bool = False
    error: str = ""
    logprob_mean: float | None = None
    token_logprobs: list[tuple[str, float]] | None = None

    @property
    def ok(self) -> bool:
        return self.source != SOURCE_ERROR

    @property
    def p_yes(self) -> float | None:
        """option_probs["yes"] when the options were yes/no (None when there are no probs)."""
        if not self.option_probs:
            return None
        if "yes" not in self.option_probs:
            raise KeyError(f"p_yes needs the option 'yes'; options were {list(self.option_probs)}")
        return self.option_probs["yes"]

    @property
    def answer(self) -> str | None:
        """The most likely option (None without option probabilities)."""
        if not self.option_probs:
            return None
        return max(self.option_probs, key=self.option_probs.__getitem__)

    def to_cache(self) -> dict[str, Any]:
        """A JSON-serialisable dict (what `ResponseCache.set` stores)."""
        return {
            "text": self.text,
            "option_probs": self.option_probs,
            "source": self.source,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "latency_s": self.latency_s,
            "logprob_mean": self.logprob_mean,
            "token_logprobs": (
                None if self.token_logprobs is None else [list(t) for t in self.token_logprobs]
            ),
        }

    @classmethod
    def from_cache(cls, value: Mapping[str, Any]) -> Completion:
        tokens = value.get("token_logprobs")
        return cls(
            text=value.get("text", ""),
            option_probs=value.get("option_probs"),
            source=value.get("source", SOURCE_PARSED),
            tokens_in=int(value.get("tokens_in", 0)),
            tokens_out=int(value.get("tokens_out", 0)),
            latency_s=float(value.get("latency_s", 0.0)),
            cached=True,
            logprob_mean=value.get("logprob_mean"),
            token_logprobs=None if tokens is None else [(str(t), float(lp)) for t, lp in tokens],
        )


def error_completion(message: str, *, latency_s: float = 0.0) -> Completion:
    return Completion(source=SOURCE_ERROR, error=message, latency_s=latency_s)


@dataclass
class Usage:
    """What a backend has spent, accumulated across threads.

    `requests`: requests actually sent (HTTP requests, retries included; prompts computed for a
    local model); `cache_hits`: prompts answered from the cache (no request); `retries`: repeated
    attempts; `failures`: prompts that ended in an error; `tokens_in`/`tokens_out`: from the
    server's `usage` (or counted locally); `latency_s`: summed per-prompt time (retries and
    backoff included), not wall time.
    """

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    _FIELDS = ("requests", "cache_hits", "retries", "failures", "tokens_in", "tokens_out",
               "latency_s")

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                if name not in self._FIELDS:
                    raise AttributeError(f"Usage has no counter {name!r}")
                setattr(self, name, getattr(self, name) + delta)

    def record(self, completion: Completion) -> None:
        """Count a computed (not cached) completion's tokens, latency and failure."""
        self.add(
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            latency_s=completion.latency_s,
            failures=0 if completion.ok else 1,
        )

    def as_dict(self) -> dict[str, float]:
        with self._lock:
            return {name: getattr(self, name) for name in self._FIELDS}

    def since(self, before: Mapping[str, float]) -> dict[str, float]:
        """The difference from an earlier `as_dict()` (what one call spent)."""
        now = self.as_dict()
        return {name: now[name] - before.get(name, 0) for name in self._FIELDS}


# --------------------------------------------------------------------------------------------
# Response cache
# --------------------------------------------------------------------------------------------


class ResponseCache(Protocol):
    """Where answers are kept between runs; values are `Completion.to_cache()` dicts.

    Optional batch methods, used when present: `get_many(keys) -> {key: value}` (found keys
    only) and `set_many({key: value})`. Backends read the cache before a batch and write it
    after the batch, on the calling thread (never from their HTTP worker threads), so a
    database cache needs no per-thread connections; call in chunks (say 64-256 prompts) so
    that an interrupted run loses at most one chunk's answers.
    """

    def get(self, key: str) -> dict | None: ...

    def set(self, key: str, value: dict) -> None: ...


class MemoryCache:
    """A process-local `ResponseCache` (a dict behind a lock; stores JSON copies)."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            raw = self._data.get(key)
        return None if raw is None else json.loads(raw)

    def set(self, key: str, value: dict) -> None:
        raw = json.dumps(value)  # fails loudly on values a database cache could not store
        with self._lock:
            self._data[key] = raw

    def __len__(self) -> int:
        return len(self._data)


def _cache_lookup(cache: ResponseCache | None, keys: list[str]) -> dict[str, dict]:
    """Cached values by key; one `get_many(keys)` call when the cache has it (a database cache
    then reads a batch in one query), else `get` per key."""
    if cache is None or not keys:
        return {}
    get_many = getattr(cache, "get_many", None)
    if get_many is not None:
        return dict(get_many(keys))
    values = {key: cache.get(key) for key in keys}
    return {key: value for key, value in values.items() if value is not None}


def _cache_store(cache: ResponseCache | None, values: dict[str, dict]) -> None:
    """Store answers; one `set_many(values)` call when the cache has it, else `set` per key."""
    if cache is None or not values:
        return
    set_many = getattr(cache, "set_many", None)
    if set_many is not None:
        set_many(values)
        return
    for key, value in values.items():
        cache.set(key, value)


def cache_key(model: str, mode: str, prompt: str, params: Mapping[str, Any], *,
              endpoint: str = "") -> str:
    """sha256 over the endpoint, model, mode, prompt and generation parameters (canonical JSON).

    `endpoint` is where answers come from (a server's public base URL, a local model's path):
    two servers may call different models by one name, and a cached answer of one must never
    stand in for the other (nor for a server that does not answer at all)."""
    payload = json.dumps(
        {"endpoint": endpoint, "model": model, "mode": mode, "prompt": prompt,
         "params": dict(params)},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Options: matching tokens and parsing answers
# --------------------------------------------------------------------------------------------


def normalise_option(text: str) -> str:
    """Case- and space-insensitive form of an option or token ("  Yes." -> "yes")."""
    return text.strip(TOKEN_WRAPPING).casefold()


def check_options(options: Sequence[str]) -> list[str]:
    """The options as a list; at least two, none empty, distinct once normalised."""
    options = [str(option) for option in options]
    if len(options) < 2:
        raise ValueError(f"score_options needs at least two options, got {options!r}")
    seen: dict[str, str] = {}
    for option in options:
        key = normalise_option(option)
        if not key:
            raise ValueError(f"option {option!r} is empty once spaces and punctuation are removed")
        if key in seen:
            raise ValueError(
                f"options {seen[key]!r} and {option!r} are the same once case and spaces are "
                "ignored"
            )
        seen[key] = option
    return options


def option_probs_from_logprobs(
    candidates: Sequence[tuple[str, float]], options: Sequence[str]
) -> dict[str, float] | None:
    """Normalised option probabilities from (token, log-probability) candidates of one position.

    Every candidate whose normalised text equals an option's counts for it (probabilities
    summed). An option absent from the candidates gets 0: its probability is below the smallest
    one returned. None when no candidate matches any option.
    """
    keys = {normalise_option(option): option for option in options}
    mass = dict.fromkeys(options, 0.0)
    seen_tokens: set[str] = set()
    for token, logprob in candidates:
        if token in seen_tokens or logprob is None:
            continue
        seen_tokens.add(token)
        option = keys.get(normalise_option(token))
        if option is not None:
            mass[option] += math.exp(float(logprob))
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {option: value / total for option, value in mass.items()}


def parse_option(text: str, options: Sequence[str]) -> str | None:
    """The option named first in `text` as a whole word (case-insensitive), or None.

    At the same position the longest option wins ("Summary A" over "Summary").
    """
    folded = text.casefold()
    best: tuple[int, int, str] | None = None
    for option in options:
        needle = re.escape(option.strip().casefold())
        match = re.search(rf"(?<!\w){needle}(?!\w)", folded)
        if match and (best is None or (match.start(), -len(option)) < best[:2]):
            best = (match.start(), -len(option), option)
    return None if best is None else best[2]


def mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# --------------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------------


class JudgeBackend(ABC):
    """A source of completions; see the module doc for the shared behaviour."""

    kind = "abstract"

    def __init__(self, cache: ResponseCache | None = None) -> None:
        self.cache = cache
        self.usage = Usage()

    @abstractmethod
    def signature(self) -> dict[str, Any]:
        """Everything results depend on (backend kind, model, mode, ...); never secrets."""

    @abstractmethod
    def score_options(self, prompts: Sequence[str], options: Sequence[str]) -> list[Completion]:
        """Probability of each option as the next answer, per prompt, in prompt order."""

    @abstractmethod
    def generate(
        self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0
    ) -> list[Completion]:
        """Generated text per prompt, in prompt order (greedy at temperature 0)."""

    @staticmethod
    def _generation_params(max_tokens: int, temperature: float, **extra: Any) -> dict[str, Any]:
        """The checked generation settings, as they enter the cache key."""
        if int(max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        return {"task": "generate", "max_tokens": int(max_tokens),
                "temperature": float(temperature), **extra}

    # -- shared cache handling -----------------------------------------------------------
    @abstractmethod
    def _cache_identity(self) -> tuple[str, str, str]:
        """(endpoint, model, mode) for `cache_key`."""

    def _cached_map(
        self,
        prompts: Sequence[str],
        params: Mapping[str, Any],
        compute: Callable[[list[str]], list[Completion]],
    ) -> list[Completion]:
        """Answers from the cache where present; `compute` the distinct missing prompts once.

        Successful answers are stored; errors never are (a re-run retries them).
        """
        prompts = [str(p) for p in prompts]
        endpoint, model, mode = self._cache_identity()
        distinct = list(dict.fromkeys(prompts))
        all_keys = {prompt: cache_key(model, mode, prompt, params, endpoint=endpoint)
                    for prompt in distinct}
        found = _cache_lookup(self.cache, list(all_keys.values()))
        results: dict[str, Completion] = {}
        keys: dict[str, str] = {}
        missing: list[str] = []
        for prompt in distinct:
            value = found.get(all_keys[prompt])
            if value is not None:
                results[prompt] = Completion.from_cache(value)
            else:
                keys[prompt] = all_keys[prompt]
                missing.append(prompt)
        hits = sum(1 for p in prompts if p in results)
        if hits:
            self.usage.add(cache_hits=hits)
        if missing:
            computed = compute(missing)
            if len(computed) != len(missing):  # pragma: no cover - a backend bug
                raise JudgeError(f"backend returned {len(computed)} answers for {len(missing)}")
            to_store: dict[str, dict] = {}
            for prompt, completion in zip(missing, computed, strict=True):
                self.usage.record(completion)
                if completion.ok:
                    to_store[keys[prompt]] = completion.to_cache()
                results[prompt] = completion
            _cache_store(self.cache, to_store)
        # Duplicated prompts share one answer: hand out copies so callers may mutate them.
        out: list[Completion] = []
        used: set[str] = set()
        for prompt in prompts:
            completion = results[prompt]
            if prompt in used:
                completion = Completion(**{**completion.__dict__})
            used.add(prompt)
            out.append(completion)
        return out
