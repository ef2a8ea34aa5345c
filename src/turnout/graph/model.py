"""The routing graph: frozen, typed records that every dialect compiles into.

Nothing here knows a dialect or an Envoy type. Routes in a virtual host are an explicit first-match
order: dialects sort them by their own precedence rules and nothing downstream re-sorts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from turnout.compile_inputs import ListenerProtocol
from turnout.objects import ObjectRef


class PathMatchKind(enum.Enum):
    EXACT = "exact"
    PREFIX = "prefix"  # a string prefix: /foo matches /foobar
    SEGMENT_PREFIX = (
        "segment_prefix"  # a path-segment prefix: /foo matches /foo and /foo/x, not /foobar
    )
    REGEX = "regex"  # RE2, must match the whole path (without the query string)


@dataclass(frozen=True, slots=True)
class PathMatch:
    kind: PathMatchKind
    value: str

    @staticmethod
    def prefix(value: str = "/") -> PathMatch:
        return PathMatch(PathMatchKind.PREFIX, value)


class StringMatchKind(enum.Enum):
    PRESENT = "present"
    EXACT = "exact"
    PREFIX = "prefix"
    SUFFIX = "suffix"
    CONTAINS = "contains"
    REGEX = "regex"
    # Headers only: the value is an integer in [start, end), written "start,end" (Envoy's
    # HeaderMatcher.range_match; Skipper's ContentLengthBetween).
    RANGE = "range"


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """One header condition. `invert` negates the whole condition (notpresent, notexact, ...).

    `treat_missing_as_empty`: a missing header is evaluated as the empty string instead of failing.
    Header names are lower case; pseudo-headers (`:method`, `:authority`) are allowed.
    """

    name: str
    kind: StringMatchKind
    value: str = ""
    invert: bool = False
    ignore_case: bool = False
    treat_missing_as_empty: bool = False


@dataclass(frozen=True, slots=True)
class QueryMatch:
    name: str
    kind: StringMatchKind
    value: str = ""
    ignore_case: bool = False


@dataclass(frozen=True, slots=True)
class RouteMatch:
    path: PathMatch = field(default_factory=PathMatch.prefix)
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[QueryMatch, ...] = ()
    # The share of requests (0..1) the route matches at all (Skipper's Traffic): Envoy draws one
    # random number per request and every route compares its fraction with that same number
    # (RouteMatch.runtime_fraction). None: every request.
    runtime_fraction: float | None = None


class UpstreamProtocol(enum.Enum):
    HTTP = "http"  # HTTP/1.1 in clear text
    H2C = "h2c"  # HTTP/2 in clear text
    TLS = "tls"  # HTTP/1.1 over TLS
    H2 = "h2"  # HTTP/2 over TLS
    TCP = "tcp"


class LoadBalancerStrategy(enum.Enum):
    ROUND_ROBIN = "RoundRobin"
    WEIGHTED_LEAST_REQUEST = "WeightedLeastRequest"
    RANDOM = "Random"
    REQUEST_HASH = "RequestHash"
    COOKIE = "Cookie"


@dataclass(frozen=True, slots=True)
class HTTPHealthCheck:
    """Active HTTP health checking of a cluster's endpoints (seed 002 `lbHealthCheck`, Contour's
    `healthCheckPolicy`). Times are in seconds; statuses are inclusive-exclusive [start, end)."""

    path: str
    host: str = "contour-envoy-healthcheck"
    interval_s: float = 5.0
    timeout_s: float = 2.0
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2
    expected_statuses: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TCPHealthCheck:
    """Active TCP health checking: an endpoint is healthy when it accepts a connection (Contour's
    `tcpproxy.healthCheckPolicy`). Times are in seconds."""

    interval_s: float = 10.0
    timeout_s: float = 2.0
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2


@dataclass(frozen=True, slots=True)
class OutlierDetection:
    """Passive health checking: eject an endpoint after consecutive failures (seed 001
    `failurePolicy`, Skipper `consecutiveBreaker`)."""

    consecutive_5xx: int = 5
    consecutive_gateway_errors: int | None = None
    interval_s: float = 10.0
    base_ejection_time_s: float = 30.0
    max_ejection_percent: int = 50


@dataclass(frozen=True, slots=True)
class UpstreamValidation:
    """Verify the upstream's certificate (Contour `validation`, Gateway API BackendTLSPolicy)."""

    ca_secret: str  # name of a CA bundle in RoutingGraph.ca_bundles; "" with system_trust_store
    subject_names: tuple[str, ...]  # DNS subject alternative names, any of which must match
    sni: str | None = None
    # Chain to the installation's system trust store (BackendTLSPolicy `wellKnownCACertificates:
    # System`) instead of a bundle: a file on Envoy's host (`TranslateOptions.system_ca_file`),
    # so it is not part of the graph.
    system_trust_store: bool = False
    # URI subject alternative names (BackendTLSPolicy `subjectAltNames` of type URI, e.g. SPIFFE
    # IDs), matched exactly. The certificate must carry one of `subject_names` or `subject_uris`.
    subject_uris: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlowStart:
    window_s: float
    aggression: float = 1.0
    min_weight_percent: int = 10


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """How a cluster talks to its endpoints. Part of the cluster's identity: two references to
    one Service port with different settings are two clusters."""

    protocol: UpstreamProtocol = UpstreamProtocol.HTTP
    lb_strategy: LoadBalancerStrategy = LoadBalancerStrategy.ROUND_ROBIN
    health_check: HTTPHealthCheck | None = None
    outlier_detection: OutlierDetection | None = None
    validation: UpstreamValidation | None = None
    slow_start: SlowStart | None = None
    connect_timeout_s: float | None = None
    # How long an upstream connection may stay open without requests (Contour's
    # `timeoutPolicy.idleConnection`); None: Envoy's default (1 h), 0: never closed for idleness.
    idle_connection_timeout_s: float | None = None
    tcp_health_check: TCPHealthCheck | None = None
    # The Service port (number) whose endpoint ports receive the active health checks (Contour's
    # `healthPort`); None: the traffic port. Resolved per endpoint into `Endpoint.health_port`.
    health_port: int | None = None
    # Bounded-load consistent hashing (Skipper consistentHashBalanceFactor): a percentage, 150 =
    # an endpoint takes at most 1.5 times the average load (Envoy's hash_balance_factor, >= 100).
    hash_balance_factor: int | None = None


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    address: str
    port: int
    # Where active health checks go (Envoy's `health_check_config.port_value`); 0: `port`.
    health_port: int = 0


