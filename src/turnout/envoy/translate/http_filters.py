"""Virtual-host and route policies that Envoy enforces in HTTP filters: CORS, IP allow/deny lists
(RBAC) and local rate limits.

Every HTTP connection manager carries the four filters, in this order, first in its chain:

    envoy.filters.http.cors -> envoy.filters.http.rbac -> envoy.filters.http.local_ratelimit
    -> envoy.filters.http.compressor
    (-> the Lua filter of cookie rewrites -> envoy.filters.http.router)

(with `--rate-limit-service`, `envoy.filters.http.ratelimit` follows the local rate limiter: see
`rate_limit.py`; the compressor is listed `disabled` and a route that compresses enables it with a
`FilterConfig`; CORS can also be set per route, merged field by field with the virtual host's)

While some route validates JWTs (`RoutePolicies.jwt`), every connection manager also carries
`envoy.filters.http.jwt_authn` after the rate limiter (a flood of bad tokens is limited before
signatures are checked): one provider and one requirement per (issuer, JWKS URI), named by
`jwt_provider_name`, and no `rules`, so a route checks tokens only when its
`PerRouteConfig.requirement_name` asks for one and every other route is untouched. The providers
are listener configuration: the listeners change when the set of issuers changes, not when routes
using them come and go (see `jwt_authn_filter`).

and each of them does nothing until a virtual host or a route configures it through
`typed_per_filter_config` (the most specific configuration wins: a route's replaces its virtual
host's). Keeping the filters present whether or not any host uses them means that adding or
removing a policy changes only route tables (RDS): the listeners stay byte-identical, so Envoy
never drains a listener's connections because one tenant switched CORS on. The cost is three
idle filters per connection manager.

The order differs from Contour's (cors, local_ratelimit, rbac): an address refused by the IP
filter gets its 403 before it can take tokens from a bucket, so a denied client cannot rate-limit
the clients that are allowed in. CORS comes first, as in Contour, so preflight requests are
answered without spending tokens.

Everything here is pure and guards Envoy's own limits: a value no dialect should produce (a CIDR
that does not parse, a status Envoy cannot send) degrades on its own virtual host or route and
never makes Envoy reject a whole route table.
"""

from __future__ import annotations

import hashlib
import ipaddress
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2
from envoy.config.rbac.v3 import rbac_pb2 as rbac_config_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.compression.gzip.compressor.v3 import gzip_pb2
from envoy.extensions.filters.http.compressor.v3 import compressor_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import http_status_pb2, percent_pb2, token_bucket_pb2

from turnout.compile_inputs import RateLimitService
from turnout.envoy.translate.common import duration, pack
from turnout.envoy.translate.rate_limit import rate_limit_filter
from turnout.graph.model import (
    CorsPolicy,
    DnsLookupFamily,
    ExternalAuthorization,
    HeaderValue,
    IPFilter,
    IPFilterSource,
    JwtValidation,
    LocalRateLimit,
    RegexOrigin,
    Route,
    RouteAuthorization,
    RoutingGraph,
    UpstreamValidation,
    VirtualHost,
)

CORS_FILTER = "envoy.filters.http.cors"
RBAC_FILTER = "envoy.filters.http.rbac"
LOCAL_RATELIMIT_FILTER = "envoy.filters.http.local_ratelimit"
COMPRESSOR_FILTER = "envoy.filters.http.compressor"
JWT_AUTHN_FILTER = "envoy.filters.http.jwt_authn"
EXT_AUTHZ_FILTER = "envoy.filters.http.ext_authz"


# The name of the one RBAC policy turnout writes; it shows in Envoy's RBAC stats and logs.
IP_FILTER_POLICY = "ip-filter"

# The filter-wide local rate limiter has no token bucket, so it limits nothing by itself.
_RATELIMIT_STAT_PREFIX = "http"

_UINT32_MAX = 2**32 - 1
# `LocalRateLimit.response_headers_to_add` is limited to 10 entries by its proto validation.
MAX_RATE_LIMIT_HEADERS = 10
# `HttpStatus.code` must be a value of Envoy's `StatusCode` enum (`defined_only`).
_SENDABLE_STATUSES = frozenset(v for v in http_status_pb2.StatusCode.values() if v >= 200)
# Stat sinks (statsd, Prometheus) choke on other characters; route names have "/" and "[".
_STAT_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Envoy's `token_bucket.fill_interval` must be at least 50 ms.
_MIN_FILL_INTERVAL_S = 0.05


