"""Where judge requests may go: a network policy enforced on the connecting socket (no Django).

Whoever configures a judge chooses its `base_url`, and the process that sends the requests sits
inside the deployment's network. Unfenced, a `base_url` of `http://169.254.169.254/` (the cloud
metadata service) or `http://10.0.0.5:6379/` turns a judge into a way to reach internal
services (server-side request forgery). A `NetworkPolicy` says what is reachable:

- Addresses that are not public are refused unless they lie in `allowed_networks`: loopback,
  link-local (169.254.0.0/16, fe80::/10), private (RFC 1918, fc00::/7), multicast,
  unspecified, reserved and the other special-purpose ranges that are not globally routable,
  and IPv6 addresses that stand for such an IPv4 address (IPv4-mapped `::ffff:127.0.0.1`,
  IPv4-compatible `::127.0.0.1`, 6to4, NAT64 `64:ff9b::/96`). A name that resolves to several
  addresses is refused when any of them is.
- When `allowed_hosts` is not empty, only those host names (or literal addresses) are reached.
- `trusted_origins`, the (scheme, host, port) of endpoints an operator configured, skip both
  checks: the operator chose them, as they chose the key that goes with them.

`guarded_adapter` gives a `requests` adapter whose connections resolve the host once, check
every address and connect only to a checked one, then check the socket's peer address: the
decision is taken on the address actually connected to, when the request is sent, so a name
that is public when a run is configured and 127.0.0.1 when the request leaves (DNS rebinding)
is refused. `NetworkPolicy.check_url` runs the same checks ahead of time, for a clear message
when a judge is configured.

The policy does not cover proxies (the adapter refuses them; sessions using it set
`trust_env = False` so that HTTP(S)_PROXY cannot route around the check) or redirects (a backend
with a policy does not follow them).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, cast
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_PRIVATE = tuple(ipaddress.ip_network(net) for net in
                 ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class NetworkRefused(RuntimeError):  # noqa: N818 - reads as what happened, like ConnectionRefused
    """The policy refuses a host or address; the message says which and why, without secrets.

    Deliberately not an OSError: urllib3 and requests wrap and retry OSErrors, while a refusal is
    final and must reach the caller as it is. `unresolved` is True when the host name did not
    resolve (ahead-of-time checks only; at connect time that is an ordinary connection error).
    """

    def __init__(self, message: str, *, unresolved: bool = False) -> None:
        super().__init__(message)
        self.unresolved = unresolved


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, which is where its packets end up:
    IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), 6to4 (2002:aabb:ccdd::) and
    NAT64 (64:ff9b::a.b.c.d). None for IPv4 and for other IPv6 addresses."""
    if address.version != 6:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # not :: or ::1, which are IPv6's own
        return ipaddress.IPv4Address(int(address))
    return None


def address_problem(address: Address) -> str | None:
    """Why `address` is not public ("a loopback address", ...), or None when it is public.

    Explicit checks come first so the reason is the most specific one; `is_global` then catches
    the remaining special-purpose ranges (100.64.0.0/10, documentation, benchmarking, ...).
    """
    inner = embedded_ipv4(address)
    if inner is not None:
        return address_problem(inner)
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if any(address in network for network in _PRIVATE):
        return "a private address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "an address that is not publicly routable"
    return None


def _ip(text: str) -> Address:
    """An address from getaddrinfo's sockaddr (IPv6 may carry a %zone)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def _literal(host: str) -> Address | None:
    try:
        return _ip(host)
    except ValueError:
        return None


def url_origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, lower-case host, port with the scheme's default) of an http(s) URL, or None."""
    parts = urlsplit(str(url))
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:  # a port that is not a number or out of range
        return None
    return scheme, parts.hostname.lower(), port


