"""The OpenAI-compatible HTTP backend (no Django here): any server speaking the OpenAI wire
format (vLLM, llama.cpp server, Ollama, hosted APIs), in chat or completions mode, with
concurrency, retries, the response cache and the network policy.
"""

from __future__ import annotations

import email.utils
import http
import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxies.judges.backends.base import (
    SOURCE_GENERATED,
    SOURCE_LOGPROBS,
    SOURCE_PARSED,
    SOURCE_UNPARSED,
    Completion,
    JudgeBackend,
    JudgeError,
    ResponseCache,
    check_options,
    error_completion,
    mean_or_none,
    option_probs_from_logprobs,
    parse_option,
)
from proxies.judges.network import NetworkPolicy, NetworkRefused, guarded_adapter

logger = logging.getLogger(__name__)

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

    With a `policy` (`proxies.judges.network.NetworkPolicy`): every connection is checked
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
        for name, seconds in (("timeout_s", timeout_s), ("backoff_s", backoff_s),
                              ("max_backoff_s", max_backoff_s),
                              ("max_retry_after_s", max_retry_after_s)):
            if not seconds >= 0 or (name == "timeout_s" and seconds == 0):
                raise ValueError(f"{name} must be a positive number, got {seconds!r}")
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
                logprob_mean=mean_or_none([lp for _, lp in sampled or []]), token_logprobs=sampled,
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
                logprob_mean=mean_or_none([lp for _, lp in sampled or []]), token_logprobs=sampled,
            )

        return self._cached_map(prompts, params, lambda missing: self._map(one, missing))
