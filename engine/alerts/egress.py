"""Which addresses a receiver may reach: URL vetting at load time and an httpx transport that re-checks at send.

A receiver URL must be https (http only with `allow_http`) and every address its host resolves to must be
public (loopback, link-local, private, reserved, ... only with `allow_private_network`), so an alerts.yaml or a
DNS answer cannot turn gpuslo into a proxy to cloud metadata or internal services (SSRF).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from gpuslo.engine.errors import DeliveryError

Resolver = Callable[[str, int], Sequence[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_NETWORK_HINT = "set allow_private_network: true on this receiver to allow it"
ALLOW_HTTP_HINT = "set allow_http: true on this receiver to allow it"
# Most specific first: 127.0.0.1 is also "private" in ipaddress's tables, but "loopback" says more.
ADDRESS_CLASSES = (
    ("is_unspecified", "an unspecified address"), ("is_loopback", "a loopback address"),
    ("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
    ("is_reserved", "a reserved address"), ("is_private", "a private address"),
    ("is_site_local", "a site-local address"),
)


class ForbiddenTarget(DeliveryError):
    """A receiver URL or the address its host resolves to is not allowed; retrying will not help."""


@dataclass(frozen=True)
class TargetPolicy:
    """What one receiver may reach beyond public https hosts."""

    allow_private_network: bool = False
    allow_http: bool = False

    @property
    def schemes(self) -> frozenset[str]:
        return frozenset({"https", "http"} if self.allow_http else {"https"})


@dataclass(frozen=True)
class UrlCheck:
    """The verdict on one URL at load time: any `errors` refuse it, a `warning` (DNS failed) lets it load."""

    errors: tuple[str, ...] = ()
    warning: str | None = None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to now, in the resolver's order, each once. OSError if it does not."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def address_class(address: str) -> str | None:
    """Why `address` is not a public one ("a loopback address", ...), or None when it is public."""
    ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id is not part of the address
    suffix = ""
    # ::ffff:127.0.0.1 (IPv4-mapped) and 2002:7f00:1:: (6to4) carry an IPv4 address: that one decides.
    embedded = (ip.ipv4_mapped or ip.sixtofour) if isinstance(ip, ipaddress.IPv6Address) else None
    if embedded is not None:
        ip, suffix = embedded, f" (IPv4 {embedded})"
    for attribute, kind in ADDRESS_CLASSES:
        if getattr(ip, attribute, False):
            return kind + suffix
    if not ip.is_global:  # e.g. 100.64.0.0/10, shared address space behind carrier NAT
        return "a non-public address" + suffix
    return None


def is_address(host: str) -> bool:
    """Whether `host` is an IP literal (used as written, never looked up)."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def refused_addresses(addresses: Iterable[str]) -> str | None:
    """`resolves to X, a loopback address` for the first forbidden address, or None when all are public."""
    for address in addresses:
        kind = address_class(address)
        if kind is not None:
            return f"resolves to {address}, {kind}"
    return None


def check_url(url: str, shown: str, policy: TargetPolicy, resolver: Resolver) -> UrlCheck:
    """Vet a receiver URL at load time; `shown` is how messages name it (the reference for a secret URL)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:  # its message may quote the URL, which can be a secret
        return UrlCheck((f"url {shown} is not a valid URL",))
    if parsed.scheme not in ("http", "https"):
        return UrlCheck((f"url {shown}: scheme '{parsed.scheme}' is not allowed: url must start with https:// "
                         "(or http:// with allow_http: true)",))
    if not parsed.host:
        return UrlCheck((f"url {shown} has no host",))
    errors = []
    if parsed.scheme not in policy.schemes:
        errors.append(f"url {shown} uses plain http ({ALLOW_HTTP_HINT})")
    if not policy.allow_private_network:
        host, port = parsed.raw_host.decode("ascii"), parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            addresses = [host] if is_address(host) else list(resolver(host, port))
            if not addresses:
                raise OSError("no address")
        except OSError as exc:
            return UrlCheck(tuple(errors),
                            warning=f"url {shown}: its host does not resolve now ({exc.strerror or exc}); "
                                    "its addresses are checked again before every send")
        refused = refused_addresses(addresses)
        if refused:
            errors.append(f"url {shown} {refused} ({ALLOW_NETWORK_HINT})")
    return UrlCheck(tuple(errors))


class GuardedBackend(httpcore.NetworkBackend):
    """Resolves each host once, refuses it if any address is forbidden, and connects to the vetted addresses.

    Connecting to the very addresses that were checked (not to the name again) is what stops a DNS rebind
    between check and connect. httpcore still sends the name in the Host header and as TLS SNI, and verifies
    the certificate against it, because those come from the request URL, not from the socket.
    """

    def __init__(self, policy: TargetPolicy, resolver: Resolver):
        self.policy, self.resolver = policy, resolver
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        try:
            addresses = [host] if is_address(host) else list(self.resolver(host, port))
        except OSError as exc:  # DNS down or the name gone: may recover, so an ordinary connect error (retry)
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        refused = None if self.policy.allow_private_network else refused_addresses(addresses)
        if refused:
            raise ForbiddenTarget(f"refused to connect: {host} {refused} ({ALLOW_NETWORK_HINT})")
        return self._connect_first(addresses, port, timeout, local_address, socket_options)

    def _connect_first(self, addresses: list[str], port: int, timeout: float | None, local_address: str | None,
                       socket_options: Iterable[Any] | None) -> httpcore.NetworkStream:
        # One deadline for all addresses, so a name with many dead addresses cannot outlast the delivery lease.
        deadline = None if timeout is None else time.monotonic() + timeout
        error: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                return self.inner.connect_tcp(address, port, left, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error or httpcore.ConnectTimeout("connect timed out")

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise ForbiddenTarget("receivers are reached over TCP only")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport with its connection pool built on GuardedBackend, plus a scheme check per request."""

    def __init__(self, policy: TargetPolicy, resolver: Resolver):
        super().__init__()
        self.policy = policy
        # httpx offers no hook for the network backend, httpcore's pool does: replacing the pool keeps httpx's
        # request/response mapping and error translation. Environment proxies are not used (the client gets a
        # transport), on purpose: a proxy would resolve the name itself, outside this check.
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                             network_backend=GuardedBackend(policy, resolver))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in self.policy.schemes:
            hint = ALLOW_HTTP_HINT if request.url.scheme == "http" else "use https"
            raise ForbiddenTarget(f"refused to send: scheme '{request.url.scheme}' is not allowed ({hint})")
        return super().handle_request(request)


class GuardedClients:
    """One httpx client per target policy, made on first use; redirects are never followed."""

    def __init__(self, timeout_s: float, resolver: Resolver = system_resolver):
        self.timeout_s, self.resolver = timeout_s, resolver
        self._clients: dict[TargetPolicy, httpx.Client] = {}
        self._lock = threading.Lock()

    def get(self, policy: TargetPolicy) -> httpx.Client:
        with self._lock:
            if policy not in self._clients:
                self._clients[policy] = httpx.Client(transport=GuardedTransport(policy, self.resolver),
                                                     timeout=self.timeout_s, follow_redirects=False)
            return self._clients[policy]

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
