"""A fuzz campaign over every dialect, in-process: the routing objects of the fixtures in
tests/fixtures/*, each mutated (seeded) and compiled next to a few neighbour objects.

For each mutated document it checks what one tenant's object must never do to the control plane
(issue 14): raise, take a second or more to compile, change another owner's virtual hosts or
status, or produce a configuration the translator cannot build. A sample of the configurations
goes to `envoy --mode validate`. `bench/fuzz_campaign.py` runs the long campaign;
tests/unit/test_fuzz_campaign.py a CI-sized slice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnout.app import compile_snapshot
from turnout.envoy.translate import translate
from turnout.envoy.validate import validate_resources
from turnout.graph.build import CompileResult
from turnout.objects import KubeObject, freeze, thaw
from turnout.sources.parse import parse_text
from turnout.store import Snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NEIGHBOURS_NAMESPACE = "fuzz-neighbour"
# The kinds a tenant writes routing with: the campaign mutates these.
TARGET_KINDS = frozenset(
    {
        "HTTPProxy",
        "IngressRoute",
        "Route",
        "Ingress",
        "RouteGroup",
        "Gateway",
        "HTTPRoute",
        "GRPCRoute",
        "TLSRoute",
        "TCPRoute",
        "BackendTLSPolicy",
        "ReferenceGrant",
        "TLSCertificateDelegation",
    }
)
# How many copies of a list item a "blow-up" mutation makes: past every list cap.
_BLOW_UP = (100, 1_100, 5_000)
_NUMBERS = (0, -1, 1, 80, 443, 65535, 65536, 2**31, 2**32, 2**63)
_STRINGS = ("", "/", "*", "a", "//x/../", "(", "[a-", "*.x", "x" * 300, "%2f", "\u00e9", "1s")


def _neighbours() -> list[KubeObject]:
    ns = NEIGHBOURS_NAMESPACE
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        },
        {
            "apiVersion": "projectcontour.io/v1",
            "kind": "HTTPProxy",
            "metadata": {"name": "n", "namespace": ns},
            "spec": {
                "virtualhost": {"fqdn": "neighbour.fuzz.test"},
                "routes": [
                    {"conditions": [{"prefix": "/"}], "services": [{"name": "s", "port": 80}]}
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "n-ingress", "namespace": ns},
            "spec": {
                "ingressClassName": "turnout",
                "rules": [
                    {
                        "host": "neighbour-ingress.fuzz.test",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "s", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ],
            },
        },
    ]
    return [_object(doc) for doc in docs]


def _object(raw: dict[str, Any]) -> KubeObject:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace", "")
    return KubeObject(raw["apiVersion"], raw["kind"], namespace, meta["name"], freeze(raw))


@dataclass(frozen=True, slots=True)
class Seed:
    """One fixture's objects and, among them, the index of the object to mutate."""

    fixture: str
    objects: tuple[KubeObject, ...]
    target: int


def seeds() -> list[Seed]:
    """Every (fixture, routing object) pair, in a stable order."""
    out: list[Seed] = []
    for path in sorted(FIXTURES.glob("*/*/input.yaml")):
        parsed = parse_text(path.read_text(), str(path))
        objects = tuple(parsed.objects)
        for i, obj in enumerate(objects):
            if obj.kind in TARGET_KINDS:
                out.append(Seed(str(path.parent.relative_to(FIXTURES)), objects, i))
    return out


def _strings_of(value: Any, found: set[str]) -> None:
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, dict):
        found.update(value)
        for item in value.values():
            _strings_of(item, found)
    elif isinstance(value, list):
        for item in value:
            _strings_of(item, found)


class Mutator:
    """Small structural mutations of a document, as tests/unit/fuzzing.py makes them, plus
    "blow-ups" (one list item repeated past every cap), drawn from a seeded `random.Random`."""

    def __init__(self, rng: random.Random, strings: list[str]) -> None:
        self.rng = rng
        self.strings = strings

    def scalar(self) -> Any:
        rng = self.rng
        pick = rng.randrange(6)
        if pick == 0:
            return None
        if pick == 1:
            return rng.choice((True, False))
        if pick == 2:
            return rng.choice(_NUMBERS)
        if pick == 3:
            return rng.choice(_STRINGS)
        return rng.choice(self.strings)

    def value(self, depth: int = 0) -> Any:
        pick = self.rng.randrange(5 if depth < 2 else 3)
        if pick == 3:
            return [self.value(depth + 1) for _ in range(self.rng.randrange(3))]
        if pick == 4:
            return {self.rng.choice(self.strings): self.value(depth + 1)}
        return self.scalar()

    def leaf(self, value: Any) -> Any:
        rng = self.rng
        if rng.randrange(4) == 0:
            return self.value()
        if isinstance(value, bool):
            return rng.choice((True, False))
        if isinstance(value, int):
            return rng.choice(_NUMBERS)
        if isinstance(value, str):
            return rng.choice(self.strings) if rng.randrange(2) else rng.choice(_STRINGS)
        return self.value()

    def mutate(self, value: Any) -> Any:
        if not isinstance(value, dict | list) or not value:
            return self.leaf(value)
        rng = self.rng
        choice = rng.randrange(10)
        if choice == 0:
            return self.value()
        if isinstance(value, dict):
            key = rng.choice(sorted(value))
            if choice == 1:
                return {k: v for k, v in value.items() if k != key}
            if choice == 2:
                return {**value, rng.choice(self.strings): self.value()}
            return {**value, key: self.mutate(value[key])}
        i = rng.randrange(len(value))
        if choice == 1:
            return [*value[:i], *value[i + 1 :]]
        if choice == 2:
            copies = rng.choice(_BLOW_UP) if rng.randrange(20) == 0 else 1
            return [*value, *([value[i]] * copies)]
        return [*value[:i], self.mutate(value[i]), *value[i + 1 :]]