def policy_http_filters(
    jwt_providers: Sequence[JwtValidation] = (),
    rate_limit_service: RateLimitService | None = None,
    authorization: ExternalAuthorization | None = None,
) -> list[Any]:
    """The policy filters of every HTTP connection manager, disabled until configured, with the
    global rate limiter when a rate limit service is configured (`rate_limit.py`), the JWT filter
    when some route validates tokens (`jwt_providers`, see `jwt_providers`), and the `ext_authz`
    filter of a TLS host's chain whose host has `authorization`."""
    # The global limiter after the local one (a client over its local limit costs the service
    # no call); then tokens; then external authorization, as in Contour: cheap refusals first.
    optional = [rate_limit_filter(rate_limit_service)] if rate_limit_service is not None else []
    optional += [jwt_authn_filter(jwt_providers)] if jwt_providers else []
    optional += [ext_authz_filter(authorization)] if authorization is not None else []
    return [
        hcm_pb2.HttpFilter(name=CORS_FILTER, typed_config=pack(cors_pb2.Cors())),
        # No `rules`: the filter enforces nothing until a virtual host or route sets some (an
        # empty `rules` would deny every request).
        hcm_pb2.HttpFilter(name=RBAC_FILTER, typed_config=pack(rbac_filter_pb2.RBAC())),
        hcm_pb2.HttpFilter(
            name=LOCAL_RATELIMIT_FILTER,
            typed_config=pack(
                local_rate_limit_pb2.LocalRateLimit(stat_prefix=_RATELIMIT_STAT_PREFIX)
            ),
        ),
        *optional,
        # Disabled: only a route that compresses enables it (`route_compression`).
        hcm_pb2.HttpFilter(
            name=COMPRESSOR_FILTER, typed_config=pack(gzip_compressor()), disabled=True
        ),
    ]


def gzip_compressor() -> Any:
    """The compressor filter: gzip, for `COMPRESSIBLE_TYPES`, when the client accepts gzip."""
    config = compressor_pb2.Compressor()
    config.compressor_library.name = "gzip"
    config.compressor_library.typed_config.CopyFrom(pack(gzip_pb2.Gzip()))
    # No content types: Envoy's defaults are COMPRESSIBLE_TYPES (setting them is deprecated).
    config.response_direction_config.common_config.SetInParent()
    return config


def route_compression() -> Any:
    """A per-route `FilterConfig` switching on the compressor the HCM lists as disabled. Envoy
    wants a configuration in it: overrides that change nothing."""
    per_route = compressor_pb2.CompressorPerRoute()
    per_route.overrides.response_direction_config.SetInParent()
    return rc.FilterConfig(config=pack(per_route), disabled=False)


def set_virtual_host_filter_configs(out: Any, vh: VirtualHost) -> None:
    """Adds the virtual host's CORS, IP filter and rate limit to `out` (an Envoy VirtualHost)."""
    policies = vh.policies
    if policies.cors is not None:
        out.typed_per_filter_config[CORS_FILTER].CopyFrom(pack(cors_policy(policies.cors)))
    if policies.ip_filter is not None:
        out.typed_per_filter_config[RBAC_FILTER].CopyFrom(pack(rbac_per_route(policies.ip_filter)))
    if policies.rate_limit is not None:
        config = local_rate_limit(policies.rate_limit, f"vhost.{vh.name}")
        out.typed_per_filter_config[LOCAL_RATELIMIT_FILTER].CopyFrom(pack(config))


def set_route_filter_configs(out: Any, route: Route, stat_name: str) -> None:
    """Adds the route's CORS policy, IP filter, rate limit and compression to `out` (an Envoy
    Route); each replaces the virtual host's for this route only (Envoy reads CORS field by
    field: a field the route's policy leaves empty comes from the virtual host's). `stat_name`
    names the route's rate-limit stats."""
    policies = route.policies
    if policies.cors is not None:
        out.typed_per_filter_config[CORS_FILTER].CopyFrom(pack(cors_policy(policies.cors)))
    if policies.ip_filter is not None:
        out.typed_per_filter_config[RBAC_FILTER].CopyFrom(pack(rbac_per_route(policies.ip_filter)))
    if policies.rate_limit is not None:
        config = local_rate_limit(policies.rate_limit, "route." + _STAT_UNSAFE.sub("_", stat_name))
        out.typed_per_filter_config[LOCAL_RATELIMIT_FILTER].CopyFrom(pack(config))
    if policies.compression is not None:
        out.typed_per_filter_config[COMPRESSOR_FILTER].CopyFrom(pack(route_compression()))
    if policies.jwt is not None and policies.jwt.jwks_endpoint() is not None:
        per_route = jwt_pb2.PerRouteConfig(requirement_name=jwt_provider_name(policies.jwt))
        out.typed_per_filter_config[JWT_AUTHN_FILTER].CopyFrom(pack(per_route))
    auth = policies.authorization
    if auth is not None and (auth.disabled or auth.context):
        out.typed_per_filter_config[EXT_AUTHZ_FILTER].CopyFrom(pack(ext_authz_per_route(auth)))


