"""Ingress rules, merged per host, following Contour's `IngressProcessor` where it has a rule.

Every Ingress of turnout's class that names a host contributes its paths to that host; the
Ingresses of one host are one group that owns the host with the age of its oldest member (design
section 4: Ingresses for one host merge, as every Ingress controller does). Within the group:

- paths become routes by their `pathType` (Contour): `Exact` is an exact path; `Prefix` is a
  segment prefix with trailing slashes trimmed, and `/` a string prefix that matches everything;
  `ImplementationSpecific` is a regex when the path holds any of `^+*[]%`, else a string prefix;
- two paths with the same match (after that normalisation) conflict: the one of the older Ingress
  is served, in one Ingress the one written first, and the other is reported;
- a host's certificate comes from the `tls` entries of its group only: an Ingress's entry for a
  host it has no paths for is ignored (and reported), so that no namespace sets the certificate
  of hosts it does not serve;
- `defaultBackend` serves the `*` virtual host (requests that match no host of any rule), below
  every rule: a rule for the same match replaces it without a conflict;
- the routes are then in Contour's precedence order (exact, regex, prefixes longest first), across
  the Ingresses of the group.

Error granularity: an Ingress the API server would refuse is not served at all (it owns nothing);
a path turnout cannot serve is dropped; a path whose Service is missing, or whose backend is a
`resource`, answers 503 so that its requests do not fall through to a shorter prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER, CompileOptions
from turnout.dialects.contour.order import contour_route_order
from turnout.dialects.ingress.classes import ClassIndex
from turnout.dialects.ingress.spec import (
    ACCEPTED,
    API_VERSION,
    EXACT,
    GROUP,
    KIND,
    PREFIX,
    RESOLVED_REFS,
    BackendSpec,
    ParsedIngress,
    PathSpec,
    TLSSpec,
    parse_ingress,
)
from turnout.dialects.ingress.status import IngressStatusAccessor
from turnout.dialects.tls_vhosts import https_upgrade
from turnout.graph.dialect import CompileContext, DialectOutput, HostClaim
from turnout.graph.model import (
    DirectResponse,
    Forward,
    HostnameMatch,
    PathMatch,
    PathMatchKind,
    Route,
    RouteAction,
    RouteMatch,
    RouteSource,
    TLSSecret,
    TLSTermination,
    VirtualHost,
    WeightedCluster,
)
from turnout.graph.regex import regex_error
from turnout.graph.services import Unresolved, external_name_phrase
from turnout.objects import KubeObject
from turnout.status.model import IgnoredObject
from turnout.store import Snapshot

CATCH_ALL = "*"

# Annotations (Contour's names; the first two are the Ingress API's own conventions).
FORCE_SSL_REDIRECT = "ingress.kubernetes.io/force-ssl-redirect"
ALLOW_HTTP = "kubernetes.io/ingress.allow-http"
TLS_CERT_NAMESPACE = "projectcontour.io/tls-cert-namespace"
TLS_MIN_VERSION = "projectcontour.io/tls-minimum-protocol-version"
TLS_MAX_VERSION = "projectcontour.io/tls-maximum-protocol-version"

# Contour's test for "this ImplementationSpecific path is a regex".
_REGEX_CHARS = frozenset("^+*[]%")
_TLS_VERSIONS = ("1.2", "1.3")


def select_ingresses(snapshot: Snapshot, options: CompileOptions) -> list[ParsedIngress]:
    """The Ingresses of turnout's class, parsed, oldest first. Others are not turnout's to read."""
    index = ClassIndex.of(snapshot, options.ingress_class_name, options.classless_ingress_is_ours)
    chosen = [
        o for o in snapshot.kind(GROUP, KIND) if o.api_version == API_VERSION and index.selects(o)
    ]
    chosen.sort(key=lambda o: o.age_key)
    return [parse_ingress(o) for o in chosen]


def ignored_ingresses(snapshot: Snapshot, options: CompileOptions) -> list[IgnoredObject]:
    """The Ingresses (and IngressClasses) of another controller, with the reason."""
    index = ClassIndex.of(snapshot, options.ingress_class_name, options.classless_ingress_is_ours)
    out = [IgnoredObject.of(ic, why) for ic, why in index.ignored_classes(snapshot)]
    for o in snapshot.kind(GROUP, KIND):
        why = index.why_not(o) if o.api_version == API_VERSION else None
        if why is not None:
            out.append(IgnoredObject.of(o, why))
    return out


def _route_hosts(ing: ParsedIngress) -> list[str]:
    """The virtual hosts an admitted Ingress has paths for, in the order it names them."""
    hosts: dict[str, None] = {}
    for rule in ing.spec.rules:
        if rule.paths:
            hosts.setdefault(rule.host or CATCH_ALL)
    if ing.spec.default_backend is not None:
        hosts.setdefault(CATCH_ALL)
    return list(hosts)


def _own_tls(ing: ParsedIngress) -> list[tuple[str, TLSSpec]]:
    """The (host, entry) pairs of an Ingress's `tls` that may serve: only hosts its own rules have
    paths for. An entry for a host only other Ingresses route would put this Ingress's Secret
    (and its TLS-version annotations) in front of their paths: across namespaces, one tenant's
    certificate on another's host."""
    routed = set(_route_hosts(ing))
    return [
        (host, tls) for tls in ing.spec.tls for host in dict.fromkeys(tls.hosts) if host in routed
    ]


