"""The status writer's and leader election's API calls, with lightkube.

Objects stay dicts: lightkube's generic resources (`Generic` is a dict) carry the JSON as the
server sent it, so no typed model is decoded. Errors become the writer's and elector's own
(`Conflict`, `Gone`, `LeaseConflict`), so those modules and their tests know no client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from httpx2 import HTTPStatusError
from lightkube import AsyncClient
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from turnout.sources.kubernetes.kinds import LEASE, ApiResource
from turnout.sources.kubernetes.leader import LEASE_NAME, LeaseConflict, LeaseRecord
from turnout.sources.kubernetes.status_writer import Conflict, Gone, Observed, StatusTarget

FIELD_MANAGER = "turnout"


def generic(resource: ApiResource) -> Any:
    """lightkube's generic resource class for `resource` (created once, then reused)."""
    make = create_namespaced_resource if resource.namespaced else create_global_resource
    return make(resource.group, resource.version, resource.kind, resource.plural)


def _observed(obj: Mapping[str, Any]) -> Observed:
    metadata = obj.get("metadata") or {}
    status = obj.get("status")
    return Observed(str(metadata.get("resourceVersion", "")), status or None)


def _code(err: HTTPStatusError) -> int:
    # lightkube raises its ApiError (a subclass) only when the answer says exactly
    # `application/json`; the HTTP status is there either way.
    return err.response.status_code


class LightkubeStatusApi:
    """`status_writer.StatusApi`: GET and merge-PATCH of `/status`."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    def _where(self, target: StatusTarget) -> dict[str, Any]:
        return {"namespace": target.namespace} if target.resource.namespaced else {}

    async def read(self, target: StatusTarget) -> Observed:
        res = generic(target.resource)
        try:
            obj = await self.client.get(res.Status, target.name, **self._where(target))
        except HTTPStatusError as err:
            if _code(err) == 404:
                raise Gone(target.name) from err
            raise
        return _observed(obj)

    async def patch(
        self, target: StatusTarget, resource_version: str, status: Mapping[str, Any]
    ) -> Observed:
        res = generic(target.resource)
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        try:
            obj = await self.client.patch(
                res.Status,
                target.name,
                body,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
                **self._where(target),
            )
        except HTTPStatusError as err:
            if _code(err) == 409:
                raise Conflict(target.name) from err
            if _code(err) == 404:
                raise Gone(target.name) from err
            raise
        return _observed(obj)


def _record(obj: Mapping[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((obj.get("metadata") or {}).get("resourceVersion", "")),
    )


class LightkubeLeaseApi:
    """`leader.LeaseApi`: the Lease `turnout` in one namespace, written at its resourceVersion."""

    def __init__(self, client: AsyncClient, namespace: str, name: str = LEASE_NAME) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.res = generic(LEASE)

    def _object(self, record: LeaseRecord) -> Any:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        spec: dict[str, Any] = {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": record.lease_duration_s,
            "acquireTime": record.acquire_time,
            "renewTime": record.renew_time,
            "leaseTransitions": record.transitions,
        }
        return self.res(apiVersion=LEASE.api_version, kind=LEASE.kind, metadata=metadata, spec=spec)

    async def get(self) -> LeaseRecord | None:
        try:
            obj = await self.client.get(self.res, self.name, namespace=self.namespace)
        except HTTPStatusError as err:
            if _code(err) == 404:
                return None
            raise
        return _record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        try:
            obj = await self.client.create(self._object(record))
        except HTTPStatusError as err:
            if _code(err) == 409:
                raise LeaseConflict(self.name) from err
            raise
        return _record(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        try:
            obj = await self.client.replace(self._object(record))
        except HTTPStatusError as err:
            if _code(err) in (409, 404):
                raise LeaseConflict(self.name) from err
            raise
        return _record(obj)
