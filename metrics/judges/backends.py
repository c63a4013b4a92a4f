"""Judge backends: turn prompts into `Completion`s (no Django here).

Two backends speak one interface (`JudgeBackend`):

- `OpenAICompatibleBackend`: any server speaking the OpenAI wire format (vLLM, llama.cpp server,
  Ollama, hosted APIs), in chat (`POST {base_url}/chat/completions`) or completions
  (`POST {base_url}/completions`) mode. Concurrent requests (a thread pool bounded by
  `concurrency`), retries with exponential backoff and jitter on 429, 5xx, connection errors and
  timeouts (honouring `Retry-After`), a response cache, token and latency accounting.
- `LocalHFBackend`: a local Hugging Face model directory (causal or seq2seq), loaded lazily once
  per process and device; next-token logits for option scoring, greedy generation.

Option scoring (`score_options`) is LATTE's inference: the probability of each answer option as
the next token, normalised over the options asked for, so for ["yes", "no"] it is
P(yes) = softmax over the yes/no log-probabilities. Tokens count for an option whatever their
case and surrounding spaces ("yes", " Yes", "YES" all count for "yes"): their probabilities are
summed. When a server returns no log-probabilities the answer text is parsed instead and the
`Completion` says so (`source="parsed"`, a one-hot `option_probs`).

Results come back in prompt order. A failed prompt gives a `Completion` with `source="error"` and
the reason in `error`; it never fails the rest of the batch.

Where requests may go: `OpenAICompatibleBackend(..., policy=NetworkPolicy(...))` checks every
connection against the policy (`metrics.judges.network`), follows no redirect, ignores proxy
environment variables and keeps failing endpoints' response bodies out of error messages. Without
a policy (a library user talking to a server of their own) none of that applies; an application
that lets others choose `base_url` must pass one.
"""

from __future__ import annotations

import email.utils
import hashlib
import http
import json
import logging
import math
import os
import queue
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from metrics.judges.network import NetworkPolicy, NetworkRefused, guarded_adapter

logger = logging.getLogger(__name__)

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
_TOKEN_MARKERS = "\u0120\u2581\u010a"
_TOKEN_WRAPPING = " \t\r\n\"'`{}[]().,:;*_" + _TOKEN_MARKERS


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
    return text.strip(_TOKEN_WRAPPING).casefold()


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


def _mean(values: Sequence[float]) -> float | None:
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


# --------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP
# --------------------------------------------------------------------------------------------


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _public_url(url: str) -> str:
    """The URL without user info, query or fragment (where secrets could hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def _excerpt(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _status_text(status: int) -> str:
    """"HTTP 503 Service Unavailable": the standard reason phrase, never the server's own (a
    status line is the server's text too)."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _connection_reason(exc: BaseException) -> str:
    """A short reason for a failed connection, without addresses, ports or library internals
    (requests nests urllib3's errors, which name both, several levels deep)."""
    import socket
    import ssl

    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    names: set[str] = set()
    found: list[BaseException] = []
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        found.append(error)
        names.add(type(error).__name__)
        nested = [error.__cause__, error.__context__, getattr(error, "reason", None),
                  *getattr(error, "args", ())]
        stack.extend(e for e in nested if isinstance(e, BaseException))
    if "NameResolutionError" in names or any(isinstance(e, socket.gaierror) for e in found):
        return "the host name does not resolve"
    if any(isinstance(e, ConnectionRefusedError) for e in found):
        return "connection refused"
    if any(isinstance(e, ssl.SSLError) for e in found) or "SSLError" in names:
        return "TLS handshake failed"
    if any(isinstance(e, ConnectionResetError) for e in found) or names & {
            "RemoteDisconnected", "ProtocolError"}:
        return "connection closed by the server"
    return "connection failed"


