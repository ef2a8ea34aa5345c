"""BackendTLSPolicy (`gateway.networking.k8s.io/v1`): TLS from Envoy to a Service, validated.

A policy targets Services (`targetRefs`, core group, kind Service; `sectionName` narrows it to the
Service port of that name) and says how to validate the backend's certificate
(`spec.validation`):

- `caCertificateRefs`: ConfigMaps (Core) or Secrets (the `ca.crt` key, PEM) in the policy's
  namespace. turnout validates with one bundle: the first reference that resolves (the Core
  support level is one ConfigMap); the others are reported when they do not resolve.
- `wellKnownCACertificates: System`: the installation's system trust store, which for turnout is
  one PEM file where Envoy runs (`--system-ca-file`, default Debian's bundle; the same file https
  JWKS servers are checked against). The compile names it (`UpstreamValidation.system_trust_store`)
  and the translator points Envoy at the file, so the compile reads no file. The CRD allows only
  `System`, and exactly one of the two fields: any other value, or both fields, is `Accepted`
  False `Invalid`.
- `hostname` (a PreciseHostname): the SNI sent to the backend, and the name its certificate must
  carry unless `subjectAltNames` lists others: then the certificate must carry one of those
  (`Hostname` entries, a hostname whose first label may be `*`, matched as DNS SANs; `URI`
  entries, an absolute URI such as a SPIFFE ID, matched exactly as URI SANs). A value the CRD
  refuses makes the policy `Accepted` False `Invalid`.

What a route's backendRef to a targeted Service port gets (`validation`): the upstream speaks TLS
(HTTP/1.1, or HTTP/2 for h2c and gRPC backends) and verifies the backend against the bundle and
names. When the policy cannot be honoured (no CA bundle resolves, an invalid spec) the ref
is invalid: its share answers 500, as the spec requires a 5xx. The route reports it `ResolvedRefs`
False `BackendNotFound` (of the spec's four route reasons, the one for a backend Envoy cannot
use), with the policy's own condition and reason in the message.

Conflicts (two policies for the same Service and `sectionName`): the oldest wins, then
`{namespace}/{name}` (`age_key`); the others are `Accepted` False `Conflicted` and apply nowhere,
so they take no target from a newer policy. A policy naming the port wins over one naming the
whole Service.

Routes whose backends it applies to: HTTPRoute, GRPCRoute, and TLSRoute on listeners that
terminate TLS (GEP-4274: the gateway re-encrypts the stream it decrypted). A TLSRoute on a
Passthrough listener forwards the client's own TLS session: the policy cannot apply there.

Status is `PolicyStatus`: one `ancestors` entry per Gateway that a route using a targeted Service
is attached to (`statuses`), with `Accepted` and `ResolvedRefs`, for this controller only; a
conflicted policy reports `Accepted` False `Conflicted` to the same Gateways. A Gateway that
reaches the Service only through Passthrough listeners gets `Accepted` False `NotApplicable`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from turnout.dialects.gatewayapi.conditions import (
    ACCEPTED,
    BACKEND_NOT_FOUND,
    CONFLICTED,
    FALSE,
    INVALID_KIND,
    POLICY_SHAPE,
    RESOLVED_REFS,
    TRUE,
    Condition,
    RouteProblem,
    observed,
)
from turnout.dialects.gatewayapi.filters import MAX_HOSTNAME, precise_hostname_problem
from turnout.dialects.gatewayapi.kinds import (
    BACKEND_TLS_POLICY,
    GROUP,
    core_group,
    mapping,
    sequence,
)
from turnout.graph.dialect import CompileContext
from turnout.graph.model import CABundle, UpstreamValidation
from turnout.graph.services import ServicePort
from turnout.objects import KubeObject, ObjectRef
from turnout.status.model import ObjectStatus, Section, State
from turnout.store import Snapshot

INVALID = "Invalid"
INVALID_CA_CERTIFICATE_REF = "InvalidCACertificateRef"
NO_VALID_CA_CERTIFICATE = "NoValidCACertificate"
# turnout's own reason: the policy cannot apply to how a Gateway uses the Service (passthrough).
NOT_APPLICABLE = "NotApplicable"

# `wellKnownCACertificates`: the one value the CRD allows.
SYSTEM = "System"

# The CRD's `AbsoluteURI` (a `subjectAltNames` entry of type URI): RFC 3986 with a scheme and an
# authority, at most 253 characters.
_ABSOLUTE_URI = re.compile(r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?")
MAX_URI = 253


@dataclass(frozen=True, slots=True)
class _CARef:
    group: str
    kind: str
    name: str
    field: str


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A BackendTLSPolicy as read."""

    obj: KubeObject
    targets: tuple[tuple[str, str], ...]  # (Service name, sectionName or "")
    ca_refs: tuple[_CARef, ...]
    well_known: str
    hostname: str
    subject_names: tuple[str, ...]
    subject_uris: tuple[str, ...]
    invalid: tuple[str, ...]  # why the spec cannot be honoured (Accepted False Invalid)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a policy amounts to in this compile."""

    validation: UpstreamValidation | None  # None: the policy cannot be honoured
    conditions: tuple[Condition, ...]