@dataclass(slots=True)
class Report:
    documents: int = 0
    exceptions: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)  # compiles of a second or more
    cross_object: list[str] = field(default_factory=list)
    untranslatable: list[str] = field(default_factory=list)
    validated: int = 0
    envoy_rejected: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    compile_s: float = 0.0

    @property
    def failures(self) -> list[str]:
        return [
            *self.exceptions,
            *self.slow,
            *self.cross_object,
            *self.untranslatable,
            *self.envoy_rejected,
        ]


def _neighbour_view(result: CompileResult) -> tuple[Any, ...]:
    """What the neighbours get: their virtual hosts on every listener and their statuses."""
    hosts = tuple(
        (lst.name, vh)
        for lst in result.graph.listeners
        for vh in lst.virtual_hosts
        if vh.owner.namespace == NEIGHBOURS_NAMESPACE
    )
    statuses = tuple(
        (s.ref, s.body) for s in result.statuses if s.ref.namespace == NEIGHBOURS_NAMESPACE
    )
    return hosts, statuses


class Campaign:
    """Runs mutated documents; `check` one, `run` many."""

    def __init__(self, seed: int, validate_every: int = 1000, slow_after_s: float = 1.0) -> None:
        # `slow_after_s`: a compile this long is reported. The benchmark holds the campaign to
        # the 1 s; the test suite only catches hangs (shared CI machines are noisy).
        self.slow_after_s = slow_after_s
        self.rng = random.Random(seed)
        self.seeds = seeds()
        self.neighbours = _neighbours()
        self.validate_every = validate_every
        strings: set[str] = set()
        for s in self.seeds:
            _strings_of(thaw(s.objects[s.target].raw), strings)
        self.mutator = Mutator(self.rng, sorted(strings))
        self._baselines: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.report = Report()

    def baseline(self, seed: Seed) -> tuple[Any, ...]:
        """The neighbours' view with the fixture but without its target object."""
        key = (seed.fixture, seed.target)
        if key not in self._baselines:
            others = [o for i, o in enumerate(seed.objects) if i != seed.target]
            result = compile_snapshot(Snapshot.of([*others, *self.neighbours]))
            self._baselines[key] = _neighbour_view(result)
        return self._baselines[key]

    def document(self) -> tuple[Seed, KubeObject]:
        seed = self.rng.choice(self.seeds)
        raw = thaw(seed.objects[seed.target].raw)
        for _ in range(self.rng.randrange(1, 4)):
            raw["spec"] = self.mutator.mutate(raw.get("spec"))
        target = seed.objects[seed.target]
        mutated = KubeObject(
            target.api_version, target.kind, target.namespace, target.name, freeze(raw)
        )
        return seed, mutated

    def check(self, seed: Seed, mutated: KubeObject) -> None:
        report = self.report
        report.documents += 1
        label = f"#{report.documents} {seed.fixture} {mutated.kind} {mutated.name}"
        objects = list(seed.objects)
        objects[seed.target] = mutated
        try:
            started = time.perf_counter()
            result = compile_snapshot(Snapshot.of([*objects, *self.neighbours]))
            elapsed = time.perf_counter() - started
        except Exception as err:
            report.exceptions.append(f"{label}: compile raised {err!r}")
            return
        report.compile_s += elapsed
        report.slowest_s = max(report.slowest_s, elapsed)
        if elapsed >= self.slow_after_s:
            report.slow.append(f"{label}: compile took {elapsed:.2f} s")
        if _neighbour_view(result) != self.baseline(seed):
            report.cross_object.append(f"{label}: a neighbour's virtual hosts or status changed")
        try:
            resources = translate(result.graph)
        except Exception as err:
            report.untranslatable.append(f"{label}: translate raised {err!r}")
            return
        if self.validate_every and report.documents % self.validate_every == 0:
            report.validated += 1
            outcome = validate_resources(resources)
            if not outcome.ok:
                report.envoy_rejected.append(f"{label}: envoy: {outcome.output[-500:]}")

    def run(self, count: int, deadline_s: float | None = None) -> Iterator[Report]:
        """Checks `count` documents (or as many as fit before `deadline_s` of wall time),
        yielding the report every 1000 documents and at the end."""
        started = time.monotonic()
        for n in range(1, count + 1):
            self.check(*self.document())
            if n % 1000 == 0:
                yield self.report
            if deadline_s is not None and time.monotonic() - started >= deadline_s:
                break
        yield self.report
