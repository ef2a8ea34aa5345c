"""No tenant object makes Envoy talk to the control plane: the reserved ports are refused on
every address of this host (not only loopback spellings), and DNS-named upstreams cannot lead
to them nor to this host or link-local addresses (issue 14 item 1)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from turnout import app, cli
from turnout.compile_inputs import CompileOptions, DnsAnswer
from turnout.config import ServeConfig
from turnout.graph.build import CompileResult
from turnout.graph.model import Cluster
from turnout.sources.local_addresses import HostWatcher, local_addresses, resolve_names
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

LOCAL = "10.20.30.40"  # an address of this host's interfaces, as the controller found it
SERVED = ServeConfig(paths=(), address="0.0.0.0")
OPTIONS = app.compile_options(SERVED)


def _compile(text: str, options: CompileOptions) -> CompileResult:
    parsed = parse_text(text, "test.yaml")
    assert not parsed.problems
    return app.compile_snapshot(Snapshot.of(parsed.objects), options)


def _slice_service(address: str, port: int) -> str:
    return f"""
---
apiVersion: v1
kind: Service
metadata: {{name: s, namespace: team-b}}
spec: {{ports: [{{port: 80, name: http}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: s-x, namespace: team-b, labels: {{kubernetes.io/service-name: s}}}}
addressType: IPv4
ports: [{{port: {port}, name: http}}]
endpoints: [{{addresses: ["{address}"]}}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: b, namespace: team-b}}
spec:
  virtualhost: {{fqdn: b.example.com}}
  routes: [{{services: [{{name: s, port: 80}}]}}]
"""


def _network_rg(address: str) -> str:
    return f"""
---
apiVersion: zalando.org/v1
kind: RouteGroup
metadata: {{name: rg, namespace: team-b}}
spec:
  hosts: [rg.example.com]
  backends: [{{name: net, type: network, address: "{address}"}}]
  routes: [{{pathSubtree: /, backends: [{{backendName: net}}]}}]
"""


def _external_name(name: str, port: int) -> str:
    return f"""
---
apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: team-b}}
spec: {{type: ExternalName, externalName: {name}, ports: [{{port: {port}, name: http}}]}}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: b, namespace: team-b}}
spec:
  virtualhost: {{fqdn: b.example.com}}
  routes: [{{services: [{{name: ext, port: {port}}}]}}]
"""


def _cluster(result: CompileResult, service: str) -> Cluster:
    (cluster,) = [c for c in result.graph.clusters if c.service == service]
    return cluster


def _status_text(result: CompileResult, name: str) -> str:
    (status,) = [s for s in result.statuses if s.ref.name == name]
    return str(status.body)


@pytest.mark.parametrize(
    ("port", "flag"),
    [(8001, "--admin-port"), (18000, "--xds-port"), (9901, "--envoy-admin-port")],
)
def test_endpoint_slice_at_a_local_non_loopback_address_is_refused(port: int, flag: str) -> None:
    """Under `--address 0.0.0.0` the control plane answers on every interface: an endpoint at
    one of this host's addresses on a reserved port is left out, and its HTTPProxy says so."""
    options = replace(OPTIONS, local_addresses=(LOCAL,))
    result = _compile(_slice_service(LOCAL, port), options)
    assert _cluster(result, "s").endpoints == ()
    assert f"{LOCAL}:{port}" in _status_text(result, "b") and flag in _status_text(result, "b")
    assert any("EndpointSlice team-b/s-x" in str(p) for p in result.problems)


def test_the_same_address_elsewhere_is_an_ordinary_backend() -> None:
    """Without the address among this host's, the port is no one's: the endpoint stays."""
    result = _compile(_slice_service(LOCAL, 9901), OPTIONS)
    assert [e.address for e in _cluster(result, "s").endpoints] == [LOCAL]


def test_routegroup_network_backend_at_a_local_address_is_refused() -> None:
    options = replace(OPTIONS, local_addresses=(LOCAL,))
    result = _compile(_network_rg(f"http://{LOCAL}:9901"), options)
    assert not [c for c in result.graph.clusters if c.service == "rg-net"]
    assert "--envoy-admin-port" in _status_text(result, "rg")


