"""GatewayClasses: which are turnout's (`spec.controllerName` equals `--gateway-controller-name`)
and their status (reference notes §1.2).

turnout takes no parameters: a class with `parametersRef` is not accepted (InvalidParameters)
and its Gateways are not served. `SupportedVersion` is True: turnout reads the API as the v1.6
standard channel ships it (there are no CRDs with a bundle-version annotation to compare in files
mode).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    CLASS_SHAPE,
    FALSE,
    SUPPORTED_VERSION,
    TRUE,
    Condition,
    observed,
)
from turnout.dialects.gatewayapi.kinds import GATEWAY_CLASS, GROUP, mapping, text
from turnout.objects import KubeObject
from turnout.status.model import ObjectStatus, State
from turnout.store import Snapshot

BUNDLE_VERSION = "v1.6.1"

# `status.supportedFeatures`: the spec's feature names turnout supports (docs/dialects/
# gateway-api.md has the table), sorted as the spec requires.
SUPPORTED_FEATURES = tuple(
    sorted(
        (
            "BackendTLSPolicy",
            "BackendTLSPolicySANValidation",
            "GRPCRoute",
            "GRPCRouteNamedRouteRule",
            "Gateway",
            "GatewayHTTPListenerIsolation",
            "GatewayHTTPSListenerDetectMisdirectedRequests",
            "GatewayPort8080",
            "HTTPRoute",
            "HTTPRoute303RedirectStatusCode",
            "HTTPRoute307RedirectStatusCode",
            "HTTPRoute308RedirectStatusCode",
            "HTTPRouteBackendProtocolH2C",
            "HTTPRouteBackendProtocolWebSocket",
            "HTTPRouteBackendRequestHeaderModification",
            "HTTPRouteBackendTimeout",
            "HTTPRouteCORS",
            "HTTPRouteHostRewrite",
            "HTTPRouteMethodMatching",
            "HTTPRouteNamedRouteRule",
            "HTTPRouteParentRefPort",
            "HTTPRoutePathRedirect",
            "HTTPRoutePathRewrite",
            "HTTPRoutePortRedirect",
            "HTTPRouteQueryParamMatching",
            "HTTPRouteRequestMirror",
            "HTTPRouteRequestMultipleMirrors",
            "HTTPRouteRequestPercentageMirror",
            "HTTPRouteRequestTimeout",
            "HTTPRouteResponseHeaderModification",
            "HTTPRouteSchemeRedirect",
            "ReferenceGrant",
            "TCPRoute",
            "TLSRoute",
            "TLSRouteModeMixed",
            "TLSRouteModeTerminate",
        )
    )
)


@dataclass(frozen=True, slots=True)
class GatewayClassInfo:
    obj: KubeObject
    accepted: bool
    message: str


def our_classes(snapshot: Snapshot, controller_name: str) -> dict[str, GatewayClassInfo]:
    """turnout's GatewayClasses by name. GatewayClasses are cluster-scoped: the namespace a file
    gives them is ignored; of two with one name, the oldest counts."""
    out: dict[str, GatewayClassInfo] = {}
    objects = sorted(snapshot.kind(GROUP, GATEWAY_CLASS), key=lambda o: o.age_key)
    for obj in objects:
        spec = mapping(obj.spec)
        if text(spec.get("controllerName")) != controller_name or obj.name in out:
            continue
        params = spec.get("parametersRef")
        if params is not None:
            ref = mapping(params)
            what = f"{ref.get('group', '')}/{ref.get('kind', '')} {ref.get('name', '')}"
            out[obj.name] = GatewayClassInfo(
                obj,
                False,
                f"spec.parametersRef: turnout supports no GatewayClass parameters (got {what}); "
                "remove parametersRef",
            )
        else:
            out[obj.name] = GatewayClassInfo(obj, True, "GatewayClass is accepted")
    return out


def gateway_class_status(info: GatewayClassInfo) -> ObjectStatus:
    generation = info.obj.generation
    accepted = (
        Condition(ACCEPTED, TRUE, "Accepted", info.message)
        if info.accepted
        else Condition(ACCEPTED, FALSE, "InvalidParameters", info.message)
    )
    supported = Condition(
        SUPPORTED_VERSION,
        TRUE,
        "SupportedVersion",
        f"turnout implements Gateway API {BUNDLE_VERSION} (standard channel)",
    )
    return ObjectStatus(
        ref=info.obj.ref,
        api_version=info.obj.api_version,
        state=State.VALID if info.accepted else State.INVALID,
        summary=info.message,
        shape=CLASS_SHAPE,
        generation=generation,
        conditions=observed((accepted, supported), generation),
        fields={"supportedFeatures": [{"name": name} for name in SUPPORTED_FEATURES]},
    )
