"""A fake Kubernetes API server for tests and bench scripts (not a test module): real HTTP on a
loopback port, driven by any client library. See `server.FakeApiServer`."""

from tests.fake_apiserver.server import BUILTIN, CRDS, FakeApiServer, LoggedRequest
from tests.fake_apiserver.state import ApiError, Resource

__all__ = ["BUILTIN", "CRDS", "ApiError", "FakeApiServer", "LoggedRequest", "Resource"]
