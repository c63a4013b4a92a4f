"""LLM judges cannot reach into the host's network, and one study's cached answers are not
another's: proxy runs under the judge network policy (settings EVALSTUDY_JUDGE_ALLOWED_*),
against real servers on loopback (tests/proxies/judges/fake_openai.py)."""

from __future__ import annotations

import json
import socket

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.models import Output
from proxies.models import JudgeResponse, ProxyRun
from proxies.runs import proxy_run_start
from tests.factories import UserFactory, make_study, token_client
from tests.proxies.judges.fake_openai import FakeOpenAI, Reply
from tests.proxies.test_proxy_runs import latte_responder, run_here

pytestmark = pytest.mark.django_db

SECRET = "sk-live-TOPSECRET-4242"


def backend_for(url: str, **extra):
    return {"base_url": url, "model": "judge-test", "max_retries": 0, **extra}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(study, url, **kwargs):
    return proxy_run_start(study=study, method="latte", criteria=["usable"],
                           backend=backend_for(url), enqueue=False, **kwargs)


# --- refused when the run is started ----------------------------------------------------------

@pytest.mark.parametrize(("host", "reason"), [
    ("127.0.0.1", "is a loopback address"),
    ("localhost", "resolves to a loopback address"),
    ("[::1]", "is a loopback address"),
    ("10.20.30.40", "is a private address"),
    ("192.168.1.10", "is a private address"),
    ("172.16.5.5", "is a private address"),
    ("169.254.169.254", "is a link-local address"),  # the cloud metadata service
    ("[fe80::1]", "is a link-local address"),
    ("[fd00::1]", "is a private address"),
    ("2130706433", "resolves to a loopback address"),  # 127.0.0.1 as a decimal number
    ("0x7f000001", "resolves to a loopback address"),  # ... and in hex
    ("[::ffff:127.0.0.1]", "is a loopback address"),  # IPv4-mapped
    ("[::ffff:169.254.169.254]", "is a link-local address"),
    ("0.0.0.0", "is an unspecified address"),
    ("224.0.0.1", "is a multicast address"),
])
def test_internal_addresses_are_refused_when_a_run_is_started(study, host, reason):
    with pytest.raises(ValidationError) as error:
        start(study, f"http://{host}:8000/v1")
    message = " ".join(error.value.messages)
    assert reason in message and "which judge requests may not reach" in message
    assert "EVALSTUDY_JUDGE_ALLOWED_NETWORKS" in message  # says how an operator allows it
    assert not ProxyRun.objects.exists()


def test_loopback_is_refused_by_default_and_reachable_once_allowed(study, settings):
    with FakeOpenAI(latte_responder) as server:
        # The shipped default: no network beyond the public ones.
        assert getattr(settings, "EVALSTUDY_JUDGE_ALLOWED_NETWORKS", []) == []
        with pytest.raises(ValidationError, match="loopback"):
            start(study, server.base_url)
        settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = ["127.0.0.1/32"]
        run = run_here(start(study, server.base_url))
        assert run.status == ProxyRun.Status.DONE and run.done == 18


def test_the_configured_endpoint_is_trusted_as_configured(study, settings):
    """The operator's EVALSTUDY_JUDGE_BASE_URL (scheme, host, port) needs no network entry;
    another port of the same host does."""
    with FakeOpenAI(latte_responder) as server:
        settings.EVALSTUDY_JUDGE_BASE_URL = server.base_url
        settings.EVALSTUDY_JUDGE_MODEL = "judge-test"
        run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                       enqueue=False))
        assert run.status == ProxyRun.Status.DONE and server.hits == 18
        with pytest.raises(ValidationError, match="loopback"):
            start(study, f"http://127.0.0.1:{closed_port()}/v1")


def test_the_api_refuses_the_metadata_address_with_the_reason():
    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="asr")
    response = token_client(owner).post(
        reverse("api-study-proxy-runs", args=["asr"]), content_type="application/json",
        data=json.dumps({"method": "latte", "criteria": ["usable"],
                         "backend": backend_for("http://169.254.169.254/latest")}))
    assert response.status_code == 400
    assert "link-local address" in json.dumps(response.json())
    assert not ProxyRun.objects.exists()


# --- refused when the request is sent ---------------------------------------------------------

def test_a_run_whose_endpoint_is_no_longer_allowed_sends_nothing(study, settings):
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with FakeOpenAI(latte_responder) as server:
        run = start(study, server.base_url)  # allowed when started
        settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = []  # the operator closes loopback
        run = run_here(run)
        assert server.hits == 0
    assert run.status == ProxyRun.Status.FAILED
    assert "is a loopback address, which judge requests may not reach" in run.error
    assert len(run.error) < 300  # the reason, briefly
    assert not Judgment.objects.filter(rater=run.rater).exists()


