"""The judges' network policy (proxies.judges.network) without Django: which addresses are
refused, and that the check happens on the connecting socket, where DNS rebinding, redirects and
proxy variables cannot route around it. Real sockets to the fake server on loopback."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.network import NetworkPolicy, NetworkRefused, address_problem
from tests.proxies.judges.fake_openai import FakeOpenAI, Reply, yes_no_reply

YES_NO = ["yes", "no"]
LOOPBACK_ALLOWED = NetworkPolicy.build(allowed_networks=["127.0.0.0/8"])
SECRET = "sk-live-TOPSECRET-4242"


def backend(url, policy, **kwargs):
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAICompatibleBackend(url, "judge-model", policy=policy, **kwargs)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("address", "problem"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::127.0.0.1", "loopback"),  # IPv4-compatible
    ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ("169.254.169.254", "link-local"), ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of it
    ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.0.1", "private"),
    ("fd00::1", "private"), ("::ffff:10.0.0.1", "private"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("100.64.0.1", "not publicly routable"), ("192.0.2.1", "not publicly routable"),
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("2002:808:808::", None),
])
def test_non_public_addresses_are_named(address, problem):
    found = address_problem(ipaddress.ip_address(address))
    assert (found is None) if problem is None else (problem in found), found


def test_allowed_networks_admit_their_addresses_only():
    policy = NetworkPolicy.build(allowed_networks=["127.0.0.1/32", " ", "10.0.5.7/24"])
    allowed = [ipaddress.ip_address(a) for a in ("127.0.0.1", "::ffff:127.0.0.1", "10.0.5.200")]
    assert all(policy.address_refusal(a) is None for a in allowed)
    assert "loopback" in policy.address_refusal(ipaddress.ip_address("127.0.0.2"))
    assert "private" in policy.address_refusal(ipaddress.ip_address("10.0.6.1"))
    with pytest.raises(ValueError, match=r"'10.0.0.0/33' is not an address or a CIDR network"):
        NetworkPolicy.build(allowed_networks=["10.0.0.0/33"])


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/v1", "http://localhost:8000/v1", "http://[::1]/", "http://2130706433/",
    "http://0x7f000001/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest",
    "http://10.0.0.8/", "http://[fd00::8]/",
])
def test_check_url_refuses_every_spelling_of_an_internal_address(url):
    with pytest.raises(NetworkRefused, match="which judge requests may not reach; ask an admin"):
        NetworkPolicy(hint="ask an admin").check_url(url)


def test_a_refused_address_sends_nothing_and_is_not_retried():
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as server:
        guarded = backend(server.base_url, NetworkPolicy(), max_retries=3)
        result = guarded.score_options(["p"], YES_NO)[0]
        assert server.hits == 0
        assert result.source == "error"
        assert "refused: host '127.0.0.1' is a loopback address" in result.error
        assert guarded.usage.requests == 0 and guarded.usage.retries == 0
        # The same server once its network is allowed; and a library user's backend without a
        # policy keeps the old behaviour (no check at all).
        assert backend(server.base_url, LOOPBACK_ALLOWED).score_options(["p"], YES_NO)[0].ok
        assert backend(server.base_url, None).score_options(["p"], YES_NO)[0].ok
        assert server.hits == 2


def test_dns_rebinding_is_caught_on_the_connecting_socket(monkeypatch):
    """The name is public when checked ahead of time and loopback when the request leaves: the
    connection's own resolution is what counts, and it is refused."""
    real = socket.getaddrinfo
    answers = iter(["93.184.216.34"])  # the first lookup only; every later one: 127.0.0.1

    def rebinding(host, port, *args, **kwargs):
        if host == "judge.rebind.test":
            return real(next(answers, "127.0.0.1"), port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as server:
        url = f"http://judge.rebind.test:{server.httpd.server_address[1]}/v1"
        policy = NetworkPolicy()
        policy.check_url(url)  # public at configuration time
        result = backend(url, policy).score_options(["p"], YES_NO)[0]
        assert server.hits == 0
        assert "'judge.rebind.test' resolves to a loopback address" in result.error
        assert "127.0.0.1" not in result.error  # a name's internal address is not disclosed
        # With loopback allowed the guarded connection does reach the server by that name.
        assert backend(url, LOOPBACK_ALLOWED).score_options(["p"], YES_NO)[0].ok
        assert server.hits == 1


def test_the_configured_origin_is_trusted_and_nothing_beside_it():
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as server, \
            FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as other:
        policy = NetworkPolicy.build(trusted_urls=[server.base_url])
        assert backend(server.base_url + "/", policy).score_options(["p"], YES_NO)[0].ok
        # Same host, another port: not what the operator configured.
        refused = backend(other.base_url, policy).score_options(["p"], YES_NO)[0]
        assert "loopback" in refused.error
        assert (server.hits, other.hits) == (1, 0)


def test_allowed_hosts_are_checked_on_each_connection():
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as server:
        policy = NetworkPolicy.build(allowed_networks=["127.0.0.0/8"],
                                     allowed_hosts=["judge.example.org"])
        result = backend(server.base_url, policy).score_options(["p"], YES_NO)[0]
        assert "host '127.0.0.1' is not one of the hosts" in result.error
        assert server.hits == 0


def test_redirects_are_not_followed_under_a_policy():
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7), host="127.0.0.2") as target:
        hidden = f"{target.base_url}/chat/completions"
        with FakeOpenAI(lambda r: Reply(307, {"moved": True}, headers={"Location": hidden})
                        ) as redirecting:
            result = backend(redirecting.base_url, LOOPBACK_ALLOWED, max_retries=2
                             ).score_options(["p"], YES_NO)[0]
            assert result.source == "error"
            assert "HTTP 307 Temporary Redirect; redirects are not followed" in result.error
            assert "127.0.0.2" not in result.error
            assert (redirecting.hits, target.hits) == (1, 0)
            # Without a policy requests' default applies: the redirect is followed.
            assert backend(redirecting.base_url, None).score_options(["p"], YES_NO)[0].ok
            assert target.hits == 1


