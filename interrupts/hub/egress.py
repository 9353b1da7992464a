"""Where Countersign may connect when it calls an agent.

An agent's URL is typed by whoever registers it, and a hostname is whatever
its DNS says at the moment of the call: either could point Countersign at
the cloud's metadata service or another internal address, with the agent's
credential and the thread's messages in the request. So the address is
checked when the connection is made, not when the URL is saved:
``agent_client`` resolves the host itself, checks every address it resolves
to against ``COUNTERSIGN_AGENT_NETWORKS``, and connects to the checked
address, so a second lookup cannot answer differently (DNS rebinding). TLS
still verifies the certificate against the URL's hostname and sends it as
SNI: httpcore passes the origin's host to ``start_tls``, not the address.

``COUNTERSIGN_AGENT_NETWORKS`` (comma-separated): networks in CIDR form (or
single addresses) that agents may be at, and ``!``-prefixed ones they may
not. With no plain entry every address is allowed but the excluded ones;
``ALWAYS_REFUSED`` is excluded whatever the setting says. For example
``10.0.0.0/8,!10.9.0.0/16`` or ``!127.0.0.0/8,!::1/128``.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
import typing

import httpcore
import httpx
from django.core.exceptions import ImproperlyConfigured

from ..conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Never an agent: link-local (and the cloud metadata services on it),
# the other metadata addresses, "this host" (0.0.0.0 reaches loopback on
# Linux), and multicast.
ALWAYS_REFUSED: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16",      # IPv4 link-local; AWS, GCP and Azure metadata at 169.254.169.254
    "fe80::/10",           # IPv6 link-local
    "fd00:ec2::254/128",   # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "0.0.0.0/8",           # unspecified / "this network"
    "::/128",              # IPv6 unspecified
    "224.0.0.0/4",         # IPv4 multicast
    "ff00::/8",            # IPv6 multicast
))


class AgentAddressRefused(Exception):
    """The agent's host is, or resolves to, an address agents may not be at; nothing was sent."""

    code = "AGENT_ADDRESS_REFUSED"

    def __init__(self, host: str, address: str, reason: str) -> None:
        self.host, self.address = host, address
        shown = host if host == address else f"{host} ({address})"
        self.message = (f"Countersign does not connect to {shown}: {reason}. Register the agent at another address, "
                        "or have the operator allow it in COUNTERSIGN_AGENT_NETWORKS.")
        super().__init__(self.message)


class AddressPolicy:
    """Which addresses agents may be at: ``allowed`` (empty: any) minus ``excluded`` and ``ALWAYS_REFUSED``."""

    def __init__(self, allowed: typing.Sequence[Network], excluded: typing.Sequence[Network]) -> None:
        self.allowed, self.excluded = tuple(allowed), tuple(excluded)

    @classmethod
    def parse(cls, text: str) -> AddressPolicy:
        allowed, excluded = [], []
        for entry in (item.strip() for item in text.split(",")):
            if not entry:
                continue
            target = excluded if entry.startswith("!") else allowed
            try:
                target.append(ipaddress.ip_network(entry.removeprefix("!").strip(), strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    f"COUNTERSIGN_AGENT_NETWORKS: {entry!r} is not a network; write CIDRs such as 10.0.0.0/8, "
                    "and !10.9.0.0/16 to exclude one, separated by commas.") from None
        return cls(allowed, excluded)

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` is refused, or None when an agent may be there."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
        for network in ALWAYS_REFUSED:
            if address.version == network.version and address in network:
                return f"{address} is in {network}, which is never an agent (link-local, metadata, unspecified " \
                       "or multicast)"
        for network in self.excluded:
            if address.version == network.version and address in network:
                return f"{address} is in {network}, excluded by COUNTERSIGN_AGENT_NETWORKS"
        if self.allowed and not any(address.version == n.version and address in n for n in self.allowed):
            return f"{address} is outside the networks COUNTERSIGN_AGENT_NETWORKS allows"
        return None


@functools.cache
def _policy(text: str) -> AddressPolicy:
    return AddressPolicy.parse(text)


def policy() -> AddressPolicy:
    """The policy of the current settings (parsed once per distinct value)."""
    return _policy(settings.COUNTERSIGN_AGENT_NETWORKS)


@functools.cache
def tls() -> ssl.SSLContext:
    """The TLS settings every agent client shares, built once per process.

    httpx builds a fresh context per client otherwise: 35–60 ms of loading
    the CA bundle on the event loop, blocking every socket and stream, for
    each run started (it was most of the decision-to-resume latency).
    """
    return httpx.create_ssl_context()


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the policy allows, by address."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        rules = policy()
        try:
            async with asyncio.timeout(timeout):
                found = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"Looking up {host} took longer than {timeout} s.") from None
        except OSError as problem:  # socket.gaierror: no such host, or DNS unreachable
            raise httpcore.ConnectError(f"Could not look up {host}: {problem}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in found))
        # Every address, not only the first: a name that also resolves to a
        # refused address is refused, whichever one the next lookup puts first.
        for address in addresses:
            if (reason := rules.refusal(address)) is not None:
                raise AgentAddressRefused(host, str(address), reason)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as problem:
                last = problem
        raise last or httpcore.ConnectError(f"{host} resolved to no address.")

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise AgentAddressRefused(path, path, "agents are called over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def agent_client(timeout: httpx.Timeout | float, *, verify: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An httpx client for calling agents: checked addresses only, no redirects, no proxies from the environment.

    Raises ``AgentAddressRefused`` (code ``AGENT_ADDRESS_REFUSED``) from a
    request whose host is, or resolves to, a refused address, before any
    byte is sent to it. ``verify`` replaces the shared TLS context (tests).
    """
    context = verify or tls()
    transport = httpx.AsyncHTTPTransport(verify=context)
    limits = httpx.Limits()
    # httpx 0.28 takes no network backend, so its pool is replaced by the
    # same pool with ours (the arguments AsyncHTTPTransport passes itself).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        network_backend=CheckedBackend(),
    )
    # A redirect would be a new request to wherever the agent says, and a
    # proxy (HTTP_PROXY from the environment) would make the lookup ours no longer.
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)
