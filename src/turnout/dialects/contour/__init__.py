"""What the Contour family (HTTPProxy, IngressRoute, Route) shares, and Ingress with it.

A lower layer under the dialect packages: they may import it, it imports none of them (an
import-linter contract in pyproject.toml says so). `order` is Contour's route precedence (also
Ingress's, which Contour serves the same way), `health_check` Contour's active HTTP health check
with its defaults, `session_affinity` the cookie of the `Cookie` load-balancing strategy.
"""
