"""A CI-sized slice of the fuzz campaign (bench/fuzz_campaign.py runs the long one): mutated
routing objects of every dialect never raise, never hang, leave their neighbours' virtual hosts
and statuses as they were, and translate; a sample passes Envoy's validation. Compile times are
the benchmark's business (docs/benchmarks.md): here a compile only has to end within 10 s."""

from __future__ import annotations

from tests.cases.fuzz_campaign import NEIGHBOURS_NAMESPACE, Campaign, seeds


def test_seeds_cover_every_dialect() -> None:
    kinds = {s.objects[s.target].kind for s in seeds()}
    assert {"HTTPProxy", "IngressRoute", "Route", "Ingress", "RouteGroup"} <= kinds
    assert {"Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"} <= kinds


def test_the_neighbours_are_served_so_a_change_to_them_would_be_seen() -> None:
    campaign = Campaign(seed=0)
    hosts, statuses = campaign.baseline(campaign.seeds[0])
    names = {vh.hostname for _, vh in hosts}
    assert {"neighbour.fuzz.test", "neighbour-ingress.fuzz.test"} <= names
    assert {ref.namespace for ref, _ in statuses} == {NEIGHBOURS_NAMESPACE}


def test_two_thousand_mutated_documents() -> None:
    campaign = Campaign(seed=2026, validate_every=1000, slow_after_s=10.0)
    for _ in campaign.run(2000):
        pass
    report = campaign.report
    assert report.documents == 2000
    assert report.failures == []
    assert report.validated == 2
