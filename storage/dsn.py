"""A database URL said back to an operator: where it points, and why connecting failed.

An operator whose gateway cannot reach Postgres needs one sentence that says which
server and database were tried and what the server (or the network) answered, in its own
words: `password authentication failed for user "app"`, `database "app" does not exist`,
`connection refused`. asyncpg's exception class names say none of that. The password is
never part of the sentence: `database_place` leaves it out, and `why` cuts it out of any
message that quotes the URL.

`check_dsn` is the part of asyncpg's URL parsing that can fail before a connection is
tried (the scheme, a port that is not a number), so the settings refuse such a URL when
they are read, naming DATABASE_URL, instead of a traceback at the first connection.
"""

from __future__ import annotations

import socket
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg

SCHEMES = ("postgresql", "postgres")
DEFAULT_PORT = 5432


def check_dsn(dsn: str) -> None:
    """Raise `ValueError` saying what is wrong with `dsn` as asyncpg reads it (never
    quoting the URL: it holds the password)."""
    parts = urlsplit(dsn)
    if parts.scheme not in SCHEMES:
        raise ValueError("expected a postgresql://user:password@host:port/database URL")
    try:
        query = parse_qs(parts.query, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("its query (after ?) is not name=value pairs joined by &") from None
    ports = [spec.rpartition(":")[2] for spec in _hosts(parts.netloc) if _has_port(spec)]
    ports += [p for value in query.get("port", []) for p in value.split(",")]
    if any(not port.isdigit() or not 0 < int(port) < 65536 for port in ports if port):
        raise ValueError("a port in it is not a number from 1 to 65535")


def cannot_connect(dsn: str, exc: BaseException) -> str:
    """The one sentence for a connection to `dsn` that failed with `exc`."""
    if isinstance(exc, ValueError):  # asyncpg's parsing (ClientConfigurationError is one)
        return (
            f"DATABASE_URL is not a usable database URL ({why(exc, dsn)}): put "
            "postgresql://user:password@host:port/database there."
        )
    return f"Cannot connect to the {database_place(dsn)} ({why(exc, dsn)}): {fix(exc)}."


# What to do about a server's refusal, by its SQLSTATE.
_FIXES = {
    "28P01": "check the password in DATABASE_URL",
    "28000": "check the user in DATABASE_URL, and that the server's pg_hba.conf lets it in",
    "3D000": "create that database, or put the right name in DATABASE_URL",
    "53300": "the server has no connection free: raise its max_connections, or lower "
    "THREADGATE_DB_CONNECTIONS",
    "57P03": "the server is starting or stopping: try again in a moment",
}


def fix(exc: BaseException) -> str:
    """What an operator does about `exc`, naming the part of DATABASE_URL to check."""
    if isinstance(exc, asyncpg.PostgresError):
        return _FIXES.get(exc.sqlstate or "", "check DATABASE_URL")
    if isinstance(exc, socket.gaierror):
        return "check the host in DATABASE_URL"
    if isinstance(exc, FileNotFoundError):
        return "check the socket directory (host) in DATABASE_URL, and that the server runs"
    return "check the host and port in DATABASE_URL, and that the server runs and is reachable"


def database_place(dsn: str) -> str:
    """`database NAME on HOST:PORT as USER` for `dsn`, without its password."""
    parts = urlsplit(dsn)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    user = query.get("user") or unquote(parts.username or "") or "the current user"
    hosts = ",".join(_hosts(parts.netloc)) or query.get("host") or "localhost"
    if not any(_has_port(spec) for spec in hosts.split(",")) and not hosts.startswith("/"):
        hosts = f"{hosts}:{query.get('port') or DEFAULT_PORT}"
    elif hosts.startswith("/"):  # a Unix socket's directory, as the embedded server's
        hosts = f"the socket in {hosts}"
    name = query.get("dbname") or query.get("database") or unquote(parts.path.lstrip("/"))
    return f"database {name or user} on {hosts} as {user}"


def why(exc: BaseException, dsn: str) -> str:
    """What went wrong, in the server's words when it answered, else the network's."""
    if isinstance(exc, asyncpg.PostgresError):
        reason = str(exc).strip() or exc.sqlstate or "the server refused"
    elif isinstance(exc, ConnectionRefusedError):
        reason = "connection refused: no server listens there"
    elif isinstance(exc, socket.gaierror):
        reason = f"the host name does not resolve: {exc.strerror}"
    elif isinstance(exc, FileNotFoundError):
        reason = "no server socket there"
    elif isinstance(exc, TimeoutError):
        reason = "no answer in time"
    elif isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or "the connection failed"
    else:
        reason = str(exc) or "the connection failed"
    password = urlsplit(dsn).password
    for secret in (password, unquote(password or "")):
        if secret:
            reason = reason.replace(secret, "…")
    return " ".join(reason.split())


def _hosts(netloc: str) -> list[str]:
    hostspec = netloc.rpartition("@")[2]
    return [spec for spec in hostspec.split(",") if spec]


def _has_port(spec: str) -> bool:
    """Whether a host spec names a port (`[::1]:5432`, `db:5432`; not a bare `[::1]`)."""
    return ":" in spec.rpartition("]")[2]
