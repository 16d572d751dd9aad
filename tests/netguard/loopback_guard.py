"""Loopback only: the socket guard every test process and every gateway child runs under.

The suite talks to a real Postgres over a Unix socket and to fake Slack and model servers
on 127.0.0.1. A connection anywhere else means a real setting leaked in (a token, a model
URL, a webhook) or a default pointed at the internet, and must fail the test, loudly,
before a packet leaves the machine.

`install()` wraps the socket library, never threadgate's code: every client used here
(asyncio's loops, httpx, aiohttp, asyncpg, the Slack SDK) connects through
`socket.socket.connect`/`connect_ex` and resolves names through `socket.getaddrinfo`.
Unix sockets and 127.0.0.0/8, ::1 and `localhost` pass through untouched.

uvloop, the loop gateway children run on (gateway/process/event_loop.py), resolves names and
connects in libuv, where no socket-library wrapper sees it: where it is installed, the
loop methods that do (`getaddrinfo`, `create_connection`, `sock_connect`,
`create_datagram_endpoint`) are wrapped too, on `uvloop.Loop`, with the same judgement.

This module needs only the standard library (uvloop is wrapped where it is installed) and
is imported two ways: as `tests.netguard.loopback_guard` by the suite's conftest, and as
the top-level `loopback_guard` by `sitecustomize.py` in child processes, whose PYTHONPATH
starts with this directory (see `tests/gateway/process.py`).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Set on every wrapper, so a test (or a child asked from outside) can tell it is installed.
MARK = "__loopback_only__"

_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
_UNIX = getattr(socket, "AF_UNIX", None)
_IP = (socket.AF_INET, socket.AF_INET6)


class NonLoopbackConnection(RuntimeError):
    """A test, or a gateway a test started, tried to reach beyond this machine.

    Deliberately not an `OSError`: clients catch those as "unreachable" and retry, fall
    back to another model or log a warning; this is a bug in the test's setup and must
    surface as one.
    """

    def __init__(self, what: str, target: object) -> None:
        super().__init__(
            f"refused {what} {target!r}: tests may only talk to loopback "
            "(127.0.0.0/8, ::1, localhost) and Unix sockets"
        )


def is_loopback_host(host: str | bytes) -> bool:
    """Whether `host`, an IP literal or a name, certainly means this machine's loopback."""
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # any other name, and odd spellings such as "127.1" or ""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1 is still 127.0.0.1
    return address.is_loopback


def is_allowed_address(family: int, address: object) -> bool:
    """Whether a socket of `family` may connect (or send) to `address`."""
    if family == _UNIX:
        return True
    if family in _IP and isinstance(address, tuple) and address:
        host = address[0]
        return isinstance(host, str | bytes) and is_loopback_host(host)
    # Any other family (netlink, packet, CAN, …) has no business in these tests.
    return False


def is_allowed_lookup(host: object) -> bool:
    """Whether resolving `host` stays on this machine.

    No host (a passive or loopback lookup), an IP literal (converted locally; whether it may
    be connected to is judged at connect) and `localhost` do; any other name would send a
    query to a DNS server, itself off this machine, before any connect could refuse it.
    """
    if host is None:
        return True
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str):
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _refuse(what: str, target: object) -> NonLoopbackConnection:
    error = NonLoopbackConnection(what, target)
    # Also on stderr: a gateway child may catch the exception as a failed model call and
    # carry on; the line still lands in the log the test prints when it fails.
    print(f"loopback_guard: {error}", file=sys.stderr, flush=True)
    return error


def guard_connect(original: Callable[..., T]) -> Callable[..., T]:
    """`connect` or `connect_ex` that refuses a non-loopback address before calling
    `original`, and otherwise is `original`: a non-blocking socket's BlockingIOError
    (asyncio's `sock_connect`) or `connect_ex`'s EINPROGRESS come back unchanged."""

    @functools.wraps(original)
    def connect(sock: socket.socket, address: Any, /) -> T:
        if not is_allowed_address(sock.family, address):
            raise _refuse("a connection to", address)
        return original(sock, address)

    setattr(connect, MARK, True)
    return connect


def guard_sendto(original: Callable[..., T]) -> Callable[..., T]:
    """`sendto` that refuses a non-loopback address: a datagram needs no connect."""

    @functools.wraps(original)
    def sendto(sock: socket.socket, data: Any, /, *rest: Any) -> T:
        # sendto(data, address) or sendto(data, flags, address): the address comes last.
        if rest and not is_allowed_address(sock.family, rest[-1]):
            raise _refuse("a datagram to", rest[-1])
        return original(sock, data, *rest)

    setattr(sendto, MARK, True)
    return sendto


def guard_lookup(original: Callable[..., T]) -> Callable[..., T]:
    """`getaddrinfo` that refuses to ask DNS about any name but `localhost`."""

    @functools.wraps(original)
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> T:
        if not is_allowed_lookup(host):
            raise _refuse("a name lookup of", host)
        return original(host, *args, **kwargs)

    setattr(getaddrinfo, MARK, True)
    return getaddrinfo


