"""OpenAICompatibleBackend against a real HTTP server on loopback (tests/.../fake_openai.py)."""

import math
import time

import pytest

from proxies.judges.backends.base import (
    MemoryCache,
    cache_key,
    normalise_option,
    option_probs_from_logprobs,
    parse_option,
)
from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.backends.registry import build_backend
from tests.proxies.judges.fake_openai import FakeOpenAI, Reply, answer, yes_no_reply

YES_NO = ["yes", "no"]


def backend_for(server, **kwargs):
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAICompatibleBackend(server.base_url, "judge-model", **kwargs)


# -- pure helpers -----------------------------------------------------------------------------


def test_option_matching_ignores_case_spaces_and_markers():
    assert normalise_option(" Yes") == normalise_option("YES") == normalise_option("\u0120yes")
    assert normalise_option("\u2581No.") == "no"
    probs = option_probs_from_logprobs(
        [("Yes", math.log(0.5)), (" yes", math.log(0.2)), ("No", math.log(0.1)),
         ("maybe", math.log(0.2))], YES_NO)
    assert probs["yes"] == pytest.approx(0.7 / 0.8)
    assert sum(probs.values()) == pytest.approx(1.0)
    assert option_probs_from_logprobs([("maybe", -0.1)], YES_NO) is None
    assert parse_option("No, it does not.", YES_NO) == "no"
    assert parse_option("Summary B - clearer", ["Summary A", "Summary B"]) == "Summary B"
    assert parse_option("nobody knows", YES_NO) is None  # whole words only


def test_cache_key_depends_on_every_part():
    base = cache_key("m", "chat", "p", {"max_tokens": 1})
    assert base == cache_key("m", "chat", "p", {"max_tokens": 1})
    assert len({base, cache_key("m2", "chat", "p", {"max_tokens": 1}),
                cache_key("m", "completions", "p", {"max_tokens": 1}),
                cache_key("m", "chat", "p2", {"max_tokens": 1}),
                cache_key("m", "chat", "p", {"max_tokens": 2})}) == 5


# -- log-probabilities -> P(yes) ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_p_yes_from_logprobs(mode):
    wanted = {"prompt one": 0.9, "prompt two": 0.25, "prompt three": 0.5}
    with FakeOpenAI(lambda r: yes_no_reply(r, wanted[r.prompt])) as server:
        backend = backend_for(server, mode=mode, top_logprobs=7)
        results = backend.score_options(list(wanted), YES_NO)
    for completion, p in zip(results, wanted.values(), strict=True):
        assert completion.source == "logprobs"
        assert completion.p_yes == pytest.approx(p, abs=1e-9)
        assert sum(completion.option_probs.values()) == pytest.approx(1.0)
    request = next(r for r in server.requests if r.prompt == "prompt one")
    body = request.body
    assert body["model"] == "judge-model" and body["max_tokens"] == 1
    assert body["temperature"] == 0.0
    if mode == "chat":
        assert request.path == "/v1/chat/completions"
        assert body["logprobs"] is True and body["top_logprobs"] == 7
        assert body["messages"] == [{"role": "user", "content": "prompt one"}]
    else:
        assert request.path == "/v1/completions"
        assert body["logprobs"] == 7 and body["prompt"] == "prompt one"


def test_answer_found_at_a_later_position():
    """With answer_tokens > 1 a leading brace token does not hide the answer."""
    top = [{"{": -0.01, "The": -5.0}, {"no": math.log(0.8), "yes": math.log(0.2)}]
    with FakeOpenAI(lambda r: answer(r, "{no", top=top)) as server:
        result = backend_for(server, answer_tokens=2).score_options(["p"], YES_NO)[0]
    assert result.source == "logprobs" and result.p_yes == pytest.approx(0.2)
    assert server.requests[0].body["max_tokens"] == 2


def test_no_logprobs_falls_back_to_parsing_and_says_so():
    texts = {"a": "Yes.", "b": " no", "c": "I am not sure"}
    with FakeOpenAI(lambda r: answer(r, texts[r.prompt], logprobs=False)) as server:
        a, b, c = backend_for(server).score_options(["a", "b", "c"], YES_NO)
    assert (a.source, a.p_yes, a.option_probs) == ("parsed", 1.0, {"yes": 1.0, "no": 0.0})
    assert (b.source, b.p_yes) == ("parsed", 0.0)
    assert c.source == "unparsed" and c.option_probs is None and c.p_yes is None
    assert "no option" in c.error


# -- retries, Retry-After, 4xx, timeouts ------------------------------------------------------


def test_retries_on_429_and_500_then_success():
    script = [Reply(429, {"error": "slow down"}), Reply(500, {"error": "boom"}),
              Reply(503, "unavailable")]
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.8), script=script) as server:
        backend = backend_for(server, max_retries=5)
        result = backend.score_options(["p"], YES_NO)[0]
    assert result.source == "logprobs" and result.p_yes == pytest.approx(0.8)
    assert server.hits == 4
    usage = backend.usage.as_dict()
    assert usage["requests"] == 4 and usage["retries"] == 3 and usage["failures"] == 0


