"""A real HTTP server on loopback that speaks the OpenAI chat and completions wire format,
scripted per test (not a mock: the backends talk to it through sockets).

`FakeOpenAI(responder)` starts a `ThreadingHTTPServer` on 127.0.0.1 (a free port; `host` picks
another loopback address, e.g. 127.0.0.2, which Linux answers as well) in a thread;
`responder(request) -> Reply` decides every answer. `script` holds replies used first, one per
hit, whatever the request (429s, 500s, slow answers). The server records every hit (`hits`,
`requests`, `hit_times`, the request headers) and the most requests it served at once
(`max_in_flight`).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def prompt(self) -> str:
        if "messages" in self.body:
            return self.body["messages"][-1]["content"]
        return self.body.get("prompt", "")

    @property
    def chat(self) -> bool:
        return self.path.endswith("/chat/completions")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; str -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def tokenize(text: str) -> list[str]:
    """Word and whitespace runs: joined back they give the text exactly."""
    return re.findall(r"\s*\S+|\s+", text)


def answer(request: Request, text: str, *, top: list[dict[str, float]] | None = None,
           token_logprobs: list[tuple[str, float]] | None = None, logprobs: bool = True,
           prompt_tokens: int | None = None) -> Reply:
    """A 200 reply in the request's format (chat or completions).

    `top`: the top log-probabilities per generated position ({token: logprob}); the sampled
    tokens default to the text's words with log-probability log(0.9), and to the top entry
    when `top` is given. `logprobs=False` leaves log-probabilities out (servers without them).
    """
    if token_logprobs is None:
        if top is not None:
            token_logprobs = [max(position.items(), key=lambda kv: kv[1]) for position in top]
        else:
            token_logprobs = [(t, math.log(0.9)) for t in tokenize(text)]
    usage = {
        "prompt_tokens": prompt_tokens if prompt_tokens is not None else
        len(request.prompt.split()),
        "completion_tokens": len(token_logprobs),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    tops = top if top is not None else [{t: lp} for t, lp in token_logprobs]
    if request.chat:
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}
        if logprobs and request.body.get("logprobs"):
            n = int(request.body.get("top_logprobs") or 0)
            choice["logprobs"] = {"content": [
                {"token": t, "logprob": lp, "bytes": list(t.encode()),
                 "top_logprobs": [{"token": k, "logprob": v, "bytes": list(k.encode())}
                                  for k, v in sorted(position.items(), key=lambda kv: -kv[1])[:n]]}
                for (t, lp), position in zip(token_logprobs, tops, strict=False)
            ]}
        else:
            choice["logprobs"] = None
        return Reply(body={"id": "chatcmpl-test", "object": "chat.completion",
                           "model": request.body.get("model"), "choices": [choice],
                           "usage": usage})
    choice = {"index": 0, "text": text, "finish_reason": "stop"}
    if logprobs and request.body.get("logprobs") is not None:
        n = int(request.body["logprobs"])
        choice["logprobs"] = {
            "tokens": [t for t, _ in token_logprobs],
            "token_logprobs": [lp for _, lp in token_logprobs],
            "top_logprobs": [dict(sorted(p.items(), key=lambda kv: -kv[1])[:n]) for p in tops],
            "text_offset": [],
        }
    else:
        choice["logprobs"] = None
    return Reply(body={"id": "cmpl-test", "object": "text_completion",
                       "model": request.body.get("model"), "choices": [choice], "usage": usage})


def yes_no_reply(request: Request, p_yes: float) -> Reply:
    """An answer whose first position puts P(yes) = p_yes over several spellings."""
    top = {"Yes": math.log(0.6 * p_yes), " yes": math.log(0.3 * p_yes),
           "YES": math.log(0.1 * p_yes), "No": math.log(0.7 * (1 - p_yes)),
           " no": math.log(0.3 * (1 - p_yes))}
    best = max(top, key=top.__getitem__)
    return answer(request, best, top=[top])


class FakeOpenAI:
    def __init__(self, responder: Callable[[Request], Reply] | None = None,
                 script: list[Reply] | None = None, host: str = "127.0.0.1") -> None:
        self.responder = responder or (lambda request: answer(request, "yes"))
        self.script: deque[Reply] = deque(script or [])
        self.requests: list[Request] = []
        self.hit_times: list[float] = []
        self.clients: set[tuple[str, int]] = set()  # client (host, port): one per connection
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # TCP_NODELAY, as real servers set it

            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                request = Request(self.path, json.loads(raw or b"{}"), dict(self.headers))
                with server._lock:
                    server.requests.append(request)
                    server.clients.add(self.client_address[:2])
                    server.hit_times.append(time.monotonic())
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    scripted = server.script.popleft() if server.script else None
                try:
                    reply = scripted or server.responder(request)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                body = reply.body
                data = (json.dumps(body) if not isinstance(body, str) else body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def hits(self) -> int:
        return len(self.requests)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
