"""The suite is hermetic: no `.env`, no shell settings, and no connection beyond loopback.

No test here sends anything off this machine, even if the guard it tests were broken: the
refusals are checked on the address predicates (pure functions) and on the wrappers around
a recording stand-in for the real `connect`, and the one child that reaches for names has
its real resolver replaced first. Only loopback is ever really connected to.
"""

from __future__ import annotations

import _socket
import asyncio
import errno
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp.resolver
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.provisional import domains

from gateway.config.settings import load_settings
from tests import hermetic
from tests.gateway.process import NETGUARD, child_cwd, child_env, run_cli
from tests.gateway.rig import rig_settings
from tests.netguard import loopback_guard
from tests.netguard.loopback_guard import (
    NonLoopbackConnection,
    guard_connect,
    guard_lookup,
    guard_loop_connection,
    guard_loop_datagrams,
    guard_loop_lookup,
    guard_loop_sock_connect,
    guard_sendto,
    is_allowed_address,
    is_allowed_lookup,
    is_loopback_host,
)

ROOT = Path(__file__).resolve().parent.parent

# What a developer might keep in `.env` (or export) for `make run`; none of it may reach a test.
REAL_LOOKING = {
    "SLACK_APP_TOKEN": "xapp-1-A0REAL-from-the-developer",
    "THREADGATE_FALLBACK_MODEL": "openai:gpt-real",
    "THREADGATE_ALERT_WEBHOOK_URL": "https://hooks.example.invalid/real",
    "OPENAI_API_KEY": "sk-real",
}

# Enough for `threadgate serve` to get past its settings, on loopback only.
SERVE = {
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
    "DATABASE_URL": "postgresql://127.0.0.1:1/none",
}

IPV4_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
IPV6_LOOPBACK = ipaddress.ip_network("::1/128")
IPV4_MAPPED_LOOPBACK = ipaddress.ip_network("::ffff:127.0.0.0/104")


