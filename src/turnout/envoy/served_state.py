"""The served state kept on disk: what the xDS server held, for a restart with the same inputs.

The compile is deterministic: the same files, turnout code and options give byte-identical xDS
resources. So a restart that finds the files and everything else unchanged can hand Envoy what
the last run served before it has compiled anything, and the first compile then replaces it
through the normal path (same content: nothing is sent). At 10,000 HTTPProxies that is the
difference between about 3 s and about 30 s to ready.

The file (`served-state` in the state directory, next to the parse cache) holds every resource
of the xDS server's snapshot (type, name, serialized bytes, the names it makes Envoy subscribe
to), the snapshot's version and the listeners whose rejection the dialects report on their own
objects (what readiness excuses), behind two keys:

* the environment: the turnout code (a digest of every module of the package), Python,
  protobuf and the Envoy API protos, and every setting the output depends on (`ServeConfig`,
  the compile and translate options, canonically written: `canonical`);
* the files: every file the files source read, with its (device, inode, size, mtime_ns,
  ctime_ns) signature, sorted.

A restart lists and stats the files (it reads none) and compares both keys; any difference, a
missing, corrupt (checksum) or foreign file, is logged and the state is not used: the normal cold
path runs. The payload is a pickle of plain data only (tuples, strings, bytes): its loader
accepts no class at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import io
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from google.protobuf import __version__ as protobuf_version

from turnout.envoy.xds import Serialized

log = logging.getLogger(__name__)

STATE_NAME = "served-state"
_MAGIC = b"turnout served state\n"
# Bumped whenever the layout below changes.
_FORMAT = b"1\n"
_DIGEST_BYTES = 32
_HEAD = len(_MAGIC) + len(_FORMAT) + 3 * _DIGEST_BYTES
# Resources per pickle: a save checks between chunks whether a compile wants the CPU.
_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class ServedKey:
    """What the served state depends on: the environment (code, versions, settings) and the
    files (their signatures), each a sha256."""

    environment: bytes
    files: bytes


@dataclass(frozen=True, slots=True)
class ServedState:
    key: ServedKey
    version: str  # the xDS snapshot's version: `XdsServer.restore` checks it
    reported_listeners: frozenset[str]
    resources: tuple[Serialized, ...]


class Cancelled(Exception):
    """A save given up because a compile wants the CPU."""


def canonical(value: object) -> str:
    """`value` written the same way in every process (a set's order depends on the hash seed,
    so `repr` will not do); TypeError for a value with no known canonical form."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, Path):
        return f"Path({str(value)!r})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (
            f"{f.name}={canonical(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"{type(value).__qualname__}({', '.join(fields)})"
    if isinstance(value, Mapping):
        items = sorted(f"{canonical(k)}: {canonical(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted(map(canonical, value))) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(canonical, value)) + "]"
    raise TypeError(f"no canonical form for {type(value).__qualname__}")


# The Envoy API messages, the YAML reader, the RE2 checks and the certificate checks.
_LIBRARIES = ("xds-protos", "PyYAML", "google-re2", "cryptography")


