"""Contour's JWT verification: `virtualhost.jwtProviders` and routes' `jwtVerificationPolicy`.

A TLS root names its providers (issuer, audiences, a remote key set); a route requires one by
name, or the provider marked `default` when it says nothing, or none with `disabled: true`. The
checks and their reasons are Contour's (`httpproxy_processor.go`): providers need a root that
terminates TLS (`JWTVerificationNotPermitted`), names are unique, one default at most, the key set
URI is http(s), `validation` only over https, durations parse, and a route may only require a
provider its root defines (`JWTProviderNotDefined`). Every error drops the root, so nothing meant
to be protected is ever served without its check.

Where turnout is stricter than Contour: a route of a root without TLS that requires a provider is
an error (Contour serves it unchecked); routes that permit insecure traffic check tokens on plain
HTTP too (Contour only checks over HTTPS); and an https key server without `validation` must have
a certificate the installation's CA file trusts for its host (Contour does not verify it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from turnout.dialects.contour.names import namespaced_name
from turnout.dialects.fields import NANOS_PER_SECOND, parse_go_duration
from turnout.dialects.httpproxy.upstream import Reader, ValidationSpec, read_validation
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import DnsLookupFamily, JwtValidation, UpstreamValidation
from turnout.graph.services import Unresolved

JWT_ERROR = "JWTVerificationError"
VHOST_FIELDS = frozenset({"jwtProviders"})
ROUTE_FIELDS = frozenset({"jwtVerificationPolicy"})
_PROVIDER_FIELDS = frozenset({"name", "issuer", "audiences", "remoteJWKS", "default", "forwardJWT"})
_REMOTE_FIELDS = frozenset({"uri", "timeout", "cacheDuration", "dnsLookupFamily", "validation"})
_POLICY_FIELDS = frozenset({"require", "disabled"})
_WHERE = "Spec.VirtualHost.JWTProviders"
# Contour's default fetch timeout; Envoy's default cache duration (Contour leaves it unset).
DEFAULT_TIMEOUT_S = 1.0
DEFAULT_CACHE_S = 600.0

Problem = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True, slots=True)
class RemoteJWKSSpec:
    uri: str
    timeout: str = ""
    cache_duration: str = ""
    dns_lookup_family: str = ""
    validation: ValidationSpec | None = None


@dataclass(frozen=True, slots=True)
class JWTProviderSpec:
    name: str
    remote_jwks: RemoteJWKSSpec
    issuer: str = ""
    audiences: tuple[str, ...] = ()
    default: bool = False
    forward_jwt: bool = False


@dataclass(frozen=True, slots=True)
class JWTPolicySpec:
    require: str = ""
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class VhostJwt:
    """A root's providers by name, and the one its routes require by default ("" for none)."""

    providers: Mapping[str, JwtValidation]
    default: str = ""


NO_JWT = VhostJwt({})


# --- reading -----------------------------------------------------------------------------------


def read_providers(r: Reader, m: Mapping[str, Any], path: str) -> tuple[JWTProviderSpec, ...]:
    out = (_provider(r, v, p) for p, v in r.items(m, "jwtProviders", path))
    return tuple(p for p in out if p is not None)


def _provider(r: Reader, value: Any, path: str) -> JWTProviderSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _PROVIDER_FIELDS)
    name = r.string(m, "name", path, required=True)
    remote = r.mapping(m.get("remoteJWKS"), f"{path}.remoteJWKS")
    if remote is None:
        return None
    audiences = []
    for p, v in r.items(m, "audiences", path):
        if not isinstance(v, str) or not v:
            r.error(f"{p}: must be a non-empty string")
            continue
        audiences.append(v)
    return JWTProviderSpec(
        name=name,
        remote_jwks=_remote(r, remote, f"{path}.remoteJWKS"),
        issuer=r.string(m, "issuer", path),
        audiences=tuple(audiences),
        default=r.boolean(m, "default", path),
        forward_jwt=r.boolean(m, "forwardJWT", path),
    )


