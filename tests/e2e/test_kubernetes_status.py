"""`turnout serve --kubernetes` against the fake API server: status written back to every
dialect's objects in its API's shape, never rewritten unchanged, objects of other classes left
alone, and two replicas electing one writer that a standby replaces when it is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import free_port
from tests.e2e.serve import stop_serve
from tests.fake_apiserver import ApiError, FakeApiServer
from turnout.compile_inputs import DEFAULT_GATEWAY_CONTROLLER_NAME as OURS
from turnout.envoy.process import envoy_binary
from turnout.envoy.state import StateDir

THEIRS = "example.com/other-controller"
LB_HOST = "lb.example.net"
NS = "app"
# Short election timings so a takeover is measured in seconds (client-go's rules otherwise).
FAST_ELECTION = (
    "--leader-election-lease-duration",
    "3",
    "--leader-election-renew-deadline",
    "2",
    "--leader-election-retry-period",
    "0.5",
)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.5) as server:
        for name in (NS, "turnout-system"):
            server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield server


def obj(api: str, kind: str, name: str, spec: Any, namespace: str | None = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def service(name: str = "web") -> dict[str, Any]:
    return obj("v1", "Service", name, {"ports": [{"name": "http", "port": 80}]})


def proxy(name: str, fqdn: str, **extra: Any) -> dict[str, Any]:
    spec = {"virtualhost": {"fqdn": fqdn}, "routes": [{"services": [{"name": "web", "port": 80}]}]}
    return obj("projectcontour.io/v1", "HTTPProxy", name, {**spec, **extra})


def status_of(fake: FakeApiServer, api: str, kind: str, name: str, ns: str = NS) -> Any:
    try:
        return fake.get(api, kind, name, ns).get("status")
    except ApiError:
        return None


def eventually(check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        time.sleep(0.1)


def metric(admin_port: int, name: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{admin_port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@contextlib.contextmanager
def replica(
    fake: FakeApiServer,
    *,
    envoy: bool,
    identity: str,
    extra: Sequence[str] = (),
    ports: Mapping[str, int] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`turnout serve --kubernetes` as a child process (its own Envoy unless `envoy` is
    False); yields the process and its admin port once it serves /metrics. `ports`: port flags
    to set rather than pick at random (`--xds-port`, `--http-port`)."""
    admin = free_port()
    with tempfile.TemporaryDirectory(prefix="turnout-kube-") as tmp:
        cmd = [sys.executable, "-m", "turnout", "serve", "--kubernetes"]
        cmd += ["--kubeconfig", str(fake.kubeconfig(Path(tmp) / "kubeconfig"))]
        for flag in ("--http-port", "--https-port", "--xds-port", "--envoy-admin-port"):
            cmd += [flag, str((ports or {}).get(flag) or free_port())]
        cmd += ["--admin-port", str(admin), "--state-dir", tmp, "--no-demo-backends"]
        cmd += ["--log-level", "warning", *([] if envoy else ["--no-envoy"]), *extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": identity}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            eventually(
                lambda: proc.poll() is not None or metric(admin, "turnout_leader") is not None,
                60,
                "turnout serving /metrics",
            )
            assert proc.poll() is None, proc.communicate()[0].decode()
            yield proc, admin
        finally:
            if proc.poll() is None:
                stop_serve(proc)
            # A turnout killed with SIGKILL leaves its Envoy serving (by design): stop it.
            pid = StateDir(Path(tmp)).read_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def every_dialect(gateway_port: int) -> list[dict[str, Any]]:
    web = {"name": "web", "port": 80}
    theirs_parent = {
        "parentRef": {"name": "elsewhere"},
        "controllerName": THEIRS,
        "conditions": [
            {
                "type": "Accepted",
                "status": "True",
                "reason": "Accepted",
                "message": "theirs",
                "lastTransitionTime": "2020-01-01T00:00:00Z",
            }
        ],
    }
    route = obj(
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        "hr",
        {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [web]}]},
    )
    route["status"] = {"parents": [theirs_parent]}
    return [
        service(),
        proxy("hp", "hp.example.com"),
        obj(
            "contour.heptio.com/v1beta1",
            "IngressRoute",
            "ir",
            {
                "virtualhost": {"fqdn": "ir.example.com"},
                "routes": [{"match": "/", "services": [web]}],
            },
        ),
        obj(
            "contour.heptio.com/v1alpha1",
            "Route",
            "r",
            {
                "host": "r.example.com",
                "routes": [
                    {"pathPrefix": "/", "upstreams": [{"serviceName": "web", "servicePort": 80}]}
                ],
            },
        ),
        obj(
            "zalando.org/v1",
            "RouteGroup",
            "rg",
            {
                "hosts": ["rg.example.com"],
                "backends": [
                    {"name": "b", "type": "service", "serviceName": "web", "servicePort": 80}
                ],
                "defaultBackends": [{"backendName": "b"}],
            },
        ),
        obj(
            "networking.k8s.io/v1",
            "Ingress",
            "ing",
            {
                "ingressClassName": "turnout",
                "rules": [
                    {
                        "host": "ing.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "web", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ],
            },
        ),
        obj(
            "gateway.networking.k8s.io/v1",
            "GatewayClass",
            "turnout",
            {"controllerName": OURS},
            namespace=None,
        ),
        obj(
            "gateway.networking.k8s.io/v1",
            "Gateway",
            "gw",
            {
                "gatewayClassName": "turnout",
                "listeners": [{"name": "http", "port": gateway_port, "protocol": "HTTP"}],
            },
        ),
        route,
        # Another controller's objects: no status from turnout.
        obj(
            "networking.k8s.io/v1",
            "Ingress",
            "other-ing",
            {
                "ingressClassName": "other",
                "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
            },
        ),
        proxy("other-hp", "other.example.com", ingressClassName="other"),
        obj(
            "gateway.networking.k8s.io/v1",
            "GatewayClass",
            "other",
            {"controllerName": THEIRS},
            namespace=None,
        ),
    ]


def condition(status: Any, type_: str) -> dict[str, Any]:
    found = [c for c in (status or {}).get("conditions", []) if c.get("type") == type_]
    assert found, f"no {type_} condition in {status}"
    return dict(found[0])


def programmed(fake: FakeApiServer) -> bool:
    status = status_of(fake, "gateway.networking.k8s.io/v1", "Gateway", "gw")
    return bool(status) and condition(status, "Programmed")["status"] == "True"


def test_status_in_each_apis_shape_written_once(fake: FakeApiServer) -> None:
    for o in every_dialect(free_port()):
        fake.create(o)
    flags = ("--ingress-status-address", LB_HOST)
    with replica(fake, envoy=True, identity="only", extra=flags) as (_, admin):
        # Programmed is True only once Envoy acknowledged the Gateway's listener.
        eventually(lambda: programmed(fake), 60, "Gateway Programmed after Envoy's ACK")
        eventually(
            lambda: status_of(fake, "zalando.org/v1", "RouteGroup", "rg"), 10, "all statuses"
        )
        hp = status_of(fake, "projectcontour.io/v1", "HTTPProxy", "hp")
        assert (hp["currentStatus"], hp["description"]) == ("valid", "Valid HTTPProxy")
        assert condition(hp, "Valid")["status"] == "True"
        assert condition(hp, "Valid")["lastTransitionTime"]
        ir = status_of(fake, "contour.heptio.com/v1beta1", "IngressRoute", "ir")
        assert ir["currentStatus"] == "valid"
        r = status_of(fake, "contour.heptio.com/v1alpha1", "Route", "r")
        assert (r["currentStatus"], r["errors"]) == ("Valid", [])
        assert r["lastProcessTime"]
        rg = status_of(fake, "zalando.org/v1", "RouteGroup", "rg")
        assert condition(rg, "Accepted")["status"] == "True"
        assert rg["loadBalancer"] == {"routegroup": [{"hostname": LB_HOST}]}
        ing = status_of(fake, "networking.k8s.io/v1", "Ingress", "ing")
        assert ing["loadBalancer"] == {"ingress": [{"hostname": LB_HOST}]}
        gc = status_of(fake, "gateway.networking.k8s.io/v1", "GatewayClass", "turnout", "")
        assert condition(gc, "Accepted")["status"] == "True"
        gw = status_of(fake, "gateway.networking.k8s.io/v1", "Gateway", "gw")
        assert condition(gw, "Accepted")["observedGeneration"] == 1
        assert [listener["name"] for listener in gw["listeners"]] == ["http"]
        hr = status_of(fake, "gateway.networking.k8s.io/v1", "HTTPRoute", "hr")
        assert [p["controllerName"] for p in hr["parents"]] == [THEIRS, OURS]
        assert hr["parents"][0]["conditions"][0]["message"] == "theirs"  # kept as it was
        assert condition(hr["parents"][1], "Accepted")["status"] == "True"
        # Another class's objects get no status.
        assert status_of(fake, "networking.k8s.io/v1", "Ingress", "other-ing") is None
        assert status_of(fake, "projectcontour.io/v1", "HTTPProxy", "other-hp") is None
        assert status_of(fake, "gateway.networking.k8s.io/v1", "GatewayClass", "other", "") is None

        # A recompile that changes no status writes nothing.
        time.sleep(1.0)
        writes = len(fake.status_writes())
        compiles = metric(admin, "turnout_compiles_total") or 0
        fake.create(service("unrelated"))
        eventually(lambda: (metric(admin, "turnout_compiles_total") or 0) > compiles, 10)
        time.sleep(1.0)
        assert len(fake.status_writes()) == writes
        # A change rewrites the changed object only.
        current = fake.get("projectcontour.io/v1", "HTTPProxy", "hp", NS)
        fake.update(
            {
                **current,
                "spec": {
                    **current["spec"],
                    "routes": [{"services": [{"name": "missing", "port": 80}]}],
                },
            }
        )
        eventually(
            lambda: (
                status_of(fake, "projectcontour.io/v1", "HTTPProxy", "hp")["currentStatus"]
                == "invalid"
            ),
            10,
            "the changed HTTPProxy's status",
        )
        time.sleep(1.0)
        assert [w.path.split("/")[-2] for w in fake.status_writes()[writes:]] == ["hp"]


def leader_of(admins: dict[str, int]) -> list[str]:
    return [name for name, port in admins.items() if metric(port, "turnout_leader") == 1]


def test_two_replicas_elect_one_writer_and_a_standby_takes_over(fake: FakeApiServer) -> None:
    fake.create(service())
    fake.create(proxy("first", "first.example.com"))
    with (
        replica(fake, envoy=True, identity="replica-a", extra=FAST_ELECTION) as (proc_a, admin_a),
        replica(fake, envoy=False, identity="replica-b", extra=FAST_ELECTION) as (proc_b, admin_b),
    ):
        admins = {"replica-a": admin_a, "replica-b": admin_b}
        procs = {"replica-a": proc_a, "replica-b": proc_b}
        leaders = eventually(lambda: leader_of(admins), 20, "a leader")
        time.sleep(2.0)  # several retry periods: still exactly one
        assert leader_of(admins) == leaders and len(leaders) == 1
        lease = fake.get("coordination.k8s.io/v1", "Lease", "turnout", "turnout-system")
        assert lease["spec"]["holderIdentity"] == leaders[0]
        eventually(lambda: status_of(fake, "projectcontour.io/v1", "HTTPProxy", "first"), 10)
        # One writer: the status was written once.
        assert len(fake.status_writes("httpproxies")) == 1

        killed = leaders[0]
        standby = next(name for name in admins if name != killed)
        procs[killed].send_signal(signal.SIGKILL)
        procs[killed].wait()
        killed_at = time.monotonic()
        fake.create(proxy("second", "second.example.com"))
        eventually(
            lambda: status_of(fake, "projectcontour.io/v1", "HTTPProxy", "second"),
            15,
            "the standby writing status",
        )
        took = time.monotonic() - killed_at
        assert leader_of({standby: admins[standby]}) == [standby]
        lease = fake.get("coordination.k8s.io/v1", "Lease", "turnout", "turnout-system")
        assert lease["spec"]["holderIdentity"] == standby
        assert lease["spec"]["leaseTransitions"] == 1
        # The lease duration (3 s) from the last renewal, which was at most one retry period
        # (0.5 s) before the kill, plus the standby's own retry period and a write.
        assert took < 3 + 0.5 + 0.5 + 1.0, f"took {took:.1f} s"
        print(f"takeover after SIGKILL: {took:.2f} s (lease 3 s, retry 0.5 s)")


def envoy_lb_service(*entries: dict[str, str]) -> dict[str, Any]:
    svc = obj("v1", "Service", "envoy", {"type": "LoadBalancer"}, namespace="turnout-system")
    svc["spec"]["ports"] = [{"name": "http", "port": 80}]
    return {**svc, "status": {"loadBalancer": {"ingress": list(entries)}}}


def ingress_lb(fake: FakeApiServer) -> Any:
    return (status_of(fake, "networking.k8s.io/v1", "Ingress", "ing") or {}).get("loadBalancer")


def test_ingress_status_follows_the_envoy_services_load_balancer(fake: FakeApiServer) -> None:
    """`--envoy-service` (default turnout-system/envoy): the Service's load balancer address is
    what Ingress status names, and a new address is written once to each Ingress."""
    envoy = fake.create(envoy_lb_service({"ip": "203.0.113.7"}))
    fake.create(service())
    ing = obj(
        "networking.k8s.io/v1",
        "Ingress",
        "ing",
        {
            "ingressClassName": "turnout",
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
        },
    )
    fake.create(ing)
    with replica(fake, envoy=False, identity="only") as (_, admin):
        eventually(
            lambda: ingress_lb(fake) == {"ingress": [{"ip": "203.0.113.7"}]},
            20,
            "the Service's address in the Ingress status",
        )
        writes = len(fake.status_writes("ingresses"))
        fake.set_status(envoy, {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}})
        eventually(
            lambda: ingress_lb(fake) == {"ingress": [{"hostname": "lb.example.net"}]},
            10,
            "the new address in the Ingress status",
        )
        time.sleep(1.0)
        assert len(fake.status_writes("ingresses")) == writes + 1
        # Another Service's load balancer changing compiles nothing.
        compiles = metric(admin, "turnout_compiles_total")
        other = fake.get("v1", "Service", "web", NS)
        fake.set_status(other, {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}})
        time.sleep(1.0)
        assert metric(admin, "turnout_compiles_total") == compiles
        assert ingress_lb(fake) == {"ingress": [{"hostname": "lb.example.net"}]}


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def backend() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answering 200 to every GET; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def endpoints(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-1",
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port}],
        "endpoints": [{"addresses": ["127.0.0.1"]}],
    }


