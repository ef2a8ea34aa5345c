"""Differential test: generated route sets and requests, the evaluator against the real Envoy.

Hypothesis draws virtual hosts (exact, one-label and any-label wildcards, a long wildcard, `*`)
with routes of every path, header and query match kind, and requests with dot segments,
percent-encoding, repeated and escaped slashes (merged, and redirected: the translator's default
`PathNormalization`), `+`, backslashes, query strings, fragments, mixed-case hosts and ports. Each
route set goes through `enforce_envoy_limits` and the translator to ONE Envoy (its own xDS server,
started once for the module), and each request's answer must be what the evaluator decided:
every route is a direct response whose body names it, so the answer tells which route matched.

Bounded and deterministic for CI: 100 derandomized examples of 10 requests each (a few seconds).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnout.envoy.bootstrap import bootstrap_config, write_bootstrap
from turnout.envoy.process import EnvoyProcess
from turnout.envoy.translate import TranslateOptions, translate
from turnout.envoy.translate.route_tree import plan_route_tree
from turnout.envoy.xds import XdsServer
from turnout.graph.evaluate import (
    Decision,
    effective_forward,
    evaluate,
    make_request,
    normalize_path,
)
from turnout.graph.model import (
    Cluster,
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    Forward,
    HeaderMatch,
    HostnameMatch,
    IPFilter,
    IPFilterSource,
    IPRule,
    Listener,
    ListenerProtocol,
    LocalRateLimit,
    PathMatch,
    PathMatchKind,
    QueryMatch,
    Redirect,
    Route,
    RouteAction,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    StringMatchKind,
    VirtualHost,
    VirtualHostPolicies,
    WeightedCluster,
)
from turnout.graph.validate import enforce_envoy_limits
from turnout.objects import ObjectRef

pytestmark = pytest.mark.e2e

OWNER = ObjectRef("projectcontour.io", "HTTPProxy", "default", "generated")
EMPTY_CLUSTER = "default/empty/80/eeee"  # no endpoints: Envoy answers 503 "no healthy upstream"
PROBE_HOST = "probe.turnout.invalid"
LONG_SUFFIX = (
    ".a-much-longer-subdomain-name-for-the-payments-service.of-some-team.in-a-large-company"
    ".example.com"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EnvoyUnderTest:
    """One Envoy fed by its own xDS server, on an event loop in a background thread so that
    hypothesis can drive it from a plain test function."""

    def __init__(self, work: Path) -> None:
        self.listen_port = _free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = XdsServer()
        self._envoy: EnvoyProcess | None = None
        self._work = work
        self._generation = 0

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def start(self) -> None:
        async def start() -> None:
            xds_port = await self._server.start("127.0.0.1", 0)
            config = bootstrap_config(
                xds_address="127.0.0.1",
                xds_port=xds_port,
                admin_address="127.0.0.1",
                admin_port=_free_port(),
                node_id="differential",
            )
            envoy = EnvoyProcess(
                write_bootstrap(self._work / "envoy.yaml", config), log_level="error"
            )
            await envoy.start()
            self._envoy = envoy

        self._run(start())

    def stop(self) -> None:
        async def stop() -> None:
            if self._envoy is not None:
                await self._envoy.stop()
            await self._server.stop(0)

        try:
            self._run(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def serve(self, graph: RoutingGraph, options: TranslateOptions | None = None) -> RoutingGraph:
        """Pushes `graph` (plus a probe host), translated with `options`, and returns once
        Envoy's workers route with it."""
        self._generation += 1
        marker = f"generation-{self._generation}"
        probe = VirtualHost(
            PROBE_HOST, PROBE_HOST, (_route(0, RouteMatch(), DirectResponse(200, marker)),), OWNER
        )
        [lst] = graph.listeners
        graph = RoutingGraph(
            listeners=(
                Listener(lst.name, "127.0.0.1", self.listen_port, lst.protocol,
                         (*lst.virtual_hosts, probe)),
            ),
            clusters=graph.clusters,
        )  # fmt: skip

        async def push() -> bool:
            version = self._server.set_resources(translate(graph, options))
            return await self._server.wait_acked(version, 15.0)

        assert self._run(push()), f"Envoy did not acknowledge: {self._server.readiness()[1]}"
        # An ACK means the main thread took the configuration; workers follow a moment later.
        for _ in range(200):
            try:
                if self.request(PROBE_HOST, "/") == (200, marker):
                    return graph
            except OSError:
                pass
            threading.Event().wait(0.02)
        raise AssertionError("Envoy never served the pushed configuration")

    def request(
        self,
        host: str,
        target: str,
        method: str = "GET",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> tuple[int, str]:
        """One HTTP/1.1 request written byte for byte (no client-side normalisation)."""
        status, _, body = self.exchange(host, target, method, headers)
        return status, body

    def exchange(
        self,
        host: str,
        target: str,
        method: str = "GET",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> tuple[int, dict[str, str], str]:
        """`request`, with the response's headers (lower-case names)."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines += ["Connection: close", "", ""]
        with socket.create_connection(("127.0.0.1", self.listen_port), timeout=5) as s:
            s.sendall("\r\n".join(lines).encode("latin-1"))
            data = b""
            # Read by Content-Length: waiting for EOF would wait out Envoy's delayed close (1 s).
            while True:
                head, sep, body = data.partition(b"\r\n\r\n")
                if sep:
                    length = _content_length(head)
                    if length is None or len(body) >= length:
                        break
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        response_headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            response_headers[name.strip().lower()] = value.strip()
        return int(status_line.split(" ", 2)[1]), response_headers, body.decode("latin-1")


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyUnderTest]:
    under_test = EnvoyUnderTest(tmp_path_factory.mktemp("differential"))
    try:
        under_test.start()
        yield under_test
    finally:
        under_test.stop()


# --- generated route sets ---------------------------------------------------------------------


def _route(i: int, match: RouteMatch, action: RouteAction) -> Route:
    return Route(match, action, RouteSource(OWNER, f"spec.routes[{i}]"))


HOSTNAMES = [
    ("a.example.com", HostnameMatch.EXACT),
    ("B.example.com", HostnameMatch.EXACT),
    ("*.example.com", HostnameMatch.WILDCARD_ONE_LABEL),
    ("*.any.example.com", HostnameMatch.WILDCARD_ANY_LABELS),
    ("*" + LONG_SUFFIX, HostnameMatch.WILDCARD_ONE_LABEL),
    ("*", HostnameMatch.EXACT),
]

# Weighted towards matches that let requests reach the header and query conditions.
path_matches = st.one_of(
    st.just(PathMatch.prefix("/")),
    st.builds(
        PathMatch,
        st.sampled_from([PathMatchKind.EXACT, PathMatchKind.PREFIX, PathMatchKind.SEGMENT_PREFIX]),
        st.sampled_from(
            ["/", "/a", "/a/", "/a/b", "/A", "/ab", "/a.b", "/a/b/c", "/%41", "/b", "/a+b", "/b/"]
        ),
    ),
    st.builds(
        PathMatch,
        st.just(PathMatchKind.REGEX),
        st.sampled_from(["/a.*", "/[ab]+", "/a/[^/]+", "(/[aAb])+/?", "/.*b", "/A/?", "/%41"]),
    ),
)
header_matches = st.builds(
    HeaderMatch,
    name=st.sampled_from(["x-a", "x-b", ":method"]),
    kind=st.sampled_from(list(StringMatchKind)),
    value=st.sampled_from(["a", "A", "b", "a,b", "", "GET", "[ab]+", "a.*"]),
    invert=st.booleans(),
    ignore_case=st.booleans(),
    treat_missing_as_empty=st.booleans(),
)
query_matches = st.builds(
    QueryMatch,
    name=st.sampled_from(["q", "q", "r", "q%20"]),
    kind=st.sampled_from(list(StringMatchKind)),
    value=st.sampled_from(["a", "a+b", "a%20b", "a b", "A", "", "a.*", "b"]),
    ignore_case=st.booleans(),
)
route_matches = st.builds(
    RouteMatch,
    path=path_matches,
    headers=st.lists(header_matches, max_size=1).map(tuple),
    query=st.lists(query_matches, max_size=1).map(tuple),
)
# None: a direct response naming the route, filled in once the route has its index.
actions = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.just(Forward((WeightedCluster(EMPTY_CLUSTER, 0),))),
    st.just(Forward((WeightedCluster(EMPTY_CLUSTER, 3),))),
    st.builds(Redirect, scheme=st.just("https"), status=st.sampled_from([301, 308])),
    st.builds(Redirect, hostname=st.just("elsewhere.example.com"), status=st.just(302)),
)


@st.composite
def route_sets(
    draw: st.DrawFn, hostnames: list[tuple[str, HostnameMatch]] | None = None
) -> RoutingGraph:
    pool = hostnames if hostnames is not None else HOSTNAMES
    hosts = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
    vhosts = []
    n = 0
    for hostname, kind in hosts:
        routes = []
        for match, action in draw(
            st.lists(st.tuples(route_matches, actions), min_size=1, max_size=6)
        ):
            body = f"{hostname}#{n}"
            routes.append(_route(n, match, action or DirectResponse(200, body)))
            n += 1
        vhosts.append(VirtualHost(hostname.lower(), hostname, tuple(routes), OWNER, kind))
    listener = Listener("ingress_http", "127.0.0.1", 0, ListenerProtocol.HTTP, tuple(vhosts))
    return RoutingGraph(
        listeners=(listener,), clusters=(Cluster(EMPTY_CLUSTER, "default", "empty", 80),)
    )


# --- generated requests -----------------------------------------------------------------------

segments = st.sampled_from(
    ["a", "b", "A", "..", ".", "%2e", "%2E%2e", "%41", "%2f", "%2F", "a+b", "a.b", "", "%61",
     "%7e", "x", "%5C", '"']
)  # fmt: skip
query_params = st.sampled_from(
    ["q=a", "q=a+b", "q=a%20b", "q=A", "r", "r=", "q%20=a", "Q=a", "q=a%2Bb", "q=b"]
)
# Rare on purpose: each answers 400 before routing, which says nothing about the routes.
fragments = st.sampled_from([""] * 14 + ["#f"])
nul = st.sampled_from([""] * 19 + ["/%00"])
random_paths = st.tuples(
    st.lists(segments, min_size=1, max_size=4),
    st.sampled_from(["/", "/", "/", "\\"]),
    st.lists(query_params, max_size=3),
    fragments,
).map(lambda t: "/" + t[1].join(t[0]) + ("?" + "&".join(t[2]) if t[2] else "") + t[3])
random_hosts = st.sampled_from(
    ["a.example.com", "A.Example.COM:8080", "b.example.com", "x.example.com", "X.y.example.com",
     "z.any.example.com", "q.r.any.example.com", "other.org", "a.example.com:1",
     "x" + LONG_SUFFIX, "x.y" + LONG_SUFFIX, "x.example.com:abc"]
)  # fmt: skip
random_headers = st.lists(
    st.sampled_from(
        [("x-a", "a"), ("x-a", "A"), ("x-a", "b"), ("x-b", ""), ("x-b", "a,b"), ("x-a", "ab")]
    ),
    max_size=3,
).map(tuple)
methods = st.sampled_from(["GET", "POST"])


@dataclass(frozen=True)
class Probe:
    host: str
    target: str
    method: str
    headers: tuple[tuple[str, str], ...]


random_probes = st.builds(Probe, random_hosts, random_paths, methods, random_headers)


def _host_for(vh: VirtualHost) -> st.SearchStrategy[str]:
    """Hosts that select `vh` (or nearly do), in mixed case and with ports."""
    if vh.hostname == "*":
        return st.sampled_from(["other.org", "c.example.org:81"])
    ports = st.sampled_from(["", "", "", ":8080", ":1", ":abc"])
    if vh.hostname.startswith("*"):
        label = st.sampled_from(["x", "Y", "a-b", "x", "x.y"])
        names = st.builds(lambda lb, p: lb + vh.hostname[1:] + p, label, ports)
    else:
        names = st.builds(lambda p: vh.hostname + p, ports)
    return st.builds(
        lambda n, upper: n.upper() if upper else n, names, st.sampled_from([False, False, True])
    )


# Rewrites that keep a path's meaning for Envoy, or change it only by normalisation.
_NOISE = [
    lambda p: p,
    lambda p: p,
    lambda p: "/x/.." + p,
    lambda p: "/./" + p.lstrip("/"),
    lambda p: p.replace("a", "%61", 1),
    lambda p: p.replace("b", "%62", 1),
    lambda p: p.replace("/", "\\", 1),
    lambda p: p + "/.",
    lambda p: p.replace("/", "/%2e/", 1),
    lambda p: p.upper(),
]


def _path_for(path: PathMatch) -> st.SearchStrategy[str]:
    if path.kind is PathMatchKind.REGEX:
        bases = st.sampled_from(["/a", "/ab", "/a/b", "/b/a", "/A", "/%41", "/bb", "/a/"])
    else:
        value = path.value
        bases = st.sampled_from([value, value + "/x", value + "x", value.rstrip("/") or "/"])
    noise = st.sampled_from(_NOISE)
    return st.builds(lambda b, f: f(b) if f(b).startswith("/") else b, bases, noise)


def _param_for(q: QueryMatch) -> st.SearchStrategy[str]:
    if q.kind is StringMatchKind.PRESENT:
        return st.sampled_from([q.name, q.name + "=", q.name + "=x"])
    value = q.value.replace(" ", "%20")
    return st.sampled_from(
        [f"{q.name}={v}" for v in (value, value, value.upper(), q.value.replace(" ", "+"), "a")]
    )


def _header_for(h: HeaderMatch) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    if h.name.startswith(":"):
        return st.just(())
    v = h.value
    meets = {
        StringMatchKind.EXACT: v,
        StringMatchKind.PREFIX: v + "x",
        StringMatchKind.SUFFIX: "x" + v,
        StringMatchKind.CONTAINS: "x" + v + "x",
        StringMatchKind.REGEX: "ab",
        StringMatchKind.PRESENT: "p",
    }[h.kind]
    values = st.sampled_from([meets, meets, meets.upper(), v, "b", ""])
    # Sent twice now and then, once meeting the condition: Envoy matches each value on its own,
    # not the comma-joined string.
    twice = st.sampled_from([((h.name, meets), (h.name, "zz")), ((h.name, "zz"), (h.name, meets))])
    return st.one_of(st.just(()), st.builds(lambda x: ((h.name, x),), values), twice)


@st.composite
def probes_for(draw: st.DrawFn, graph: RoutingGraph) -> Probe:
    """A request aimed at one of the graph's routes: its host, a path its match takes (through
    normalisation), and query parameters and headers that meet or just miss its conditions."""
    vhosts = [vh for vh in graph.listeners[0].virtual_hosts if vh.routes]
    if not vhosts or draw(st.integers(0, 3)) == 0:
        return draw(random_probes)
    vh = draw(st.sampled_from(vhosts))
    route = draw(st.sampled_from(vh.routes))
    path = draw(_path_for(route.match.path)) + draw(nul)
    params = [draw(_param_for(q)) for q in route.match.query] + draw(
        st.lists(query_params, max_size=1)
    )
    headers: tuple[tuple[str, str], ...] = ()
    for h in route.match.headers:
        headers += draw(_header_for(h))
    target = path + ("?" + "&".join(draw(st.permutations(params))) if params else "")
    return Probe(draw(_host_for(vh)), target + draw(fragments), draw(methods), headers)


# What the generated requests exercised, so a generator change cannot quietly stop covering
# an outcome (checked by the next test).
COVERAGE: Counter[str] = Counter()


def _cover(decision: Decision, target: str) -> None:
    route = decision.route
    if decision.location is not None:
        COVERAGE["escaped slash redirected"] += 1
    elif decision.rejected_status is not None:
        COVERAGE["rejected before routing"] += 1
    elif route is None:
        COVERAGE["no route"] += 1
    else:
        COVERAGE[type(route.action).__name__] += 1
        COVERAGE["header condition matched"] += bool(route.match.headers)
        COVERAGE["query condition matched"] += bool(route.match.query)
        path = target.partition("?")[0]
        canonical = normalize_path(path) or ""
        COVERAGE["path normalised, then matched"] += canonical != path
        COVERAGE["slashes merged, then matched"] += "//" in canonical


def expected(decision: Decision) -> tuple[int, str | None]:
    """What Envoy answers for `decision`: (status, body), body None when it is not compared."""
    route = decision.route
    if route is None:
        return decision.status, None
    action = route.action
    if isinstance(action, DirectResponse):
        return action.status, action.body
    if isinstance(action, Forward):
        return (503, "no healthy upstream") if effective_forward(action) else (503, "")
    return decision.status, None


def disagrees(envoy: EnvoyUnderTest, p: Probe, decision: Decision) -> str | None:
    """What Envoy answered to probe `p` if it is not what the evaluator's `decision` says."""
    want_status, want_body = expected(decision)
    status, body = envoy.request(p.host, p.target, p.method, p.headers)
    if status == want_status and (want_body is None or body == want_body):
        return None
    chosen = decision.route.source if decision.route is not None else None
    return (
        f"{p}: envoy {status} {body[:40]!r}, evaluator {want_status} {want_body!r} "
        f"(route {chosen}, {decision.rejected_reason or 'routed'})"
    )


def envoy_examples(count: int) -> Any:
    """Hypothesis settings for a test that asks the real Envoy: the same examples every run
    (derandomized, no database) and no deadline, since Envoy's reconfiguration sets the pace."""
    return settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@envoy_examples(100)
@given(graph=route_sets(), data=st.data())
def test_envoy_routes_generated_requests_as_the_evaluator_decides(
    envoy: EnvoyUnderTest, graph: RoutingGraph, data: st.DataObject
) -> None:
    enforced, _ = enforce_envoy_limits(graph)
    probes = data.draw(st.lists(probes_for(enforced), min_size=10, max_size=10), label="requests")
    served = envoy.serve(enforced)
    disagreements = []
    for p in probes:
        decision = evaluate(served, make_request(p.host, p.target, p.method, p.headers))
        _cover(decision, p.target)
        disagreement = disagrees(envoy, p, decision)
        if disagreement is not None:
            disagreements.append(disagreement)
    assert not disagreements, "\n".join(disagreements)


def test_the_generated_requests_reach_every_kind_of_outcome() -> None:
    assert COVERAGE, "the differential test must run first (same module, file order)"
    for outcome in (
        "rejected before routing",
        "escaped slash redirected",
        "no route",
        "DirectResponse",
        "Forward",
        "Redirect",
        "header condition matched",
        "query condition matched",
        "path normalised, then matched",
        "slashes merged, then matched",
    ):
        print(COVERAGE)
        assert COVERAGE[outcome] >= 2, (outcome, COVERAGE)


# --- hosts translated to matcher trees ----------------------------------------------------------

# Prefixes of prefixes, segment boundaries, trailing slashes and values no key can stand for.
TREE_PATHS = ["/", "/a", "/a/", "/a/b", "/a/b/", "/a/bc", "/ab", "/a/b/c", "/b", "/b/", "/api",
              "/api/v1", "/A", "/a.b", "/%41", "/a?x", "/a#f", "/ap"]  # fmt: skip
tree_path_matches = st.one_of(
    *[st.builds(
        PathMatch,
        st.sampled_from([PathMatchKind.EXACT, PathMatchKind.PREFIX, PathMatchKind.SEGMENT_PREFIX]),
        st.sampled_from(TREE_PATHS),
    )] * 6,
    st.builds(PathMatch, st.just(PathMatchKind.REGEX),
              st.sampled_from(["/a.*", "/a/[^/]+", "/ab?", "/a|/b", ".*b", "/a/b+/?"])),
)  # fmt: skip
tree_route_matches = st.builds(
    RouteMatch,
    path=tree_path_matches,
    headers=st.lists(header_matches, max_size=1).map(tuple),
    query=st.lists(query_matches, max_size=1).map(tuple),
)
TREE_HOSTS = [("a.example.com", HostnameMatch.EXACT), ("*.example.com",
              HostnameMatch.WILDCARD_ONE_LABEL)]  # fmt: skip
# Every host is a matcher tree, the probe host's one route included.
TREES = TranslateOptions(matcher_tree_min_routes=1)


@st.composite
def tree_route_sets(draw: st.DrawFn) -> RoutingGraph:
    hosts = draw(st.lists(st.sampled_from(TREE_HOSTS), min_size=1, max_size=2, unique=True))
    vhosts = []
    n = 0
    for hostname, kind in hosts:
        routes = []
        for match in draw(st.lists(tree_route_matches, min_size=1, max_size=24)):
            routes.append(_route(n, match, DirectResponse(200, f"{hostname}#{n}")))
            n += 1
        vhosts.append(VirtualHost(hostname, hostname, tuple(routes), OWNER, kind))
    listener = Listener("ingress_http", "127.0.0.1", 0, ListenerProtocol.HTTP, tuple(vhosts))
    return RoutingGraph(listeners=(listener,))


TREE_SUFFIXES = ["", "", "/", "x", "/x", "b", "/b/c", "?q=a", "/?q=a", "?x=/a/b", "#f"]


@st.composite
def tree_probes_for(draw: st.DrawFn, graph: RoutingGraph) -> Probe:
    """A request near one route's path: the path itself, a prefix of it, or it followed by a
    trailing slash, more characters or segments, or a query string."""
    vhosts = [vh for vh in graph.listeners[0].virtual_hosts if vh.routes]
    if not vhosts:
        return draw(random_probes)
    vh = draw(st.sampled_from(vhosts))
    route = draw(st.sampled_from(vh.routes))
    base = draw(st.sampled_from(TREE_PATHS)) if route.match.path.kind is PathMatchKind.REGEX else (
        route.match.path.value)  # fmt: skip
    base = base[: draw(st.integers(1, len(base)))] if draw(st.booleans()) else base
    target = base + draw(st.sampled_from(TREE_SUFFIXES))
    headers: tuple[tuple[str, str], ...] = ()
    for h in route.match.headers:
        headers += draw(_header_for(h))
    params = [draw(_param_for(q)) for q in route.match.query]
    if params:
        target += ("&" if "?" in target else "?") + "&".join(params)
    return Probe(draw(_host_for(vh)), target, draw(methods), headers)


TREE_COVERAGE: Counter[str] = Counter()


@envoy_examples(60)
@given(graph=tree_route_sets(), data=st.data())
def test_matcher_tree_hosts_route_generated_requests_as_the_evaluator_decides(
    envoy: EnvoyUnderTest, graph: RoutingGraph, data: st.DataObject
) -> None:
    """The same comparison with every host translated to a matcher tree: the evaluator walks
    the list, Envoy looks up the path's leaf; first-match order must agree for every request."""
    enforced, _ = enforce_envoy_limits(graph)
    [routes] = translate(enforced, TREES).routes
    for vh, message in zip(enforced.listeners[0].virtual_hosts, routes.virtual_hosts, strict=True):
        # A host without a key, or copying routes too often, stays a list.
        tree = plan_route_tree([r.match for r in vh.routes]) is not None
        assert message.HasField("matcher") is tree
        assert not (tree and message.routes)
        TREE_COVERAGE["tree host"] += tree
    probes = data.draw(st.lists(tree_probes_for(enforced), min_size=12, max_size=12))
    served = envoy.serve(enforced, TREES)
    disagreements = []
    for p in probes:
        decision = evaluate(served, make_request(p.host, p.target, p.method, p.headers))
        TREE_COVERAGE["routed" if decision.route is not None else "no route"] += 1
        if decision.route is not None:
            TREE_COVERAGE[decision.route.match.path.kind.value] += 1
            TREE_COVERAGE["query string"] += "?" in p.target
        disagreement = disagrees(envoy, p, decision)
        if disagreement is not None:
            disagreements.append(disagreement)
    assert not disagreements, "\n".join(disagreements)


def test_the_tree_requests_reach_every_kind_of_route() -> None:
    assert TREE_COVERAGE, "the matcher-tree differential test must run first (file order)"
    assert TREE_COVERAGE["tree host"] >= 40, TREE_COVERAGE
    for outcome in ("no route", "exact", "prefix", "segment_prefix", "regex", "query string"):
        assert TREE_COVERAGE[outcome] >= 5, (outcome, TREE_COVERAGE)


# --- policy answers before the route -------------------------------------------------------------

APP_ORIGIN = "https://app.example.com"
CORS = CorsPolicy(
    (ExactOrigin(APP_ORIGIN),), allow_methods=("GET", "PUT"), allow_headers=("x-a",),
    max_age_s=60, allow_credentials=True,
)  # fmt: skip
DENY_LOOPBACK = IPFilter(False, (IPRule("127.0.0.0/8"),))


def _policy_host(
    name: str, policies: VirtualHostPolicies, *routes: tuple[str, RouteAction, RoutePolicies]
) -> VirtualHost:
    forward = Forward((WeightedCluster(EMPTY_CLUSTER, 1),))
    built = [
        Route(RouteMatch(PathMatch.prefix(prefix)), action, RouteSource(OWNER, f"{name}{i}"), rp)
        for i, (prefix, action, rp) in enumerate(routes)
    ]
    built.append(Route(RouteMatch(), forward, RouteSource(OWNER, f"{name}-default")))
    return VirtualHost(name, name, tuple(built), OWNER, policies=policies)


def _policy_graph() -> RoutingGraph:
    remote = IPFilter(False, (IPRule("192.0.2.0/24", IPFilterSource.REMOTE),))
    vhosts = (
        _policy_host("deny.example.com", VirtualHostPolicies(ip_filter=DENY_LOOPBACK)),
        _policy_host(
            "allow.example.com",
            VirtualHostPolicies(ip_filter=IPFilter(True, (IPRule("10.0.0.0/8"),))),
            ("/open", Forward((WeightedCluster(EMPTY_CLUSTER, 1),)),
             RoutePolicies(ip_filter=IPFilter(True, (IPRule("127.0.0.1"),)))),
        ),
        _policy_host("remote.example.com", VirtualHostPolicies(ip_filter=remote)),
        _policy_host(
            "cors.example.com",
            VirtualHostPolicies(cors=CORS),
            ("/direct", DirectResponse(200, "direct"), RoutePolicies()),
            ("/any", Forward((WeightedCluster(EMPTY_CLUSTER, 1),)),
             RoutePolicies(cors=CorsPolicy((ExactOrigin("*"),)))),
        ),
        _policy_host(
            "both.example.com", VirtualHostPolicies(cors=CORS, ip_filter=DENY_LOOPBACK)
        ),
        _policy_host(
            "limited.example.com", VirtualHostPolicies(rate_limit=LocalRateLimit(1, 3600))
        ),
    )  # fmt: skip
    listener = Listener("ingress_http", "127.0.0.1", 0, ListenerProtocol.HTTP, vhosts)
    return RoutingGraph(
        listeners=(listener,), clusters=(Cluster(EMPTY_CLUSTER, "default", "empty", 80),)
    )


PREFLIGHT = (("Origin", APP_ORIGIN), ("Access-Control-Request-Method", "PUT"))
POLICY_PROBES = [
    Probe("deny.example.com", "/", "GET", ()),
    Probe("deny.example.com", "/", "GET", (("X-Forwarded-For", "10.0.0.1"),)),
    Probe("allow.example.com", "/", "GET", ()),
    Probe("allow.example.com", "/open/x", "GET", ()),
    Probe("remote.example.com", "/", "GET", (("X-Forwarded-For", "192.0.2.1"),)),
    Probe("cors.example.com", "/", "OPTIONS", PREFLIGHT),
    Probe("cors.example.com", "/", "OPTIONS", (("Origin", "https://evil.example"),
                                                ("Access-Control-Request-Method", "GET"))),
    Probe("cors.example.com", "/", "OPTIONS", (("Origin", APP_ORIGIN),)),
    Probe("cors.example.com", "/", "GET", (("Origin", APP_ORIGIN),)),
    Probe("cors.example.com", "/direct", "OPTIONS", PREFLIGHT),
    Probe("cors.example.com", "/any", "OPTIONS", (("Origin", "https://evil.example"),
                                                  ("Access-Control-Request-Method", "GET"))),
    Probe("both.example.com", "/", "OPTIONS", PREFLIGHT),
    Probe("both.example.com", "/", "GET", ()),
    Probe("limited.example.com", "/", "GET", ()),
]  # fmt: skip


def test_envoy_answers_policies_before_the_route_as_the_evaluator_decides(
    envoy: EnvoyUnderTest,
) -> None:
    """IP allow/deny lists (403) and CORS preflights (200 with the Access-Control-Allow-*
    headers) from Envoy, against the evaluator's `policy_answers`; the peer is 127.0.0.1, the
    evaluator's default client address. A rate limit is conditional: the first request passes,
    the next gets the answer the evaluator said it may."""
    served = envoy.serve(_policy_graph())
    disagreements = []
    answered = Counter[str]()
    for p in POLICY_PROBES:
        decision = evaluate(served, make_request(p.host, p.target, p.method, p.headers))
        answer = decision.definite_policy_answer
        answered[answer.policy if answer else "route"] += 1
        status, headers, body = envoy.exchange(p.host, p.target, p.method, p.headers)
        want_status, want_body = expected(decision) if answer is None else (answer.status, None)
        got_cors = {k: v for k, v in headers.items() if k.startswith("access-control-")}
        want_cors = dict(answer.headers) if answer is not None else {}
        sent = {name.lower() for name, _ in p.headers}
        preflight = p.method == "OPTIONS" and {"origin", "access-control-request-method"} <= sent
        if answer is None and not preflight:
            got_cors = {}  # an actual CORS request's response headers are not modelled
        if status != want_status or (want_body is not None and body != want_body):
            disagreements.append(f"{p}: envoy {status} {body[:40]!r}, evaluator {want_status}")
        elif got_cors != want_cors:
            disagreements.append(f"{p}: envoy headers {got_cors}, evaluator {want_cors}")
    assert not disagreements, "\n".join(disagreements)
    assert answered["IP deny list"] >= 2 and answered["IP allow list"] >= 1
    assert answered["CORS"] >= 2
    limited = evaluate(served, make_request("limited.example.com", "/"))
    [maybe] = limited.policy_answers
    assert not maybe.definite
    assert envoy.request("limited.example.com", "/")[0] == maybe.status


# --- scoped route configurations ---------------------------------------------------------------

# Only exact hosts: a listener with a wildcard one keeps its single route configuration.
SCOPED_HOSTS = [("a.example.com", HostnameMatch.EXACT), ("B.example.com", HostnameMatch.EXACT),
                ("c.example.org", HostnameMatch.EXACT)]  # fmt: skip
# Every listener is scoped: one scope and route configuration per host, the probe host's too.
SCOPED = TranslateOptions(scoped_routes_min_hosts=1)
# Hosts no scope has, and spellings of the ones it has that Envoy's own lookup would take.
scoped_hosts = st.sampled_from(
    ["a.example.com.", "A.EXAMPLE.COM.:8080", "a.example.com..", "b.EXAMPLE.com:80", "[::1]",
     "[::1]:8080", "[A::1]:80", "a.example.com:x:80", "c.example.org:", "other.org", "a.example"]
)  # fmt: skip
SCOPED_COVERAGE: Counter[str] = Counter()


@st.composite
def scoped_probes_for(draw: st.DrawFn, graph: RoutingGraph) -> Probe:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.builds(Probe, scoped_hosts, random_paths, methods, random_headers))
    return draw(probes_for(graph))