def ingress_claims(parsed: Iterable[ParsedIngress]) -> list[HostClaim]:
    """One claim per host, by the oldest Ingress that has paths for it: the group's age. A host
    that a member of its group lists under `tls` is claimed on the HTTPS listener too, by the
    same one."""
    oldest: dict[str, KubeObject] = {}
    tls_hosts: set[str] = set()
    for ing in parsed:  # oldest first
        if not ing.admitted:
            continue
        for host in _route_hosts(ing):
            oldest.setdefault(host, ing.obj)
        tls_hosts.update(host for host, _ in _own_tls(ing))
    claims = [HostClaim(HTTP_LISTENER, host, obj) for host, obj in oldest.items()]
    claims.extend(
        HostClaim(HTTPS_LISTENER, host, obj) for host, obj in oldest.items() if host in tls_hosts
    )
    return claims


@dataclass(frozen=True, slots=True)
class _Entry:
    """One path (or a default backend) that wants a route in a virtual host."""

    ingress: ParsedIngress
    backend: BackendSpec
    field: str
    path: PathSpec | None = None  # None for a default backend


@dataclass(frozen=True, slots=True)
class _Kept:
    entry: _Entry
    match: RouteMatch


def _is_ingress(obj: KubeObject | None) -> bool:
    return obj is not None and obj.group == GROUP and obj.kind == KIND


def _tls_version(annotations: Mapping[str, str], key: str, default: str) -> str:
    value = annotations.get(key)
    return value if value in _TLS_VERSIONS else default


@dataclass(frozen=True, slots=True)
class _TLSChoice:
    secret: TLSSecret
    ingress: ParsedIngress
    field: str