@contextlib.contextmanager
def external_envoy(xds_port: int, tmp: Path) -> Iterator[subprocess.Popen[bytes]]:
    """An Envoy of its own, started from what `turnout bootstrap` writes for `xds_port`."""
    bootstrap = tmp / "envoy.yaml"
    cmd = [sys.executable, "-m", "turnout", "bootstrap", str(bootstrap)]
    cmd += ["--xds-port", str(xds_port), "--admin-port", str(free_port())]
    subprocess.run([*cmd, "--node-id", "standby-envoy"], check=True)
    log = (tmp / "envoy.log").open("wb")
    proc = subprocess.Popen(
        [envoy_binary(), "-c", str(bootstrap), "--use-dynamic-base-id", "-l", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def get(port: int, host: str) -> int | str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", headers={"Host": host}, timeout=2).status_code
    except httpx.HTTPError as err:
        return type(err).__name__


class Poller:
    """GETs `host` through Envoy's `port` every 20 ms in a thread, counting every answer."""

    def __init__(self, port: int, host: str) -> None:
        self.port, self.host = port, host
        self.answers: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.answers.append(get(self.port, self.host))
            time.sleep(0.02)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_an_envoy_on_the_standby_keeps_routing_through_the_leaders_sigkill(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 12: Envoys connected to the surviving replica never lose configuration. The Envoy
    is connected to the standby only; the leader is killed; not one request through the Envoy
    fails before, during or after, and the standby takes over writing status."""
    http_port = free_port()
    xds = {"replica-a": free_port(), "replica-b": free_port()}
    with backend() as backend_port:
        fake.create(service())
        fake.create(endpoints("web", backend_port))
        fake.create(proxy("first", "first.example.com"))
        with (
            replica(
                fake,
                envoy=False,
                identity="replica-a",
                extra=FAST_ELECTION,
                ports={"--xds-port": xds["replica-a"], "--http-port": http_port},
            ) as (proc_a, admin_a),
            replica(
                fake,
                envoy=False,
                identity="replica-b",
                extra=FAST_ELECTION,
                ports={"--xds-port": xds["replica-b"], "--http-port": http_port},
            ) as (proc_b, admin_b),
        ):
            admins = {"replica-a": admin_a, "replica-b": admin_b}
            procs = {"replica-a": proc_a, "replica-b": proc_b}
            (leader,) = eventually(lambda: leader_of(admins), 20, "a leader")
            standby = next(name for name in admins if name != leader)
            eventually(lambda: status_of(fake, "projectcontour.io/v1", "HTTPProxy", "first"), 10)
            with external_envoy(xds[standby], tmp_path) as envoy:
                eventually(
                    lambda: get(http_port, "first.example.com") == 200,
                    30,
                    "the route through the standby's Envoy",
                )
                with Poller(http_port, "first.example.com") as poller:
                    time.sleep(1.0)  # before
                    before = len(poller.answers)
                    procs[leader].send_signal(signal.SIGKILL)
                    procs[leader].wait()
                    fake.create(proxy("second", "second.example.com"))
                    eventually(
                        lambda: status_of(fake, "projectcontour.io/v1", "HTTPProxy", "second"),
                        15,
                        "the standby writing status",
                    )
                    during = len(poller.answers)
                    # The standby keeps programming its Envoy: the new route is served too.
                    eventually(
                        lambda: get(http_port, "second.example.com") == 200,
                        10,
                        "a route added after the kill, through the standby's Envoy",
                    )
                    time.sleep(1.0)  # after
                assert envoy.poll() is None
            assert leader_of({standby: admins[standby]}) == [standby]
            failed = [a for a in poller.answers if a != 200]
            assert not failed, f"{len(failed)} of {len(poller.answers)} failed: {failed[:5]}"
            # Polled all along: before the kill, until the takeover, and after it.
            assert 0 < before < during < len(poller.answers)
            print(f"{len(poller.answers)} requests through the standby's Envoy, 0 failed")