def _remote(r: Reader, m: Mapping[str, Any], path: str) -> RemoteJWKSSpec:
    r.check_fields(m, path, _REMOTE_FIELDS)
    validation = None
    if m.get("validation") is not None:
        validation = read_validation(r, m["validation"], f"{path}.validation")
    return RemoteJWKSSpec(
        uri=r.string(m, "uri", path, required=True),
        timeout=r.string(m, "timeout", path),
        cache_duration=r.string(m, "cacheDuration", path),
        dns_lookup_family=r.string(m, "dnsLookupFamily", path),
        validation=validation,
    )


def read_policy(r: Reader, m: Mapping[str, Any], path: str) -> JWTPolicySpec | None:
    if m.get("jwtVerificationPolicy") is None:
        return None
    where = f"{path}.jwtVerificationPolicy"
    policy = r.mapping(m["jwtVerificationPolicy"], where)
    if policy is None:
        return None
    r.check_fields(policy, where, _POLICY_FIELDS)
    return JWTPolicySpec(
        require=r.string(policy, "require", where), disabled=r.boolean(policy, "disabled", where)
    )


# --- compiling ---------------------------------------------------------------------------------


def not_permitted() -> Problem:
    return (
        JWT_ERROR,
        "JWTVerificationNotPermitted",
        f"{_WHERE} can only be defined for root HTTPProxies that terminate TLS",
    )


def compile_providers(
    specs: tuple[JWTProviderSpec, ...], namespace: str, ca_bundles: CABundleResolver
) -> VhostJwt | Problem:
    """A TLS root's providers, checked in Contour's order; the first error is returned."""
    providers: dict[str, JwtValidation] = {}
    default = ""
    for spec in specs:
        if spec.name in providers:
            return (
                JWT_ERROR,
                "DuplicateProviderName",
                f"{_WHERE} is invalid: duplicate name {spec.name}",
            )
        if spec.default:
            if default:
                return (
                    JWT_ERROR,
                    "MultipleDefaultProvidersSpecified",
                    f"{_WHERE} is invalid: at most one provider can be set as the default",
                )
            default = spec.name
        built = _provider_validation(spec, namespace, ca_bundles)
        if not isinstance(built, JwtValidation):
            return built
        providers[spec.name] = built
    return VhostJwt(providers, default)


def _provider_validation(
    spec: JWTProviderSpec, namespace: str, ca_bundles: CABundleResolver
) -> JwtValidation | Problem:
    remote = spec.remote_jwks
    scheme = _uri_problem(remote.uri)
    if not isinstance(scheme, str):
        return scheme
    validation: UpstreamValidation | None = None
    if remote.validation is not None:
        if scheme == "http":
            return (
                JWT_ERROR,
                "RemoteJWKSUpstreamValidationInvalid",
                f"{_WHERE}.RemoteJWKS.UpstreamValidation must not be specified when URI scheme "
                "is http.",
            )
        checked = _upstream_validation(remote.validation, namespace, ca_bundles)
        if not isinstance(checked, UpstreamValidation):
            return checked
        validation = checked
    timeout = _duration(remote.timeout, DEFAULT_TIMEOUT_S, "Timeout")
    if not isinstance(timeout, float):
        return timeout
    cache = _duration(remote.cache_duration, DEFAULT_CACHE_S, "CacheDuration")
    if not isinstance(cache, float):
        return cache
    family = _family(remote.dns_lookup_family)
    if not isinstance(family, DnsLookupFamily):
        return family
    return JwtValidation(
        issuer=spec.issuer or None,
        jwks_uri=remote.uri,
        audiences=spec.audiences,
        forward=spec.forward_jwt,
        require_subject=False,
        bearer_header_only=False,
        timeout_s=timeout,
        cache_s=cache,
        validation=validation,
        dns_lookup_family=family,
    )


