"""HTTPProxy status strings more than one module records: Contour's sub-condition types
(`ConditionType...Error`) and the reasons for unsupported and ignored fields.

A module of its own, importing nothing, so that `spec.py` and the modules it imports (which
cannot import `spec.py` back) share one definition of each string.
"""

from __future__ import annotations

SPEC_ERROR = "SpecError"
VIRTUAL_HOST_ERROR = "VirtualHostError"
ROOT_NAMESPACE_ERROR = "RootNamespaceError"
INCLUDE_ERROR = "IncludeError"
ROUTE_ERROR = "RouteError"
SERVICE_ERROR = "ServiceError"
TLS_ERROR = "TLSError"
ORPHANED = "Orphaned"

# turnout's reason for a field it knows but refuses.
FIELD_NOT_SUPPORTED = "FieldNotSupported"
# Contour's own reason for ignored fields (a warning).
IGNORED_FIELD = "IgnoredField"