def test_gives_up_after_max_retries():
    with FakeOpenAI(lambda r: Reply(500, {"error": "always broken"})) as server:
        backend = backend_for(server, max_retries=2)
        result = backend.score_options(["p"], YES_NO)[0]
    assert result.source == "error" and result.p_yes is None
    assert "after 3 attempts" in result.error and "HTTP 500" in result.error
    assert server.hits == 3
    assert backend.usage.failures == 1


def test_retry_after_is_honoured():
    script = [Reply(429, {"error": "rate limited"}, headers={"Retry-After": "1"})]
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.6), script=script) as server:
        result = backend_for(server, backoff_s=0.001).score_options(["p"], YES_NO)[0]
    assert result.source == "logprobs"
    assert server.hits == 2
    gap = server.hit_times[1] - server.hit_times[0]
    assert 0.95 <= gap < 3.0, gap  # without the header the backoff would be ~1-2 ms


def test_client_errors_are_not_retried_and_keep_the_key_secret():
    with FakeOpenAI(lambda r: Reply(401, {"error": {"message": "bad key"}})) as server:
        backend = backend_for(server, api_key="sk-secret-123")
        result = backend.score_options(["p"], YES_NO)[0]
    assert server.hits == 1
    assert result.source == "error" and "HTTP 401" in result.error and "bad key" in result.error
    assert server.requests[0].headers["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in result.error
    assert "sk-secret" not in repr(backend) and "sk-secret" not in str(backend.signature())


def test_timeout_is_an_error_after_the_retries():
    with FakeOpenAI(lambda r: Reply(200, {}, delay_s=1.0)) as server:
        backend = backend_for(server, timeout_s=0.2, max_retries=2)
        started = time.monotonic()
        result = backend.score_options(["p"], YES_NO)[0]
        elapsed = time.monotonic() - started
    assert result.source == "error" and "timed out" in result.error
    assert server.hits == 3
    assert 0.6 <= elapsed < 2.5, elapsed


def test_one_failed_prompt_does_not_sink_the_batch():
    def respond(request):
        if request.prompt == "bad":
            return Reply(400, {"error": "prompt too long"})
        return yes_no_reply(request, {"x": 0.1, "y": 0.7, "z": 0.4}[request.prompt])

    with FakeOpenAI(respond) as server:
        results = backend_for(server, concurrency=3).score_options(
            ["x", "bad", "y", "z"], YES_NO)
    assert [r.source for r in results] == ["logprobs", "error", "logprobs", "logprobs"]
    assert [round(r.p_yes, 6) for r in (results[0], results[2], results[3])] == [0.1, 0.7, 0.4]
    assert "prompt too long" in results[1].error


def test_malformed_response_is_an_error():
    with FakeOpenAI(lambda r: Reply(200, "<html>proxy error</html>")) as server:
        result = backend_for(server).score_options(["p"], YES_NO)[0]
    assert result.source == "error" and "not JSON" in result.error


# -- cache ------------------------------------------------------------------------------------


def test_cache_second_run_makes_no_request():
    cache = MemoryCache()
    prompts = [f"prompt {i}" for i in range(6)] + ["prompt 0"]  # one duplicate
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.3 + 0.1 * int(r.prompt[-1]))) as server:
        first = backend_for(server, cache=cache).score_options(prompts, YES_NO)
        assert server.hits == 6  # the duplicate is asked once
        second_backend = backend_for(server, cache=cache)
        second = second_backend.score_options(prompts, YES_NO)
        assert server.hits == 6
        # Another model or other generation parameters are other keys.
        OpenAICompatibleBackend(server.base_url, "other-model", cache=cache).score_options(
            prompts[:1], YES_NO)
        assert server.hits == 7
    assert [c.p_yes for c in first] == [c.p_yes for c in second]
    assert not any(c.cached for c in first) and all(c.cached for c in second)
    assert second_backend.usage.as_dict()["requests"] == 0
    assert second_backend.usage.cache_hits == 7
    assert second_backend.usage.tokens_in == 0


class BatchCache(MemoryCache):
    """A cache with the optional batch methods, counting calls (as a database cache would)."""

    def __init__(self):
        super().__init__()
        self.calls = {"get": 0, "set": 0, "get_many": 0, "set_many": 0}

    def get(self, key):
        self.calls["get"] += 1
        return super().get(key)

    def set(self, key, value):
        self.calls["set"] += 1
        super().set(key, value)

    def get_many(self, keys):
        self.calls["get_many"] += 1
        return {k: v for k in keys if (v := MemoryCache.get(self, k)) is not None}

    def set_many(self, values):
        self.calls["set_many"] += 1
        for key, value in values.items():
            super().set(key, value)


def test_cache_batch_methods_are_used_when_present():
    cache = BatchCache()
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.5)) as server:
        backend_for(server, cache=cache).score_options(["a", "b", "c"], YES_NO)
        again = backend_for(server, cache=cache).score_options(["a", "b", "c", "d"], YES_NO)
    assert server.hits == 4 and len(cache) == 4
    assert [c.cached for c in again] == [True, True, True, False]
    assert cache.calls == {"get": 0, "set": 0, "get_many": 2, "set_many": 2}


