"""Long tcpproxy include and delegation chains compile without recursion limits, in linear time."""

from __future__ import annotations

import time
from typing import Any

from tests.builders import kube_object, service
from turnout.app import compile_snapshot
from turnout.objects import KubeObject
from turnout.store import Snapshot

LENGTH = 3000


def _obj(api: str, kind: str, name: str, spec: dict[str, Any]) -> KubeObject:
    return kube_object(api, kind, name, spec=spec)


SERVICE = service("db", port=443)


def _tcp_proxies(objects: list[KubeObject]) -> dict[str, Any]:
    started = time.perf_counter()
    result = compile_snapshot(Snapshot.of(objects))
    assert time.perf_counter() - started < 20
    https = next(lst for lst in result.graph.listeners if lst.name == "ingress_https")
    return {p.hostname: p for p in https.tcp_proxies}


def _chain(api: str, kind: str, link: str) -> list[KubeObject]:
    """A passthrough root whose tcpproxy reaches the service through LENGTH objects, each
    naming the next under `link`."""
    objects = [
        SERVICE,
        _obj(
            api,
            kind,
            "root",
            {
                "virtualhost": {"fqdn": "db.example.com", "tls": {"passthrough": True}},
                "tcpproxy": {link: {"name": "p0"}},
            },
        ),
    ]
    objects += [
        _obj(api, kind, f"p{i}", {"tcpproxy": {link: {"name": f"p{i + 1}"}}}) for i in range(LENGTH)
    ]
    objects.append(
        _obj(api, kind, f"p{LENGTH}", {"tcpproxy": {"services": [{"name": "db", "port": 443}]}})
    )
    return objects


def test_a_long_httpproxy_include_chain() -> None:
    proxies = _tcp_proxies(_chain("projectcontour.io/v1", "HTTPProxy", "include"))
    assert [wc.cluster.split("/")[1] for wc in proxies["db.example.com"].clusters] == ["db"]


def test_a_long_ingressroute_delegation_chain() -> None:
    proxies = _tcp_proxies(_chain("contour.heptio.com/v1beta1", "IngressRoute", "delegate"))
    assert [wc.cluster.split("/")[1] for wc in proxies["db.example.com"].clusters] == ["db"]