@envoy_examples(40)
@given(graph=route_sets(SCOPED_HOSTS), data=st.data())
def test_scoped_listeners_route_generated_requests_as_the_evaluator_decides(
    envoy: EnvoyUnderTest, graph: RoutingGraph, data: st.DataObject
) -> None:
    """The same comparison with the listener translated to scoped RDS (a scope per host, chosen
    by the Host lower-cased without its port): mixed-case hosts, ports, trailing dots, IPv6
    literals and hosts no scope has must be answered as the single route table answers them."""
    enforced, _ = enforce_envoy_limits(graph)
    probes = data.draw(st.lists(scoped_probes_for(enforced), min_size=12, max_size=12))
    served = envoy.serve(enforced, SCOPED)
    scopes = translate(served, SCOPED).scoped_routes
    assert len(scopes) == len(served.listeners[0].virtual_hosts)
    disagreements = []
    for p in probes:
        decision = evaluate(served, make_request(p.host, p.target, p.method, p.headers))
        SCOPED_COVERAGE["routed" if decision.route is not None else "no route"] += 1
        SCOPED_COVERAGE["upper-case host"] += p.host != p.host.lower()
        SCOPED_COVERAGE["port"] += ":" in p.host.rpartition("]")[2]
        SCOPED_COVERAGE["ipv6 literal"] += p.host.startswith("[")
        disagreement = disagrees(envoy, p, decision)
        if disagreement is not None:
            disagreements.append(disagreement)
    assert not disagreements, "\n".join(disagreements)