def test_errors_are_not_cached():
    cache = MemoryCache()
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.5), script=[Reply(400, {"e": 1})]) as server:
        first = backend_for(server, cache=cache).score_options(["p"], YES_NO)[0]
        second = backend_for(server, cache=cache).score_options(["p"], YES_NO)[0]
        assert first.source == "error" and second.p_yes == pytest.approx(0.5)
        assert server.hits == 2


# -- concurrency and accounting ---------------------------------------------------------------


def test_concurrency_limit_is_respected():
    with FakeOpenAI(lambda r: Reply(**{**yes_no_reply(r, 0.5).__dict__, "delay_s": 0.15})
                    ) as server:
        backend = backend_for(server, concurrency=4)
        started = time.monotonic()
        results = backend.score_options([f"p{i}" for i in range(16)], YES_NO)
        elapsed = time.monotonic() - started
    assert all(r.source == "logprobs" for r in results)
    assert server.max_in_flight == 4
    assert elapsed >= 4 * 0.15 * 0.95  # 16 requests, 4 at a time


def test_connections_are_kept_alive_across_calls():
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.5)) as server:
        backend = backend_for(server, concurrency=2)
        for call in range(3):
            backend.score_options([f"call {call} prompt {i}" for i in range(4)], YES_NO)
    assert server.hits == 12
    assert len(server.clients) <= 2  # at most `concurrency` connections, reused


def test_token_and_latency_accounting():
    def respond(request):
        reply = answer(request, "yes", top=[{"yes": -0.1, "no": -2.4}], prompt_tokens=11)
        reply.delay_s = 0.05
        return reply

    with FakeOpenAI(respond) as server:
        backend = backend_for(server, concurrency=2)
        results = backend.score_options(["a", "b", "c", "d"], YES_NO)
    usage = backend.usage.as_dict()
    assert usage["tokens_in"] == 44 and usage["tokens_out"] == 4
    assert all(r.tokens_in == 11 and r.tokens_out == 1 for r in results)
    assert all(0.05 <= r.latency_s < 1.0 for r in results)
    assert usage["latency_s"] == pytest.approx(sum(r.latency_s for r in results))
    assert usage["requests"] == 4 and usage["cache_hits"] == 0


# -- generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_generate_reads_text_and_token_logprobs(mode):
    lps = [("Summary", -0.1), (" A", -0.3), (" is", -0.2), (" clearer", -0.6)]
    with FakeOpenAI(lambda r: answer(r, "Summary A is clearer", token_logprobs=lps)) as server:
        result = backend_for(server, mode=mode).generate(["compare"], max_tokens=20)[0]
    assert result.text == "Summary A is clearer" and result.source == "generated"
    assert result.logprob_mean == pytest.approx(-0.3)
    assert result.token_logprobs == lps
    body = server.requests[0].body
    assert body["max_tokens"] == 20 and body["temperature"] == 0.0


# -- configuration ----------------------------------------------------------------------------


def test_build_backend_reads_the_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-from-env")
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.5)) as server:
        backend = build_backend({"backend": "openai", "base_url": server.base_url,
                                 "model": "m", "api_key_env": "JUDGE_TEST_KEY",
                                 "concurrency": 2, "mode": "completions"})
        backend.score_options(["p"], YES_NO)
    assert server.requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert backend.concurrency == 2 and backend.mode == "completions"
    assert backend.signature() == {
        "backend": "openai", "base_url": server.base_url, "model": "m", "mode": "completions",
        "top_logprobs": 5, "answer_tokens": 1, "option_temperature": 0.0, "logprobs": True,
    }


@pytest.mark.parametrize(("config", "message"), [
    ({"backend": "openai", "base_url": "http://x/v1", "model": "m",
      "api_key_env": "JUDGE_TEST_UNSET"}, "JUDGE_TEST_UNSET"),
    ({"backend": "openai", "base_url": "http://x/v1", "model": "m", "temprature": 0},
     "temprature"),
    ({"backend": "openai", "model": "m"}, "base_url"),
    ({"backend": "gpt"}, "'backend' must be one of"),
    ({"backend": "openai", "base_url": "http://x/v1", "model": "m", "concurrency": "8"},
     "'concurrency' must be int"),
    ({"backend": "openai", "base_url": "ftp://x", "model": "m"}, "http(s) URL"),
    ({"backend": "hf"}, "model_path"),
])
def test_build_backend_errors_name_the_key(config, message, monkeypatch):
    monkeypatch.delenv("JUDGE_TEST_UNSET", raising=False)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_backend(config)


def test_build_backend_hf_config(tmp_path):
    backend = build_backend({"backend": "hf", "model_path": str(tmp_path), "device": "cpu",
                             "batch_size": 4})
    assert backend.kind == "hf" and backend.batch_size == 4 and backend.device == "cpu"