@dataclass(frozen=True)
class NetworkPolicy:
    """Which hosts and addresses judge requests may reach (see the module doc).

    `allowed_networks`: non-public networks that are reachable anyway (an internal vLLM
    server). `allowed_hosts`: when not empty, the only host names reachable. `trusted_origins`:
    (scheme, host, port) exempt from both checks. `show_response_bodies`: whether error
    messages may quote what a failing endpoint answered (off: status code and reason phrase
    only, since those messages are shown to whoever configured the judge). `hint`: appended to
    address refusals, to say how an operator allows a network.
    """

    allowed_networks: tuple[Network, ...] = ()
    allowed_hosts: frozenset[str] = frozenset()
    trusted_origins: frozenset[tuple[str, str, int]] = frozenset()
    show_response_bodies: bool = False
    hint: str = ""

    @classmethod
    def build(cls, *, allowed_networks: Iterable[str] = (), allowed_hosts: Iterable[str] = (),
              trusted_urls: Iterable[str] = (), show_response_bodies: bool = False,
              hint: str = "") -> NetworkPolicy:
        """A policy from plain strings (settings); ValueError names an entry that is not an
        address or CIDR network. A host address in a network (10.0.5.7/24) means its network."""
        networks = []
        for entry in allowed_networks:
            text = str(entry).strip()
            if not text:
                continue
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ValueError(f"{entry!r} is not an address or a CIDR network "
                                 "(e.g. 10.0.5.0/24 or fd00::/8)") from None
        hosts = frozenset(str(h).strip().strip("[]").lower() for h in allowed_hosts
                          if str(h).strip())
        origins = frozenset(origin for origin in (url_origin(url) for url in trusted_urls if url)
                            if origin is not None)
        return cls(tuple(networks), hosts, origins, show_response_bodies, hint)

    def trusts(self, scheme: str, host: str, port: int) -> bool:
        return (scheme.lower(), host.strip("[]").lower(), int(port)) in self.trusted_origins

    def trusts_url(self, url: str) -> bool:
        origin = url_origin(url)
        return origin is not None and origin in self.trusted_origins

    def address_refusal(self, address: Address) -> str | None:
        """Why the policy refuses `address` (None: reachable). An allowed network admits an
        address directly or through the IPv4 address it stands for."""
        candidates = [address]
        inner = embedded_ipv4(address)
        if inner is not None:
            candidates.append(inner)
        if any(candidate in network for candidate in candidates
               for network in self.allowed_networks):
            return None
        return address_problem(address)

    def _refuse(self, host: str, address: Address, problem: str) -> NetworkRefused:
        # A name's resolved address is left out: for an internal name it is internal knowledge.
        verb = "is" if _literal(host) is not None else "resolves to"
        hint = f"; {self.hint}" if self.hint else ""
        return NetworkRefused(f"host {host!r} {verb} {problem}, which judge requests may not "
                              f"reach{hint}")

    def check_host_name(self, host: str) -> None:
        host = host.strip("[]").lower()
        if self.allowed_hosts and host not in self.allowed_hosts:
            raise NetworkRefused(f"host {host!r} is not one of the hosts judge requests may "
                                 "reach")

    def check_address(self, scheme: str, host: str, port: int, address: Address) -> None:
        """NetworkRefused unless a connection for (scheme, host, port) may go to `address`."""
        if self.trusts(scheme, host, port):
            return
        problem = self.address_refusal(address)
        if problem is not None:
            raise self._refuse(host, address, problem)

    def resolve(self, scheme: str, host: str, port: int, *, family: int = socket.AF_UNSPEC
                ) -> list[tuple[Any, ...]]:
        """getaddrinfo's answers for a TCP connection to (host, port), every address checked.

        NetworkRefused when the host name or any address is refused (a name with one forbidden
        address is refused whole, so no fallback order can reach it); socket.gaierror when the
        name does not resolve.
        """
        host = host.strip("[]")
        trusted = self.trusts(scheme, host, port)
        if not trusted:
            self.check_host_name(host)
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
        if not trusted:
            for info in infos:
                self.check_address(scheme, host, port, _ip(str(info[4][0])))
        return infos

    def check_url(self, url: str) -> None:
        """The connect-time checks ahead of time, for a message when a judge is configured:
        NetworkRefused (with `unresolved` when the name does not resolve). A trusted origin is
        not even resolved: the operator's names may resolve on the workers' hosts only."""
        origin = url_origin(url)
        if origin is None:
            raise NetworkRefused(f"{url!r} is not an http(s) URL with a host")
        if origin in self.trusted_origins:
            return
        scheme, host, port = origin
        try:
            self.resolve(scheme, host, port)
        except (socket.gaierror, UnicodeError):
            raise NetworkRefused(f"host {host!r} does not resolve", unresolved=True) from None