class OpenAICompatibleBackend(JudgeBackend):
    """A server speaking the OpenAI chat or completions wire format.

    `mode="chat"` sends the prompt as one user message to `{base_url}/chat/completions` and
    asks for `logprobs=true, top_logprobs=N`; `mode="completions"` sends it as `prompt` to
    `{base_url}/completions` with `logprobs=N`. `base_url` includes the API prefix, e.g.
    `http://127.0.0.1:8000/v1`.

    Option scoring asks for `answer_tokens` tokens (1 by default) at temperature 0 and reads the
    first generated position whose top log-probabilities contain an option token, so a leading
    space or brace token does not hide the answer when `answer_tokens` > 1.

    Thread-safe; at most `concurrency` requests are in flight per backend object, whichever
    thread calls it. `max_retries` is the number of retries after the first attempt. The API
    key is sent as a bearer token and never appears in `signature()` or error messages.

    With a `policy` (`metrics.judges.network.NetworkPolicy`): every connection is checked
    against it on the address the socket connects to (a refusal is an error, never retried, and
    sends nothing); redirects are not followed (a 3xx is an error naming the status); proxy
    environment variables are ignored (`trust_env = False`: a proxy would be the socket's peer,
    not the judge); and unless `policy.show_response_bodies`, error messages give the status
    code and its standard reason phrase, or a short connection reason, never what the endpoint
    sent. Without a policy, requests' defaults apply (redirects followed, proxies from the
    environment) and errors quote the response.
    """

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        mode: str = "chat",
        concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        top_logprobs: int = 5,
        cache: ResponseCache | None = None,
        *,
        answer_tokens: int = 1,
        logprobs: bool = True,
        max_backoff_s: float = 30.0,
        max_retry_after_s: float = 120.0,
        policy: NetworkPolicy | None = None,
    ) -> None:
        super().__init__(cache)
        parts = urlsplit(str(base_url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if mode not in ("chat", "completions"):
            raise ValueError(f"mode must be 'chat' or 'completions', got {mode!r}")
        if not model:
            raise ValueError("model is required (the name the server knows the model by)")
        for name, value, low in (("concurrency", concurrency, 1), ("max_retries", max_retries, 0),
                                 ("top_logprobs", top_logprobs, 1),
                                 ("answer_tokens", answer_tokens, 1)):
            if int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name, value in (("timeout_s", timeout_s), ("backoff_s", backoff_s),
                            ("max_backoff_s", max_backoff_s),
                            ("max_retry_after_s", max_retry_after_s)):
            if not value >= 0 or (name == "timeout_s" and value == 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        self.base_url = str(base_url).rstrip("/")
        self.model = str(model)
        self._api_key = str(api_key or "")
        self.mode = mode
        self.concurrency = int(concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_retry_after_s = float(max_retry_after_s)
        self.top_logprobs = int(top_logprobs)
        self.answer_tokens = int(answer_tokens)
        self.logprobs = bool(logprobs)
        self.policy = policy
        self._show_bodies = policy is None or policy.show_response_bodies
        self._in_flight = threading.BoundedSemaphore(self.concurrency)
        # Idle keep-alive sessions; one is checked out per request while holding `_in_flight`,
        # so at most `concurrency` exist however many calls and threads come and go.
        self._idle_sessions: queue.LifoQueue[Any] = queue.LifoQueue()

    def __repr__(self) -> str:
        return (f"OpenAICompatibleBackend({_public_url(self.base_url)!r}, {self.model!r}, "
                f"mode={self.mode!r})")

    def signature(self) -> dict[str, Any]:
        return {
            "backend": self.kind,
            "base_url": _public_url(self.base_url),
            "model": self.model,
            "mode": self.mode,
            "top_logprobs": self.top_logprobs,
            "answer_tokens": self.answer_tokens,
            "option_temperature": 0.0,
            "logprobs": self.logprobs,
        }

    def _cache_identity(self) -> tuple[str, str, str]:
        return _public_url(self.base_url), self.model, self.mode

    # -- HTTP ----------------------------------------------------------------------------
    def _new_session(self):
        import requests
        from requests.adapters import HTTPAdapter

        session = requests.Session()
        # One keep-alive connection per session; retries are ours, not urllib3's.
        if self.policy is None:
            adapter = HTTPAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
        else:
            # Proxies from the environment would make the proxy the socket's peer and route
            # around the policy's address check.
            session.trust_env = False
            adapter = guarded_adapter(self.policy, pool_connections=1, pool_maxsize=1,
                                      max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["Content-Type"] = "application/json"
        if self._api_key:
            session.headers["Authorization"] = f"Bearer {self._api_key}"
        return session

    def close(self) -> None:
        """Close the idle keep-alive connections (a later call opens new ones)."""
        while True:
            try:
                self._idle_sessions.get_nowait().close()
            except queue.Empty:
                return

    def _backoff(self, retry: int) -> float:
        """Exponential backoff with full jitter in [base, 2 * base), capped."""
        base = self.backoff_s * (2 ** retry)
        return min(self.max_backoff_s, base * (1.0 + random.random()))

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries; the decoded JSON body, or JudgeError saying why not."""
        import requests

        url = f"{self.base_url}{path}"
        shown = _public_url(url)
        payload = json.dumps(body).encode("utf-8")  # once for every attempt
        show = self._show_bodies
        retry = 0
        while True:
            wait: float | None = None
            try:
                with self._in_flight:
                    try:
                        session = self._idle_sessions.get_nowait()
                    except queue.Empty:
                        session = self._new_session()
                    sent = True
                    try:
                        response = session.post(
                            url, data=payload, timeout=(self.timeout_s, self.timeout_s),
                            allow_redirects=self.policy is None,
                        )
                    except NetworkRefused:
                        sent = False  # refused before a byte left: not a request
                        raise
                    finally:
                        if sent:
                            self.usage.add(requests=1)
                        self._idle_sessions.put(session)
            except NetworkRefused as exc:
                raise JudgeError(f"POST {shown} refused: {exc}") from None
            except requests.Timeout:
                problem = f"timed out after {self.timeout_s:g} s"
            except requests.ConnectionError as exc:
                problem = (f"connection failed ({type(exc).__name__}: {_excerpt(str(exc), 200)})"
                           if show else _connection_reason(exc))
            except requests.RequestException as exc:
                if show:
                    raise JudgeError(f"POST {shown} failed: {type(exc).__name__}: {exc}") from exc
                raise JudgeError(f"POST {shown} failed ({type(exc).__name__})") from None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        return response.json()
                    except ValueError as exc:
                        if show:
                            raise JudgeError(
                                f"POST {shown} answered {status} with a body that is not JSON: "
                                f"{_excerpt(response.text)!r}"
                            ) from exc
                        raise JudgeError(f"POST {shown} answered {_status_text(status)} with a "
                                         "body that is not JSON") from None
                if 300 <= status < 400 and self.policy is not None:
                    # Where a redirect points is the server's choice, not the policy's: the
                    # status is all that is reported (not even the Location).
                    raise JudgeError(f"POST {shown} answered {_status_text(status)}; redirects "
                                     "are not followed")
                if status == 429 or status >= 500:
                    problem = (f"HTTP {status}: {_excerpt(response.text)}" if show
                               else _status_text(status))
                    wait = _retry_after_seconds(response.headers.get("Retry-After"))
                elif show:
                    raise JudgeError(
                        f"POST {shown} answered HTTP {status} (not retried: the request itself "
                        f"was refused): {_excerpt(response.text)}"
                    )
                else:
                    raise JudgeError(f"POST {shown} answered {_status_text(status)} (not "
                                     "retried: the request itself was refused)")
            if retry >= self.max_retries:
                raise JudgeError(f"POST {shown} failed after {retry + 1} attempts: {problem}")
            delay = (min(wait, self.max_retry_after_s) if wait is not None
                     else self._backoff(retry))
            retry += 1
            self.usage.add(retries=1)
            time.sleep(delay)

    def _request(self, prompt: str, *, max_tokens: int, temperature: float,
                 top_logprobs: int | None) -> dict[str, Any]:
        """Send one prompt; `top_logprobs` None asks only for the sampled tokens' logprobs."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": int(max_tokens),
                                "temperature": float(temperature)}
        if self.mode == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            if self.logprobs:
                body["logprobs"] = True
                if top_logprobs:
                    body["top_logprobs"] = int(top_logprobs)
            return self._post("/chat/completions", body)
        body["prompt"] = prompt
        if self.logprobs:
            body["logprobs"] = int(top_logprobs or 1)
        return self._post("/completions", body)

    def _read(self, data: dict[str, Any]) -> tuple[
        str, list[tuple[str, float]] | None, list[list[tuple[str, float]]] | None, int, int
    ]:
        """(text, sampled token logprobs, top candidates per position, tokens in, tokens out)."""
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            if self._show_bodies:
                raise JudgeError(
                    f"response has no choices[0]: {_excerpt(json.dumps(data))}") from exc
            raise JudgeError("the response is not a completion (no choices[0])") from None
        usage = data.get("usage") or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
        logprobs = choice.get("logprobs") or {}
        sampled: list[tuple[str, float]] | None = None
        tops: list[list[tuple[str, float]]] | None = None
        if self.mode == "chat":
            message = choice.get("message") or {}
            text = message.get("content") or ""
            content = logprobs.get("content") if isinstance(logprobs, dict) else None
            if content:
                sampled = [(c.get("token", ""), float(c["logprob"])) for c in content
                           if c.get("logprob") is not None]
                tops = []
                for c in content:
                    position = [(t.get("token", ""), t.get("logprob"))
                                for t in c.get("top_logprobs") or []]
                    if c.get("logprob") is not None:
                        position.append((c.get("token", ""), c["logprob"]))
                    tops.append(position)
        else:
            text = choice.get("text") or ""
            tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
            token_lps = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
            top_lists = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
            if tokens and token_lps:
                sampled = [(t, float(lp)) for t, lp in zip(tokens, token_lps, strict=False)
                           if lp is not None]
            if top_lists:
                tops = []
                for index, position in enumerate(top_lists):
                    candidates = list((position or {}).items())
                    if tokens and token_lps and index < len(tokens) and index < len(token_lps):
                        candidates.append((tokens[index], token_lps[index]))
                    tops.append(candidates)
        return text, sampled, tops, tokens_in, tokens_out

    # -- the interface -------------------------------------------------------------------
    def _map(self, function: Callable[[str], Completion], prompts: list[str]) -> list[Completion]:
        """`function` over the prompts on at most `concurrency` threads, in order; an exception
        becomes that prompt's error Completion."""

        def guarded(prompt: str) -> Completion:
            started = time.perf_counter()
            try:
                return function(prompt)
            except Exception as exc:  # noqa: BLE001 - one prompt's failure must not sink a batch
                if isinstance(exc, JudgeError):
                    message = str(exc)
                elif self._show_bodies:
                    message = f"{type(exc).__name__}: {exc}"
                else:
                    # Reading a malformed answer fails with the offending value in the message
                    # (int('<whatever the server sent>')): the log gets it, the caller does not.
                    logger.warning("judge answer from %s could not be read",
                                   _public_url(self.base_url), exc_info=True)
                    message = f"the answer could not be read ({type(exc).__name__})"
                return error_completion(message, latency_s=time.perf_counter() - started)

        if len(prompts) == 1:
            return [guarded(prompts[0])]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts)),
                                thread_name_prefix="judge-http") as pool:
            return list(pool.map(guarded, prompts))

    def score_options(self, prompts: Sequence[str], options: Sequence[str]) -> list[Completion]:
        options = check_options(options)
        params = {"task": "options", "options": options, "top_logprobs": self.top_logprobs,
                  "max_tokens": self.answer_tokens, "temperature": 0.0,
                  "logprobs": self.logprobs}

        def one(prompt: str) -> Completion:
            started = time.perf_counter()
            data = self._request(prompt, max_tokens=self.answer_tokens, temperature=0.0,
                                 top_logprobs=self.top_logprobs)
            text, sampled, tops, tokens_in, tokens_out = self._read(data)
            probs = None
            for position in tops or []:
                probs = option_probs_from_logprobs(position, options)
                if probs is not None:
                    break
            if probs is not None:
                source, error = SOURCE_LOGPROBS, ""
            else:
                parsed = parse_option(text, options)
                if parsed is not None:
                    source, error = SOURCE_PARSED, ""
                    probs = {option: float(option == parsed) for option in options}
                else:
                    source = SOURCE_UNPARSED
                    error = f"no option of {options} in the answer {_excerpt(text, 120)!r}"
            return Completion(
                text=text, option_probs=probs, source=source, tokens_in=tokens_in,
                tokens_out=tokens_out, latency_s=time.perf_counter() - started, error=error,
                logprob_mean=_mean([lp for _, lp in sampled or []]), token_logprobs=sampled,
            )

        return self._cached_map(prompts, params, lambda missing: self._map(one, missing))

    def generate(
        self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0
    ) -> list[Completion]:
        params = self._generation_params(max_tokens, temperature, logprobs=self.logprobs)

        def one(prompt: str) -> Completion:
            started = time.perf_counter()
            data = self._request(prompt, max_tokens=max_tokens, temperature=temperature,
                                 top_logprobs=None)
            text, sampled, _tops, tokens_in, tokens_out = self._read(data)
            return Completion(
                text=text, source=SOURCE_GENERATED, tokens_in=tokens_in, tokens_out=tokens_out,
                latency_s=time.perf_counter() - started,
                logprob_mean=_mean([lp for _, lp in sampled or []]), token_logprobs=sampled,
            )

        return self._cached_map(prompts, params, lambda missing: self._map(one, missing))


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
            model = loader.from_pretrained(model_path, local_files_only=True, dtype=dtype)
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
                    mass = (mass / mass.sum(dim=-1, keepdim=True)).cpu().tolist()
                    lengths = mask.sum(dim=-1).cpu().tolist()
            except (RuntimeError, ValueError) as exc:
                elapsed = time.perf_counter() - started
                for i in batch:
                    results[i] = error_completion(f"{type(exc).__name__}: {exc}",
                                                  latency_s=elapsed / len(batch))
                continue
            elapsed = time.perf_counter() - started
            for row, i in enumerate(batch):
                option_probs = dict(zip(options, mass[row], strict=True))
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
                    latency_s=elapsed / len(batch), logprob_mean=_mean(lps),
                    token_logprobs=tokens,
                )
        return results  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