@dataclass(frozen=True, slots=True)
class Cluster:
    """An upstream: a Service port (or a static set of endpoints) with its connection settings.

    `name` is deterministic and readable: namespace/service/port plus a short hash of settings.
    The endpoints are the ready endpoints, sorted, so the same input gives the same output.
    """

    name: str
    namespace: str
    service: str
    port: int  # the Service port the user referenced
    protocol: UpstreamProtocol = UpstreamProtocol.HTTP
    endpoints: tuple[Endpoint, ...] = ()
    lb_strategy: LoadBalancerStrategy = LoadBalancerStrategy.ROUND_ROBIN
    health_check: HTTPHealthCheck | None = None
    outlier_detection: OutlierDetection | None = None
    validation: UpstreamValidation | None = None
    slow_start: SlowStart | None = None
    connect_timeout_s: float | None = None
    idle_connection_timeout_s: float | None = None  # see UpstreamSettings
    tcp_health_check: TCPHealthCheck | None = None
    health_port: int | None = None  # see UpstreamSettings; the endpoints carry the target ports
    # Set for ExternalName Services and RouteGroup `network` backends: resolved by DNS in Envoy
    # (STRICT_DNS) instead of EDS endpoints.
    dns_name: str | None = None
    # Bounded-load consistent hashing (Skipper consistentHashBalanceFactor): a percentage, 150 =
    # an endpoint takes at most 1.5 times the average load (Envoy's hash_balance_factor, >= 100).
    hash_balance_factor: int | None = None
    # The local address Envoy connects from (None: the system's choice). Set only on turnout's
    # own upstreams; see compile_inputs.OWN_HOP_SOURCE_ADDRESS.
    source_address: str | None = None


