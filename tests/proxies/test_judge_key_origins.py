"""The operator's judge keys go to the origins they are bound to, never to an editor's URL
(EVALSTUDY_JUDGE_KEY_ENVS: `NAME` is bound to EVALSTUDY_JUDGE_BASE_URL's origin,
`NAME=https://host:port` to that origin). Real servers on loopback stand in for the operator's
judge and for an attacker's (tests/proxies/judges/fake_openai.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from proxies.models import ProxyRun
from proxies.runs import backend_build, backend_clean, proxy_run_start
from tests.proxies.judges.fake_openai import FakeOpenAI
from tests.proxies.test_proxy_runs import latte_responder, run_here

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_loopback_judges")]

SECRET = "sk-OPERATOR-SECRET"


def _origin(server) -> str:
    return server.base_url.rsplit("/", 1)[0]  # http://127.0.0.1:PORT (base_url ends in /v1)


def _keys_seen(server) -> set[str]:
    return {request.headers.get("Authorization", "") for request in server.requests}


@pytest.fixture
def operator(settings, monkeypatch):
    """The operator's judge: a hosted API with its key in the environment."""
    monkeypatch.setenv("EVALSTUDY_JUDGE_API_KEY", SECRET)
    settings.EVALSTUDY_JUDGE_BASE_URL = "https://api.openai.com/v1"
    settings.EVALSTUDY_JUDGE_MODEL = "gpt-4o-mini"
    settings.EVALSTUDY_JUDGE_KEY_ENVS = ["EVALSTUDY_JUDGE_API_KEY"]


def test_an_editor_naming_the_operators_key_with_their_own_url_gets_nothing(study, operator):
    """The reported reproduction: an explicit api_key_env with another base_url."""
    refused = None
    with FakeOpenAI(latte_responder) as evil:
        try:
            run_here(proxy_run_start(
                study=study, method="latte", criteria=["usable"], enqueue=False,
                backend={"base_url": evil.base_url, "model": "x", "max_retries": 0,
                         "api_key_env": "EVALSTUDY_JUDGE_API_KEY"}))
        except ValidationError as error:
            refused = error
        assert not any(SECRET in key for key in _keys_seen(evil)), "the key reached the URL"
        assert evil.hits == 0
    assert refused is not None
    message = " ".join(refused.messages)
    assert "the key in 'EVALSTUDY_JUDGE_API_KEY' is sent only to https://api.openai.com:443" \
        in message
    assert "EVALSTUDY_JUDGE_KEY_ENVS" in message and "another origin" in message
    assert not ProxyRun.objects.exists()