def write_dotenv(directory: Path, values: dict[str, str]) -> None:
    (directory / ".env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))


# --- No `.env` --------------------------------------------------------------------------


def test_load_settings_reads_a_dotenv_only_when_given_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `.env` in the working directory is ignored by default and read when named."""
    write_dotenv(tmp_path, REAL_LOOKING)
    monkeypatch.chdir(tmp_path)
    ignored = load_settings()
    assert ignored.slack.app_token is None and ignored.models.fallback_model is None
    read = load_settings(env_file=".env")  # what the `threadgate` command passes
    assert read.slack.app_token is not None and read.models.fallback_model == "openai:gpt-real"


def test_the_rigs_settings_ignore_a_dotenv_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-process test gateway stays in HTTP mode, with no fallback model or webhook,
    beside a `.env` that would give it all three."""
    write_dotenv(tmp_path, REAL_LOOKING)
    monkeypatch.chdir(tmp_path)
    settings = rig_settings(SERVE)
    assert not settings.slack.socket_mode
    assert settings.models.fallback_model is None
    assert settings.alerts.webhook_url is None
    assert settings.models.openai_api_key is not None
    assert settings.models.openai_api_key.get_secret_value() == "sk-test"


async def test_the_threadgate_command_still_reads_the_dotenv_of_its_directory(
    tmp_path: Path,
) -> None:
    """Production is unchanged: `threadgate serve` reads `./.env` (here a bad PORT, which
    stops it with one sentence before it touches anything)."""
    write_dotenv(tmp_path, {"PORT": "abc"})
    status, stderr = await run_cli(["serve"], SERVE, tmp_path, dotenv=True)
    assert status == 2 and "PORT" in stderr and stderr.count("\n") == 1


def test_a_child_will_not_start_beside_a_dotenv_it_was_not_meant_to_read(tmp_path: Path) -> None:
    """A test that starts a child in a directory holding a `.env` fails, unless it says
    the file is its own."""
    assert child_cwd(tmp_path) == tmp_path
    write_dotenv(tmp_path, REAL_LOOKING)
    with pytest.raises(AssertionError, match=r"\.env would configure the child"):
        child_cwd(tmp_path)
    assert child_cwd(tmp_path, dotenv=True) == tmp_path


# --- No shell settings ------------------------------------------------------------------


def test_scrub_removes_gateway_settings_and_keeps_what_the_suite_reads() -> None:
    """Every settings family, every unprefixed setting and proxies go, in any case;
    DATABASE_URL, THREADGATE_CHAOS_SCALE and the rest of the environment stay."""
    environ = {
        **REAL_LOOKING,
        "slack_bot_token": "xoxb-lowercase-is-read-too",
        "ANTHROPIC_API_KEY": "sk-ant-real",
        "THREADGATE_SOMETHING_NEW": "x",
        "PORT": "8080",
        "HTTPS_PROXY": "http://proxy.example.invalid:3128",
        "DATABASE_URL": "postgresql://127.0.0.1:5432/other",
        "THREADGATE_CHAOS_SCALE": "full",
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
    }
    removed = hermetic.scrub(environ)
    assert environ == {
        "DATABASE_URL": "postgresql://127.0.0.1:5432/other",
        "THREADGATE_CHAOS_SCALE": "full",
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
    }
    assert removed == sorted(removed) and "slack_bot_token" in removed and "PORT" in removed


def test_the_environment_holds_no_gateway_setting() -> None:
    """After the conftest, nothing in this process's environment configures a gateway."""
    assert [name for name in os.environ if hermetic.removed(name)] == []
    settings = load_settings()
    assert settings.slack.app_token is None and not settings.slack.socket_mode
    assert settings.models.openai_api_key is None and settings.alerts.webhook_url is None


async def test_settings_exported_in_the_shell_are_gone_before_any_test_runs() -> None:
    """A pytest started with real-looking settings exported runs the test above, and passes:
    the conftest removed them before the first test (and before any gateway) could read them."""
    test = f"{Path(__file__).relative_to(ROOT)}::test_the_environment_holds_no_gateway_setting"
    env = {**os.environ, **REAL_LOOKING, "slack_signing_secret": "lowercase-too"}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    assert "1 passed" in out.decode()


# --- No connection beyond loopback: the predicates --------------------------------------


@given(st.ip_addresses(v=4), st.integers(0, 65535))
@example(ipaddress.IPv4Address("127.0.0.1"), 80)
@example(ipaddress.IPv4Address("127.255.255.255"), 80)
@example(ipaddress.IPv4Address("128.0.0.1"), 80)
@example(ipaddress.IPv4Address("0.0.0.0"), 80)
def test_ipv4_loopback_is_allowed_and_every_other_address_refused(
    address: ipaddress.IPv4Address, port: int
) -> None:
    """127.0.0.0/8, and nothing else of IPv4."""
    expected = address in IPV4_LOOPBACK
    assert is_loopback_host(str(address)) is expected
    assert is_allowed_address(socket.AF_INET, (str(address), port)) is expected


@given(st.ip_addresses(v=6), st.integers(0, 65535))
@example(ipaddress.IPv6Address("::1"), 443)
@example(ipaddress.IPv6Address("::ffff:127.0.0.1"), 443)
@example(ipaddress.IPv6Address("::ffff:10.0.0.1"), 443)
@example(ipaddress.IPv6Address("::"), 443)
@example(ipaddress.IPv6Address("fe80::1"), 443)
def test_ipv6_loopback_is_allowed_and_every_other_address_refused(
    address: ipaddress.IPv6Address, port: int
) -> None:
    """::1 and IPv4-mapped 127.0.0.0/8, and nothing else of IPv6."""
    expected = address in IPV6_LOOPBACK or address in IPV4_MAPPED_LOOPBACK
    assert is_loopback_host(str(address)) is expected
    assert is_allowed_address(socket.AF_INET6, (str(address), port, 0, 0)) is expected


@given(domains().filter(lambda name: name.lower().rstrip(".") != "localhost"))
@example("slack.com")
@example("api.openai.com")
@example("localhost.example.com")
def test_names_other_than_localhost_are_neither_connected_to_nor_looked_up(name: str) -> None:
    """A name could resolve anywhere, and asking DNS is itself traffic."""
    assert not is_allowed_address(socket.AF_INET, (name, 443))
    assert not is_allowed_lookup(name)
    assert not is_allowed_lookup(name.encode())


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", "localhost.", b"localhost"])
def test_localhost_is_loopback(name: str | bytes) -> None:
    """The one name allowed, in any case, rooted or not, as str or bytes."""
    assert is_loopback_host(name)
    assert is_allowed_address(socket.AF_INET6, (name, 80, 0, 0))
    assert is_allowed_lookup(name)


@pytest.mark.parametrize("host", ["", "127.1", "2130706433", "<broadcast>", b"\xff"])
def test_odd_spellings_are_refused(host: str | bytes) -> None:
    """Forms the C library would accept but that are not plainly loopback are refused."""
    assert not is_allowed_address(socket.AF_INET, (host, 80))


@given(st.ip_addresses())
def test_ip_literals_may_be_looked_up_locally(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    """Converting a literal sends nothing (binding 0.0.0.0 looks one up); connecting to it
    is judged by the address predicate."""
    assert is_allowed_lookup(str(address))
    assert is_allowed_lookup(None)


@given(st.one_of(st.text(), st.binary()))
def test_unix_sockets_are_allowed_whatever_their_path(path: str | bytes) -> None:
    """Postgres is on one; abstract (NUL-prefixed) names included."""
    assert is_allowed_address(socket.AF_UNIX, path)


def test_other_families_are_refused() -> None:
    """Only IP on loopback and Unix sockets: raw packets and netlink have no place here."""
    families = [
        getattr(socket, name) for name in ("AF_NETLINK", "AF_PACKET") if hasattr(socket, name)
    ]
    assert families
    assert not any(is_allowed_address(family, (0, 0)) for family in families)


# --- The wrappers, around a stand-in that records instead of connecting -----------------


class Recorder:
    """Stands in for the real `connect`/`sendto`/`getaddrinfo`: nothing is ever sent."""

    def __init__(self, result: object = None, error: BaseException | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result = result
        self.error = error

    def __call__(self, *args: Any) -> object:
        self.calls.append(args)
        if self.error is not None:
            raise self.error
        return self.result


def ipv4() -> Any:
    return SimpleNamespace(family=socket.AF_INET)


def test_a_refused_connect_never_reaches_the_real_one() -> None:
    """The error names the address and the rule; the real connect is not called."""
    real = Recorder()
    connect = guard_connect(real)
    with pytest.raises(NonLoopbackConnection, match=r"'192\.0\.2\.1', 443.*only talk to loopback"):
        connect(ipv4(), ("192.0.2.1", 443))
    with pytest.raises(NonLoopbackConnection, match=r"slack\.com"):
        connect(ipv4(), ("slack.com", 443))
    assert real.calls == []


def test_an_allowed_connect_is_the_real_one_results_and_errors_alike() -> None:
    """A non-blocking socket's BlockingIOError (asyncio's sock_connect) and connect_ex's
    EINPROGRESS come back untouched."""
    sock = ipv4()
    assert guard_connect(Recorder(result=errno.EINPROGRESS))(sock, ("127.0.0.1", 1)) == (
        errno.EINPROGRESS
    )
    pending = BlockingIOError(errno.EINPROGRESS, "in progress")
    real = Recorder(error=pending)
    with pytest.raises(BlockingIOError) as raised:
        guard_connect(real)(sock, ("127.0.0.1", 1))
    assert raised.value is pending and real.calls == [(sock, ("127.0.0.1", 1))]


def test_sendto_is_judged_by_its_last_argument() -> None:
    """A datagram is judged by its address, with or without flags before it."""
    real = Recorder(result=3)
    sendto = guard_sendto(real)
    assert sendto(ipv4(), b"abc", ("127.0.0.1", 9)) == 3
    assert sendto(ipv4(), b"abc", 0, ("127.0.0.1", 9)) == 3
    with pytest.raises(NonLoopbackConnection):
        sendto(ipv4(), b"abc", 0, ("192.0.2.1", 53))
    assert len(real.calls) == 2


def test_lookups_of_names_never_reach_the_resolver() -> None:
    """A name is refused before any query; a literal is passed on with all its arguments."""
    real = Recorder(result=[])
    getaddrinfo = guard_lookup(real)
    with pytest.raises(NonLoopbackConnection, match=r"api\.openai\.com"):
        getaddrinfo("api.openai.com", 443)
    assert getaddrinfo("127.0.0.1", 80, 0, socket.SOCK_STREAM) == []
    assert real.calls == [("127.0.0.1", 80, 0, socket.SOCK_STREAM)]


class AsyncRecorder(Recorder):
    """A stand-in for one of the loop's own (async) methods."""

    async def method(self, loop: object, *args: Any, **kwargs: Any) -> Any:
        return self(*args, *kwargs.items())


async def test_uvloops_own_lookups_and_connections_are_judged_as_the_socket_librarys() -> None:
    """uvloop resolves and connects in libuv: its loop methods are wrapped, and refuse what
    `connect` and `getaddrinfo` refuse before the real method (a stand-in here) is called."""
    real = AsyncRecorder(result="real")
    lookup = guard_loop_lookup(real.method)
    connection = guard_loop_connection(real.method)
    sock_connect = guard_loop_sock_connect(real.method)
    datagrams = guard_loop_datagrams(real.method)
    refused = [
        lookup(None, "api.openai.com", 443),
        connection(None, asyncio.Protocol, "slack.com", 443),
        connection(None, asyncio.Protocol, "192.0.2.1", 443),
        connection(None, asyncio.Protocol, host="10.0.0.1", port=5432),
        sock_connect(None, ipv4(), ("192.0.2.1", 443)),
        datagrams(None, asyncio.DatagramProtocol, remote_addr=("192.0.2.1", 53)),
        datagrams(None, asyncio.DatagramProtocol, None, ("192.0.2.1", 53)),
    ]
    for attempt in refused:
        with pytest.raises(NonLoopbackConnection):
            await attempt
    assert real.calls == []
    allowed = [
        lookup(None, "localhost", 443),
        lookup(None, "192.0.2.1", 443),  # a literal is converted locally, judged at connect
        connection(None, asyncio.Protocol, "127.0.0.1", 5432),
        connection(None, asyncio.Protocol, sock=object()),  # connected through `connect`
        sock_connect(None, ipv4(), ("127.0.0.1", 443)),
        datagrams(None, asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)),
    ]
    for attempt in allowed:
        assert await attempt == "real"
    assert len(real.calls) == len(allowed)


# --- The guard is installed, here and in children ---------------------------------------


def test_the_test_process_runs_under_the_guard() -> None:
    """The conftest wrapped the socket library itself, once, around the real calls."""
    assert loopback_guard.installed()
    assert socket.socket.connect.__wrapped__ is _socket.socket.connect  # type: ignore[attr-defined]
    assert socket.socket.connect_ex.__wrapped__ is _socket.socket.connect_ex  # type: ignore[attr-defined]
    # socket.getaddrinfo was already Python (it converts enums) before the guard wrapped it.
    assert socket.getaddrinfo.__module__ == "socket"


@pytest.fixture
def listener() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[:2]
    finally:
        server.close()


async def test_loopback_passes_through_the_guard_blocking_or_not(
    listener: tuple[str, int],
) -> None:
    """Real loopback connections: blocking, non-blocking (EINPROGRESS, then asyncio's
    wait for writability) and through asyncio's streams."""
    with socket.create_connection(listener, timeout=5):
        pass
    with socket.socket() as sock:
        sock.setblocking(False)
        assert sock.connect_ex(listener) in (0, errno.EINPROGRESS)
    with socket.socket() as sock:
        sock.setblocking(False)
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, listener), 5)
        assert sock.getpeername()[:2] == listener
    _, writer = await asyncio.wait_for(asyncio.open_connection(*listener), 5)
    writer.close()
    await writer.wait_closed()


