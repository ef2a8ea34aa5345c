"""Which Ingresses are turnout's: the class annotation, `spec.ingressClassName`, IngressClass
objects and the default IngressClass.

The order is Contour's (`internal/ingressclass`): a class annotation, when set, wins over
`spec.ingressClassName` (the API server refuses new Ingresses where both are set and differ, but
older objects can still carry both). A class *name* is turnout's when the IngressClass of that
name names turnout's controller, or, when no IngressClass of that name exists, when it is the name
turnout serves (`CompileOptions.ingress_class_name`; Contour's `--ingress-class-name`, which also
needs no IngressClass object). An Ingress without any class is turnout's only when the cluster's
default IngressClass (annotated `ingressclass.kubernetes.io/is-default-class: "true"`; the newest
one when several are, as the API server's admission plugin picks) names turnout's controller: in a
cluster, the admission plugin would have written that class into the Ingress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from turnout.dialects.ingress.spec import CLASS_KIND, GROUP
from turnout.objects import KubeObject
from turnout.store import Snapshot

CONTROLLER = "turnout.dev/ingress-controller"
IS_DEFAULT_CLASS = "ingressclass.kubernetes.io/is-default-class"
# Looked up in this order; the first one present with a non-empty value decides (Contour's order).
CLASS_ANNOTATIONS = ("projectcontour.io/ingress.class", "kubernetes.io/ingress.class")


def _controller(ingress_class: KubeObject) -> str:
    spec = ingress_class.spec
    controller = spec.get("controller") if isinstance(spec, Mapping) else None
    return controller if isinstance(controller, str) else ""


@dataclass(frozen=True, slots=True)
class ClassIndex:
    """The IngressClasses of a snapshot, and the class name turnout serves."""

    served_name: str
    controllers: Mapping[str, str]  # IngressClass name -> spec.controller
    default_class: str | None  # the effective default IngressClass, if any

    @staticmethod
    def of(snapshot: Snapshot, served_name: str) -> ClassIndex:
        controllers: dict[str, str] = {}
        defaults: list[KubeObject] = []
        # IngressClass is cluster-scoped; files give it a namespace, which does not count. The
        # snapshot yields objects sorted by namespace/name, so the first of a name wins.
        for ic in snapshot.kind(GROUP, CLASS_KIND):
            if ic.name in controllers:
                continue
            controllers[ic.name] = _controller(ic)
            if ic.annotations.get(IS_DEFAULT_CLASS) == "true":
                defaults.append(ic)
        default: str | None = None
        if defaults:
            # The newest default; equal timestamps: the first name (the admission plugin's order).
            newest = max(ic.creation_timestamp for ic in defaults)
            default = min(ic.name for ic in defaults if ic.creation_timestamp == newest)
        return ClassIndex(served_name, controllers, default)

    def is_ours(self, class_name: str) -> bool:
        controller = self.controllers.get(class_name)
        if controller is not None:
            return controller == CONTROLLER
        return class_name == self.served_name

    def class_of(self, ingress: KubeObject) -> str | None:
        """The class an Ingress belongs to, or None for an Ingress without any class."""
        for key in CLASS_ANNOTATIONS:
            value = ingress.annotations.get(key)
            if isinstance(value, str) and value:
                return value
        spec = ingress.spec
        name = spec.get("ingressClassName") if isinstance(spec, Mapping) else None
        if isinstance(name, str) and name:
            return name
        return None

    def selects(self, ingress: KubeObject) -> bool:
        """Whether turnout serves `ingress`."""
        class_name = self.class_of(ingress)
        if class_name is None:
            return self.default_class is not None and self.is_ours(self.default_class)
        return self.is_ours(class_name)