# The cluster name of "an invalid backend" (Gateway API: a backendRef that does not resolve):
# requests sent to its weighted share are answered 500 and TCP connections to it are closed. No
# Cluster ever has this name (Service clusters are `ns/service/port/hash`); the translator emits
# it as a cluster Envoy does not know, with the route's `cluster_not_found_response_code` 500.
INVALID_BACKEND = "turnout/invalid-backend"
INVALID_BACKEND_STATUS = 500
# The statuses Envoy's cluster_not_found_response_code can answer (Forward.invalid_backend_status).
INVALID_BACKEND_STATUSES = (404, 500, 503)


def invalid_backend_status(status: int) -> int:
    """What Envoy answers for `Forward.invalid_backend_status`: itself when Envoy can, else 500."""
    return status if status in INVALID_BACKEND_STATUSES else INVALID_BACKEND_STATUS


@dataclass(frozen=True, slots=True)
class WeightedCluster:
    cluster: str  # Cluster.name, or INVALID_BACKEND
    weight: int
    # What happens to requests sent to this backend only (HTTPProxy per-service header and cookie
    # policies, Gateway API backendRef filters), on top of the route's own policies.
    policies: BackendPolicies | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request to one of the clusters, split by weight."""

    clusters: tuple[WeightedCluster, ...]
    # What the share of INVALID_BACKEND answers: 500 (Gateway API HTTPRoute) or 503, which gRPC
    # clients read as UNAVAILABLE (GRPCRoute). Envoy can answer only 500, 503 or 404 (its
    # cluster_not_found_response_code); anything else is answered 500.
    invalid_backend_status: int = INVALID_BACKEND_STATUS


@dataclass(frozen=True, slots=True)
class DirectResponse:
    """Answer without an upstream: used for unresolved backends (502/503) and direct responses."""

    status: int
    body: str = ""
    # Response headers of the direct response itself (Skipper inlineContent's content type);
    # route response-header policies apply to forwarded responses only.
    headers: tuple[HeaderValue, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    scheme: str | None = None
    hostname: str | None = None
    port: int | None = None
    path: str | None = None
    prefix: str | None = None
    status: int = 302
    # Kept request query plus this one: `?<request query>&<query_suffix>` (Skipper's merge; the
    # `&` is there even when the request has no query). None: the query is the request's, or
    # the one `path` carries.
    query_suffix: str | None = None


RouteAction = Forward | DirectResponse | Redirect


@dataclass(frozen=True, slots=True)
class HeaderValue:
    name: str
    value: str  # may use Envoy's %VAR% substitutions; a literal % is written %%
    # Set (or appended) only when every substitution the value uses comes out non-empty;
    # otherwise the header is left as the request has it (Skipper's templates). False: Envoy's
    # rule, skipped only when the whole value is empty.
    when_resolved: bool = False


@dataclass(frozen=True, slots=True)
class HeaderPolicy:
    """Changes to request or response headers, applied in the order: remove, set, add."""

    set: tuple[HeaderValue, ...] = ()  # replace any existing value
    add: tuple[HeaderValue, ...] = ()  # append to existing values
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    count: int = 1
    per_try_timeout_s: float | None = None
    retry_on: tuple[str, ...] = ("5xx",)  # Envoy retry_on conditions
    retriable_status_codes: tuple[int, ...] = ()


class CrossSchemeRedirect(enum.Enum):
    """Whether an internal redirect may follow a target with another scheme than the request's
    (`x-forwarded-proto`)."""

    NEVER = "Never"
    ALWAYS = "Always"
    SAFE_ONLY = "SafeOnly"  # https -> http or https, http -> http only


@dataclass(frozen=True, slots=True)
class InternalRedirectPolicy:
    """Envoy follows an upstream's redirect itself and answers with the final response."""

    max_redirects: int | None = None  # None: Envoy's default of one
    response_codes: tuple[int, ...] = ()  # 301, 302, 303, 307, 308; empty: Envoy's default (302)
    cross_scheme: CrossSchemeRedirect = CrossSchemeRedirect.NEVER
    deny_repeated_route: bool = False  # refuse a target route an earlier redirect already went to


