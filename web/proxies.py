"""The client's address behind trusted reverse proxies (`trusted_proxies`), for audit, rate limits and bootstrap.

Without it, every request behind a proxy carries the proxy's address: the audit log names the proxy, rate limits
lump all clients together, and a proxy on the loopback interface makes every remote client look local to the
bootstrap mode. X-Forwarded-For is read only when the peer is a trusted proxy, from the right, skipping trusted
addresses (what nginx's `real_ip_recursive` does), so a client cannot choose the address it is recorded under.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from gpuslo.engine.errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def trusted_networks(setting: str) -> tuple[Network, ...]:
    """Parse `trusted_proxies`: comma-separated addresses or CIDR networks; empty: trust no proxy."""
    networks = []
    for part in (p.strip() for p in setting.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise ConfigError(f"setting 'trusted_proxies': {part!r} is not an IP address or network ({exc})") from exc
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class TrustedProxies:
    """WSGI middleware: REMOTE_ADDR and the URL scheme as the nearest untrusted hop sent them."""

    def __init__(self, app: WsgiApp, networks: tuple[Network, ...]):
        self._app = app
        self._networks = networks

    def _trusted(self, text: str) -> bool:
        address = _address(text)
        return address is not None and any(address in network for network in self._networks)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        peer = environ.get("REMOTE_ADDR", "")
        if self._networks and self._trusted(peer):
            hops = [h.strip() for h in environ.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
            client = peer
            for hop in reversed(hops):
                if _address(hop) is None:
                    break  # garbage in the chain: stop at the last address a trusted proxy vouched for
                client = hop
                if not self._trusted(hop):
                    break
            environ["gpuslo.proxy_addr"] = peer
            environ["REMOTE_ADDR"] = client
            scheme = environ.get("HTTP_X_FORWARDED_PROTO", "").split(",")[-1].strip().lower()
            if scheme in ("http", "https"):
                environ["wsgi.url_scheme"] = scheme
        return self._app(environ, start_response)