def guard_loop_lookup(original: Callable[..., Any]) -> Callable[..., Any]:
    """An event loop's `getaddrinfo`, refusing what `guard_lookup` refuses."""

    @functools.wraps(original)
    async def getaddrinfo(loop: Any, host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_allowed_lookup(host):
            raise _refuse("a name lookup of", host)
        return await original(loop, host, *args, **kwargs)

    setattr(getaddrinfo, MARK, True)
    return getaddrinfo


def guard_loop_connection(original: Callable[..., Any]) -> Callable[..., Any]:
    """An event loop's `create_connection`: a host that is not loopback is refused before
    the loop resolves it (a socket passed in instead was connected through `connect`)."""

    @functools.wraps(original)
    async def create_connection(
        loop: Any, protocol_factory: Any, host: Any = None, port: Any = None, *args: Any, **kw: Any
    ) -> Any:
        if host is not None and not is_loopback_host(host):
            raise _refuse("a connection to", (host, port))
        return await original(loop, protocol_factory, host, port, *args, **kw)

    setattr(create_connection, MARK, True)
    return create_connection


def guard_loop_sock_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    """An event loop's `sock_connect`, judged as `connect` is."""

    @functools.wraps(original)
    async def sock_connect(loop: Any, sock: socket.socket, address: Any) -> Any:
        if not is_allowed_address(sock.family, address):
            raise _refuse("a connection to", address)
        return await original(loop, sock, address)

    setattr(sock_connect, MARK, True)
    return sock_connect


def guard_loop_datagrams(original: Callable[..., Any]) -> Callable[..., Any]:
    """An event loop's `create_datagram_endpoint`: its remote address must be loopback."""

    @functools.wraps(original)
    async def create_datagram_endpoint(
        loop: Any, protocol_factory: Any, *args: Any, **kw: Any
    ) -> Any:
        # (protocol_factory, local_addr=None, remote_addr=None, ...): by keyword or position.
        remote = kw.get("remote_addr", args[1] if len(args) > 1 else None)
        if remote is not None and not (
            isinstance(remote, tuple) and remote and is_loopback_host(remote[0])
        ):
            raise _refuse("a datagram to", remote)
        return await original(loop, protocol_factory, *args, **kw)

    setattr(create_datagram_endpoint, MARK, True)
    return create_datagram_endpoint


# uvloop's loop methods the guard wraps, and how.
_LOOP_GUARDS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "getaddrinfo": guard_loop_lookup,
    "create_connection": guard_loop_connection,
    "sock_connect": guard_loop_sock_connect,
    "create_datagram_endpoint": guard_loop_datagrams,
}


def _uvloop_class() -> type | None:
    try:
        import uvloop
    except ImportError:
        return None
    loop: type = uvloop.Loop
    return loop


def guarded() -> dict[str, object]:
    """The callables the guard replaces, as they are now."""
    entries: dict[str, object] = {
        "socket.socket.connect": socket.socket.connect,
        "socket.socket.connect_ex": socket.socket.connect_ex,
        "socket.socket.sendto": socket.socket.sendto,
        "socket.getaddrinfo": socket.getaddrinfo,
    }
    uvloop_class = _uvloop_class()
    if uvloop_class is not None:
        for name in _LOOP_GUARDS:
            entries[f"uvloop.Loop.{name}"] = getattr(uvloop_class, name)
    return entries


def installed() -> bool:
    """Whether every entry point is the guard's wrapper."""
    return all(getattr(entry, MARK, False) for entry in guarded().values())


def install() -> None:
    """Wrap the socket library in this process; what is wrapped already stays as it is."""
    # Class attributes of the Python-level `socket.socket`, which every socket (SSL ones
    # included) inherits; `_socket.socket` itself is a C type and cannot be patched.
    if not getattr(socket.socket.connect, MARK, False):
        socket.socket.connect = guard_connect(socket.socket.connect)  # type: ignore[method-assign]
    if not getattr(socket.socket.connect_ex, MARK, False):
        socket.socket.connect_ex = guard_connect(socket.socket.connect_ex)  # type: ignore[method-assign]
    if not getattr(socket.socket.sendto, MARK, False):
        socket.socket.sendto = guard_sendto(socket.socket.sendto)  # type: ignore[method-assign]
    # The module attribute: asyncio's loop.getaddrinfo and socket.create_connection both
    # look it up at call time.
    if not getattr(socket.getaddrinfo, MARK, False):
        socket.getaddrinfo = guard_lookup(socket.getaddrinfo)
    # `uvloop.Loop` is a Python subclass of the Cython loop: its attributes can be set.
    uvloop_class = _uvloop_class()
    if uvloop_class is not None:
        for name, guard in _LOOP_GUARDS.items():
            if not getattr(getattr(uvloop_class, name), MARK, False):
                setattr(uvloop_class, name, guard(getattr(uvloop_class, name)))