CHILD_REPORT = """
import json, socket, sys
import uvloop
entries = {
    "connect": socket.socket.connect,
    "connect_ex": socket.socket.connect_ex,
    "sendto": socket.socket.sendto,
    "getaddrinfo": socket.getaddrinfo,
    "uvloop getaddrinfo": uvloop.Loop.getaddrinfo,
    "uvloop create_connection": uvloop.Loop.create_connection,
    "uvloop sock_connect": uvloop.Loop.sock_connect,
    "uvloop create_datagram_endpoint": uvloop.Loop.create_datagram_endpoint,
}
site = sys.modules.get("sitecustomize")
print(json.dumps({
    "guarded": {name: getattr(f, "__loopback_only__", False) for name, f in entries.items()},
    "sitecustomize": getattr(site, "__file__", None),
}))
"""


async def test_a_child_started_with_child_env_runs_under_the_guard(tmp_path: Path) -> None:
    """The same interpreter, environment and kind of working directory as a gateway child:
    `sitecustomize` loaded from tests/netguard and wrapped every entry point before the
    child's own code ran."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", CHILD_REPORT),
        env=child_env({}),
        cwd=child_cwd(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert err == b""  # a failing sitecustomize only warns, on stderr
    report = json.loads(out)
    assert report["guarded"] == dict.fromkeys(
        ("connect", "connect_ex", "sendto", "getaddrinfo", *(f"uvloop {m}" for m in UVLOOP)),
        True,
    )
    assert report["sitecustomize"] == str(NETGUARD / "sitecustomize.py")


UVLOOP = ("getaddrinfo", "create_connection", "sock_connect", "create_datagram_endpoint")


async def test_names_and_connections_go_where_the_guard_sees_them() -> None:
    """The Slack SDK's HTTP client is aiohttp; with aiodns installed it would resolve
    through c-ares, whose DNS queries no Python-level guard sees. And the test process's
    loop is asyncio's own, whose connections are `socket.socket.connect` calls (gateway
    children run on uvloop, whose libuv lookups and connections go through the loop
    methods the guard wraps there)."""
    assert aiohttp.resolver.DefaultResolver is aiohttp.resolver.ThreadedResolver
    assert isinstance(asyncio.get_running_loop(), asyncio.SelectorEventLoop)


# Run in a gateway child: the real resolver is replaced first, so that even with the guard
# broken, the names below would reach nothing (and the test would say so).
CHILD_DOCTOR = """
import _socket, sys
def unreachable(*args, **kwargs):
    raise RuntimeError("REAL RESOLVER REACHED")
