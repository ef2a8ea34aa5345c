"""TLSCertificateDelegation, in both Contour groups (`projectcontour.io/v1`,
`contour.heptio.com/v1beta1`): the fields `graph.secret_data` reads, for the CRD's schema."""

from __future__ import annotations

from turnout.dialects.openapi import obj, objects, string, strings

DELEGATION_SHORT_NAMES = ("tlscerts",)
DELEGATION_SPEC = obj(
    "spec",
    objects(
        "delegations",
        string("secretName", required=True),
        strings("targetNamespaces", required=True),
        required=True,
    ),
)