# --- external authorization ----------------------------------------------------------------------


def ext_authz_filter(auth: ExternalAuthorization) -> Any:
    """Envoy's gRPC `ext_authz` (transport API v3) checking every request of the chain with the
    server at `auth.cluster`; routes opt out or add context with `ext_authz_per_route`. Only the
    chain of a TLS host with authorization has it, so no other host pays for it or can bypass
    it. Contour's settings: the peer certificate is passed, `failure_mode_allow` is `fail_open`,
    and a server that answers nothing within the timeout counts as a failure."""
    config = ext_authz_pb2.ExtAuthz(
        transport_api_version=config_source_pb2.ApiVersion.V3,
        failure_mode_allow=auth.fail_open,
        include_peer_certificate=True,
    )
    config.grpc_service.envoy_grpc.cluster_name = auth.cluster
    if auth.response_timeout_s is not None:
        config.grpc_service.timeout.CopyFrom(duration(auth.response_timeout_s))
    body = auth.with_request_body
    if body is not None:
        config.with_request_body.max_request_bytes = body.max_request_bytes
        config.with_request_body.allow_partial_message = body.allow_partial_message
        config.with_request_body.pack_as_bytes = body.pack_as_bytes
    return hcm_pb2.HttpFilter(name=EXT_AUTHZ_FILTER, typed_config=pack(config))


def ext_authz_per_route(auth: RouteAuthorization) -> Any:
    """A route skipping the check, or checked with its context extensions."""
    if auth.disabled:
        return ext_authz_pb2.ExtAuthzPerRoute(disabled=True)
    out = ext_authz_pb2.ExtAuthzPerRoute()
    out.check_settings.context_extensions.update(dict(auth.context))
    return out


# --- JWT validation ------------------------------------------------------------------------------

# A failed key set fetch is tried again this often (Envoy's async_fetch.failed_refetch_duration).
JWKS_REFETCH_S = 5.0
JWKS_RETRIES = 3


@dataclass(frozen=True, slots=True)
class JwksCluster:
    """One cluster that JWT providers fetch key sets through (`clusters.jwks_cluster`)."""

    tls: bool
    host: str
    port: int
    validation: UpstreamValidation | None = None
    dns_lookup_family: DnsLookupFamily = DnsLookupFamily.DEFAULT


def jwt_providers(graph: RoutingGraph) -> tuple[JwtValidation, ...]:
    """The distinct JWT validations the graph's routes ask for, sorted: one provider each."""
    return sorted_providers(
        jwt for lst in graph.listeners for vh in lst.virtual_hosts for jwt in host_jwts(vh)
    )


def host_jwts(vh: VirtualHost) -> frozenset[JwtValidation]:
    """The JWT validations (with a JWKS endpoint) the routes of one virtual host ask for."""
    # One C-speed pass over the routes: a big host has tens of thousands, few with a JWT.
    found = set(map(_ROUTE_JWT, vh.routes))
    found.discard(None)
    return frozenset(jwt for jwt in found if jwt.jwks_endpoint() is not None)


_ROUTE_JWT = operator.attrgetter("policies.jwt")


def sorted_providers(found: Iterable[JwtValidation]) -> tuple[JwtValidation, ...]:
    """Distinct validations in the order `jwt_providers` gives them."""
    return tuple(sorted(set(found), key=lambda j: (j.issuer or "", j.jwks_uri, repr(j))))


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:12]


def jwt_provider_name(jwt: JwtValidation) -> str:
    """The provider (and requirement) name of a validation: its (issuer, JWKS URI) pair, with a
    digest of its other settings when they are not Skipper's (two Contour providers of one
    issuer may differ in audiences or forwarding)."""
    base = f"{jwt.issuer or '-'} {jwt.jwks_uri}"
    return base if jwt == JwtValidation(jwt.issuer, jwt.jwks_uri) else f"{base} {_digest(jwt)}"


