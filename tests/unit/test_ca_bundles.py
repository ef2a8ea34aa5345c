"""CA bundles and CRLs from Secrets (`graph/ca_bundles.py`), and the `--fallback-certificate`
flag."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.builders import from_dict
from tests.e2e.certs import CA
from turnout.cli import build_parser
from turnout.graph.ca_bundles import CABundleResolver
from turnout.graph.model import CABundle
from turnout.graph.services import Unresolved
from turnout.store import Snapshot

_CA, _OTHER = CA(), CA("other")


def _secret(name: str, namespace: str = "default", type_: str | None = "Opaque", **kw: Any) -> Any:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        **kw,
    }
    if type_ is not None:
        raw["type"] = type_
    return from_dict(raw)


def _resolver(*objects: Any) -> CABundleResolver:
    return CABundleResolver(Snapshot.of(list(objects)))


def test_ca_bundle_from_string_data_or_base64_data() -> None:
    both = _CA.cert_pem + _OTHER.cert_pem
    encoded = base64.b64encode(both.encode()).decode()
    resolver = _resolver(
        _secret("plain", stringData={"ca.crt": both}),
        _secret("encoded", data={"ca.crt": encoded}),
        _secret("tls", type_="kubernetes.io/tls", stringData={"ca.crt": _CA.cert_pem}),
        _secret("untyped", type_=None, stringData={"ca.crt": _CA.cert_pem}),
    )
    plain = resolver.ca_bundle("default", "plain", for_namespace="default")
    encoded_bundle = resolver.ca_bundle("default", "encoded", for_namespace="default")
    assert isinstance(plain, CABundle) and isinstance(encoded_bundle, CABundle)
    assert plain.ca_certificates == encoded_bundle.ca_certificates == both
    assert plain.crl is None
    for name in ("tls", "untyped"):
        assert isinstance(resolver.ca_bundle("default", name, for_namespace="default"), CABundle)


def test_bundle_names_follow_the_content() -> None:
    first = _resolver(_secret("ca", stringData={"ca.crt": _CA.cert_pem}))
    second = _resolver(_secret("ca", stringData={"ca.crt": _OTHER.cert_pem}))
    a = first.ca_bundle("default", "ca", for_namespace="default")
    b = second.ca_bundle("default", "ca", for_namespace="default")
    assert isinstance(a, CABundle) and isinstance(b, CABundle)
    assert a.name.startswith("default/ca/") and b.name.startswith("default/ca/")
    assert a.name != b.name


def test_crl_bundle() -> None:
    resolver = _resolver(_secret("crl", stringData={"crl.pem": _CA.crl(), "ca.crt": _CA.cert_pem}))
    crl = resolver.crl("default", "crl", for_namespace="default")
    ca = resolver.ca_bundle("default", "crl", for_namespace="default")
    assert isinstance(crl, CABundle) and isinstance(ca, CABundle)
    assert crl.crl is not None and "X509 CRL" in crl.crl and crl.ca_certificates == ""
    assert crl.name != ca.name  # one Secret, two bundles
    assert resolver.bundles() == tuple(sorted((crl, ca), key=lambda b: b.name))


@pytest.mark.parametrize(
    ("entries", "type_", "message"),
    [
        ({"ca.crt": "junk"}, "Opaque", "ca.crt holds no PEM certificate"),
        ({"ca.crt": _CA.crl()}, "Opaque", 'holds a PEM block of type "X509 CRL"'),
        (
            {"ca.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
            "Opaque",
            "ca.crt holds a malformed PEM certificate",
        ),
        ({"other": "x"}, "Opaque", 'has no "ca.crt" entry'),
        (
            {"ca.crt": _CA.cert_pem},
            "kubernetes.io/basic-auth",
            'of type "kubernetes.io/basic-auth"',
        ),
    ],
)
def test_unusable_ca_bundles(entries: dict[str, str], type_: str, message: str) -> None:
    result = _resolver(_secret("ca", type_=type_, stringData=entries)).ca_bundle(
        "default", "ca", for_namespace="default"
    )
    assert isinstance(result, Unresolved)
    assert result.reason == "SecretNotValid"
    assert message in result.message


def test_malformed_crl_and_missing_secret() -> None:
    resolver = _resolver(_secret("crl", stringData={"crl.pem": _CA.cert_pem}))
    bad = resolver.crl("default", "crl", for_namespace="default")
    assert isinstance(bad, Unresolved) and 'of type "CERTIFICATE", not "X509 CRL"' in bad.message
    missing = resolver.crl("default", "nope", for_namespace="default")
    assert isinstance(missing, Unresolved) and missing.reason == "SecretNotFound"
    assert resolver.bundles() == ()


def test_other_namespaces_need_a_delegation_checked_before_the_secret() -> None:
    delegation = from_dict(
        {
            "apiVersion": "projectcontour.io/v1",
            "kind": "TLSCertificateDelegation",
            "metadata": {"name": "d", "namespace": "pki"},
            "spec": {"delegations": [{"secretName": "ca", "targetNamespaces": ["team"]}]},
        }
    )
    resolver = _resolver(_secret("ca", "pki", stringData={"ca.crt": _CA.cert_pem}), delegation)
    assert isinstance(resolver.ca_bundle("pki", "ca", for_namespace="team"), CABundle)
    denied = resolver.ca_bundle("pki", "ca", for_namespace="other")
    assert isinstance(denied, Unresolved) and denied.reason == "DelegationNotPermitted"
    # Not even whether it exists is revealed.
    hidden = resolver.ca_bundle("pki", "nope", for_namespace="other")
    assert isinstance(hidden, Unresolved) and hidden.reason == "DelegationNotPermitted"


def test_fallback_certificate_flag() -> None:
    parser = build_parser()
    args = parser.parse_args(["check", "x.yaml", "--fallback-certificate", "certs/fallback"])
    assert args.fallback_certificate == "certs/fallback"
    assert parser.parse_args(["check", "x.yaml"]).fallback_certificate == ""
    for bad in ("fallback", "/fallback", "certs/", "a/b/c"):
        with pytest.raises(SystemExit):
            parser.parse_args(["check", "x.yaml", "--fallback-certificate", bad])
