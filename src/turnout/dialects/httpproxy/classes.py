"""Which HTTPProxies are turnout's: Contour's `ingressclass.MatchesHTTPProxy`, adapted to turnout's
default class.

Contour reads the class from the `projectcontour.io/ingress.class` annotation, else
`kubernetes.io/ingress.class`, else `spec.ingressClassName`: the first annotation *present* is the
annotation class, and only when that is empty does `spec.ingressClassName` count. A Contour with no
class configured serves proxies of no class and of its default class `contour`; a Contour with a
class configured serves that class only. turnout always has a class name
(`CompileOptions.ingress_class_name`); the default, `turnout`, plays the part of "no class
configured": proxies of no class and of class `turnout` are served. Any other name serves exactly
that class, so a proxy of no class is left to the turnout (or Contour) without a configured class.

A proxy of another class is not turnout's at all: no routes, no status (Contour drops it from its
cache, so an include of it is `IncludeNotFound`, and another controller owns its status).
IngressClass objects play no part here, as in Contour: HTTPProxy classes are matched by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from turnout.compile_inputs import CompileOptions
from turnout.objects import KubeObject

# Looked up in this order; the first one present decides (Contour's `annotation.IngressClass`).
CLASS_ANNOTATIONS = ("projectcontour.io/ingress.class", "kubernetes.io/ingress.class")
DEFAULT_CLASS = CompileOptions().ingress_class_name


def proxy_class(obj: KubeObject) -> str:
    """The class an HTTPProxy asks for, "" for none."""
    annotations = obj.annotations
    for key in CLASS_ANNOTATIONS:
        if key in annotations:
            value = annotations[key]
            # Annotation values are strings in Kubernetes; a file may hold a YAML number.
            text = "" if value is None else str(value)
            if text:
                return text
            break
    spec = obj.spec
    name = spec.get("ingressClassName") if isinstance(spec, Mapping) else None
    # A value of the wrong type is no class: the proxy is then read, and its SpecError reported,
    # by the turnout that serves proxies without a class.
    return name if isinstance(name, str) else ""


def serves(obj: KubeObject, options: CompileOptions) -> bool:
    """Whether the turnout compiling with `options` serves this HTTPProxy."""
    wanted = proxy_class(obj)
    configured = options.ingress_class_name
    if configured in ("", DEFAULT_CLASS):
        return wanted in ("", DEFAULT_CLASS)
    return wanted == configured


def why_not_served(obj: KubeObject, options: CompileOptions) -> str | None:
    """Why the turnout compiling with `options` does not serve this HTTPProxy; None if it does."""
    if serves(obj, options):
        return None
    wanted = proxy_class(obj)
    if not wanted:
        return f"no class; turnout serves class {options.ingress_class_name!r} only"
    served = options.ingress_class_name or DEFAULT_CLASS
    return f"class {wanted!r} is not turnout's (turnout serves {served!r})"