@dataclass(frozen=True, slots=True)
class Timeouts:
    """None: Envoy's default. 0: no timeout (Contour's `infinity`)."""

    response_s: float | None = None  # the whole request, upstream included (RouteAction.timeout)
    idle_s: float | None = None  # idle stream (RouteAction.idle_timeout)
    backend_request_s: float | None = None  # one upstream attempt (Gateway API backendRequest)


@dataclass(frozen=True, slots=True)
class Mirror:
    cluster: str  # Cluster.name
    percent: float = 100.0


@dataclass(frozen=True, slots=True)
class PathRewrite:
    """Replace the matched prefix (Contour replacePrefix, Gateway API ReplacePrefixMatch), or the
    whole path (ReplaceFullPath), or a regex substitution (Skipper modPath)."""

    prefix: str | None = None  # with `prefix`, replaces the route's matched prefix
    full_path: str | None = None
    regex: str | None = None
    substitution: str | None = None


@dataclass(frozen=True, slots=True)
class HostRewrite:
    literal: str | None = None
    from_header: str | None = None


@dataclass(frozen=True, slots=True)
class CookieRewrite:
    name: str
    path: str | None = None
    domain: str | None = None
    secure: bool | None = None
    same_site: str | None = None  # Strict | Lax | None


class IPFilterSource(enum.Enum):
    PEER = "Peer"  # the direct peer address
    REMOTE = "Remote"  # the client address from X-Forwarded-For (--num-trusted-hops)


@dataclass(frozen=True, slots=True)
class IPRule:
    cidr: str
    source: IPFilterSource = IPFilterSource.PEER


@dataclass(frozen=True, slots=True)
class IPFilter:
    """Only one of allow/deny semantics at a time: `allow` rules admit, everything else is 403;
    `deny` rules reject with 403, everything else passes."""

    allow: bool
    rules: tuple[IPRule, ...]


