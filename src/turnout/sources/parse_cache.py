"""The parse memo kept on disk: what each file's content parsed into, for the next start.

Parsing YAML is most of a files cold start (about 0.4 ms a file: 13 s at 30,000 files); a
restart usually finds the same files. The files source records, per file, the sha256 of the
bytes it parsed and the result, and writes them to `parse-cache` in the state directory a
while after a change and when it stops. The next start still reads every file (the digest is
of what is on disk now), but a file whose digest matches is not parsed again.

The cache is never trusted blindly: it is one pickle of plain data (tuples, strings, numbers and
`FrozenDict`, the one class its loader accepts), behind a header naming the format and a
fingerprint of what parsing depends on (this module, the parser, the object classes, Python and
PyYAML), with the payload's sha256. A missing, foreign, stale or corrupt file is ignored with
one log line and everything is parsed as before; a file whose digest differs is parsed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from turnout import objects, store
from turnout.objects import FrozenDict, KubeObject, Origin
from turnout.sources import parse
from turnout.sources.parse import ParseResult
from turnout.store import SourceProblem

log = logging.getLogger(__name__)

CACHE_NAME = "parse-cache"
_MAGIC = b"turnout parse cache\n"
# Bumped whenever the layout of the payload below changes.
_FORMAT = 1
_DIGEST_BYTES = 32


@dataclass(frozen=True, slots=True)
class CachedParse:
    """One file's parse: the sha256 of the bytes parsed, and what they parsed into."""

    digest: bytes
    result: ParseResult


def fingerprint() -> bytes:
    """What a cached parse depends on besides the file's bytes: a change to any of it (a new
    turnout, Python or PyYAML) makes every entry stale."""
    h = hashlib.sha256(f"{_FORMAT} {sys.version} {yaml.__version__}".encode())
    h.update(b"libyaml" if hasattr(yaml, "CSafeLoader") else b"python")
    for module in (parse, objects, store, sys.modules[__name__]):
        h.update(Path(module.__file__ or "").read_bytes())
    return h.digest()


class _Unpickler(pickle.Unpickler):
    """Loads only plain data and `FrozenDict`: a cache file cannot name any other class."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("turnout.objects", "FrozenDict"):
            return FrozenDict
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a parse cache")


class _Hashing:
    """A file that hashes what is written to it. Its `write` is Python code, called once per
    pickle frame (64 KiB): the other threads get the interpreter between frames, so writing a
    large cache does not stall the event loop for its whole length."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.sha = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha.update(data)
        written: int = self.out.write(data)
        return written


def _plain(result: ParseResult) -> tuple[Any, ...]:
    """A parse as plain data: the source is the entry's key, and `_ref` is built again."""
    objs = tuple(
        (o.api_version, o.kind, o.namespace, o.name, o.raw, o.origin.line) for o in result.objects
    )
    problems = tuple((p.line, p.reason, p.object, p.severity) for p in result.problems)
    return objs, problems


def _result(source: str, plain: Any) -> ParseResult:
    items, problems = plain
    objs = [KubeObject(a, k, ns, n, raw, Origin(source, line)) for a, k, ns, n, raw, line in items]
    return ParseResult(
        tuple(objs), tuple([SourceProblem(source, *problem) for problem in problems])
    )


# Files per pickle: the pickler remembers every object it wrote (to write a repeated one as a
# reference), about 50 MiB at 30,000 files in one pickle; a chunk's memory is freed after it.
# Values repeat mostly within a chunk (the same strings, ports and conditions), so little
# sharing is lost.
_CHUNK_FILES = 1000


def _dump(out: _Hashing, items: list[tuple[str, CachedParse]]) -> None:
    chunks = range(0, len(items), _CHUNK_FILES)
    pickle.Pickler(out, protocol=5).dump(len(chunks))
    for start in chunks:
        chunk = items[start : start + _CHUNK_FILES]
        plain = {source: (e.digest, _plain(e.result)) for source, e in chunk}
        pickle.Pickler(out, protocol=5).dump(plain)


class ParseCache:
    """The parse cache file at `path` (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, CachedParse]:
        """The cached parses by source (the file's path as the files source names it); empty
        when there is no usable cache, which is logged."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as err:
            log.warning("parse cache %s not read (%s): parsing every file", self.path, err)
            return {}
        try:
            return self._decode(data)
        except Exception as err:  # whatever a damaged file makes pickle raise
            log.warning("parse cache %s ignored (%s): parsing every file", self.path, err)
            return {}

    def _decode(self, data: bytes) -> dict[str, CachedParse]:
        head = len(_MAGIC) + 2 * _DIGEST_BYTES
        if not data.startswith(_MAGIC) or len(data) < head:
            raise ValueError("not a turnout parse cache")
        key = data[len(_MAGIC) : len(_MAGIC) + _DIGEST_BYTES]
        if key != fingerprint():
            raise ValueError("written by another turnout, Python or PyYAML")
        body = memoryview(data)[head:]
        if hashlib.sha256(body).digest() != data[head - _DIGEST_BYTES : head]:
            raise ValueError("checksum mismatch")
        stream = io.BytesIO(body)
        chunks = _Unpickler(stream).load()
        if not isinstance(chunks, int):
            raise ValueError("unexpected content")
        out: dict[str, CachedParse] = {}
        for _ in range(chunks):
            # Each chunk is a pickle of its own (see `_dump`).
            entries = _Unpickler(stream).load()
            if not isinstance(entries, dict):
                raise ValueError("unexpected content")
            for source, (digest, plain) in entries.items():
                if not isinstance(source, str) or not isinstance(digest, bytes):
                    raise ValueError("unexpected content")
                out[source] = CachedParse(digest, _result(source, plain))
        if stream.read(1):
            raise ValueError("trailing data")
        return out

    def save(self, entries: Mapping[str, CachedParse]) -> bool:
        """Writes `entries` atomically (a temporary file renamed over the cache); False, logged,
        when it cannot be written."""
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{CACHE_NAME}.")
            with os.fdopen(fd, "wb") as out:
                out.write(_MAGIC + fingerprint() + bytes(_DIGEST_BYTES))
                hashing = _Hashing(out)
                _dump(hashing, list(entries.items()))
                out.seek(len(_MAGIC) + _DIGEST_BYTES)
                out.write(hashing.sha.digest())
            os.replace(tmp, self.path)
        except Exception as err:  # a full disk, a value pickle refuses: never fatal
            log.warning("parse cache %s not written: %s", self.path, err)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False
        return True
