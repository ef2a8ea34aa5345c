"""The HTTP connection to the API server: lightkube's configuration (kubeconfig and context, or
the in-cluster service account) and its httpx transport, used raw. Objects stay the dicts
`json.loads` makes: no typed model is built, since the dialects read dicts anyway and a model
decode costs more than the parse (docs/benchmarks.md, "Kubernetes list and decode")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config.client_adapter import AsyncClient as lightkube_http_client
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError

# A request that is not a watch: discovery and lists. A list of 10,000 objects takes well under
# a second on loopback; a slow API server gets this long before the reflector backs off.
REQUEST_TIMEOUT_S = 60.0
# How much longer than the watch's own server-side timeout a silent connection is waited for
# before it is taken as dead (a half-open TCP connection never errors by itself).
WATCH_READ_MARGIN_S = 30.0

Json = dict[str, Any]


class KubeApiError(Exception):
    """The API server answered with an error `Status` (or an HTTP error code)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason


# An error answer, or a lost or refused connection: the reflector backs off and retries.
RETRYABLE: tuple[type[Exception], ...] = (KubeApiError, httpx2.TransportError, OSError)


def load_config(kubeconfig: Path | None, context: str | None) -> SingleConfig:
    """The kubeconfig's context (its current one unless `context` is given), or, without a
    kubeconfig, the in-cluster service account (then $KUBECONFIG or ~/.kube/config).
    ValueError with a one-line reason when there is none."""
    try:
        config = (
            KubeConfig.from_file(kubeconfig) if kubeconfig is not None else KubeConfig.from_env()
        )
        single = config.get(context_name=context)
    except (ConfigError, OSError, KeyError) as err:
        raise ValueError(f"no usable Kubernetes configuration: {err}") from err
    if single is None:
        raise ValueError("no usable Kubernetes configuration: the kubeconfig has no context")
    return single


def error_of(status: Any, http_code: int) -> KubeApiError:
    """A `Status` object (or whatever the server sent) -> KubeApiError."""
    if isinstance(status, Mapping):
        code = status.get("code")
        return KubeApiError(
            code if isinstance(code, int) else http_code,
            str(status.get("reason", "")),
            str(status.get("message", "")),
        )
    return KubeApiError(http_code, "", str(status)[:200])


class KubeApi:
    """GET and watch against one API server, answering decoded JSON."""

    def __init__(self, http: httpx2.AsyncClient, server: str) -> None:
        self._http = http
        self.server = server

    @classmethod
    def connect(cls, config: SingleConfig) -> KubeApi:
        params = ConnectionParams(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), trust_env=False)
        return cls(lightkube_http_client(config, params), str(config.cluster.server))

    async def close(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Json:
        resp = await self._http.get(path, params=dict(params or {}))
        body = _decode(resp.content)
        if resp.status_code >= 400:
            raise error_of(body, resp.status_code)
        if not isinstance(body, dict):
            raise KubeApiError(resp.status_code, "BadResponse", f"{path} did not answer an object")
        return body

    async def watch(
        self, path: str, params: Mapping[str, str], timeout_s: int
    ) -> AsyncIterator[Json]:
        """The events of one watch request, until the server ends it."""
        timeout = httpx2.Timeout(REQUEST_TIMEOUT_S, read=timeout_s + WATCH_READ_MARGIN_S)
        query = {**params, "watch": "1", "timeoutSeconds": str(timeout_s)}
        request = self._http.build_request("GET", path, params=query, timeout=timeout)
        resp = await self._http.send(request, stream=True)
        try:
            if resp.status_code >= 400:
                raise error_of(_decode(await resp.aread()), resp.status_code)
            async for line in resp.aiter_lines():
                if line.strip():
                    event = _decode(line.encode())
                    if isinstance(event, dict):
                        yield event
        finally:
            await resp.aclose()


def _decode(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content.decode(errors="replace")