_socket.getaddrinfo = unreachable
from gateway.operator.cli import main
sys.exit(main(["doctor", "--timeout", "10"]))
"""


async def test_a_gateway_child_reaching_beyond_loopback_fails_loudly(tmp_path: Path) -> None:
    """`threadgate doctor` in a child, pointed at Slack and a model by name: both checks
    fail on the guard, and its stderr names what was refused and why. On asyncio's loop,
    whose lookups are `socket.getaddrinfo`'s, replaced first: uvloop's are libuv's, which
    nothing in Python can replace (its wrappers are tested on stand-ins above)."""
    env = {
        **SERVE,
        "THREADGATE_EVENT_LOOP": "asyncio",
        "SLACK_API_URL": "https://slack.invalid/api/",
        "OPENAI_BASE_URL": "https://model.invalid/v1",
    }
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", CHILD_DOCTOR),
        env=child_env(env),
        cwd=child_cwd(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    report, log = out.decode(), err.decode()
    assert proc.returncode == 1, log
    assert "REAL RESOLVER REACHED" not in report + log
    # The report names no exception class: the guard's refusal is an unexpected error to it.
    assert report.count("the check could not finish (an unexpected error") == 2, report
    assert "refused a name lookup of 'slack.invalid'" in log
    assert "refused a name lookup of 'model.invalid'" in log  # aiohttp's lookup: a str
    assert log.count("tests may only talk to loopback") == 2
