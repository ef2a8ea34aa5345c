"""This machine's own addresses and what DNS names resolve to, found outside the compile.

The compile refuses upstreams at turnout's and Envoy's own ports on every address of this host
(`CompileOptions.local_addresses`) and DNS-named upstreams that resolve to this host or to
link-local addresses (`CompileOptions.dns_answers`). Both are found here, by the controller,
and enter the compile as options, so the compile stays a pure function of snapshot and options.

Standard library only: IPv4 addresses by the SIOCGIFADDR ioctl on each interface, IPv6 ones from
/proc/net/if_inet6 (Linux), plus whatever the host name resolves to.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from turnout.compile_inputs import DnsAnswer

log = logging.getLogger("turnout.local_addresses")

_SIOCGIFADDR = 0x8915
_IF_INET6 = Path("/proc/net/if_inet6")

# A function from a host name to its addresses (a seam: tests resolve without DNS).
Resolve = Callable[[str], tuple[str, ...]]


def _ipv4_of(sock: socket.socket, interface: str) -> str | None:
    request = struct.pack("256s", interface.encode()[:15])
    try:
        answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
    except OSError:
        return None  # an interface without an IPv4 address
    return socket.inet_ntoa(answer[20:24])


def _ipv4_addresses() -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            address = _ipv4_of(sock, name)
            if address is not None:
                found.add(address)
    return found


def _ipv6_addresses(path: Path = _IF_INET6) -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            fields = line.split()
            if fields and len(fields[0]) == 32:
                with contextlib.suppress(ValueError):
                    found.add(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return found


def resolve_host(name: str) -> tuple[str, ...]:
    """Every address `name` resolves to here (the system resolver, as Envoy's default), sorted;
    raises OSError when it does not resolve."""
    infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    return tuple(sorted({str(ipaddress.ip_address(info[4][0])) for info in infos}))


def local_addresses(resolve: Resolve = resolve_host) -> tuple[str, ...]:
    """This machine's interface addresses and its host name's, sorted (loopback included: the
    compile refuses those anyway)."""
    found = _ipv4_addresses() | _ipv6_addresses()
    with contextlib.suppress(OSError, UnicodeError):
        found.update(resolve(socket.gethostname()))
    return tuple(sorted(found))


def resolve_names(names: Iterable[str], resolve: Resolve = resolve_host) -> tuple[DnsAnswer, ...]:
    """One answer per name, sorted; a name that does not resolve has an `error`."""
    answers: list[DnsAnswer] = []
    for name in sorted(set(names)):
        try:
            answers.append(DnsAnswer(name, addresses=resolve(name)))
        except (OSError, UnicodeError, ValueError) as err:
            answers.append(DnsAnswer(name, error=str(err) or type(err).__name__))
    return tuple(answers)


class HostWatcher:
    """Re-reads this host's addresses and re-resolves the DNS names the last compile used every
    `interval_s`, and calls `on_change` when an answer changed (the controller recompiles)."""

    def __init__(
        self,
        on_change: Callable[[], Awaitable[object]],
        interval_s: float = 30.0,
        resolve: Resolve = resolve_host,
    ) -> None:
        self._on_change = on_change
        self.interval_s = interval_s
        self._resolve = resolve
        self.addresses: tuple[str, ...] = local_addresses(resolve)
        self.answers: tuple[DnsAnswer, ...] = ()
        self._names: frozenset[str] = frozenset()

    def track(self, names: Iterable[str]) -> bool:
        """Resolves the names not yet answered (blocking: call it off the event loop); True when
        the answers changed."""
        wanted = frozenset(names)
        known = {a.name: a for a in self.answers if a.name in wanted}
        fresh = resolve_names(wanted - known.keys(), self._resolve)
        answers = tuple(sorted((*known.values(), *fresh), key=lambda a: a.name))
        self._names = wanted
        changed = answers != self.answers
        self.answers = answers
        return changed

    def refresh(self) -> bool:
        """Everything found again (blocking); True when anything changed."""
        addresses = local_addresses(self._resolve)
        answers = resolve_names(self._names, self._resolve)
        changed = (addresses, answers) != (self.addresses, self.answers)
        self.addresses, self.answers = addresses, answers
        return changed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if await asyncio.to_thread(self.refresh):
                log.info("this host's addresses or a backend's DNS answer changed; recompiling")
                try:
                    await self._on_change()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("recompiling after an address change failed")
