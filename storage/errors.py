"""What can go wrong in storage, as types, and where asyncpg's errors become them.

    StorageError
    ├── DatabaseUnavailable   the server cannot be reached or started; the operator must look
    └── MigrationError        the schema could not be brought up to date

asyncpg's own exceptions are translated at every port (`translate_errors` on each public
method of the queue, the history, the delegations and the outbox, and on admission), so
callers above storage see only this tree. A unique violation is not an error here at all
but a domain outcome (a duplicate), handled where it happens.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import asyncpg

P = ParamSpec("P")
T = TypeVar("T")

# What "the database is not there right now" looks like from asyncpg.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
)


class StorageError(Exception):
    """Base of every error storage raises on purpose."""


class DatabaseUnavailable(StorageError):
    """The database cannot be reached (or the embedded server cannot be started)."""


class MigrationError(StorageError):
    """A migration failed to apply; the database is left at the last good version."""


def translate_errors(
    what: str,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Raise asyncpg's failures of `fn` as this tree: `what` says what could not be done.

    The message names the exception class and the SQLSTATE, never the query's arguments
    (they hold people's messages).
    """

    def decorate(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(fn)
        async def translated(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return await fn(*args, **kwargs)
            except CONNECTION_ERRORS as exc:
                raise DatabaseUnavailable(f"{what}: {type(exc).__name__}.") from exc
            except asyncpg.PostgresError as exc:
                raise StorageError(f"{what}: {type(exc).__name__} ({exc.sqlstate}).") from exc

        return translated

    return decorate