@functools.cache
def code_digest() -> bytes:
    """A digest of every module of the turnout package (any change to the code may change
    what it compiles) and of the libraries that read the input or shape the output."""
    root = Path(__file__).resolve().parent.parent  # the turnout package
    h = hashlib.sha256(f"{sys.version}\0{protobuf_version}\0".encode())
    for library in _LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            h.update(f"{library}={metadata.version(library)}\0".encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.digest()


def environment_key(settings: Iterable[object]) -> bytes:
    """The code digest and `settings` (the configuration and options the output depends on).
    TypeError when a setting has no canonical form."""
    h = hashlib.sha256(code_digest())
    for setting in settings:
        h.update(canonical(setting).encode() + b"\0")
    return h.digest()


def files_key(stats: Iterable[tuple[str, Any]]) -> bytes:
    """The files by path and signature (`sources.files.file_stats`), as given (sorted)."""
    h = hashlib.sha256()
    for path, signature in stats:
        h.update(f"{path}\0{signature!r}\n".encode())
    return h.digest()


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a served state")


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("unexpected content")
    return value


def _resource(item: object) -> Serialized:
    if not isinstance(item, tuple) or len(item) != 5:
        raise ValueError("unexpected content")
    type_url, name, data, refs, secret_refs = item
    if not (isinstance(type_url, str) and isinstance(name, str) and isinstance(data, bytes)):
        raise ValueError("unexpected content")
    return Serialized(type_url, name, data, _strings(refs), _strings(secret_refs))


def _plain(resource: Serialized) -> tuple[Any, ...]:
    return (resource.type_url, resource.name, resource.data, resource.refs, resource.secret_refs)


class ServedStateFile:
    """The served state file at `path` (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, key: ServedKey) -> ServedState | None:
        """The saved state when its keys are `key` and it checks out; None (logged) otherwise."""
        try:
            with self.path.open("rb") as f:
                head = f.read(_HEAD)
                mismatch = self._mismatch(head, key)
                if mismatch:
                    log.info("served state %s not used: %s", self.path, mismatch)
                    return None
                body = f.read()
        except FileNotFoundError:
            return None
        except OSError as err:
            log.warning("served state %s not read (%s)", self.path, err)
            return None
        try:
            return self._decode(key, head[-_DIGEST_BYTES:], body)
        except Exception as err:  # whatever a damaged file makes pickle raise
            log.warning("served state %s ignored (%s)", self.path, err)
            return None

    @staticmethod
    def _mismatch(head: bytes, key: ServedKey) -> str:
        if len(head) < _HEAD or not head.startswith(_MAGIC + _FORMAT):
            return "not a served state of this turnout's format"
        at = len(_MAGIC) + len(_FORMAT)
        if head[at : at + _DIGEST_BYTES] != key.environment:
            return "written by another turnout, Python or protobuf, or with other settings"
        if head[at + _DIGEST_BYTES : at + 2 * _DIGEST_BYTES] != key.files:
            return "the files changed since (added, removed or written)"
        return ""

    @staticmethod
    def _decode(key: ServedKey, checksum: bytes, body: bytes) -> ServedState:
        if hashlib.sha256(body).digest() != checksum:
            raise ValueError("checksum mismatch")
        stream = io.BytesIO(body)
        header = _Unpickler(stream).load()
        if not isinstance(header, tuple) or len(header) != 3:
            raise ValueError("unexpected content")
        version, listeners, chunks = header
        if not isinstance(version, str) or not isinstance(chunks, int):
            raise ValueError("unexpected content")
        resources: list[Serialized] = []
        for _ in range(chunks):
            chunk = _Unpickler(stream).load()
            if not isinstance(chunk, tuple):
                raise ValueError("unexpected content")
            resources.extend(map(_resource, chunk))
        if stream.read(1):
            raise ValueError("trailing data")
        return ServedState(key, version, frozenset(_strings(listeners)), tuple(resources))

    def save(self, state: ServedState, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Writes `state` atomically (a temporary file renamed over the old one); False when it
        was not written: `cancelled()` turned true between two chunks (a compile wants the CPU),
        or it could not be written (logged)."""
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{STATE_NAME}.")
            with os.fdopen(fd, "wb") as out:
                out.write(_MAGIC + _FORMAT + state.key.environment + state.key.files)
                out.write(bytes(_DIGEST_BYTES))
                checksum = self._dump(out, state, cancelled)
                out.seek(_HEAD - _DIGEST_BYTES)
                out.write(checksum)
            os.replace(tmp, self.path)
            return True
        except Cancelled:
            log.debug("served state not written: a compile came")
        except Exception as err:  # a full disk: never fatal
            log.warning("served state %s not written: %s", self.path, err)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False

    @staticmethod
    def _dump(out: Any, state: ServedState, cancelled: Callable[[], bool]) -> bytes:
        sha = hashlib.sha256()

        def write(plain: tuple[Any, ...]) -> None:
            if cancelled():
                raise Cancelled
            data = pickle.dumps(plain, protocol=5)
            sha.update(data)
            out.write(data)

        resources = state.resources
        chunks = range(0, len(resources), _CHUNK)
        write((state.version, tuple(sorted(state.reported_listeners)), len(chunks)))
        for start in chunks:
            write(tuple(map(_plain, resources[start : start + _CHUNK])))
        return sha.digest()

    def remove(self) -> None:
        """Removes the file: what it holds no longer stands for what is served."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
