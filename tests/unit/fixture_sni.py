"""Fixture checks for what a TLS connection gets before any HTTP request: `sni.yaml`.

Each entry is `{sni, listener, expect}`: `sni` is the server name the client sends (null: none),
`listener` defaults to `ingress_https` (a plain TCP listener ignores `sni`), and `expect` holds
`chain` (`vhost`, `tcp`, `fallback` or `closed`), and for a TCP proxy `clusters` (a list of
`{cluster, weight}`, `ns/service/port` prefixes, in order) and `upstream` (a subset of `{protocol,
lb_strategy, tcp_health_check}` of each cluster), and `tls` (null: passed through; or a subset of
`tls_facts`), for a virtual host `host` (its hostname) and `tls`. `tls_facts` also serves
`requests.yaml`'s `expect.tls`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from turnout.compile_inputs import ListenerProtocol
from turnout.graph.build import CompileResult
from turnout.graph.model import RoutingGraph, TLSTermination
from turnout.graph.sni import SNIDecision, select_sni


def _secret_ref(graph: RoutingGraph, name: str | None) -> str | None:
    if name is None:
        return None
    secret = next((s for s in graph.secrets if s.name == name), None)
    return f"{secret.namespace}/{secret.secret}" if secret else f"(missing) {name}"


def _bundle_ref(graph: RoutingGraph, name: str | None) -> str | None:
    if name is None:
        return None
    bundle = next((b for b in graph.ca_bundles if b.name == name), None)
    return f"{bundle.namespace}/{bundle.secret}" if bundle else f"(missing) {name}"


def tls_facts(graph: RoutingGraph, tls: TLSTermination) -> dict[str, Any]:
    """A termination with Secrets and bundles as `ns/name`: `client_validation` (null or
    `{ca_secret, crl_secret, skip_verification, optional, crl_only_verify_leaf}`) and `fallback`
    (the fallback certificate's `ns/name`, or null)."""
    cv = tls.client_validation
    return {
        "secret": _secret_ref(graph, tls.secret),
        "min_version": tls.min_version,
        "max_version": tls.max_version,
        "client_validation": None
        if cv is None
        else {
            "ca_secret": _bundle_ref(graph, cv.ca_bundle),
            "crl_secret": _bundle_ref(graph, cv.crl_bundle),
            "skip_verification": cv.skip_verification,
            "optional": cv.optional,
            "crl_only_verify_leaf": cv.crl_only_verify_leaf,
        },
        "fallback": _secret_ref(graph, tls.fallback_secret),
    }


def _prefix(prefix: str, cluster: str) -> bool:
    return cluster == prefix or cluster.startswith(prefix + "/")


def check_sni(result: CompileResult, entry: dict[str, Any], subset: Any) -> list[str]:
    """Mismatches for one `sni.yaml` entry; `subset` is test_fixtures' `subset_mismatches`."""
    label = f"sni {entry.get('sni')!r}"
    listener_name = entry.get("listener", "ingress_https")
    listener = next((lst for lst in result.graph.listeners if lst.name == listener_name), None)
    expect = entry.get("expect") or {}
    if listener is None:
        if expect.get("chain", "closed") == "closed":
            return []
        return [f"{label}: the graph has no listener {listener_name}"]
    if listener.protocol is ListenerProtocol.TCP:
        # A plain TCP listener reads no SNI: its proxy without hostname takes every connection,
        # as the translator builds it.
        decision = SNIDecision(
            tcp_proxy=next((p for p in listener.tcp_proxies if not p.hostname), None)
        )
    else:
        decision = select_sni(listener, entry.get("sni"))
    if decision.virtual_host is not None:
        chain, tls = "vhost", decision.virtual_host.tls
    elif decision.tcp_proxy is not None:
        chain, tls = "tcp", decision.tcp_proxy.tls
    else:
        chain, tls = ("fallback" if decision.fallback else "closed"), None
    problems: list[str] = []
    if "chain" in expect and expect["chain"] != chain:
        problems.append(f"chain: expected {expect['chain']}, got {chain}")
    host = decision.virtual_host.hostname if decision.virtual_host is not None else None
    if "host" in expect and host != expect["host"]:
        problems.append(f"host: expected {expect['host']}, got {host}")
    proxy = decision.tcp_proxy
    if "clusters" in expect:
        got = [(wc.cluster, wc.weight) for wc in proxy.clusters] if proxy else []
        want = [(c["cluster"], c["weight"]) for c in expect["clusters"]]
        if len(got) != len(want) or any(
            not _prefix(wc, gc) or ww != gw for (wc, ww), (gc, gw) in zip(want, got, strict=False)
        ):
            problems.append(f"clusters: expected {want}, got {got}")
    if "upstream" in expect:
        for wc in proxy.clusters if proxy else ():
            cluster = result.graph.cluster(wc.cluster)
            if cluster is None:
                problems.append(f"upstream: the graph has no cluster {wc.cluster}")
                continue
            actual = {
                "protocol": cluster.protocol.value,
                "lb_strategy": cluster.lb_strategy.value,
                "tcp_health_check": asdict(cluster.tcp_health_check)
                if cluster.tcp_health_check
                else None,
            }
            problems.extend(subset(expect["upstream"], actual, f"upstream of {wc.cluster}"))
    if "tls" in expect:
        if expect["tls"] is None:
            if tls is not None:
                problems.append(f"tls: expected none, got {tls}")
        elif tls is None:
            problems.append(f"tls: expected {expect['tls']}, got none")
        else:
            problems.extend(subset(expect["tls"], tls_facts(result.graph, tls), "tls"))
    return [f"{label}:\n  " + "\n  ".join(problems)] if problems else []
