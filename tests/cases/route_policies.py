"""Routes carrying every route policy at once (route policy translation)."""

from __future__ import annotations

from turnout.graph.model import (
    BackendPolicies,
    Cluster,
    CookieRewrite,
    CrossSchemeRedirect,
    DirectResponse,
    Endpoint,
    Forward,
    HashPolicy,
    HashSource,
    HeaderPolicy,
    HeaderValue,
    HostRewrite,
    InternalRedirectPolicy,
    Listener,
    ListenerProtocol,
    Mirror,
    PathMatch,
    PathRewrite,
    Redirect,
    RetryPolicy,
    Route,
    RouteMatch,
    RoutePolicies,
    RouteSource,
    RoutingGraph,
    Timeouts,
    VirtualHost,
    WeightedCluster,
)
from turnout.objects import ObjectRef

REF = ObjectRef("projectcontour.io", "HTTPProxy", "default", "p")


APP = "default/app/80/x"


OTHER = "default/other/80/x"


SHADOW = "default/shadow/80/x"


def route(
    policies: RoutePolicies,
    action: Forward | DirectResponse | Redirect | None = None,
    prefix: str = "/",
) -> Route:
    return Route(
        RouteMatch(PathMatch.prefix(prefix)),
        action if action is not None else Forward((WeightedCluster(APP, 1),)),
        RouteSource(REF, "spec.routes[0]"),
        policies,
    )


def rich_policies_graph() -> RoutingGraph:
    """Every route policy at once, on routes of one virtual host, plus an idle timeout."""
    everything = RoutePolicies(
        timeouts=Timeouts(response_s=2, idle_s=0, backend_request_s=0.5),
        retry=RetryPolicy(count=2, per_try_timeout_s=0.1, retriable_status_codes=(503,)),
        request_headers=HeaderPolicy(
            set=(HeaderValue("X-A", "%REQ(x-b)% %%"), HeaderValue("X-C", "%HOSTNAME%")),
            add=(HeaderValue("X-D", "d"),),
            remove=("X-E",),
        ),
        response_headers=HeaderPolicy(set=(HeaderValue("X-F", "%RESPONSE_FLAGS%"),)),
        host_rewrite=HostRewrite(from_header="x-host"),
        path_rewrite=PathRewrite(prefix="/v2/"),
        mirrors=(Mirror(SHADOW, 12.5),),
        websockets=True,
        cookie_rewrites=(
            CookieRewrite("s", path="/", domain="a.example.com", secure=True, same_site="Lax"),
            CookieRewrite('we"ird;name', secure=False),
        ),
        hash_policies=(
            HashPolicy(HashSource.HEADER, "X-User", terminal=True),
            HashPolicy(HashSource.QUERY, "q"),
            HashPolicy(HashSource.SOURCE_IP),
            HashPolicy(HashSource.COOKIE, "c", cookie_ttl_s=0, cookie_path="/"),
        ),
        internal_redirect=InternalRedirectPolicy(
            max_redirects=3,
            response_codes=(301, 302, 307),
            cross_scheme=CrossSchemeRedirect.SAFE_ONLY,
            deny_repeated_route=True,
        ),
    )
    backend = BackendPolicies(
        request_headers=HeaderPolicy(set=(HeaderValue("X-Svc", "app:80"),)),
        host_rewrite=HostRewrite(literal="app.internal"),
        cookie_rewrites=(CookieRewrite("t", same_site="None"),),
    )
    split = Forward((WeightedCluster(APP, 3, backend), WeightedCluster(OTHER, 1)))
    regex = PathRewrite(regex="^/b/(.*)$", substitution="/\\1")
    routes = (
        route(everything, split, "/a"),
        route(RoutePolicies(path_rewrite=regex), prefix="/b"),
        route(RoutePolicies(path_rewrite=PathRewrite(full_path="/c")), prefix="/c"),
    )
    endpoints = (Endpoint("127.0.0.1", 1),)
    clusters = tuple(
        Cluster(
            name,
            "default",
            name.split("/")[1],
            80,
            endpoints=endpoints,
            idle_connection_timeout_s=t,
        )
        for name, t in ((APP, 60.0), (OTHER, None), (SHADOW, 0.0))
    )
    vh = VirtualHost("p.example.com", "p.example.com", routes, REF)
    listener = Listener("ingress_http", "0.0.0.0", 8080, ListenerProtocol.HTTP, (vh,))
    return RoutingGraph(listeners=(listener,), clusters=clusters)