def _str(m: Mapping[str, Any], key: str) -> str:
    value = m.get(key)
    return value if isinstance(value, str) else ""


def _read(obj: KubeObject) -> PolicySpec:
    spec = mapping(obj.spec)
    targets: list[tuple[str, str]] = []
    for ref in sequence(spec.get("targetRefs")):
        if not isinstance(ref, Mapping):
            continue
        service = (core_group(_str(ref, "group")), _str(ref, "kind"), _str(ref, "name"))
        if service[:2] == ("", "Service") and service[2]:
            targets.append((service[2], _str(ref, "sectionName")))
    validation = mapping(spec.get("validation"))
    invalid: list[str] = []
    ca_refs = tuple(
        _CARef(
            core_group(_str(ref, "group")),
            _str(ref, "kind"),
            _str(ref, "name"),
            f"spec.validation.caCertificateRefs[{i}]",
        )
        for i, ref in enumerate(sequence(validation.get("caCertificateRefs")))
        if isinstance(ref, Mapping)
    )
    well_known = _str(validation, "wellKnownCACertificates")
    if well_known and ca_refs:
        invalid.append(
            "spec.validation: caCertificateRefs and wellKnownCACertificates must not both be set"
        )
    elif well_known and well_known != SYSTEM:
        invalid.append(
            f"spec.validation.wellKnownCACertificates: {well_known!r} is not supported; the only "
            f"value is {SYSTEM!r}"
        )
    elif not well_known and not ca_refs:
        invalid.append("spec.validation: caCertificateRefs or wellKnownCACertificates is required")
    hostname = _str(validation, "hostname")
    if not hostname:
        invalid.append("spec.validation.hostname is required")
    elif (problem := precise_hostname_problem(hostname)) is not None:
        invalid.append(f"spec.validation.hostname: {hostname!r} {problem}")
        hostname = ""
    names: list[str] = []
    uris: list[str] = []
    for i, san in enumerate(sequence(validation.get("subjectAltNames"))):
        where = f"spec.validation.subjectAltNames[{i}]"
        if not isinstance(san, Mapping):
            invalid.append(f"{where}: is not an object")
            continue
        kind, name, uri = _str(san, "type"), _str(san, "hostname"), _str(san, "uri")
        # The CRD's rules: the field of the type is set, the other is not.
        if kind == "Hostname" and name and not uri:
            if (problem := _san_hostname_problem(name)) is not None:
                invalid.append(f"{where}.hostname: {name!r} {problem}")
            else:
                names.append(name)
        elif kind == "URI" and uri and not name:
            if (problem := _san_uri_problem(uri)) is not None:
                invalid.append(f"{where}.uri: {uri!r} {problem}")
            else:
                uris.append(uri)
        else:
            invalid.append(
                f"{where}: type must be Hostname with hostname (and no uri) or URI with uri "
                "(and no hostname)"
            )
    # Listed names replace `hostname` as what the certificate must carry, whatever their types.
    if not names and not uris and hostname:
        names.append(hostname)
    return PolicySpec(
        obj=obj,
        targets=tuple(targets),
        ca_refs=ca_refs,
        well_known=well_known,
        hostname=hostname,
        subject_names=tuple(names),
        subject_uris=tuple(uris),
        invalid=tuple(invalid),
    )


