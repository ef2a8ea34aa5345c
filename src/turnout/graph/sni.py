"""Which filter chain of a TLS listener a connection gets, from its SNI: the evaluator's view of
Envoy's `server_names` matching, for TLS virtual hosts and TCP proxies alike.

Envoy's order: the exact name, then the longest `*.suffix` wildcard (one that matches at least one
more label), then the chain without server names, which turnout emits only for the fallback
certificate. No SNI at all goes straight to that last chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.graph.model import Listener, TCPProxy, VirtualHost


@dataclass(frozen=True, slots=True)
class SNIDecision:
    """The virtual host or TCP proxy whose chain takes the connection; `fallback` when it is the
    fallback-certificate chain (then `virtual_host` is None: the Host header picks among the
    hosts that enabled it). Nothing set: the connection is closed."""

    virtual_host: VirtualHost | None = None
    tcp_proxy: TCPProxy | None = None
    fallback: bool = False


def select_sni(listener: Listener, sni: str | None) -> SNIDecision:
    chains: dict[str, VirtualHost | TCPProxy] = {}
    # A Gateway listener's hosts share the chain of its server name (`VirtualHost.sni`); the
    # listener's own host stands for the chain.
    for vh in sorted(
        listener.virtual_hosts, key=lambda v: v.sni is not None and v.sni != v.hostname
    ):
        if vh.tls is not None:
            chains.setdefault((vh.sni or vh.hostname).lower(), vh)
    for proxy in listener.tcp_proxies:
        if proxy.hostname:
            chains.setdefault(proxy.hostname.lower(), proxy)
    chosen: VirtualHost | TCPProxy | None = None
    if sni:
        name = sni.lower().rstrip(".")
        chosen = chains.get(name)
        if chosen is None:
            best = -1
            for pattern, chain in chains.items():
                suffix = pattern[1:]
                if (
                    pattern.startswith("*.")
                    and name.endswith(suffix)
                    and len(name) > len(suffix)
                    and len(suffix) > best
                ):
                    chosen, best = chain, len(suffix)
    fallback = any(vh.tls is not None and vh.tls.fallback_secret for vh in listener.virtual_hosts)
    if chosen is None and not fallback:
        chosen = chains.get("*")  # a Gateway HTTPS listener without hostname
    if isinstance(chosen, VirtualHost):
        return SNIDecision(virtual_host=chosen)
    if isinstance(chosen, TCPProxy):
        return SNIDecision(tcp_proxy=chosen)
    return SNIDecision(fallback=fallback)
