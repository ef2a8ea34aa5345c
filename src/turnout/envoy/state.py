"""The state directory of turnout's Envoy child: its bootstrap, pid file and admin socket.

Envoy's admin interface can stop Envoy (`POST /quitquitquit`) and dump every secret
(`/config_dump`), so it listens on a Unix socket here, mode 0600 in a directory of mode 0700,
instead of a TCP port that a route to a loopback upstream could reach.

The directory also lets Envoy outlive turnout: after a crash, a turnout started again with the
same state directory finds the Envoy by its pid file, makes sure through the admin socket that it
is the Envoy this turnout would run (same node id, same bootstrap), and adopts it instead of
starting another.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

BOOTSTRAP_NAME = "envoy-bootstrap.yaml"
PID_NAME = "envoy.pid"
ADMIN_SOCKET_NAME = "envoy-admin.sock"
# sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107


class StateDirError(RuntimeError):
    """The state directory cannot be used safely (someone else's, open to others, too long)."""


def default_state_dir(http_port: int) -> Path:
    """`$XDG_RUNTIME_DIR/turnout-<http-port>` when the session has a runtime directory, else
    `/tmp/turnout-<uid>-<http-port>`: per user, and per instance (one Envoy per HTTP port)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / f"turnout-{http_port}"
    return Path(tempfile.gettempdir()) / f"turnout-{os.getuid()}-{http_port}"


@dataclass(frozen=True, slots=True)
class StateDir:
    path: Path

    @property
    def bootstrap(self) -> Path:
        return self.path / BOOTSTRAP_NAME

    @property
    def pid_file(self) -> Path:
        return self.path / PID_NAME

    @property
    def admin_socket(self) -> Path:
        return self.path / ADMIN_SOCKET_NAME

    def prepare(self) -> None:
        """Creates the directory (0700) or checks that the existing one is a directory of ours
        that nobody else can write: in a shared /tmp, another user could have made it first."""
        with contextlib.suppress(FileExistsError):
            self.path.mkdir(mode=0o700, parents=True)
        info = self.path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise StateDirError(f"state directory {self.path} is not a directory")
        if info.st_uid != os.getuid():
            raise StateDirError(f"state directory {self.path} belongs to another user")
        if info.st_mode & 0o077:
            raise StateDirError(
                f"state directory {self.path} is open to other users (mode "
                f"{stat.S_IMODE(info.st_mode):o}); make it 0700 or choose another --state-dir"
            )
        if len(str(self.admin_socket).encode()) > MAX_SOCKET_PATH:
            raise StateDirError(
                f"state directory {self.path} is too long for a Unix socket path; "
                "choose a shorter --state-dir"
            )

    def read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def write_pid(self, pid: int) -> None:
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(f"{pid}\n")
        os.replace(tmp, self.pid_file)

    def clear_pid(self, pid: int) -> None:
        """Removes the pid file if it still names `pid`."""
        if self.read_pid() == pid:
            self.pid_file.unlink(missing_ok=True)


def process_start_time(pid: int) -> str | None:
    """The start time of a live process (not a zombie), from /proc: with the pid it names one
    process, even after the pid is reused. None once the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return _alive_without_proc(pid)
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]  # field 22 of proc(5), counted after the ")" that ends the name


def _alive_without_proc(pid: int) -> str | None:
    if Path("/proc/self/stat").exists():
        return None  # /proc works: the pid is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "?"
    return "?"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def admin_request(
    socket_path: Path, path: str, method: str = "GET", timeout: float = 2.0
) -> tuple[int, bytes]:
    """One request to Envoy's admin interface on its Unix socket: (status, body)."""
    conn = _UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def admin_node_id(socket_path: Path, timeout: float = 2.0) -> str | None:
    """The node id the Envoy on `socket_path` reports in /server_info, or None if none answers."""
    try:
        status, body = admin_request(socket_path, "/server_info", timeout=timeout)
        if status != 200:
            return None
        node = json.loads(body).get("node") or {}
    except (OSError, ValueError, http.client.HTTPException):
        return None
    node_id = node.get("id")
    return node_id if isinstance(node_id, str) else None


def our_envoy(state: StateDir, node_id: str) -> int | None:
    """The pid of a running Envoy that a turnout left in `state`: alive, started with this state
    directory's bootstrap, and its admin socket answers as `node_id`."""
    pid = state.read_pid()
    if pid is None or process_start_time(pid) is None:
        return None
    if not _runs_bootstrap(pid, state.bootstrap):
        log.info("pid %d in %s is not an Envoy of this state directory", pid, state.pid_file)
        return None
    if admin_node_id(state.admin_socket) != node_id:
        log.info("the Envoy (pid %d) in %s does not answer as node %s", pid, state.path, node_id)
        return None
    return pid


def same_bootstrap(state: StateDir, bootstrap_text: str) -> bool:
    """Whether the bootstrap in `state` is `bootstrap_text`: an Envoy started with another one
    (another xDS port) would never find this turnout, so it is replaced, not adopted."""
    try:
        return state.bootstrap.read_text() == bootstrap_text
    except OSError:
        return False


def _runs_bootstrap(pid: int, bootstrap: Path) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc/self/cmdline").exists()  # no /proc: trust the admin socket
    return os.fsencode(str(bootstrap)) in args