def test_the_scoped_requests_reach_every_kind_of_host() -> None:
    assert SCOPED_COVERAGE, "the scoped differential test must run first (file order)"
    for outcome in ("routed", "no route", "upper-case host", "port", "ipv6 literal"):
        assert SCOPED_COVERAGE[outcome] >= 10, (outcome, SCOPED_COVERAGE)


# --- a host split into path scopes ----------------------------------------------------------------

# Every host with two routes or more is split, each directory holding one route gets a scope,
# however many copies that makes: the index and the path scopes answer every request.
SPLIT = TranslateOptions(
    scoped_routes_min_hosts=1,
    split_host_min_routes=2,
    split_scope_max_routes=1,
    split_max_extra_share=1000.0,
)
SPLIT_COVERAGE: Counter[str] = Counter()
# Paths into the directories the generated routes pin, with a query, a trailing slash, more
# segments, a partial segment or none at all.
split_paths = st.tuples(
    st.sampled_from(["/a", "/a/b", "/b/a", "/A", "/bb", "/ab", "/b", "/x", "", "/a/b/c"]),
    st.sampled_from(["", "/", "x", "/c", "/a", "?q=a", "/?q=/a", "?", "#f"]),
).map(lambda t: (t[0] + t[1]) or "/")


@st.composite
def split_probes_for(draw: st.DrawFn, graph: RoutingGraph) -> Probe:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(scoped_probes_for(graph))
    host = draw(st.sampled_from([h for h, _ in SCOPED_HOSTS] + ["other.org"]))
    return draw(st.builds(Probe, st.just(host), split_paths, methods, random_headers))


