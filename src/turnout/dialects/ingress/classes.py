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

In files mode (`CompileOptions.classless_ingress_is_ours`) no other controller reads the objects,
so an Ingress without any class is turnout's, as Contour with no class configured takes it; a
default IngressClass still decides when there is one, and an `--ingress-class-name` other than the
default `turnout` still means "that class only" (as for HTTPProxy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from turnout.compile_inputs import CompileOptions
from turnout.dialects.ingress.spec import CLASS_KIND, GROUP
from turnout.objects import KubeObject
from turnout.store import Snapshot

CONTROLLER = "turnout.dev/ingress-controller"
IS_DEFAULT_CLASS = "ingressclass.kubernetes.io/is-default-class"
# Looked up in this order; the first one present with a non-empty value decides (Contour's order).
CLASS_ANNOTATIONS = ("projectcontour.io/ingress.class", "kubernetes.io/ingress.class")
DEFAULT_CLASS = CompileOptions().ingress_class_name


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
    # Files mode: a classless Ingress is turnout's when no default IngressClass decides.
    classless_is_ours: bool = False

    @staticmethod
    def of(snapshot: Snapshot, served_name: str, classless_is_ours: bool = False) -> ClassIndex:
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
        return ClassIndex(served_name, controllers, default, classless_is_ours)

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
        return self.why_not(ingress) is None

    def why_not(self, ingress: KubeObject) -> str | None:
        """Why `ingress` is not turnout's; None when it is."""
        class_name = self.class_of(ingress)
        if class_name is None:
            if self.default_class is not None:
                return self._not_ours(self.default_class, "no class; the default IngressClass ")
            if self.classless_is_ours and self.served_name in ("", DEFAULT_CLASS):
                return None
            if self.classless_is_ours:
                return f"no class; turnout serves class {self.served_name!r} only"
            return "no class, and no default IngressClass of turnout's"
        return self._not_ours(class_name, "class ")

    def _not_ours(self, class_name: str, prefix: str) -> str | None:
        if self.is_ours(class_name):
            return None
        controller = self.controllers.get(class_name)
        if controller is not None:
            return (
                f"{prefix}{class_name!r} is another controller's ({controller!r}; turnout is "
                f"{CONTROLLER!r})"
            )
        return f"{prefix}{class_name!r} is not turnout's (turnout serves {self.served_name!r})"

    def ignored_classes(self, snapshot: Snapshot) -> list[tuple[KubeObject, str]]:
        """The IngressClasses of another controller, with the reason."""
        return [
            (ic, f"controller {_controller(ic)!r} is not turnout's ({CONTROLLER!r})")
            for ic in snapshot.kind(GROUP, CLASS_KIND)
            if _controller(ic) != CONTROLLER
        ]