def test_a_redirect_to_another_server_is_not_followed(study, allow_loopback_judges):
    with FakeOpenAI(latte_responder, host="127.0.0.2") as hidden:
        target = f"{hidden.base_url}/chat/completions"
        with FakeOpenAI(lambda r: Reply(307, {"see": target}, headers={"Location": target})
                        ) as redirecting:
            run = run_here(start(study, redirecting.base_url))
            assert redirecting.hits == 18 and hidden.hits == 0
    assert run.done == 0 and run.failed == 18
    reasons = set(run.unreadable.values())
    assert len(reasons) == 1
    assert "HTTP 307 Temporary Redirect; redirects are not followed" in reasons.pop()
    assert "127.0.0.2" not in json.dumps(run.unreadable) + run.error


# --- what a failing endpoint says stays out of what editors see -------------------------------

def _leaky(request):
    """Five ways for an endpoint to fail while talking about its secrets, one per variant."""
    variant = request.prompt.split("(variant ")[-1][0]
    return {
        "0": lambda: Reply(500, {"error": f"db password {SECRET}"}),
        "1": lambda: Reply(401, {"error": {"message": f"key {SECRET} revoked"}}),
        "2": lambda: Reply(200, f"<html>internal admin {SECRET}</html>"),
        "3": lambda: Reply(200, {"internal": SECRET}),
        "4": lambda: Reply(200, {"choices": [{"message": {"content": "yes"}}],
                                 "usage": {"prompt_tokens": SECRET}}),
    }[variant]()


def test_a_failing_endpoint_never_shows_its_response_to_editors(allow_loopback_judges, client):
    owner = UserFactory(username="owner", is_staff=True, is_superuser=True)
    study = make_study(owner=owner, slug="leaky", n_items=2, n_systems=5)
    with FakeOpenAI(_leaky) as server:
        run = run_here(start(study, server.base_url))
    assert run.failed == 10 and run.done == 0
    detail = token_client(owner).get(reverse("api-proxy-run", args=[run.pk]))
    client.force_login(owner)
    admin_page = client.get(reverse("admin:proxies_proxyrun_change", args=[run.pk]))
    assert detail.status_code == 200 and admin_page.status_code == 200
    shown = [run.error, json.dumps(run.unreadable), detail.content.decode(),
             admin_page.content.decode()]
    assert not any("TOPSECRET" in text for text in shown)
    reasons = " | ".join(run.unreadable.values())
    for expected in ("HTTP 500 Internal Server Error", "HTTP 401 Unauthorized", "not JSON",
                     "not a completion", "could not be read (ValueError)"):
        assert expected in reasons


def test_a_dead_endpoint_gives_a_short_reason_without_internals(study, allow_loopback_judges):
    run = run_here(start(study, f"http://127.0.0.1:{closed_port()}/v1"))
    assert run.failed == 18
    reason = set(run.unreadable.values()).pop()
    assert reason.endswith("connection refused"), reason
    assert "HTTPConnectionPool" not in reason and "Errno" not in reason


# --- the response cache: per study, per endpoint ----------------------------------------------

def _copy_texts(source, target):
    """Give `target` the items and outputs of `source` (same prompts to the judge)."""
    for mine, theirs in zip(target.items.order_by("external_id"),
                            source.items.order_by("external_id"), strict=True):
        mine.reference = theirs.reference
        mine.save()
        for output in Output.objects.filter(item=mine).select_related("system"):
            output.text = Output.objects.get(item=theirs, system__name=output.system.name).text
            output.save()


def test_another_study_never_gets_answers_from_this_studys_cache(allow_loopback_judges):
    study_a, study_b = make_study(slug="tenant-a"), make_study(slug="tenant-b")
    _copy_texts(study_a, study_b)
    with FakeOpenAI(latte_responder) as server:
        first = run_here(start(study_a, server.base_url))
        assert first.done == 18 and server.hits == 18
        # Study B, same prompts, a URL where nothing answers: nothing comes from A's cache.
        dead = run_here(start(study_b, f"http://127.0.0.1:{closed_port()}/v1"))
        assert (dead.done, dead.failed) == (0, 18)
        assert dead.usage.get("cache_hits", 0) == 0
        # Study B against A's very server asks it again: the cache is the study's own.
        own = run_here(start(study_b, server.base_url))
        assert own.done == 18 and server.hits == 36 and own.usage["cache_hits"] == 0
        # Re-running in study A still costs nothing.
        again = run_here(start(study_a, server.base_url, template=first.template,
                               params={"threshold": 0.7}))
        assert again.done == 18 and server.hits == 36 and again.usage["requests"] == 0
    assert JudgeResponse.objects.filter(study=study_a).count() == 18
    assert JudgeResponse.objects.filter(study=study_b).count() == 18


def test_two_endpoints_with_one_model_name_do_not_share_answers(study, allow_loopback_judges):
    with FakeOpenAI(latte_responder) as one, FakeOpenAI(latte_responder) as other:
        run_here(start(study, one.base_url))
        second = run_here(start(study, other.base_url))
        assert (one.hits, other.hits) == (18, 18)
        assert second.usage["cache_hits"] == 0
    assert JudgeResponse.objects.filter(study=study).count() == 36