def test_a_run_stored_with_a_key_for_another_origin_sends_nothing(study, operator):
    """Runs recorded before keys were bound to origins: the worker checks again before it
    reads the key, and fails the run with the reason."""
    with FakeOpenAI(latte_responder) as evil:
        run = proxy_run_start(study=study, method="latte", criteria=["usable"], enqueue=False,
                              backend={"base_url": evil.base_url, "model": "x",
                                       "max_retries": 0})
        ProxyRun.objects.filter(pk=run.pk).update(
            backend={**run.backend, "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})
        run = run_here(run)
        assert evil.hits == 0
    assert run.status == ProxyRun.Status.FAILED
    assert "is sent only to https://api.openai.com:443" in run.error
    assert SECRET not in run.error


def test_building_a_backend_refuses_a_key_for_another_origin(operator):
    """Whoever builds a backend from a stored config: the last check before the key is read."""
    with pytest.raises(ValidationError, match="another origin"):
        backend_build({"backend": "openai", "base_url": "https://evil.example/v1",
                        "model": "m", "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})
    # The same host over another scheme or port is another origin too.
    for url in ("http://api.openai.com/v1", "https://api.openai.com:8443/v1"):
        with pytest.raises(ValidationError, match="another origin"):
            backend_build({"backend": "openai", "base_url": url, "model": "m",
                            "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})
    # An alias of the backend's name is the same backend, checked alike.
    with pytest.raises(ValidationError, match="another origin"):
        backend_clean({"backend": "openai-compatible", "base_url": "https://evil.example/v1",
                        "model": "m", "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})


def test_the_configured_endpoint_still_gets_its_key(study, settings, monkeypatch):
    monkeypatch.setenv("EVALSTUDY_JUDGE_API_KEY", SECRET)
    with FakeOpenAI(latte_responder) as judge:
        settings.EVALSTUDY_JUDGE_BASE_URL = judge.base_url
        settings.EVALSTUDY_JUDGE_MODEL = "judge-test"
        run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                       enqueue=False))
        assert run.status == ProxyRun.Status.DONE and run.done == 18
        # Named explicitly, with another path on the same origin: still its own server.
        explicit = run_here(proxy_run_start(
            study=study, method="latte", criteria=["usable"], enqueue=False,
            backend={"base_url": judge.base_url + "/", "model": "judge-test-2",
                     "api_key_env": "EVALSTUDY_JUDGE_API_KEY"}))
        assert explicit.status == ProxyRun.Status.DONE
        assert _keys_seen(judge) == {f"Bearer {SECRET}"}


def test_a_key_bound_to_an_origin_goes_there_and_nowhere_else(study, settings, monkeypatch,
                                                              operator):
    monkeypatch.setenv("VLLM_KEY", "sk-vllm")
    with FakeOpenAI(latte_responder) as vllm, FakeOpenAI(latte_responder) as other:
        settings.EVALSTUDY_JUDGE_KEY_ENVS = ["EVALSTUDY_JUDGE_API_KEY",
                                             f"VLLM_KEY={_origin(vllm)}"]
        run = run_here(proxy_run_start(
            study=study, method="latte", criteria=["usable"], enqueue=False,
            backend={"base_url": vllm.base_url, "model": "m", "api_key_env": "VLLM_KEY"}))
        assert run.status == ProxyRun.Status.DONE
        assert _keys_seen(vllm) == {"Bearer sk-vllm"}
        with pytest.raises(ValidationError, match=r"the key in 'VLLM_KEY' is sent only to "
                                                  rf"{_origin(vllm)}"):
            proxy_run_start(study=study, method="latte", criteria=["usable"], enqueue=False,
                            backend={"base_url": other.base_url, "model": "m",
                                     "api_key_env": "VLLM_KEY"})
        # The operator's own key stays with the operator's endpoint.
        with pytest.raises(ValidationError, match=r"api.openai.com:443"):
            proxy_run_start(study=study, method="latte", criteria=["usable"], enqueue=False,
                            backend={"base_url": vllm.base_url, "model": "m",
                                     "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})
        assert other.hits == 0


def test_a_bare_key_name_without_a_configured_endpoint_goes_nowhere(settings, monkeypatch):
    monkeypatch.setenv("EVALSTUDY_JUDGE_API_KEY", SECRET)
    settings.EVALSTUDY_JUDGE_BASE_URL = ""
    with pytest.raises(ValidationError, match=r"no endpoint \(EVALSTUDY_JUDGE_BASE_URL is not "
                                              r"set\)"):
        backend_clean({"base_url": "https://api.example.com/v1", "model": "m",
                        "api_key_env": "EVALSTUDY_JUDGE_API_KEY"})


@pytest.mark.parametrize("entry", ["VLLM_KEY=ftp://host", "VLLM_KEY=https://host/v1",
                                   "VLLM_KEY=https://user:pw@host", "VLLM_KEY=",
                                   "=https://host", "MY-KEY"])
def test_a_malformed_key_entry_is_an_operator_error(settings, entry):
    settings.EVALSTUDY_JUDGE_KEY_ENVS = [entry]
    with pytest.raises(ImproperlyConfigured, match="EVALSTUDY_JUDGE_KEY_ENVS"):
        backend_clean({"base_url": "https://api.example.com/v1", "model": "m",
                        "api_key_env": "VLLM_KEY"})
