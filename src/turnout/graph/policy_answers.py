"""Answers turnout's policies give before the route's action: the HTTP filters Envoy runs
between choosing the route and the router, in the order the translator emits them
(`envoy/translate/http_filters.py`, `policy_http_filters`):

1. **CORS** (`envoy.filters.http.cors`): a preflight (`OPTIONS` with a non-empty `Origin` and
   `Access-Control-Request-Method`) whose origin the effective policy allows is answered 200 with
   the `Access-Control-Allow-*` headers, and goes no further. Envoy does not compare the requested
   method with `allowMethods` (it lists them and the browser decides). A preflight from another
   origin, or one to a route without a policy, passes on without CORS headers
   (`forward_not_matching_preflights`, true by default). Envoy bypasses the filter on a route
   that answers itself (direct response or redirect).
2. **IP allow/deny lists** (`envoy.filters.http.rbac`): 403 for an address an allow list does not
   admit or a deny list names. `Peer` rules see the connection's address (`Request.client_address`),
   `Remote` rules the client address the HTTP connection manager derives from X-Forwarded-For
   with `num_trusted_hops` (`remote_address`).
3. **Local rate limits** (`envoy.filters.http.local_ratelimit`): never a definite answer for one
   request: the bucket's state decides, so the answer is "may be answered 429 once ...".
4. **JWT validation** (`envoy.filters.http.jwt_authn`): 401 definite without an
   `Authorization: Bearer` token; with one, 401 unless it verifies (conditional: the evaluator
   verifies no signatures).

A route's IP filter and rate limit replace its virtual host's (Envoy's most specific
`typed_per_filter_config`); a route's CORS policy is merged with its virtual host's field by
field (`merged_cors`), as Envoy's CORS filter reads them.

**Extending.** Each filter is one `PolicyStep`: a function of the `PolicyContext` (request,
virtual host, route, trusted hops) returning a `PolicyAnswer` or None. `POLICY_STEPS` lists them
in filter order; a filter added to the translator's chain adds its step at the same place.
`answer_policies` runs them and stops after the first definite answer, as Envoy does once a
filter answers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from turnout.graph.model import (
    CorsPolicy,
    DirectResponse,
    ExactOrigin,
    IPFilter,
    IPFilterSource,
    JwtValidation,
    LocalRateLimit,
    Redirect,
    Route,
    VirtualHost,
)
from turnout.graph.regex import envoy_regex

CORS_PREFLIGHT_STATUS = 200
IP_DENIED_STATUS = 403
JWT_MISSING_STATUS = 401
DEFAULT_CLIENT_ADDRESS = "127.0.0.1"

P = TypeVar("P")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class PolicyRequest(Protocol):
    """What the policy steps read of a request (`evaluate.Request` has it)."""

    @property
    def method(self) -> str: ...

    @property
    def client_address(self) -> str: ...

    def header_values(self, name: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class PolicyAnswer:
    """What a policy answers before the route's action.

    `definite`: every such request gets `status`; otherwise it may (a rate limit once the bucket
    is empty, a token that fails verification). `source` names where the policy was set (the
    route's object and field, or the virtual host and its owner); `headers` are the answer's
    own headers (a CORS preflight's `Access-Control-Allow-*`)."""

    status: int
    policy: str
    filter: str
    source: str
    definite: bool
    reason: str
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        """`answered by <policy> before the route: 403 (...)`, or `may be answered 429 ...`."""
        where = f"{self.policy} of {self.source}"
        if self.definite:
            return f"answered by {where} before the route: {self.status} ({self.reason})"
        return f"may be answered {self.status} by {where} {self.reason}"


@dataclass(frozen=True, slots=True)
class PolicyContext:
    request: PolicyRequest
    virtual_host: VirtualHost
    route: Route
    num_trusted_hops: int = 0


PolicyStep = Callable[[PolicyContext], PolicyAnswer | None]


def _vh_source(vh: VirtualHost) -> str:
    owner = vh.owner
    return f"virtual host {vh.hostname} ({owner.kind} {owner.namespace}/{owner.name})"


def _route_source(route: Route) -> str:
    return f"route {route.source}"


# --- CORS ----------------------------------------------------------------------------------------


def origin_allowed(policy: CorsPolicy, origin: str) -> bool:
    """Envoy's `CorsFilter::isOriginAllowed`: a matcher taking `*` allows any origin."""
    for allowed in policy.allow_origins:
        for value in ("*", origin):
            if isinstance(allowed, ExactOrigin):
                if allowed.origin.lower() == value.lower():
                    return True
            elif envoy_regex(allowed.pattern).fullmatch(value.encode("utf-8")) is not None:
                return True
    return False


def merged_cors(route: CorsPolicy, vh: CorsPolicy) -> CorsPolicy:
    """What Envoy's CORS filter applies with both a route and a virtual host policy: each field
    from the route's policy unless it is empty there, then the virtual host's
    (`CorsFilter::allowOrigins` and its siblings walk the per-filter configs, most specific
    first). The two flags are always set by the translator, so the route's count."""
    return CorsPolicy(
        allow_origins=route.allow_origins or vh.allow_origins,
        allow_methods=route.allow_methods or vh.allow_methods,
        allow_headers=route.allow_headers or vh.allow_headers,
        expose_headers=route.expose_headers or vh.expose_headers,
        max_age_s=route.max_age_s if route.max_age_s is not None else vh.max_age_s,
        allow_credentials=route.allow_credentials,
        allow_private_network=route.allow_private_network,
    )


def _first(request: PolicyRequest, name: str) -> str:
    values = request.header_values(name)
    return values[0] if values else ""


def preflight_headers(
    policy: CorsPolicy, origin: str, request: PolicyRequest
) -> tuple[tuple[str, str], ...]:
    """The headers of Envoy's answer to an allowed preflight (`CorsFilter::decodeHeaders`)."""
    out = [("access-control-allow-origin", origin)]
    if policy.allow_credentials:
        out.append(("access-control-allow-credentials", "true"))
    private = _first(request, "access-control-request-private-network")
    if policy.allow_private_network and private == "true":
        out.append(("access-control-allow-private-network", "true"))
    if policy.allow_methods:
        out.append(("access-control-allow-methods", ",".join(policy.allow_methods)))
    if policy.allow_headers:
        out.append(("access-control-allow-headers", ",".join(policy.allow_headers)))
    if policy.max_age_s is not None:
        out.append(("access-control-max-age", str(max(0, policy.max_age_s))))
    return tuple(out)


def cors_step(ctx: PolicyContext) -> PolicyAnswer | None:
    route, vh, request = ctx.route, ctx.virtual_host, ctx.request
    if isinstance(route.action, DirectResponse | Redirect):
        return None  # Envoy bypasses the CORS filter on such routes
    policy, source = _effective(route.policies.cors, vh.policies.cors, route, vh)
    if policy is not None and route.policies.cors is not None and vh.policies.cors is not None:
        policy = merged_cors(route.policies.cors, vh.policies.cors)
    origin = _first(request, "origin")
    requested = _first(request, "access-control-request-method")
    preflight = request.method == "OPTIONS" and origin != "" and requested != ""
    if policy is None or not preflight or not origin_allowed(policy, origin):
        return None
    return PolicyAnswer(
        CORS_PREFLIGHT_STATUS,
        "CORS",
        "envoy.filters.http.cors",
        source,
        definite=True,
        reason=f"a CORS preflight from allowed origin {origin}",
        headers=preflight_headers(policy, origin, request),
    )


# --- IP allow/deny lists -------------------------------------------------------------------------


def _parse_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def remote_address(peer: str, forwarded_for: Sequence[str], num_trusted_hops: int) -> str:
    """The client address Envoy (`use_remote_address`) derives: the peer without trusted hops,
    else the `num_trusted_hops`-th address from the right of X-Forwarded-For as the client sent
    it; the peer when there are fewer entries or that one does not parse."""
    if num_trusted_hops <= 0:
        return peer
    entries = [e for value in forwarded_for for e in value.split(",")]
    if len(entries) < num_trusted_hops:
        return peer
    chosen = _parse_address(entries[len(entries) - num_trusted_hops])
    return str(chosen) if chosen is not None else peer


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    # As the translator's `cidr_range`: a zone or a netmask does not parse.
    text = cidr.strip()
    _, sep, length = text.partition("/")
    if "%" in text or (sep and not (length.isascii() and length.isdigit())):
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def ip_filter_denies(ip_filter: IPFilter, peer: str, remote: str) -> str | None:
    """Why the filter answers 403, or None when it lets the request through (the translator's
    `rbac_per_route`: an unparsable rule is dropped from an allow list and denies all in a deny
    list)."""
    matched: str | None = None
    broken = False
    for rule in ip_filter.rules:
        network = _network(rule.cidr)
        if network is None:
            broken = True
            continue
        text = remote if rule.source is IPFilterSource.REMOTE else peer
        address = _parse_address(text)
        if matched is None and address is not None and address in network:
            matched = f"{rule.source.value} address {address} is in {rule.cidr}"
    if ip_filter.allow:
        return None if matched else f"neither address {peer} nor {remote} is on the allow list"
    if broken:
        return "the deny list has a rule that does not parse, so it denies every address"
    return matched


def ip_filter_step(ctx: PolicyContext) -> PolicyAnswer | None:
    route, vh, request = ctx.route, ctx.virtual_host, ctx.request
    ip_filter, source = _effective(route.policies.ip_filter, vh.policies.ip_filter, route, vh)
    if ip_filter is None:
        return None
    peer = request.client_address
    remote = remote_address(peer, request.header_values("x-forwarded-for"), ctx.num_trusted_hops)
    reason = ip_filter_denies(ip_filter, peer, remote)
    if reason is None:
        return None
    kind = "IP allow list" if ip_filter.allow else "IP deny list"
    return PolicyAnswer(
        IP_DENIED_STATUS, kind, "envoy.filters.http.rbac", source, definite=True, reason=reason
    )


# --- local rate limits ---------------------------------------------------------------------------


def _unit(seconds: int) -> str:
    return {1: "second", 60: "minute", 3600: "hour"}.get(seconds, f"{seconds} s")


def rate_limit_step(ctx: PolicyContext) -> PolicyAnswer | None:
    route, vh = ctx.route, ctx.virtual_host
    limit, source = _effective(route.policies.rate_limit, vh.policies.rate_limit, route, vh)
    if limit is None:
        return None
    return PolicyAnswer(
        _rate_limit_status(limit),
        "local rate limit",
        "envoy.filters.http.local_ratelimit",
        source,
        definite=False,
        reason=_rate_limit_reason(limit),
    )


def _rate_limit_status(limit: LocalRateLimit) -> int:
    # The translator sends Envoy's default (429) for a status Envoy cannot send.
    return limit.status if 200 <= limit.status <= 599 else 429


def _rate_limit_reason(limit: LocalRateLimit) -> str:
    burst = f" (burst {limit.burst})" if limit.burst > 0 else ""
    requests = max(limit.requests, 1)
    return f"once the limit of {requests} per {_unit(limit.unit_s)}{burst} is reached"


# --- JWT validation ------------------------------------------------------------------------------


def jwt_step(ctx: PolicyContext) -> PolicyAnswer | None:
    jwt: JwtValidation | None = ctx.route.policies.jwt
    if jwt is None or jwt.jwks_endpoint() is None:
        return None
    has_token = any(
        v.partition("Bearer ")[2].strip() for v in ctx.request.header_values("authorization")
    )
    issuer = f"issuer {jwt.issuer} (keys {jwt.jwks_uri})"
    reason = (
        f"unless the Bearer token verifies: signed by a key of {issuer}, with a subject"
        if has_token
        else f"no Authorization: Bearer token; a valid JWT of {issuer} is required"
    )
    return PolicyAnswer(
        JWT_MISSING_STATUS,
        "JWT validation",
        "envoy.filters.http.jwt_authn",
        _route_source(ctx.route),
        definite=not has_token,
        reason=reason,
    )


# --- the steps -----------------------------------------------------------------------------------


def _effective(
    on_route: P | None, on_vh: P | None, route: Route, vh: VirtualHost
) -> tuple[P | None, str]:
    if on_route is not None:
        return on_route, _route_source(route)
    return on_vh, _vh_source(vh)


# Envoy's filter order (`policy_http_filters`); ext_authz and other filters slot in here.
POLICY_STEPS: tuple[PolicyStep, ...] = (cors_step, ip_filter_step, rate_limit_step, jwt_step)


def answer_policies(
    ctx: PolicyContext, steps: Sequence[PolicyStep] = POLICY_STEPS
) -> tuple[PolicyAnswer, ...]:
    """The answers of the policy filters in order, ending with the first definite one (Envoy
    runs no filter after one that answered)."""
    out: list[PolicyAnswer] = []
    for step in steps:
        answer = step(ctx)
        if answer is not None:
            out.append(answer)
            if answer.definite:
                break
    return tuple(out)


def deciding_answer(answers: Sequence[PolicyAnswer]) -> PolicyAnswer | None:
    """The answer that counts: the definite one, else the first conditional one."""
    definite = [a for a in answers if a.definite]
    return definite[0] if definite else (answers[0] if answers else None)