@dataclass(frozen=True, slots=True)
class LocalRateLimit:
    requests: int
    unit_s: int  # 1, 60, 3600
    burst: int = 0
    status: int = 429
    response_headers: tuple[HeaderValue, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoteAddressEntry:
    """`remote_address=<client address>` (the trusted address from X-Forwarded-For)."""


@dataclass(frozen=True, slots=True)
class RequestHeaderEntry:
    """`<descriptor_key>=<value of header_name>`; no descriptor when the header is missing."""

    header_name: str
    descriptor_key: str


@dataclass(frozen=True, slots=True)
class HeaderValueMatchEntry:
    """`header_match=<value>` when the request's headers match all of `headers`
    (`expect_match`), or when they do not (`expect_match` False)."""

    value: str
    headers: tuple[HeaderMatch, ...]
    expect_match: bool = True


@dataclass(frozen=True, slots=True)
class GenericKeyEntry:
    """A fixed `<key>=<value>`."""

    value: str
    key: str = "generic_key"


DescriptorEntry = RemoteAddressEntry | RequestHeaderEntry | HeaderValueMatchEntry | GenericKeyEntry


@dataclass(frozen=True, slots=True)
class RateLimitDescriptor:
    """One descriptor sent to the rate limit service: its entries in order. A descriptor one of
    whose entries cannot be produced for a request is not sent."""

    entries: tuple[DescriptorEntry, ...]


@dataclass(frozen=True, slots=True)
class GlobalRateLimit:
    """Ask the operator's rate limit service (`CompileOptions.rate_limit_service`) about the
    request's `descriptors`; the service decides the limits. On a route, its descriptors replace
    the virtual host's; `disabled` opts the route out of the virtual host's."""

    descriptors: tuple[RateLimitDescriptor, ...] = ()
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class ExactOrigin:
    """An allowed CORS origin compared without case (browsers send scheme and host in lower
    case); `*` is any origin."""

    origin: str


@dataclass(frozen=True, slots=True)
class RegexOrigin:
    """An allowed CORS origin as an RE2 regex over the whole Origin header."""

    pattern: str


OriginMatch = ExactOrigin | RegexOrigin
ANY_ORIGIN = ExactOrigin("*")


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    allow_origins: tuple[OriginMatch, ...]
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age_s: int | None = None
    allow_credentials: bool = False
    allow_private_network: bool = False


class HashSource(enum.Enum):
    HEADER = "header"
    QUERY = "query"
    SOURCE_IP = "source_ip"
    COOKIE = "cookie"


@dataclass(frozen=True, slots=True)
class HashPolicy:
    """How RequestHash/Cookie load balancing picks an endpoint (RouteAction.hash_policy)."""

    source: HashSource
    name: str = ""  # header, query parameter or cookie name
    terminal: bool = False
    cookie_ttl_s: float | None = None  # Cookie: Envoy generates the cookie when absent
    cookie_path: str | None = None  # Cookie: the Path of the generated cookie


# What the compressor compresses: Envoy's defaults, which its compressor filter keeps for every
# route (CompressorPerRoute cannot change them; setting others is deprecated in Envoy 1.40).
# Skipper's `compress` default differs: it also has application/x-javascript, text/javascript
# and application/octet-stream, and not application/xhtml+xml and text/xml.
COMPRESSIBLE_TYPES = (
    "application/javascript",
    "application/json",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/css",
    "text/html",
    "text/plain",
    "text/xml",
)


@dataclass(frozen=True, slots=True)
class Compression:
    """Compress responses (gzip) whose content type is one of `content_types`, when the client
    accepts it (Skipper's `compress`). The types are Envoy's compressor filter's, shared by every
    route that compresses: a route can switch compression on, not choose other types, so they
    must be `COMPRESSIBLE_TYPES` (graph.validate)."""

    content_types: tuple[str, ...]


# Skipper's key set refresh (filters/auth/jwt_validation.go: refreshInterval, refreshTimeout).
JWKS_CACHE_S = 3600.0
JWKS_TIMEOUT_S = 10.0


class DnsLookupFamily(enum.Enum):
    """How a key server's DNS name is resolved (Contour's `dnsLookupFamily`); DEFAULT is
    turnout's (IPv4 preferred)."""

    DEFAULT = ""
    AUTO = "auto"
    V4 = "v4"
    V6 = "v6"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class JwtValidation:
    """Requests need a valid JWT in `Authorization: Bearer <token>` (Skipper's `jwtValidation`):
    signed by a key of the JSON Web Key Set at `jwks_uri` (fetched and refreshed by Envoy), `iss`
    equal to `issuer`, a non-empty `sub`, and `exp`/`nbf` not violated. Anything else is answered
    401 before the route's action; the token is forwarded upstream unchanged. `jwks_uri` is what
    OpenID discovery of `issuer` answered (control plane, before the compile)."""

    issuer: str | None  # None checks no issuer (Contour's provider without `issuer`)
    jwks_uri: str  # an absolute http(s) URL
    # What Contour's `jwtProviders` add; the defaults are Skipper's `jwtValidation`.
    audiences: tuple[str, ...] = ()  # `aud` must hold one of them; () checks none
    forward: bool = True  # keep the token for the backend (Contour's `forwardJWT`)
    require_subject: bool = True  # Skipper refuses a token without `sub`; Contour does not
    # Skipper reads `Authorization: Bearer` only; Envoy's defaults (Contour) also read the
    # `access_token` query parameter.
    bearer_header_only: bool = True
    timeout_s: float = JWKS_TIMEOUT_S  # one key set fetch
    cache_s: float = JWKS_CACHE_S  # how long a fetched key set is used
    # https only: the key server's certificate chains to this CA bundle and names one of the
    # subject names; None checks it against the installation's CA file and the URI's host.
    validation: UpstreamValidation | None = None
    dns_lookup_family: DnsLookupFamily = DnsLookupFamily.DEFAULT

    def jwks_endpoint(self) -> tuple[bool, str, int] | None:
        """(TLS, host, port) that `jwks_uri` is fetched from, or None when it is not an absolute
        http(s) URL with a host (graph.validate keeps such a policy out of the graph)."""
        try:
            url = urlsplit(self.jwks_uri)
            port = url.port
        except ValueError:
            return None
        if url.scheme not in ("http", "https") or not url.hostname:
            return None
        tls = url.scheme == "https"
        return tls, url.hostname, port if port is not None else (443 if tls else 80)


@dataclass(frozen=True, slots=True)
class AuthorizationBody:
    """Send the request body to the authorization server (Envoy's `with_request_body`)."""

    max_request_bytes: int = 1024
    allow_partial_message: bool = False
    pack_as_bytes: bool = False


@dataclass(frozen=True, slots=True)
class ExternalAuthorization:
    """Every request of a virtual host is checked by an external authorization server first
    (Envoy's gRPC `ext_authz`, API v3) at `cluster` (an HTTP/2 cluster); a route may opt out or
    add context (`RoutePolicies.authorization`). `fail_open`: a server that cannot be reached lets
    requests through instead of answering 403."""

    cluster: str  # Cluster.name
    response_timeout_s: float | None = None  # None: Envoy's default; 0: no timeout
    fail_open: bool = False
    with_request_body: AuthorizationBody | None = None


@dataclass(frozen=True, slots=True)
class RouteAuthorization:
    """A route's part in its virtual host's external authorization: skipped (`disabled`), or
    checked with `context` (sorted key/value pairs the server receives as context extensions)."""

    disabled: bool = False
    context: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BackendPolicies:
    """Header, Host and cookie changes for the requests one backend of a route receives (and its
    responses). Applied besides the route's own (`RoutePolicies`); None fields change nothing."""

    request_headers: HeaderPolicy | None = None
    response_headers: HeaderPolicy | None = None
    host_rewrite: HostRewrite | None = None  # literal only: Envoy has no per-backend header form
    cookie_rewrites: tuple[CookieRewrite, ...] = ()
    # The requests this backend's share takes are answered with this instead of being forwarded
    # (a backend with nothing to forward to, in a split with backends that have).
    direct_response: DirectResponse | None = None


@dataclass(frozen=True, slots=True)
class RoutePolicies:
    """Everything a route does besides matching and choosing its action."""

    timeouts: Timeouts | None = None
    retry: RetryPolicy | None = None
    request_headers: HeaderPolicy | None = None
    response_headers: HeaderPolicy | None = None
    host_rewrite: HostRewrite | None = None
    path_rewrite: PathRewrite | None = None
    mirrors: tuple[Mirror, ...] = ()
    websockets: bool = False
    cookie_rewrites: tuple[CookieRewrite, ...] = ()
    ip_filter: IPFilter | None = None  # overrides the virtual host's
    rate_limit: LocalRateLimit | None = None
    global_rate_limit: GlobalRateLimit | None = None
    hash_policies: tuple[HashPolicy, ...] = ()
    cors: CorsPolicy | None = None  # Envoy fills its empty fields from the virtual host's
    compression: Compression | None = None
    jwt: JwtValidation | None = None  # checked before the action (even a direct response)
    internal_redirect: InternalRedirectPolicy | None = None
    # Only with the virtual host's `authorization`; None: checked with no context.
    authorization: RouteAuthorization | None = None


@dataclass(frozen=True, slots=True)
class VirtualHostPolicies:
    cors: CorsPolicy | None = None
    ip_filter: IPFilter | None = None
    rate_limit: LocalRateLimit | None = None
    global_rate_limit: GlobalRateLimit | None = None
    authorization: ExternalAuthorization | None = None


@dataclass(frozen=True, slots=True)
class RouteSource:
    """The object and field a route came from, so `explain` can point at what a user wrote."""

    object: ObjectRef
    field: str  # e.g. "spec.routes[1]"
    # The chain of objects whose conditions were merged into this route (root first).
    via: tuple[ObjectRef, ...] = ()

    def __str__(self) -> str:
        via = "".join(f"{r.namespace}/{r.name} -> " for r in self.via)
        return f"{self.object.kind} {via}{self.object.namespace}/{self.object.name} {self.field}"


@dataclass(frozen=True, slots=True)
class Route:
    match: RouteMatch
    action: RouteAction
    source: RouteSource
    policies: RoutePolicies = field(default_factory=RoutePolicies)


class HostnameMatch(enum.Enum):
    EXACT = "exact"
    # "*.example.com" matches exactly one extra label (Contour HTTPProxy, Ingress)
    WILDCARD_ONE_LABEL = "wildcard_one_label"
    # "*.example.com" matches one or more extra labels (Gateway API)
    WILDCARD_ANY_LABELS = "wildcard_any_labels"


@dataclass(frozen=True, slots=True)
class TLSSecret:
    """A certificate and key from a `kubernetes.io/tls` Secret, delivered to Envoy over SDS.

    `name` is deterministic (namespace/name plus a short hash of the content), so a changed
    certificate is a new SDS resource. The PEM content must never be logged.
    """

    name: str
    namespace: str
    secret: str
    certificate_chain: str = field(repr=False)
    private_key: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class CABundle:
    """PEM CA certificates (and optionally a CRL) from a Secret or ConfigMap, for validating
    client certificates or upstream servers."""

    name: str  # deterministic: namespace/name plus a short content hash
    namespace: str
    secret: str
    ca_certificates: str = field(repr=False)
    crl: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ClientValidation:
    """Downstream mTLS (Contour `clientValidation`)."""

    ca_bundle: str | None = None  # CABundle.name; None with skip_verification
    skip_verification: bool = False
    optional: bool = False
    crl_bundle: str | None = None  # CABundle.name holding a CRL
    crl_only_verify_leaf: bool = False


@dataclass(frozen=True, slots=True)
class TLSTermination:
    """TLS termination for a virtual host on an HTTPS listener (SNI = the hostname)."""

    secret: str  # TLSSecret.name
    min_version: str = "1.2"  # "1.2" | "1.3"
    max_version: str = "1.3"
    client_validation: ClientValidation | None = None
    # TLSSecret.name of the installation's fallback certificate when the host enables it: clients
    # without SNI (or with a name no host serves) get that certificate and reach this host too.
    fallback_secret: str | None = None


@dataclass(frozen=True, slots=True)
class VirtualHost:
    """A hostname served on a listener, with its routes in first-match order.

    `name` is unique per listener (the lower-cased hostname). `owner` is the root object that
    owns the hostname on this listener.
    """

    name: str
    hostname: str
    routes: tuple[Route, ...]
    owner: ObjectRef
    hostname_match: HostnameMatch = HostnameMatch.EXACT
    tls: TLSTermination | None = None  # set on HTTPS listeners only
    policies: VirtualHostPolicies = field(default_factory=VirtualHostPolicies)
    # On an HTTPS listener, the TLS server name whose filter chain serves this host, shared by
    # every host of one Gateway API listener (its hostname, "*" for none: the chain for any other
    # SNI); None: the hostname itself, one chain per host (Contour's layout).
    sni: str | None = None


@dataclass(frozen=True, slots=True)
class TCPProxy:
    """A TCP stream routed by SNI on a TLS listener (passthrough, or terminated then proxied), or
    the whole of a TCP listener (`hostname` "")."""

    name: str
    hostname: str  # the SNI to match; "" for a plain TCP listener
    clusters: tuple[WeightedCluster, ...]
    owner: ObjectRef
    tls: TLSTermination | None = None  # None: TLS passthrough (or plain TCP)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    address: str
    port: int
    protocol: ListenerProtocol
    virtual_hosts: tuple[VirtualHost, ...] = ()
    tcp_proxies: tuple[TCPProxy, ...] = ()


@dataclass(frozen=True, slots=True)
class RoutingGraph:
    """Everything the Envoy translator needs. Listeners and clusters are sorted by name."""

    listeners: tuple[Listener, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    secrets: tuple[TLSSecret, ...] = ()
    ca_bundles: tuple[CABundle, ...] = ()

    def cluster(self, name: str) -> Cluster | None:
        for c in self.clusters:
            if c.name == name:
                return c
        return None
