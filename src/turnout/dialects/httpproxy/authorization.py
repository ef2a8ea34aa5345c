"""`virtualhost.authorization` and `routes[].authPolicy`: external authorization as Contour does
it (`computeSecureVirtualHostAuthorization`), with Contour's `AuthError` reasons and messages.

Only a root terminating TLS may set it (`AuthNotPermitted`); the server is an ExtensionService
(`extension_service.py`). A route takes the virtual host's `authPolicy.disabled` unless it has
an `authPolicy` of its own, and the virtual host's context with its own merged over it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from turnout.dialects.fields import MAX_UINT32
from turnout.dialects.httpproxy.extension_service import EXTENSION_API_VERSION, ExtensionCluster
from turnout.dialects.httpproxy.route_policies import timeout_setting
from turnout.dialects.httpproxy.upstream import Reader
from turnout.graph.model import AuthorizationBody, ExternalAuthorization, RouteAuthorization

AUTH_ERROR = "AuthError"
DEFAULT_MAX_REQUEST_BYTES = 1024

_AUTH_FIELDS = frozenset(
    {"extensionRef", "responseTimeout", "failOpen", "authPolicy", "withRequestBody"}
)
_REF_FIELDS = frozenset({"name", "namespace", "apiVersion"})
_POLICY_FIELDS = frozenset({"disabled", "context"})
_BODY_FIELDS = frozenset({"maxRequestBytes", "allowPartialMessage", "packAsBytes"})


@dataclass(frozen=True, slots=True)
class AuthPolicySpec:
    disabled: bool = False
    context: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AuthorizationSpec:
    name: str
    namespace: str
    api_version: str
    response_timeout: str = ""
    fail_open: bool = False
    policy: AuthPolicySpec = field(default_factory=AuthPolicySpec)
    body: AuthorizationBody | None = None


def read_auth_policy(r: Reader, value: Any, path: str) -> AuthPolicySpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _POLICY_FIELDS)
    context: dict[str, str] = {}
    raw = m.get("context")
    if raw is not None:
        ctx = r.mapping(raw, f"{path}.context") or {}
        for k, v in ctx.items():
            if isinstance(v, str):
                context[str(k)] = v
            else:
                r.error(f"{path}.context.{k}: must be a string")
    return AuthPolicySpec(r.boolean(m, "disabled", path), tuple(sorted(context.items())))


def read_authorization(r: Reader, value: Any, path: str) -> AuthorizationSpec | None:
    m = r.mapping(value, path)
    if m is None:
        return None
    r.check_fields(m, path, _AUTH_FIELDS)
    ref: Mapping[str, Any] = r.mapping(m.get("extensionRef") or {}, f"{path}.extensionRef") or {}
    r.check_fields(ref, f"{path}.extensionRef", _REF_FIELDS)
    where = f"{path}.extensionRef"
    policy = None
    if m.get("authPolicy") is not None:
        policy = read_auth_policy(r, m["authPolicy"], f"{path}.authPolicy")
    body = None
    if m.get("withRequestBody") is not None:
        b = r.mapping(m["withRequestBody"], f"{path}.withRequestBody") or {}
        r.check_fields(b, f"{path}.withRequestBody", _BODY_FIELDS)
        bp = f"{path}.withRequestBody"
        size = r.integer(b, "maxRequestBytes", bp) if b.get("maxRequestBytes") is not None else 0
        if not 0 <= size <= MAX_UINT32:
            # The CRD's uint32; Envoy would refuse the listener.
            r.error(f"{bp}.maxRequestBytes: must be between 1 and {MAX_UINT32}, got {size}")
            size = 0
        body = AuthorizationBody(
            max_request_bytes=size or DEFAULT_MAX_REQUEST_BYTES,
            allow_partial_message=r.boolean(b, "allowPartialMessage", bp),
            pack_as_bytes=r.boolean(b, "packAsBytes", bp),
        )
    return AuthorizationSpec(
        name=r.string(ref, "name", where),
        namespace=r.string(ref, "namespace", where),
        api_version=r.string(ref, "apiVersion", where) or EXTENSION_API_VERSION,
        response_timeout=r.string(m, "responseTimeout", path),
        fail_open=r.boolean(m, "failOpen", path),
        policy=policy or AuthPolicySpec(),
        body=body,
    )


AuthProblem = tuple[str, str, str]


def not_permitted() -> AuthProblem:
    return (
        AUTH_ERROR,
        "AuthNotPermitted",
        "Spec.VirtualHost.Authorization.ExtensionServiceRef can only be defined for root "
        "HTTPProxies that terminate TLS",
    )


def compile_authorization(
    spec: AuthorizationSpec,
    namespace: str,
    extensions: Mapping[tuple[str, str], ExtensionCluster],
) -> ExternalAuthorization | AuthProblem:
    """Contour's `computeVirtualHostAuthorization`: version, reference, then timeout."""
    if spec.api_version != EXTENSION_API_VERSION:
        return (
            AUTH_ERROR,
            "AuthBadResourceVersion",
            "Spec.Virtualhost.Authorization.extensionRef specifies an unsupported resource "
            f'version "{spec.api_version}"',
        )
    key = (spec.namespace or namespace, spec.name)
    ext = extensions.get(key)
    if ext is None:
        return (
            AUTH_ERROR,
            "ExtensionServiceNotFound",
            "Spec.Virtualhost.Authorization.ServiceRef extension service "
            f'"{key[0]}/{key[1]}" not found',
        )
    try:
        timeout = timeout_setting(spec.response_timeout)
    except ValueError as err:
        return (
            AUTH_ERROR,
            "AuthResponseTimeoutInvalid",
            f"Spec.Virtualhost.Authorization.ResponseTimeout is invalid: {err}",
        )
    return ExternalAuthorization(
        cluster=ext.cluster.name,
        response_timeout_s=timeout if timeout is not None else ext.response_timeout_s,
        fail_open=spec.fail_open,
        with_request_body=spec.body,
    )


def route_authorization(vhost: AuthPolicySpec, route: AuthPolicySpec | None) -> RouteAuthorization:
    """A route's setting: its own `disabled` if it has a policy, the host's otherwise; the
    host's context with the route's merged over it."""
    context = dict(vhost.context)
    if route is not None:
        context.update(route.context)
    disabled = route.disabled if route is not None else vhost.disabled
    return RouteAuthorization(disabled=disabled, context=tuple(sorted(context.items())))
