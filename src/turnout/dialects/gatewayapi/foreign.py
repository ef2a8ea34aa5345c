"""Hostnames another tenant owns on turnout's shared listeners.

Gateway listeners bind ports of their own, so the ownership of (listener, hostname) that the
other dialects settle on `ingress_http` / `ingress_https` does not reach them. But a browser sends
a host's cookies to every port of that host (cookies are not isolated by port, RFC 6265 §8.5):
a Gateway listener or route naming `a.example.com` on port 9080 would collect the cookies of the
tenant that serves `a.example.com` on the shared listeners (`http://a.example.com:9080/`). So a
hostname that an object of another dialect in another namespace owns on a shared listener, and
that is older than the Gateway (or route) naming it, is not served there: the Gateway listener
is Conflicted (HostnameConflict), the route's hostname is left out (NotAllowedByListeners when
nothing is left). The Gateway's own and the route's own namespaces are never foreign: Gateway
API setups where one team serves a name on several Gateways (and the conformance suite) keep
working. Gateway listeners and routes without a hostname (and wildcards covering the names of
others) still receive such requests; docs/dialects/gateway-api.md says what operators do about
that."""

from __future__ import annotations

from collections.abc import Collection

from turnout.compile_inputs import HTTP_LISTENER, HTTPS_LISTENER
from turnout.graph.dialect import Ownership
from turnout.objects import KubeObject

SHARED_LISTENERS = (HTTP_LISTENER, HTTPS_LISTENER)


def _owner_of(ownership: Ownership, listener: str, hostname: str) -> KubeObject | None:
    """Who serves `hostname` on the shared `listener`: the owner of the name itself, else, for
    an exact name, the owner of the wildcard covering it (as the shared listeners route it)."""
    owner = ownership.owner(listener, hostname)
    if owner is not None or hostname.startswith("*."):
        return owner
    _, dot, parent = hostname.partition(".")
    return ownership.owner(listener, f"*.{parent}") if dot and parent else None


def foreign_owner(
    ownership: Ownership,
    hostname: str | None,
    subject: KubeObject,
    own_namespaces: Collection[str],
) -> KubeObject | None:
    """The object outside `own_namespaces`, older than `subject`, that serves `hostname` (exact
    or wildcard) on one of the shared listeners, or None. No hostname (every hostname) is
    nobody's."""
    if hostname is None or hostname == "*":
        return None
    for listener in SHARED_LISTENERS:
        owner = _owner_of(ownership, listener, hostname.lower())
        if (
            owner is not None
            and owner.namespace not in own_namespaces
            and owner.age_key < subject.age_key
        ):
            return owner
    return None


def describe_owner(owner: KubeObject) -> str:
    return f"{owner.kind} {owner.namespace}/{owner.name}"


def foreign_message(hostname: str, owner: KubeObject) -> str:
    return (
        f"{hostname} is served on the shared listeners by the older {describe_owner(owner)} "
        "of another namespace (browsers send a host's cookies to every port)"
    )