def _san_hostname_problem(value: str) -> str | None:
    """The CRD's `Hostname` (a subject alternative name): a precise hostname, or one whose first
    label is `*`."""
    if len(value) > MAX_HOSTNAME:
        return f"must be at most {MAX_HOSTNAME} characters"
    problem = precise_hostname_problem(value[2:] if value.startswith("*.") else value)
    if problem is not None:
        return "must be a hostname (lower-case RFC 1123 labels, optionally a first label '*')"
    return None


def _san_uri_problem(value: str) -> str | None:
    """The CRD's `AbsoluteURI`."""
    if len(value) > MAX_URI:
        return f"must be at most {MAX_URI} characters"
    if _ABSOLUTE_URI.match(value) is None:
        return "must be an absolute URI with a scheme and an authority (RFC 3986)"
    # Stricter than the CRD, which does not exclude them: no certificate carries control
    # characters in a URI, and Envoy's configuration must not.
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "must not contain control characters"
    return None


class BackendTLSPolicies:
    """The BackendTLSPolicies of one snapshot, for one compile (like `BackendResolver`, it
    collects what the compile asks of it).

    `validation` is asked for each Service port a route resolves; it remembers which routes
    referenced which Service, so that `statuses` can name the Gateways (ancestors) those routes
    are attached to.
    """

    def __init__(self, policies: tuple[PolicySpec, ...] = ()) -> None:
        self.policies = policies
        # (namespace, Service, sectionName) -> the policy in force
        self._winners: dict[tuple[str, str, str], PolicySpec] = {}
        self._conflicted: dict[ObjectRef, str] = {}
        # (namespace, Service) -> the routes with a backendRef to it
        self._used_by: dict[tuple[str, str], set[ObjectRef]] = {}
        # (namespace, Service, port name) -> the TLSRoutes reaching it through passthrough
        # listeners, where no policy can apply
        self._passthrough_by: dict[tuple[str, str, str], set[ObjectRef]] = {}
        self._outcomes: dict[ObjectRef, Outcome] = {}

    @staticmethod
    def from_snapshot(snapshot: Snapshot) -> BackendTLSPolicies:
        policies = tuple(_read(o) for o in snapshot.kind(GROUP, BACKEND_TLS_POLICY))
        out = BackendTLSPolicies(policies)
        # Oldest first, each policy against the older ones in force: a conflicted policy applies
        # nowhere, not even to its other targets (one policy is either in force or not), so it
        # takes no target from a newer policy either. One pass in age order is the fixed point:
        # whether a policy is in force depends only on the older ones.
        for policy in sorted(policies, key=lambda p: p.obj.age_key):
            keys = list(dict.fromkeys((policy.obj.namespace, s, n) for s, n in policy.targets))
            taken = [(k, out._winners[k]) for k in keys if k in out._winners]
            if taken:
                (_, service, section), winner = taken[0]
                out._conflicted[policy.obj.ref] = (
                    f"spec.targetRefs: Service {service}"
                    + (f" port {section}" if section else "")
                    + f" is already targeted by the older BackendTLSPolicy {winner.obj.name}"
                )
                continue
            for key in keys:
                out._winners[key] = policy
        return out

    def policy_for(self, namespace: str, service: str, port_name: str) -> PolicySpec | None:
        """The policy in force for a Service port: one naming the port, else the Service."""
        if port_name:
            policy = self._winners.get((namespace, service, port_name))
            if policy is not None:
                return policy
        return self._winners.get((namespace, service, ""))

    def outcome(self, policy: PolicySpec, ctx: CompileContext) -> Outcome:
        cached = self._outcomes.get(policy.obj.ref)
        if cached is None:
            cached = _evaluate(policy, ctx)
            self._outcomes[policy.obj.ref] = cached
        return cached

    def validation(
        self,
        service: KubeObject,
        port: ServicePort,
        ctx: CompileContext,
        used_by: ObjectRef | None = None,
    ) -> UpstreamValidation | RouteProblem | None:
        """The upstream validation for a route's backend (None: no policy applies), or the
        problem that makes the backend invalid."""
        if used_by is not None:
            self._used_by.setdefault((service.namespace, service.name), set()).add(used_by)
        policy = self.policy_for(service.namespace, service.name, port.name)
        if policy is None:
            return None
        outcome = self.outcome(policy, ctx)
        if outcome.validation is not None:
            return outcome.validation
        reasons = [c for c in outcome.conditions if c.status is FALSE]
        reason = reasons[0] if reasons else Condition(ACCEPTED, FALSE, INVALID, "")
        # The route's reasons are the spec's four; a backend whose TLS cannot be set up is
        # one Envoy cannot reach, as if not found. The policy's own reason is in the message.
        return RouteProblem(
            RESOLVED_REFS,
            BACKEND_NOT_FOUND,
            f"Service {service.namespace}/{service.name} is targeted by BackendTLSPolicy "
            f"{policy.obj.name}, which cannot be honoured ({reason.type} {reason.reason}): "
            f"{reason.message}",
        )

    def note_passthrough(self, service: KubeObject, port: ServicePort, route: ObjectRef) -> None:
        """`route` streams to the Service port through a passthrough listener: the TLS session
        is the client's, so a policy targeting the port does not apply there (`statuses`)."""
        key = (service.namespace, service.name, port.name)
        self._passthrough_by.setdefault(key, set()).add(route)

    def passthrough_users(self, policy: PolicySpec) -> frozenset[ObjectRef]:
        """The TLSRoutes reaching a port the policy is in force for through passthrough."""
        ns = policy.obj.namespace
        return frozenset(
            r
            for (namespace, service, port), routes in self._passthrough_by.items()
            if namespace == ns and self.policy_for(ns, service, port) is policy
            for r in routes
        )

    def users(self, policy: PolicySpec) -> frozenset[ObjectRef]:
        """The routes with a backendRef to a Service the policy targets (so far in this
        compile), whether or not the policy is in force."""
        ns = policy.obj.namespace
        return frozenset(
            r for service, _ in policy.targets for r in self._used_by.get((ns, service), ())
        )

    def statuses(
        self,
        gateways_by_route: Mapping[ObjectRef, Iterable[ObjectRef]],
        controller_name: str,
        ctx: CompileContext,
        passthrough_gateways_by_route: Mapping[ObjectRef, Iterable[ObjectRef]] | None = None,
    ) -> tuple[ObjectStatus, ...]:
        """One status per policy: an `ancestors` entry per Gateway that a route using the
        policy is attached to (`gateways_by_route`, from the Gateway dialect), after every
        route was compiled. A Gateway whose routes reach a targeted Service only through TLS
        passthrough listeners (`passthrough_gateways_by_route`) gets an entry saying the policy
        does not apply there: `Accepted` False, reason `NotApplicable` (the spec lists no
        reason for it; the gateway originates no TLS to a backend it passes a client's TLS
        session to)."""
        out: list[ObjectStatus] = []
        passthrough = passthrough_gateways_by_route or {}
        for policy in self.policies:
            ref = policy.obj.ref
            conditions = self.conditions(policy, ctx)
            applied = {g for route in self.users(policy) for g in gateways_by_route.get(route, ())}
            passed = {
                g for route in self.passthrough_users(policy) for g in passthrough.get(route, ())
            } - applied
            generation = policy.obj.generation
            not_applicable = Condition(
                ACCEPTED,
                FALSE,
                NOT_APPLICABLE,
                "the Gateway passes the TLS session of the client through to the targeted "
                "Service (TLSRoute on a Passthrough listener): it originates no TLS to it",
            )
            ancestors = tuple(
                Section(
                    group="ancestors",
                    key=f"{g.group}/{g.kind}/{g.namespace}/{g.name}",
                    conditions=observed(
                        conditions if g in applied else (not_applicable,), generation
                    ),
                    fields={
                        "ancestorRef": {
                            "group": g.group,
                            "kind": g.kind,
                            "namespace": g.namespace,
                            "name": g.name,
                        },
                        "controllerName": controller_name,
                    },
                )
                for g in sorted(applied | passed)
            )
            problems = [c for c in conditions if c.status is FALSE]
            out.append(
                ObjectStatus(
                    ref=ref,
                    api_version=policy.obj.api_version,
                    state=State.INVALID if problems else State.VALID,
                    summary=problems[0].message if problems else "Accepted",
                    shape=POLICY_SHAPE,
                    generation=generation,
                    sections=ancestors,
                )
            )
        return tuple(out)

    def conditions(self, policy: PolicySpec, ctx: CompileContext) -> tuple[Condition, ...]:
        conflict = self._conflicted.get(policy.obj.ref)
        if conflict is not None:
            return (Condition(ACCEPTED, FALSE, CONFLICTED, conflict),)
        return self.outcome(policy, ctx).conditions


