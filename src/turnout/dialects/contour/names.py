"""Contour's `NamespacedNameFrom`: how its APIs write a reference to an object."""

from __future__ import annotations


def namespaced_name(written: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of `name` or `namespace/name`, split at the first "/"; an empty
    namespace (or none) is `namespace`, the referring object's."""
    ns, sep, name = written.partition("/")
    if not sep:
        return namespace, written
    return ns or namespace, name