# --- requests / urllib3 plumbing --------------------------------------------------------------


def _connect(policy: NetworkPolicy, scheme: str, host: str, port: int, timeout: Any,
             source_address: Any, socket_options: Any, default_timeout: Any, family: int
             ) -> socket.socket:
    """urllib3's create_connection, with the policy between resolving and connecting."""
    error: OSError | None = None
    for af, socktype, proto, _canonical, sockaddr in policy.resolve(scheme, host, port,
                                                                    family=family):
        sock = None
        try:
            sock = socket.socket(af, socktype, proto)
            for option in socket_options or ():
                sock.setsockopt(*option)
            if timeout is not default_timeout:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            # The address connected to was checked above; checking the peer itself keeps the
            # guarantee on the socket whatever changes in the loop.
            policy.check_address(scheme, host, port, _ip(sock.getpeername()[0]))
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                sock.close()
        except NetworkRefused:
            if sock is not None:
                sock.close()
            raise
    raise error or OSError("getaddrinfo returned no address")


@cache
def _connection_bases() -> tuple[type, type]:
    """urllib3 connection classes whose sockets go through `_connect` (built on first use so
    importing this module does not import urllib3)."""
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
    from urllib3.util.connection import allowed_gai_family
    from urllib3.util.timeout import _DEFAULT_TIMEOUT

    class GuardedConnectionMixin:
        judge_policy: NetworkPolicy
        judge_scheme = "http"

        def _new_conn(self) -> socket.socket:
            # As urllib3's HTTPConnection._new_conn, which this replaces; NetworkRefused passes
            # through unwrapped (not an OSError: never retried, never turned into a
            # "connection failed"). Mixed only into HTTPConnection subclasses (below).
            conn = cast(HTTPConnection, self)
            try:
                sock = _connect(self.judge_policy, self.judge_scheme, conn._dns_host, conn.port,
                                conn.timeout, conn.source_address, conn.socket_options,
                                _DEFAULT_TIMEOUT, allowed_gai_family())
            except socket.gaierror as exc:
                raise NameResolutionError(conn.host, conn, exc) from exc
            except TimeoutError as exc:
                raise ConnectTimeoutError(
                    conn, f"Connection to {conn.host} timed out. "
                          f"(connect timeout={conn.timeout})") from exc
            except OSError as exc:
                raise NewConnectionError(
                    conn, f"Failed to establish a new connection: {exc}") from exc
            sys.audit("http.client.connect", conn, conn.host, conn.port)
            return sock

    class GuardedHTTPConnection(GuardedConnectionMixin, HTTPConnection):
        judge_scheme = "http"

    class GuardedHTTPSConnection(GuardedConnectionMixin, HTTPSConnection):
        judge_scheme = "https"

    return GuardedHTTPConnection, GuardedHTTPSConnection


@lru_cache(maxsize=64)
def _pool_classes(policy: NetworkPolicy) -> dict[str, type]:
    """Connection-pool classes bound to one policy (urllib3 instantiates connections from a
    pool's `ConnectionCls` with fixed arguments, so the policy travels as a class attribute)."""
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    http, https = _connection_bases()
    return {
        "http": type("GuardedHTTPConnectionPool", (HTTPConnectionPool,), {
            "ConnectionCls": type("GuardedHTTPConnection", (http,), {"judge_policy": policy})}),
        "https": type("GuardedHTTPSConnectionPool", (HTTPSConnectionPool,), {
            "ConnectionCls": type("GuardedHTTPSConnection", (https,),
                                  {"judge_policy": policy})}),
    }


def guarded_adapter(policy: NetworkPolicy, **adapter_kwargs: Any):
    """A `requests` HTTPAdapter whose every connection obeys `policy`; mount it for http:// and
    https:// on a session with `trust_env = False`. Proxies are refused: through one, the
    socket's peer would be the proxy, not the judge."""
    from requests.adapters import HTTPAdapter

    class GuardedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = _pool_classes(policy)

        def proxy_manager_for(self, proxy: str, **kwargs: Any):
            raise NetworkRefused("judge requests do not go through proxies under a network "
                                 "policy")

    return GuardedAdapter(**adapter_kwargs)