def _evaluate(policy: PolicySpec, ctx: CompileContext) -> Outcome:
    namespace = policy.obj.namespace
    bundle: CABundle | None = None
    invalid_kind: list[str] = []
    invalid_ref: list[str] = []
    for ref in policy.ca_refs:
        if ref.group != "" or ref.kind not in ("ConfigMap", "Secret"):
            shown = f"{ref.group}/{ref.kind}" if ref.group else ref.kind
            invalid_kind.append(f"{ref.field}: kind {shown} is not ConfigMap or Secret")
            continue
        ca = ctx.secrets.ca_bundles
        found = (
            ca.config_map_ca_bundle(namespace, ref.name)
            if ref.kind == "ConfigMap"
            else ca.ca_bundle(namespace, ref.name, for_namespace=namespace)
        )
        if isinstance(found, CABundle):
            bundle = bundle or found
        else:
            invalid_ref.append(f"{ref.field}: {found.message}")
    if invalid_kind:
        resolved = Condition(RESOLVED_REFS, FALSE, INVALID_KIND, "; ".join(invalid_kind))
    elif invalid_ref:
        resolved = Condition(
            RESOLVED_REFS, FALSE, INVALID_CA_CERTIFICATE_REF, "; ".join(invalid_ref)
        )
    else:
        resolved = Condition(RESOLVED_REFS, TRUE, RESOLVED_REFS, "Resolved all the references")
    system = policy.well_known == SYSTEM
    if policy.invalid:
        accepted = Condition(ACCEPTED, FALSE, INVALID, "; ".join(policy.invalid))
    elif system:
        accepted = Condition(ACCEPTED, TRUE, ACCEPTED, "Policy is accepted")
    elif bundle is None:
        accepted = Condition(
            ACCEPTED,
            FALSE,
            NO_VALID_CA_CERTIFICATE,
            "no caCertificateRefs entry resolves to a CA certificate bundle",
        )
    else:
        accepted = Condition(ACCEPTED, TRUE, ACCEPTED, "Policy is accepted")
    validation = None
    if accepted.status is TRUE and system:
        validation = UpstreamValidation(
            ca_secret="",
            subject_names=policy.subject_names,
            sni=policy.hostname,
            system_trust_store=True,
            subject_uris=policy.subject_uris,
        )
    elif accepted.status is TRUE and bundle is not None:
        validation = UpstreamValidation(
            ca_secret=bundle.name,
            subject_names=policy.subject_names,
            sni=policy.hostname,
            subject_uris=policy.subject_uris,
        )
    return Outcome(validation, (accepted, resolved))