_OPENAI_OPTIONAL = {
    "api_key": str, "api_key_env": str, "mode": str, "concurrency": int, "timeout_s": float,
    "max_retries": int, "backoff_s": float, "top_logprobs": int, "answer_tokens": int,
    "logprobs": bool, "max_backoff_s": float, "max_retry_after_s": float,
}
_HF_OPTIONAL = {"device": str, "batch_size": int, "max_length": int}
_BACKEND_NAMES = {"openai": "openai", "openai-compatible": "openai", "hf": "hf",
                  "huggingface": "hf", "local": "hf"}


def backend_kind(name: Any) -> str | None:
    """"openai" or "hf" for a config's `backend` name, aliases included; None when unknown.
    Callers that check a config before building it compare kinds, never the raw name (an
    alias would otherwise slip past a check made for "openai")."""
    return _BACKEND_NAMES.get(str(name).lower()) if name is not None else None


def _typed(name: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(value, str):
        return value
    raise ValueError(f"judge config: {name!r} must be {kind.__name__}, got {value!r}")


def build_backend(config: Mapping[str, Any], *, cache: ResponseCache | None = None,
                  policy: NetworkPolicy | None = None) -> JudgeBackend:
    """A backend from a plain (JSON-storable) dict.

    `{"backend": "openai", "base_url": ..., "model": ..., "mode": "chat",
    "api_key_env": "OPENAI_API_KEY", "concurrency": 8, ...}` or
    `{"backend": "hf", "model_path": ..., "device": "cuda", "batch_size": 8}`. The API key comes
    from the environment variable named by `api_key_env` (preferred: the key is not stored with
    the config) or from `api_key`. Unknown keys, missing required keys, wrong types and an unset
    key variable are errors that name the key. `policy` goes to an OpenAI-compatible backend
    (where its requests may go; a local model makes none).
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"judge config must be a mapping, got {type(config).__name__}")
    name = config.get("backend")
    kind = backend_kind(name)
    if kind is None:
        raise ValueError(f"judge config: 'backend' must be one of {sorted(_BACKEND_NAMES)}, got "
                         f"{name!r}")
    required = ("base_url", "model") if kind == "openai" else ("model_path",)
    optional = _OPENAI_OPTIONAL if kind == "openai" else _HF_OPTIONAL
    unknown = sorted(set(config) - {"backend", *required, *optional})
    if unknown:
        raise ValueError(f"judge config: unknown key(s) {unknown} for backend {kind!r}; allowed: "
                         f"{sorted({*required, *optional})}")
    missing = [key for key in required if not config.get(key)]
    if missing:
        raise ValueError(f"judge config: missing {missing} (required for backend {kind!r})")
    options = {key: _typed(key, config[key], optional[key]) for key in optional if key in config}
    if kind == "hf":
        return LocalHFBackend(str(config["model_path"]), cache=cache, **options)
    env_name = options.pop("api_key_env", None)
    if env_name:
        if options.get("api_key"):
            raise ValueError("judge config: give 'api_key' or 'api_key_env', not both")
        key = os.environ.get(env_name, "")
        if not key:
            raise ValueError(f"judge config: api_key_env names {env_name!r}, which is not set "
                             "(or empty) in the environment")
        options["api_key"] = key
    return OpenAICompatibleBackend(str(config["base_url"]), str(config["model"]), cache=cache,
                                   policy=policy, **options)