@envoy_examples(40)
@given(graph=route_sets(SCOPED_HOSTS), data=st.data())
def test_split_hosts_route_generated_requests_as_the_evaluator_decides(
    envoy: EnvoyUnderTest, graph: RoutingGraph, data: st.DataObject
) -> None:
    """The same comparison with every host of two routes or more split into path scopes (an
    index scope leading to one scope per directory): requests into each directory, beside it,
    under it, with a query string, a trailing slash, dot segments, and to no host at all."""
    enforced, _ = enforce_envoy_limits(graph)
    probes = data.draw(st.lists(split_probes_for(enforced), min_size=16, max_size=16))
    served = envoy.serve(enforced, SPLIT)
    scopes = translate(served, SPLIT).scoped_routes
    hosts = served.listeners[0].virtual_hosts
    SPLIT_COVERAGE["split hosts"] += any(len(vh.routes) >= 2 for vh in hosts)
    SPLIT_COVERAGE["path scopes"] += len(scopes) - len(hosts)
    disagreements = []
    for p in probes:
        decision = evaluate(served, make_request(p.host, p.target, p.method, p.headers))
        SPLIT_COVERAGE["routed" if decision.route is not None else "no route"] += 1
        SPLIT_COVERAGE["query"] += "?" in p.target
        disagreement = disagrees(envoy, p, decision)
        if disagreement is not None:
            disagreements.append(disagreement)
    assert not disagreements, "\n".join(disagreements)


def test_the_split_requests_reach_path_scopes() -> None:
    assert SPLIT_COVERAGE, "the split differential test must run first (file order)"
    for outcome in ("split hosts", "routed", "no route", "query"):
        assert SPLIT_COVERAGE[outcome] >= 10, (outcome, SPLIT_COVERAGE)
    assert SPLIT_COVERAGE["path scopes"] >= 40, SPLIT_COVERAGE
