"""Contour's session affinity: the `Cookie` load-balancing strategy (HTTPProxy, IngressRoute)."""

from __future__ import annotations

# The cookie Contour's `Cookie` strategy hashes on; Envoy sets it when a request has none.
SESSION_AFFINITY_COOKIE = "X-Contour-Session-Affinity"