class _Compiler:
    def __init__(self, snapshot: Snapshot, ctx: CompileContext, parsed: list[ParsedIngress]):
        self.snapshot = snapshot
        self.ctx = ctx
        self.parsed = parsed
        self.status = {
            ing.key: IngressStatusAccessor.with_problems(ing.obj, ing.problems) for ing in parsed
        }

    def run(self) -> DialectOutput:
        admitted = [ing for ing in self.parsed if ing.admitted]
        by_host: dict[str, list[_Entry]] = {}
        defaults: list[_Entry] = []
        for ing in admitted:  # oldest first: the order that decides conflicts
            for rule in ing.spec.rules:
                for path in rule.paths:
                    entry = _Entry(ing, path.backend, path.field, path)
                    by_host.setdefault(rule.host or CATCH_ALL, []).append(entry)
            if ing.spec.default_backend is not None:
                defaults.append(_Entry(ing, ing.spec.default_backend, "spec.defaultBackend"))
        if defaults:
            # Below every rule: the default backend is for requests that match no rule.
            by_host.setdefault(CATCH_ALL, []).extend(defaults)

        tls_by_host: dict[str, list[tuple[ParsedIngress, TLSSpec]]] = {}
        for ing in admitted:  # a host's group members only, oldest first
            for host, tls in _own_tls(ing):
                tls_by_host.setdefault(host, []).append((ing, tls))

        vhosts: list[tuple[str, VirtualHost]] = []
        for host in sorted(by_host):
            vhosts.extend(self._host(host, by_host[host], tls_by_host.get(host, [])))
        self._unused_tls(admitted, by_host)
        addresses = self.ctx.options.load_balancer_addresses
        statuses = tuple(self.status[k].build(addresses) for k in sorted(self.status))
        return DialectOutput(virtual_hosts=tuple(vhosts), statuses=statuses)

    # --- one host ------------------------------------------------------------------------------

    def _host(
        self, host: str, entries: list[_Entry], tls_entries: list[tuple[ParsedIngress, TLSSpec]]
    ) -> list[tuple[str, VirtualHost]]:
        members = list({e.ingress.key: e.ingress for e in entries}.values())
        owner = self.ctx.ownership.owner(HTTP_LISTENER, host)
        if owner is None or not _is_ingress(owner):
            what = str(owner.ref) if owner is not None else "another object"
            for ing in members:
                self.status[ing.key].error(
                    ACCEPTED,
                    "HostnameConflict",
                    f'host "{host}" is already owned by {what}; '
                    "this Ingress's paths for it are not served",
                )
            return []

        kept = self._dedupe(host, entries)
        routes: list[tuple[Route, ParsedIngress]] = []
        for k in kept:
            action = self._action(k.entry)
            source = RouteSource(k.entry.ingress.obj.ref, k.entry.field)
            routes.append((Route(k.match, action, source), k.entry.ingress))
        ordered = contour_route_order([r for r, _ in routes])
        by_route = {id(r): ing for r, ing in routes}
        if not ordered:
            return []

        hostname_match = (
            HostnameMatch.WILDCARD_ONE_LABEL if host.startswith("*.") else HostnameMatch.EXACT
        )
        out: list[tuple[str, VirtualHost]] = []
        tls = self._tls(host, tls_entries, members)
        if tls is not None:
            out.append(
                (
                    HTTPS_LISTENER,
                    VirtualHost(
                        name=host,
                        hostname=host,
                        routes=ordered,
                        owner=owner.ref,
                        hostname_match=hostname_match,
                        tls=tls,
                    ),
                )
            )
            for route in ordered:
                self.status[by_route[id(route)].key].served = True

        http_routes: list[Route] = []
        for route in ordered:
            ing = by_route[id(route)]
            insecure = _insecure_route(route, ing.obj.annotations)
            if insecure is not None:
                http_routes.append(insecure)
                self.status[ing.key].served = True
        if http_routes:
            out.append(
                (
                    HTTP_LISTENER,
                    VirtualHost(
                        name=host,
                        hostname=host,
                        routes=tuple(http_routes),
                        owner=owner.ref,
                        hostname_match=hostname_match,
                    ),
                )
            )
        return out

    def _dedupe(self, host: str, entries: list[_Entry]) -> list[_Kept]:
        """The entries that get a route: the first of each match; the rest are reported."""
        kept: dict[RouteMatch, _Entry] = {}
        for entry in entries:
            match = self._match(entry)
            if match is None:
                continue
            prev = kept.get(match)
            if prev is None:
                kept[match] = entry
                continue
            if entry.path is None and prev.path is not None:
                continue  # a rule replaces the default backend: not a conflict
            by = (
                "this Ingress's"
                if prev.ingress.key == entry.ingress.key
                else str(prev.ingress.obj.ref)
            )
            if entry.path is None:
                what = "the default backend (every request no rule matches)"
            else:
                what = f'path "{entry.path.path}" ({entry.path.path_type}) of host "{host}"'
            self.status[entry.ingress.key].error(
                ACCEPTED,
                "PathConflict",
                f"{entry.field}: {what} is already served by {by} {prev.field}; "
                "this one is not served",
            )
        return [_Kept(e, m) for m, e in kept.items()]

    # --- one path ------------------------------------------------------------------------------

    def _match(self, entry: _Entry) -> RouteMatch | None:
        """The route match of a path, or None (reported) when turnout cannot serve the path."""
        path = entry.path
        if path is None:
            return RouteMatch(path=PathMatch.prefix("/"))
        st = self.status[entry.ingress.key]
        value = path.path or "/"
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            st.error(
                ACCEPTED,
                "PathNotSupported",
                f"{path.field}.path: must not contain control characters; the path is not served",
            )
            return None
        if path.path_type == EXACT:
            return RouteMatch(path=PathMatch(PathMatchKind.EXACT, value))
        if path.path_type == PREFIX:
            if value == "/":
                return RouteMatch(path=PathMatch.prefix("/"))
            if "?" in value or "#" in value:
                # Envoy's path_separated_prefix refuses them; a URL path cannot hold them anyway.
                st.error(
                    ACCEPTED,
                    "PathNotSupported",
                    f"{path.field}.path: a Prefix path must not contain '?' or '#'; "
                    "the path is not served",
                )
                return None
            return RouteMatch(path=PathMatch(PathMatchKind.SEGMENT_PREFIX, value.rstrip("/")))
        if _REGEX_CHARS.intersection(value):
            err = regex_error(value)
            if err is not None:
                st.error(
                    ACCEPTED,
                    "RegexNotValid",
                    f'{path.field}.path: "{value}" is a regular expression (it holds one of '
                    f"^+*[]%) that Envoy cannot use: {err}; the path is not served",
                )
                return None
            return RouteMatch(path=PathMatch(PathMatchKind.REGEX, value))
        return RouteMatch(path=PathMatch.prefix(value))

    def _action(self, entry: _Entry) -> RouteAction:
        backend = entry.backend
        st = self.status[entry.ingress.key]
        if backend.resource:
            st.error(
                ACCEPTED,
                "BackendNotSupported",
                f"{backend.field}.resource: resource backends ({backend.resource}) are not "
                "supported; the path answers 503",
            )
            return DirectResponse(503)
        namespace = entry.ingress.obj.namespace
        service = self.snapshot.get("", "Service", namespace, backend.service)
        # Contour's default: ExternalName Services can point Envoy anywhere, its admin
        # interface included (GHSA-5ph6-qq5x-7jwc); the resolver decides.
        refused = self.ctx.backends.refusal(service) if service is not None else None
        if refused is not None:
            st.error(
                RESOLVED_REFS,
                "ServiceNotSupported",
                f'{backend.field}.service: service "{namespace}/{backend.service}" '
                f"{external_name_phrase(refused)}; the path answers 503",
            )
            return DirectResponse(503)
        result = self.ctx.backends.service(namespace, backend.service, backend.port)
        if isinstance(result, Unresolved):
            st.error(
                RESOLVED_REFS,
                result.reason,
                f"{backend.field}.service: {result.message}; the path answers 503",
            )
            return DirectResponse(503)
        return Forward((WeightedCluster(result.name, 1),))

    # --- TLS -----------------------------------------------------------------------------------

    def _tls(
        self,
        host: str,
        tls_entries: list[tuple[ParsedIngress, TLSSpec]],
        members: list[ParsedIngress],
    ) -> TLSTermination | None:
        """The certificate for a host: the first `tls` entry of a group member (an Ingress with
        paths for the host) that lists it, oldest Ingress first, then as written, whose Secret can
        be used. Entries after it that name another Secret are reported, so nobody wonders which
        certificate clients get."""
        chosen: _TLSChoice | None = None
        for ing, tls in tls_entries:
            st = self.status[ing.key]
            namespace = ing.obj.annotations.get(TLS_CERT_NAMESPACE) or ing.obj.namespace
            if chosen is not None:
                same = (chosen.secret.namespace, chosen.secret.secret) == (
                    namespace,
                    tls.secret_name,
                )
                if not same:
                    st.warning(
                        "CertificateConflict",
                        f'{tls.field}: host "{host}" already uses Secret '
                        f'"{chosen.secret.namespace}/{chosen.secret.secret}" from '
                        f"{chosen.ingress.obj.ref} {chosen.field}; this entry is "
                        "ignored for it",
                    )
                continue
            if not tls.secret_name:
                st.warning(
                    "SecretNameMissing",
                    f"{tls.field}: no secretName, and turnout has no default certificate; "
                    f'this entry does not serve host "{host}" over HTTPS',
                )
                continue
            result = self.ctx.secrets.tls_secret(
                namespace, tls.secret_name, for_namespace=ing.obj.namespace
            )
            if isinstance(result, Unresolved):
                st.error(
                    RESOLVED_REFS,
                    result.reason,
                    f'{tls.field}.secretName: {result.message}; host "{host}" is not '
                    "served over HTTPS by this entry",
                )
                continue
            chosen = _TLSChoice(result, ing, tls.field)
        if chosen is None:
            return None
        https_owner = self.ctx.ownership.owner(HTTPS_LISTENER, host)
        if https_owner is not None and not _is_ingress(https_owner):
            for ing in members:
                self.status[ing.key].error(
                    ACCEPTED,
                    "HostnameConflict",
                    f'host "{host}" is already owned on the HTTPS listener by '
                    f"{https_owner.ref}; this Ingress's paths for it are not served "
                    "over HTTPS",
                )
            return None
        annotations = chosen.ingress.obj.annotations
        min_version = _tls_version(annotations, TLS_MIN_VERSION, "1.2")
        max_version = _tls_version(annotations, TLS_MAX_VERSION, "1.3")
        if min_version > max_version:
            self.status[chosen.ingress.key].error(
                ACCEPTED,
                "TLSVersionNotValid",
                f"{TLS_MIN_VERSION} {min_version} is above {TLS_MAX_VERSION} {max_version}; "
                "the maximum is ignored",
            )
            max_version = "1.3"
        return TLSTermination(
            secret=chosen.secret.name, min_version=min_version, max_version=max_version
        )

    def _unused_tls(self, admitted: list[ParsedIngress], by_host: Mapping[str, object]) -> None:
        for ing in admitted:
            own = set(_route_hosts(ing))
            for tls in ing.spec.tls:
                for j, host in enumerate(tls.hosts):
                    if host in own:
                        continue
                    if host not in by_host:
                        why = f'no rule of any Ingress has paths for host "{host}"'
                    else:
                        why = (
                            f'this Ingress has no paths for host "{host}", and a tls entry '
                            "only serves the hosts of its own Ingress's rules"
                        )
                    self.status[ing.key].warning(
                        "TLSHostNotRouted",
                        f"{tls.field}.hosts[{j}]: {why}; the entry does nothing for it",
                    )


def _insecure_route(route: Route, annotations: Mapping[str, str]) -> Route | None:
    """A route as the plain-HTTP listener carries it (Contour's Ingress rule): a 301 to HTTPS with
    `force-ssl-redirect: "true"` (even without TLS, as in Contour and ingress-nginx, for TLS
    terminated in front of Envoy); absent with `allow-http: "false"`; otherwise served as is,
    even for a host with TLS."""
    if annotations.get(FORCE_SSL_REDIRECT) == "true":
        return https_upgrade(route)
    if annotations.get(ALLOW_HTTP) == "false":
        return None
    return route


def compile_ingresses(
    snapshot: Snapshot, ctx: CompileContext, parsed: list[ParsedIngress] | None = None
) -> DialectOutput:
    """`parsed` may carry `select_ingresses(snapshot, ctx.options)` from the claims phase."""
    if parsed is None:
        parsed = select_ingresses(snapshot, ctx.options)
    return _Compiler(snapshot, ctx, parsed).run()
