"""P(yes) throughput of OpenAICompatibleBackend against a local OpenAI-compatible server.

The server (a separate process, so that it does not share the client's GIL) answers every
`POST /v1/chat/completions` (or `/v1/completions`) after a fixed service time, handling requests
concurrently (one thread each), with yes/no log-probabilities. The client sends `--requests`
distinct LATTE-style prompts through `OpenAICompatibleBackend.score_options` at
`--concurrency`, no cache, under the network policy proxy runs use (connections checked on the
socket, loopback allowed explicitly since the server is local; `--no-policy` measures the
unguarded library default). With a service time S and concurrency C the server's capacity as
seen by this client is C / S requests per second: the ratio achieved / capacity shows what the
backend's own overhead costs (target: at least 0.9).

Then (unless `--learned-pairs 0`) the learned proxies' training time and scoring pairs/s on
CPU, from `bench/judges_learned.py`.

Plain script, no Django: `python bench/judges.py [--requests N --concurrency C --service-ms S]
[--learned-pairs N --learned-kinds wer_bertscore,embedding_lr,cross_encoder]`.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- the server (child process) -----------------------------------------------------------------


def _p_yes_for(prompt: str) -> float:
    """A deterministic P(yes) per prompt, so the client's answers can be checked."""
    return 0.05 + 0.9 * ((sum(prompt.encode()) % 97) / 96)