def test_proxy_variables_cannot_route_around_the_policy(monkeypatch):
    with FakeOpenAI(lambda r: yes_no_reply(r, 0.7)) as judge, \
            FakeOpenAI(lambda r: yes_no_reply(r, 0.7), host="127.0.0.2") as proxy:
        proxy_url = f"http://127.0.0.2:{proxy.httpd.server_address[1]}"
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy_url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        assert backend(judge.base_url, None).score_options(["a"], YES_NO)[0].ok
        assert (judge.hits, proxy.hits) == (0, 1)  # unguarded: through the proxy
        assert backend(judge.base_url, LOOPBACK_ALLOWED).score_options(["b"], YES_NO)[0].ok
        assert (judge.hits, proxy.hits) == (1, 1)  # guarded: straight to the judge


@pytest.mark.parametrize(("reply", "expected"), [
    (Reply(500, {"error": SECRET}), "HTTP 500 Internal Server Error"),
    (Reply(401, {"error": {"message": SECRET}}), "HTTP 401 Unauthorized"),
    (Reply(404, f"<html>{SECRET}</html>"), "HTTP 404 Not Found"),
    (Reply(200, f"<html>{SECRET}</html>"), "not JSON"),
    (Reply(200, {"config": SECRET}), "not a completion"),
    (Reply(200, {"choices": [{"message": {"content": "yes"}}],
                 "usage": {"prompt_tokens": SECRET}}), "could not be read (ValueError)"),
])
def test_errors_under_a_policy_never_quote_the_response(reply, expected):
    with FakeOpenAI(lambda r: reply) as server:
        result = backend(server.base_url, LOOPBACK_ALLOWED).score_options(["p"], YES_NO)[0]
    assert result.source == "error" and expected in result.error, result.error
    assert SECRET not in result.error and "TOPSECRET" not in result.error


def test_connection_failures_give_a_short_reason():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = backend(url, LOOPBACK_ALLOWED).score_options(["p"], YES_NO)[0]
    assert result.error.endswith("failed after 1 attempts: connection refused"), result.error
    assert "HTTPConnectionPool" not in result.error and "Errno" not in result.error