def jwks_cluster_key(jwt: JwtValidation) -> JwksCluster | None:
    """What the cluster a validation fetches its key set through depends on."""
    endpoint = jwt.jwks_endpoint()
    if endpoint is None:
        return None
    tls, host, port = endpoint
    return JwksCluster(tls, host, port, jwt.validation if tls else None, jwt.dns_lookup_family)


def jwks_cluster_name(key: JwksCluster) -> str:
    """The cluster Envoy fetches a JWKS from (`clusters.jwks_cluster`); Service clusters are
    `namespace/service/port/hash`, so the names never meet."""
    base = f"turnout-jwks/{'https' if key.tls else 'http'}/{key.host}:{key.port}"
    plain = key.validation is None and key.dns_lookup_family is DnsLookupFamily.DEFAULT
    return base if plain else f"{base}/{_digest((key.validation, key.dns_lookup_family))}"


def jwt_authn_filter(providers: Sequence[JwtValidation]) -> Any:
    """`envoy.filters.http.jwt_authn` with one provider per validation. Skipper's
    `jwtValidation`: the token from `Authorization: Bearer` only (not Envoy's default
    `access_token` query parameter), forwarded to the backend unchanged, a non-empty `sub`.
    Contour's providers: Envoy's token sources, audiences, and the token removed unless
    `forwardJWT`. Either way a failure is a bare 401 (`strip_failure_response`: no body and no
    WWW-Authenticate, as Skipper's `unauthorized`) and Envoy requires `iss` to be the issuer
    when there is one.

    The key set is fetched when the listener starts and refreshed in the background
    (`async_fetch` with `fast_listener`, so one slow issuer never holds a listener update
    back); until it arrives, tokens fail with 401."""
    config = jwt_pb2.JwtAuthentication(strip_failure_response=True)
    for jwt in providers:
        key = jwks_cluster_key(jwt)
        if key is None:
            continue
        name = jwt_provider_name(jwt)
        provider = config.providers[name]
        if jwt.issuer is not None:
            provider.issuer = jwt.issuer
        provider.audiences.extend(jwt.audiences)
        provider.forward = jwt.forward
        if jwt.bearer_header_only:
            provider.from_headers.add(name="Authorization", value_prefix="Bearer ")
        if jwt.require_subject:
            provider.subjects.safe_regex.regex = ".+"
        remote = provider.remote_jwks
        remote.http_uri.uri = jwt.jwks_uri
        remote.http_uri.cluster = jwks_cluster_name(key)
        remote.http_uri.timeout.CopyFrom(duration(jwt.timeout_s))
        remote.cache_duration.CopyFrom(duration(jwt.cache_s))
        remote.async_fetch.fast_listener = True
        remote.async_fetch.failed_refetch_duration.CopyFrom(duration(JWKS_REFETCH_S))
        remote.retry_policy.num_retries.value = JWKS_RETRIES
        config.requirement_map[name].provider_name = name
    return hcm_pb2.HttpFilter(name=JWT_AUTHN_FILTER, typed_config=pack(config))


# --- CORS ----------------------------------------------------------------------------------------


def cors_policy(policy: CorsPolicy) -> Any:
    """`envoy.extensions.filters.http.cors.v3.CorsPolicy` (never the deprecated
    `VirtualHost.cors`). Exact origins ignore case, as browsers send the scheme and host in lower
    case anyway; `*` is an exact match that Envoy treats as "any origin"."""
    out = cors_pb2.CorsPolicy(
        allow_methods=",".join(policy.allow_methods),
        allow_headers=",".join(policy.allow_headers),
        expose_headers=",".join(policy.expose_headers),
    )
    out.allow_credentials.value = policy.allow_credentials
    out.allow_private_network_access.value = policy.allow_private_network
    if policy.max_age_s is not None:
        out.max_age = str(max(0, policy.max_age_s))
    for origin in policy.allow_origins:
        if isinstance(origin, RegexOrigin):
            matcher = string_pb2.StringMatcher()
            matcher.safe_regex.CopyFrom(regex_pb2.RegexMatcher(regex=origin.pattern))
        else:
            matcher = string_pb2.StringMatcher(exact=origin.origin, ignore_case=True)
        out.allow_origin_string_match.append(matcher)
    return out


# --- IP allow/deny lists (RBAC) ------------------------------------------------------------------