def _serve(service_s: float, ready: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    state = {"hits": 0, "in_flight": 0, "max_in_flight": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers
        disable_nagle_algorithm = True  # TCP_NODELAY, as real servers set it

        def log_message(self, *args):
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            with lock:
                self._send(dict(state))

        def do_POST(self):  # noqa: N802
            started = time.perf_counter()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                state["hits"] += 1
                state["in_flight"] += 1
                state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
            body = json.loads(raw)
            chat = "messages" in body
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            p = _p_yes_for(prompt)
            top = {"Yes": math.log(0.7 * p), " yes": math.log(0.3 * p),
                   "No": math.log(0.8 * (1 - p)), " no": math.log(0.2 * (1 - p))}
            best = max(top, key=top.__getitem__)
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": best},
                          "logprobs": {"content": [{
                              "token": best, "logprob": top[best],
                              "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()],
                          }]}}
            else:
                choice = {"index": 0, "text": best, "logprobs": {
                    "tokens": [best], "token_logprobs": [top[best]], "top_logprobs": [top]}}
            # The fixed service time counts from the request's arrival (as a model server's
            # compute would), so the server's own parsing is inside it, not added to it.
            remaining = service_s - (time.perf_counter() - started)
            if remaining > 0:
                time.sleep(remaining)
            with lock:
                state["in_flight"] -= 1
            self._send({"object": "chat.completion" if chat else "text_completion",
                        "choices": [choice], "usage": usage})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.request_queue_size = 1024
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ready.put(server.server_address[1])
    stop.wait()
    server.shutdown()
    server.server_close()


# -- the client -----------------------------------------------------------------------------


def _stats(port: int) -> dict:
    import requests

    return requests.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()


def _bare_client(base_url: str, bodies: list[bytes], concurrency: int, path: str) -> float:
    """Seconds for `concurrency` threads, one keep-alive requests.Session each, to POST the
    bodies and decode the answers: the least any requests-based client can cost."""
    import requests

    cursor = iter(range(len(bodies)))
    lock = threading.Lock()

    def worker() -> None:
        session = requests.Session()
        session.headers["Content-Type"] = "application/json"
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                break
            session.post(f"{base_url}{path}", data=bodies[index], timeout=60).json()
        session.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def run(requests_n: int, concurrency: int, service_ms: float, mode: str, seed: int,
        reference: bool = True, guarded: bool = True) -> dict:
    from proxies.judges.backends.openai import OpenAICompatibleBackend
    from proxies.judges.methods import LATTE_TEMPLATE, render_template
    from proxies.judges.network import NetworkPolicy

    # The server listens on loopback, which a policy refuses unless allowed, as a deployment
    # with a judge server on its own host would allow it.
    policy = NetworkPolicy.build(allowed_networks=["127.0.0.1/32"]) if guarded else None

    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(service_ms / 1000, ready, stop), daemon=True)
    server.start()
    try:
        port = ready.get(timeout=30)
        backend = OpenAICompatibleBackend(f"http://127.0.0.1:{port}/v1", "bench-model",
                                          mode=mode, concurrency=concurrency, max_retries=0,
                                          policy=policy)
        # Warm-up (not timed): opens the keep-alive connections and imports requests.
        backend.score_options([f"warm-up {seed} {i}" for i in range(concurrency)], ["yes", "no"])
        before = _stats(port)
        prompts = [
            render_template(LATTE_TEMPLATE, reference=f"reference sentence number {i}",
                            output=f"transcription number {i} of run {seed}")
            for i in range(requests_n)
        ]
        usage_before = backend.usage.as_dict()
        cpu_before = time.process_time()
        started = time.perf_counter()
        results = backend.score_options(prompts, ["yes", "no"])
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        after = _stats(port)
        spent = backend.usage.since(usage_before)
        bare = None
        if reference:
            key = "messages" if mode == "chat" else "prompt"
            bodies = [json.dumps({
                "model": "bench-model", "max_tokens": 1, "temperature": 0.0,
                **({key: [{"role": "user", "content": p}]} if mode == "chat" else {key: p}),
                **({"logprobs": True, "top_logprobs": 5} if mode == "chat" else {"logprobs": 5}),
            }).encode() for p in prompts]
            bare = _bare_client(f"http://127.0.0.1:{port}/v1", bodies, concurrency,
                                "/chat/completions" if mode == "chat" else "/completions")
    finally:
        stop.set()
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
    wrong = sum(1 for prompt, r in zip(prompts, results, strict=True)
                if r.source != "logprobs" or abs(r.p_yes - _p_yes_for(prompt)) > 1e-9)
    latencies = sorted(r.latency_s for r in results)
    capacity = concurrency / (service_ms / 1000)
    achieved = requests_n / elapsed
    return {
        "requests": requests_n, "concurrency": concurrency, "service_ms": service_ms,
        "mode": mode, "seconds": elapsed, "achieved": achieved, "capacity": capacity,
        "ratio": achieved / capacity,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "server_hits": after["hits"] - before["hits"],
        "max_in_flight": after["max_in_flight"], "wrong": wrong,
        "errors": sum(1 for r in results if r.source == "error"),
        "client_cpu_share": cpu / elapsed, "usage": spent,
        "bare_achieved": None if bare is None else requests_n / bare,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--service-ms", type=float, default=50.0)
    parser.add_argument("--mode", choices=["chat", "completions"], default="chat")
    parser.add_argument("--repeat", type=int, default=1, help="runs; the best is compared")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the bare requests.Session client run")
    parser.add_argument("--no-policy", action="store_true",
                        help="no network policy (the library default) instead of the guarded "
                             "connections proxy runs use")
    parser.add_argument("--learned-pairs", type=int, default=3000,
                        help="then bench the learned proxies on this many synthetic pairs "
                             "(bench/judges_learned.py; 0 skips it)")
    parser.add_argument("--learned-kinds", default=None,
                        help="comma-separated learned proxy kinds (default: all)")
    parser.add_argument("--smoke", action="store_true",
                        help="20 requests at 5 ms, no learned proxies, no goal (for make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.requests, args.concurrency, args.service_ms = 20, 2, 5.0
        args.repeat, args.learned_pairs = 1, 0
    if args.requests < 1 or args.concurrency < 1 or args.service_ms <= 0:
        parser.error("--requests and --concurrency must be >= 1, --service-ms > 0")

    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"server: fixed service time {args.service_ms:g} ms, concurrent; client: "
          f"OpenAICompatibleBackend ({args.mode}), concurrency {args.concurrency}, "
          f"{'no network policy' if args.no_policy else 'network policy (loopback allowed)'}")
    header = (f"{'run':>3} {'requests':>8} {'seconds':>8} {'req/s':>8} {'capacity':>8} "
              f"{'ratio':>6} {'p50 ms':>7} {'p95 ms':>7} {'in-flight':>9} {'client CPU':>10}")
    print(header)
    runs = []
    for index in range(args.repeat):
        result = run(args.requests, args.concurrency, args.service_ms, args.mode, index,
                     reference=not args.no_reference, guarded=not args.no_policy)
        runs.append(result)
        print(f"{index + 1:>3} {result['requests']:>8,} {result['seconds']:>8.2f} "
              f"{result['achieved']:>8.1f} {result['capacity']:>8.1f} {result['ratio']:>6.3f} "
              f"{result['p50_ms']:>7.1f} {result['p95_ms']:>7.1f} "
              f"{result['max_in_flight']:>9} {100 * result['client_cpu_share']:>9.0f}%")
        if result["bare_achieved"] is not None:
            bare = result["bare_achieved"]
            print(f"    bare requests.Session client, same prompts: {bare:.1f} req/s = "
                  f"{bare / result['capacity']:.3f} of capacity; the backend reaches "
                  f"{result['achieved'] / bare:.3f} of it")
    best = max(runs, key=lambda r: r["ratio"])
    failures = []
    if best["wrong"] or best["errors"]:
        failures.append(f"{best['wrong']} wrong answers, {best['errors']} errors")
    if best["server_hits"] != best["requests"]:
        failures.append(f"server saw {best['server_hits']} requests for {best['requests']}")
    usage = best["usage"]
    print(f"usage: {usage['requests']:.0f} requests, {usage['tokens_in']:.0f} tokens in, "
          f"{usage['tokens_out']:.0f} out, {usage['retries']:.0f} retries, "
          f"summed latency {usage['latency_s']:.1f} s")
    if args.smoke:
        for failure in failures:
            print(f"CHECK FAILED: {failure}")
        print("smoke: tiny sizes, no goal")
        return 1 if failures else 0
    verdict = "met" if best["ratio"] >= args.target else "NOT met"
    print(f"best ratio {best['ratio']:.3f} of capacity ({best['achieved']:.1f} of "
          f"{best['capacity']:.1f} req/s): target {args.target:g} {verdict}")
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    if args.learned_pairs:
        from bench.judges_learned import main as learned_main

        print("\n--- learned proxies: training time and scoring pairs/s ---")
        learned_main(["--pairs", str(args.learned_pairs)]
                     + (["--kinds", args.learned_kinds] if args.learned_kinds else []))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
