"""Which of the kinds turnout reads the API server offers, and at which version.

For each (group, kind) of `kinds.WATCHED` that some dialect reads, the candidates are the versions
the dialects read (`readable`, as the composition root passes them: `Dialects.kinds` plus the
core kinds). The server's preferred version of the group wins when it is a candidate the server
serves the kind at; otherwise the first candidate it serves, `kinds.WATCHED`'s own version first.
A kind served at no candidate version is missing (its CRD is not installed yet)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from turnout.objects import group_of
from turnout.sources.kubernetes.api import KubeApi, KubeApiError
from turnout.sources.kubernetes.kinds import WATCHED, ApiResource


@dataclass(frozen=True, slots=True)
class Discovered:
    served: tuple[ApiResource, ...]  # with the version chosen and discovery's `namespaced`
    missing: tuple[ApiResource, ...]


def wanted(readable: Iterable[tuple[str, str]]) -> dict[ApiResource, tuple[str, ...]]:
    """Each watched resource some dialect reads -> the versions to try, its own first."""
    versions: dict[tuple[str, str], set[str]] = {}
    for api_version, kind in readable:
        versions.setdefault((group_of(api_version), kind), set()).add(
            api_version.rpartition("/")[2]
        )
    out: dict[ApiResource, tuple[str, ...]] = {}
    for r in WATCHED:
        found = versions.get((r.group, r.kind))
        if found:
            rest = sorted(found - {r.version})
            out[r] = ((r.version,) if r.version in found else ()) + tuple(rest)
    return out


async def _preferred(api: KubeApi) -> dict[str, str]:
    """group -> the server's preferred version ("" is the core group, always v1)."""
    groups = (await api.get("/apis")).get("groups")
    out = {"": "v1"}
    for g in groups if isinstance(groups, list) else ():
        pref = g.get("preferredVersion") if isinstance(g, Mapping) else None
        if isinstance(pref, Mapping) and isinstance(g.get("name"), str):
            out[g["name"]] = str(pref.get("version", ""))
    return out


async def _kinds_at(api: KubeApi, group: str, version: str) -> dict[str, Mapping[str, Any]]:
    """kind -> its discovery entry at group/version ({} when the version is not served)."""
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    try:
        body = await api.get(path)
    except KubeApiError as err:
        if err.code == 404:
            return {}
        raise
    entries = body.get("resources")
    listed = entries if isinstance(entries, list) else []
    return {
        str(e.get("kind")): e
        for e in listed
        if isinstance(e, Mapping) and "/" not in str(e.get("name", "/"))
    }


async def discover(api: KubeApi, want: Mapping[ApiResource, tuple[str, ...]]) -> Discovered:
    preferred = await _preferred(api)
    cache: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    served: list[ApiResource] = []
    missing: list[ApiResource] = []
    for r, versions in want.items():
        if r.group not in preferred:
            missing.append(r)
            continue
        pref = preferred[r.group]
        order = ((pref,) if pref in versions else ()) + tuple(v for v in versions if v != pref)
        chosen = None
        for version in order:
            if (r.group, version) not in cache:
                cache[(r.group, version)] = await _kinds_at(api, r.group, version)
            entry = cache[(r.group, version)].get(r.kind)
            if entry is not None:
                namespaced = bool(entry.get("namespaced", r.namespaced))
                plural = str(entry.get("name") or r.plural)
                chosen = dataclasses.replace(
                    r, version=version, namespaced=namespaced, plural=plural
                )
                break
        (served if chosen is not None else missing).append(chosen or r)
    return Discovered(tuple(served), tuple(missing))