def rbac_per_route(ip_filter: IPFilter) -> Any:
    """`RBACPerRoute` for one IP filter. `Peer` is the connection's own address
    (`direct_remote_ip`); `Remote` is the client address Envoy derives from X-Forwarded-For
    with the HTTP connection manager's `xff_num_trusted_hops` (`remote_ip`).

    An allow list admits the listed addresses and answers 403 to everyone else; a deny list
    answers 403 to the listed addresses. A rule whose CIDR does not parse fails closed: an allow
    list loses the rule (fewer addresses admitted), a deny list denies everybody, because
    dropping a deny rule would let in what the user meant to keep out.
    """
    principals: list[Any] = []
    broken = False
    for rule in ip_filter.rules:
        cidr = cidr_range(rule.cidr)
        if cidr is None:
            broken = True
            continue
        principal = rbac_config_pb2.Principal()
        if rule.source is IPFilterSource.REMOTE:
            principal.remote_ip.CopyFrom(cidr)
        else:
            principal.direct_remote_ip.CopyFrom(cidr)
        principals.append(principal)
    rules = rbac_config_pb2.RBAC()
    if not ip_filter.allow and broken:
        # An ALLOW action without policies matches nobody, so every request is denied.
        rules.action = rbac_config_pb2.RBAC.ALLOW
    else:
        rules.action = rbac_config_pb2.RBAC.ALLOW if ip_filter.allow else rbac_config_pb2.RBAC.DENY
        if principals:
            # A policy needs at least one principal: an empty allow list denies everyone (no
            # policy under ALLOW), an empty deny list denies no one (no policy under DENY).
            policy = rules.policies[IP_FILTER_POLICY]
            policy.permissions.add().any = True
            policy.principals.extend(principals)
    out = rbac_filter_pb2.RBACPerRoute()
    out.rbac.rules.CopyFrom(rules)
    return out


def cidr_range(cidr: str) -> Any | None:
    """`CidrRange` of the network `cidr` names (host bits cleared; a bare address is a /32 or
    /128), or None when it does not parse."""
    text = cidr.strip()
    if "%" in text:  # an IPv6 zone never names a network
        return None
    _, sep, length = text.partition("/")
    if sep and not (length.isascii() and length.isdigit()):
        return None  # ipaddress would also take a netmask (a.b.c.d/255.0.0.0); Envoy does not
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    out = address_pb2.CidrRange(address_prefix=str(network.network_address))
    out.prefix_len.value = network.prefixlen
    return out


# --- local rate limits ---------------------------------------------------------------------------


def local_rate_limit(limit: LocalRateLimit, stat_prefix: str) -> Any:
    """A `LocalRateLimit` with its own token bucket: `requests + burst` tokens, `requests` more
    every `unit_s` seconds, shared by every connection (and worker) the virtual host or route
    serves. A rate-limited request gets `status` (Envoy's default, 429, for a status Envoy
    cannot send) with `response_headers`."""
    requests = min(max(limit.requests, 1), _UINT32_MAX)
    bucket = token_bucket_pb2.TokenBucket(
        max_tokens=min(requests + max(limit.burst, 0), _UINT32_MAX)
    )
    bucket.tokens_per_fill.value = requests
    bucket.fill_interval.CopyFrom(duration(max(float(limit.unit_s), _MIN_FILL_INTERVAL_S)))
    out = local_rate_limit_pb2.LocalRateLimit(stat_prefix=stat_prefix, token_bucket=bucket)
    # Both at 100 %: without filter_enabled the limiter only counts, without filter_enforced it
    # does not reject.
    for field in (out.filter_enabled, out.filter_enforced):
        field.default_value.numerator = 100
        field.default_value.denominator = percent_pb2.FractionalPercent.HUNDRED
    if limit.status in _SENDABLE_STATUSES and limit.status != 429:
        out.status.code = limit.status
    out.response_headers_to_add.extend(_header_options(limit.response_headers))
    return out


def _header_options(headers: Iterable[HeaderValue]) -> list[Any]:
    out = []
    for header in headers:
        if not _valid_header(header):
            continue
        option = base_pb2.HeaderValueOption(
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
        )
        option.header.key = header.name
        option.header.value = header.value
        out.append(option)
        if len(out) == MAX_RATE_LIMIT_HEADERS:
            break
    return out


def _valid_header(header: HeaderValue) -> bool:
    # Envoy's HTTP_HEADER_NAME / HTTP_HEADER_VALUE rules; a pseudo-header cannot be added.
    name = header.name
    if not name or name.startswith(":") or any(c in name for c in "\x00\r\n"):
        return False
    return not any(c in header.value for c in "\x00\r\n")
