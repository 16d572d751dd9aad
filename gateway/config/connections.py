"""The connections to Postgres each role opens, worked out in one place.

The server's `max_connections` is shared by every replica, so an operator sizing it needs
to know what one process opens at most (docs/DEPLOY.md: Postgres connections), and the process
must open exactly that. Both read this plan: the assemblies size their databases from it
(gateway/process/resources.py) and `doctor` compares its total with the server's room.

A database of a role is its pool for statements (THREADGATE_DB_CONNECTIONS), the
admission connections an ingress keeps apart so an ack never waits behind reply work
(THREADGATE_ADMISSION_CONNECTIONS), and the one LISTEN session the workers wake on. In
role `all` with THREADGATE_INGRESS_THREAD the ingress has a database of its own on its
thread, with a smaller pool: an admission holds a connection for one round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config.settings import Settings

# The most connections the ingress thread of a one-process gateway opens for statements.
INGRESS_THREAD_CONNECTIONS = 8


@dataclass(frozen=True, slots=True)
class Connections:
    """What one database of a process opens at most."""

    statements: int  # the pool for statements
    admission: int  # kept for admissions (an ingress); 0: none
    signals: bool  # the workers' LISTEN session (leases, stops, wake-ups)

    @property
    def total(self) -> int:
        return self.statements + self.admission + int(self.signals)


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    """The databases a process of one role opens: its own, and in role `all` with the
    ingress on a thread, the ingress thread's."""

    main: Connections
    ingress_thread: Connections | None = None

    @classmethod
    def of(cls, settings: Settings) -> ConnectionPlan:
        pool, admission = (
            settings.database.connections,
            settings.database.admission_connections,
        )
        if settings.process.ingress_apart:
            thread = Connections(min(INGRESS_THREAD_CONNECTIONS, pool), admission, signals=False)
            return cls(Connections(pool, 0, signals=True), thread)
        return cls(
            Connections(
                pool,
                admission if settings.process.serves_events else 0,
                signals=settings.process.runs_workers,  # an ingress takes no lease and wakes no worker
            )
        )

    @property
    def total(self) -> int:
        """The most connections the process opens, all its databases together."""
        thread = self.ingress_thread.total if self.ingress_thread is not None else 0
        return self.main.total + thread
