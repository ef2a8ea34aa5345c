"""Which filter chain of a TLS listener a connection gets, from its SNI: the evaluator's view of
Envoy's `server_names` matching, for TLS virtual hosts and TCP proxies alike.

Envoy's order: the exact name, then the longest `*.suffix` wildcard (one that matches at least one
more label), then the chain without server names (the fallback certificate's, or a Gateway HTTPS
listener's without hostname). No SNI at all goes straight to that last chain. `chain_table` then
says what the chosen HTTP chain's route table answers for each Host, 421 for a misdirected one.
"""

from __future__ import annotations

from collections.abc import Sequence
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


# --- what an HTTP chain's route table answers ----------------------------------------------------

MISDIRECTED_STATUS = 421


@dataclass(frozen=True, slots=True)
class ChainTable:
    """The route table of one HTTPS filter chain: the virtual hosts it serves, and the Host
    domains its 421 virtual host takes (`*` among them: every Host not its own). Envoy picks
    among both by its domain precedence (exact, then the longest wildcard, then `*`)."""

    hosts: tuple[VirtualHost, ...]
    misdirected: tuple[str, ...] = ()


def tls_virtual_hosts(listener: Listener) -> list[VirtualHost]:
    """The virtual hosts that can have a filter chain, in the graph's order.

    A host without TLS has no certificate to present and is dropped (the graph builder never
    puts one here). `*` (a Gateway HTTPS listener without hostname) is no SNI name: it gets the
    chain without server names, unless the fallback certificate has that chain. A repeated
    hostname would make Envoy reject the listener for two chains with one match; like a repeated
    domain in a route table, the first one stays.
    """
    seen: set[str] = set()
    out = []
    for vh in listener.virtual_hosts:
        hostname = vh.hostname.lower()
        if vh.tls is None or hostname in seen:
            continue
        seen.add(hostname)
        out.append(vh)
    return out


def more_specific_hostnames(hostnames: list[str]) -> dict[str, tuple[str, ...]]:
    """For each wildcard `*.suffix`, the other hostnames that Envoy would match against a more
    specific domain (exact, or a longer wildcard) than it: they belong to other chains.

    Indexed by suffix, so the cost grows with the number of labels, not hosts times wildcards.
    """
    under: dict[str, list[str]] = {}
    for hostname in hostnames:
        labels = hostname.split(".")
        for i in range(1, len(labels)):
            under.setdefault(".".join(labels[i:]), []).append(hostname)
    out: dict[str, tuple[str, ...]] = {}
    for hostname in hostnames:
        if not hostname.startswith("*."):
            continue
        others = tuple(sorted(h for h in under.get(hostname[2:], ()) if h != hostname))
        if others:
            out[hostname] = others
    return out


def misdirected_domains(
    sni: str,
    members: Sequence[VirtualHost],
    shadowing: dict[str, tuple[str, ...]],
    served_names: set[str],
) -> tuple[str, ...]:
    """The domains the chain of server name `sni` (serving `members`) answers 421.

    One chain per host (Contour, `VirtualHost.sni` None): every other Host, and the more
    specific names a wildcard chain would otherwise take. A Gateway listener's chain follows
    the listener hostname rules of the Gateway API: a Host that another HTTPS listener of the
    port matches (exactly, or by a more specific wildcard) gets 421, so the client connects
    again with that name; a Host no other listener matches gets the listener's own answer, a
    404 unless one of its hosts takes it. `served_names` holds every name a chain of the port
    serves, `*` among them when a listener without hostname takes every other name: then no
    Host is unmatched and every other Host gets 421.
    """
    if members[0].sni is None:
        return ("*", *shadowing.get(sni, ()))
    own = {vh.hostname.lower() for vh in members}
    others = tuple(sorted(served_names - own - {"*"}))
    if sni != "*" and "*" in served_names:
        return ("*", *others)
    return others


def chain_table(listener: Listener, sni: str | None) -> ChainTable | None:
    """The route table a TLS connection with server name `sni` gets on `listener`, as the
    translator builds it; None when the connection gets no HTTP chain (a TCP proxy, or none)."""
    vhosts = tls_virtual_hosts(listener)
    groups: dict[str, list[VirtualHost]] = {}
    for vh in vhosts:
        groups.setdefault((vh.sni or vh.hostname).lower(), []).append(vh)
    chain_names = set(groups) | {p.hostname.lower() for p in listener.tcp_proxies if p.hostname}
    shadowing = more_specific_hostnames(sorted(chain_names))
    decision = select_sni(listener, sni)
    if decision.virtual_host is not None:
        key = (decision.virtual_host.sni or decision.virtual_host.hostname).lower()
        served_names = chain_names | {vh.hostname.lower() for vh in vhosts}
        members = groups[key]
        return ChainTable(
            tuple(members), misdirected_domains(key, members, shadowing, served_names)
        )
    if not decision.fallback:
        return None
    return fallback_table(vhosts, shadowing)


def fallback_table(
    vhosts: Sequence[VirtualHost], shadowing: dict[str, tuple[str, ...]]
) -> ChainTable | None:
    """The fallback-certificate chain's table: the hosts that enabled the installation's one
    fallback certificate (the first host's, should hosts name several), and 421 for every other
    Host, the more specific names under its wildcards included."""
    enabled = [vh for vh in vhosts if vh.tls is not None and vh.tls.fallback_secret]
    if not enabled:
        return None
    assert enabled[0].tls is not None
    secret = enabled[0].tls.fallback_secret
    served = [vh for vh in enabled if vh.tls is not None and vh.tls.fallback_secret == secret]
    names = {vh.hostname.lower() for vh in served}
    elsewhere = sorted({h for name in names for h in shadowing.get(name, ()) if h not in names})
    return ChainTable(tuple(served), ("*", *elsewhere))