def _uri_problem(uri: str) -> str | Problem:
    """The URI's scheme, or Contour's error (a URI without a host is one too: Envoy could
    never fetch it)."""
    try:
        url = urlsplit(uri)
        url.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as err:
        return (JWT_ERROR, "RemoteJWKSURIInvalid", f"{_WHERE}.RemoteJWKS.URI is invalid: {err}")
    if url.scheme not in ("http", "https"):
        return (
            JWT_ERROR,
            "RemoteJWKSSchemeInvalid",
            f'{_WHERE}.RemoteJWKS.URI has invalid scheme "{url.scheme}", must be http or https',
        )
    if not url.hostname:
        return (JWT_ERROR, "RemoteJWKSURIInvalid", f"{_WHERE}.RemoteJWKS.URI is invalid: no host")
    return url.scheme


def _duration(text: str, default: float, field: str) -> float | Problem:
    if not text:
        return default
    try:
        nanos = parse_go_duration(text)
        if nanos < 0:
            raise ValueError(f'time: negative duration "{text}"')
    except ValueError as err:
        return (
            JWT_ERROR,
            f"RemoteJWKS{field}Invalid",
            f"{_WHERE}.RemoteJWKS.{field} is invalid: {err}",
        )
    return nanos / NANOS_PER_SECOND


def _family(value: str) -> DnsLookupFamily | Problem:
    try:
        return DnsLookupFamily(value)
    except ValueError:
        return (
            JWT_ERROR,
            "RemoteJWKSDNSLookupFamilyInvalid",
            f'{_WHERE}.RemoteJWKS.DNSLookupFamily has an invalid value "{value}", must be auto, '
            "all, v4 or v6",
        )


def _upstream_validation(
    spec: ValidationSpec, namespace: str, ca_bundles: CABundleResolver
) -> UpstreamValidation | Problem:
    """Contour's `LookupUpstreamValidation` with the JWT reasons: delegation, the CA Secret,
    then the names."""
    ns, secret = namespaced_name(spec.ca_secret, namespace)
    ref = f"{ns}/{secret}"
    where = f"{_WHERE}.RemoteJWKS.UpstreamValidation"
    bundle = ca_bundles.ca_bundle(ns, secret, for_namespace=namespace)
    if isinstance(bundle, Unresolved):
        if bundle.reason == "DelegationNotPermitted":
            return (
                JWT_ERROR,
                "RemoteJWKSCACertificateNotDelegated",
                f'{where}.CACertificate Secret "{ref}" is not configured for certificate '
                "delegation",
            )
        detail = bundle.message.removeprefix(f'Secret "{ref}"').lstrip(":").strip()
        detail = "Secret not found" if bundle.reason == "SecretNotFound" else detail
        return (
            JWT_ERROR,
            "RemoteJWKSUpstreamValidationInvalid",
            f'{where} is invalid: invalid CA Secret "{ref}": {detail}',
        )
    names = spec.subject_names or ((spec.subject_name,) if spec.subject_name else ())
    if not names:
        return (
            JWT_ERROR,
            "RemoteJWKSUpstreamValidationInvalid",
            f"{where} is invalid: missing subject alternative name",
        )
    if spec.subject_name and names[0] != spec.subject_name:
        return (
            JWT_ERROR,
            "RemoteJWKSUpstreamValidationInvalid",
            f"{where} is invalid: first entry of SubjectNames ({names[0]}) does not match "
            f"SubjectName ({spec.subject_name})",
        )
    return UpstreamValidation(ca_secret=bundle.name, subject_names=names)


def route_provider(policy: JWTPolicySpec | None, default: str) -> str | Problem:
    """The provider a route requires ("" for none), Contour's `computeRoutes` switch."""
    if policy is None:
        return default
    if policy.require and policy.disabled:
        return (
            JWT_ERROR,
            "InvalidJWTVerificationPolicy",
            "route's JWT verification policy cannot specify both require and disabled",
        )
    if policy.require:
        return policy.require
    return "" if policy.disabled else default


def undefined_provider(name: str) -> Problem:
    return (
        JWT_ERROR,
        "JWTProviderNotDefined",
        f'Route references an undefined JWT provider "{name}"',
    )