def test_dns_named_backend_on_a_reserved_port_is_refused_unresolved() -> None:
    """Any name can be made to resolve to this host: a reserved port is refused for every
    DNS-named backend, before and whatever it resolves to."""
    result = _compile(_network_rg("http://admin.example.com:9901"), OPTIONS)
    assert not [c for c in result.graph.clusters if c.service == "rg-net"]
    text = _status_text(result, "rg")
    assert "spec.backends[0].address" in text and "--envoy-admin-port" in text


def test_routegroup_network_backend_resolving_to_loopback_is_refused() -> None:
    options = replace(OPTIONS, dns_answers=(DnsAnswer("vm", ("127.0.0.1",)),))
    result = _compile(_network_rg("http://vm:9000"), options)
    cluster = _cluster(result, "rg-net")
    assert cluster.dns_name is None and cluster.endpoints == ()
    text = _status_text(result, "rg")
    assert '"vm" resolves to 127.0.0.1' in text
    assert result.dns_names == ("vm",)  # still tracked, so a later answer can lift it


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::1", LOCAL, "::1"])
def test_external_name_resolving_to_this_host_or_link_local_is_refused(address: str) -> None:
    options = replace(
        OPTIONS,
        enable_external_name_service=True,
        local_addresses=(LOCAL,),
        dns_answers=(DnsAnswer("db.example.com", ("203.0.113.5", address)),),
    )
    result = _compile(_external_name("db.example.com", 5432), options)
    assert _cluster(result, "ext").dns_name is None
    assert f"resolves to {address}" in _status_text(result, "b")


def test_external_name_resolving_elsewhere_stays_a_dns_cluster() -> None:
    options = replace(
        OPTIONS,
        enable_external_name_service=True,
        dns_answers=(DnsAnswer("db.example.com", ("203.0.113.5",)),),
    )
    result = _compile(_external_name("db.example.com", 5432), options)
    assert _cluster(result, "ext").dns_name == "db.example.com"


def test_external_name_on_a_reserved_port_is_refused() -> None:
    options = replace(OPTIONS, enable_external_name_service=True)
    result = _compile(_external_name("db.example.com", 18000), options)
    assert _cluster(result, "ext").dns_name is None
    assert "--xds-port" in _status_text(result, "b")


def test_resolver_seam_answers_and_errors() -> None:
    def resolve(name: str) -> tuple[str, ...]:
        if name == "gone.example.com":
            raise OSError("Name or service not known")
        return {"a.example.com": ("127.0.0.1",)}.get(name, ("192.0.2.9",))

    answers = resolve_names(["gone.example.com", "a.example.com"], resolve)
    assert answers == (
        DnsAnswer("a.example.com", ("127.0.0.1",)),
        DnsAnswer("gone.example.com", error="Name or service not known"),
    )
    assert "192.0.2.9" in local_addresses(resolve)  # the host name's addresses count


async def _noop() -> None:
    return None


def test_host_watcher_tracks_names_and_notices_a_changed_answer() -> None:
    current = {"a.example.com": ("203.0.113.1",)}
    watcher = HostWatcher(_noop, resolve=lambda name: current.get(name, ("192.0.2.9",)))
    assert watcher.track(["a.example.com"]) is True
    assert watcher.track(["a.example.com"]) is False  # answered: not resolved again
    current["a.example.com"] = ("127.0.0.1",)  # a rebinding between refreshes
    assert watcher.refresh() is True
    assert watcher.answers == (DnsAnswer("a.example.com", ("127.0.0.1",)),)
    assert watcher.track([]) is True and watcher.answers == ()


def test_admin_and_xds_default_to_loopback_and_envoy_connects_to_xds_address() -> None:
    args = cli.build_parser().parse_args(["serve", "--address", "0.0.0.0", "x.yaml"])
    config = cli.serve_config(args)
    assert (config.address, config.admin_address, config.xds_address) == (
        "0.0.0.0",
        "127.0.0.1",
        "127.0.0.1",
    )
    controller = app.build_controller(
        ServeConfig(paths=(), xds_address="127.0.0.3", run_envoy=False)
    )
    bootstrap = controller.bootstrap()
    (xds,) = bootstrap["static_resources"]["clusters"]  # type: ignore[index]
    assert "127.0.0.3" in str(xds)


def test_admin_off_loopback_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    args = cli.build_parser().parse_args(["serve", "--admin-address", "0.0.0.0", "x.yaml"])
    with caplog.at_level(logging.WARNING, logger="turnout"):
        cli.warn_exposed(cli.serve_config(args))
    (record,) = caplog.records
    assert "--admin-address 0.0.0.0" in record.getMessage()
