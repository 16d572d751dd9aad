"""The ingress of a one-process gateway on a thread of its own, with its own event loop.

Why: the ack is the one deadline Slack enforces, and on one event loop it waits its turn
behind every callback reply work has made ready: stream reads, posts, heartbeats, claims.
Under load a turn of a busy loop took 10-100 ms, and an ack takes several turns (the
request, the admission's answer), so its tail grew with the reply work, not with its own.
`serve --role ingress` beside worker processes keeps the two apart with processes; this
does the same inside one `serve` (role `all`, `THREADGATE_INGRESS_THREAD`): the ingress —
the events route or the Socket Mode connection, verification, admission, the ack — is an
`Ingress` (gateway/process/ingress.py) running on this thread's loop, with resources of its
own (a database pool sized by the connection plan, a Slack session), and the task workers
stay on the main loop. The two meet only in Postgres, as an
ingress and a worker process do, so nothing else is shared but the metrics (a
prometheus_client registry is thread-safe) and the process's GIL.

The GIL is what the ack still waits for: a thread that wakes with work waits for the
running one to let go, at most `sys.getswitchinterval()` (5 ms by default, per wake-up).
`SWITCH_INTERVAL` shortens that while the ingress runs; the ingress is idle most of the
time, so the workers give up the GIL only when an ack has something to do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
import threading
from contextlib import AsyncExitStack

from gateway.config.channel_config import ChannelConfig
from gateway.config.connections import Connections
from gateway.config.settings import Settings
from gateway.process.channel_policies import ChannelPolicies
from gateway.process.event_loop import loop_factory
from gateway.process.ingress import Ingress
from gateway.process.resources import background, open_resources
from gateway.telemetry.loop_lag import watch_lag
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# Seconds a thread that wants the GIL waits before the running one is asked to let go
# (CPython's default is 0.005). An ack wakes two or three times (the request, the
# admission's answer), so this bounds the wait it adds to about three of these.
SWITCH_INTERVAL = 0.001


class IngressThread:
    """An `Ingress` served on a thread with its own event loop and resources; `launch` it
    from the main loop, wait until it has `started`, then `stop` it."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        connections: Connections,
        channels: ChannelConfig,
    ) -> None:
        self._settings = settings
        self._channels = channels  # the channel config the main loop read, for the same policy
        self._metrics = metrics  # shared: a prometheus_client registry is thread-safe
        self._connections = connections
        self._started: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._policies: ChannelPolicies | None = None
        self._thread: threading.Thread | None = None
        # Asked from the main loop, maybe before the thread's loop exists (the workers'
        # start failed while the ingress was still starting): `_serve` looks at it too.
        self._stop_asked = threading.Event()
        self._switch_interval = sys.getswitchinterval()

    def launch(self, host: str, port: int) -> None:
        """Start serving the ingress on host:port from a new thread; `started` waits for
        it. Its start (a pool, Slack's auth.test, the listener) overlaps whatever the
        caller starts meanwhile."""
        self._thread = threading.Thread(
            target=self._run, args=(host, port), name="threadgate-ingress", daemon=True
        )
        sys.setswitchinterval(SWITCH_INTERVAL)
        self._thread.start()

    async def started(self) -> int:
        """The port the ingress listens on, once it does. What stopped its start (a port in
        use, Slack refusing the token) is raised here, its thread ended."""
        try:
            return await asyncio.wrap_future(self._started)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop the ingress (its listener first, as any gateway stops) and its thread;
        nothing if it was never launched."""
        if self._thread is None:
            return
        self._stop_asked.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed already: it ended
                loop.call_soon_threadsafe(stopping.set)
        await asyncio.wrap_future(self._finished)
        self._thread.join()  # it only returns from `_run` now
        sys.setswitchinterval(self._switch_interval)

    @property
    def policies(self) -> ChannelPolicies | None:
        """The ingress's channel policies, once it has started."""
        return self._policies

    def reload(self, channels: ChannelConfig) -> None:
        """Put the channel config the main loop read (SIGHUP arrives there) in force on the
        ingress's own loop: the same reading the workers enforce. One the thread has not
        started with yet is the one it starts with."""
        self._channels = channels
        if self._loop is not None and self._policies is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed already: it ended
                self._loop.call_soon_threadsafe(self._policies.put, channels)

    def _run(self, host: str, port: int) -> None:
        factory = loop_factory(self._settings.process.event_loop)
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(self._serve(host, port))
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            else:
                log.exception("the ingress thread ended with an error")
        finally:
            self._finished.set_result(None)

    async def _serve(self, host: str, port: int) -> None:
        self._stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()  # `stop` may set `_stopping` from now on
        if self._stop_asked.is_set():  # asked before it could be told: stop once started
            self._stopping.set()
        async with AsyncExitStack() as stack:
            try:
                bound = await self._start(stack, host, port)
            except BaseException as exc:
                self._started.set_exception(exc)
                return
            self._started.set_result(bound)
            await self._stopping.wait()

    async def _start(self, stack: AsyncExitStack, host: str, port: int) -> int:
        """Open the ingress's own resources (the workers' side migrated the database
        before launching this), then listen."""
        channels = self._channels
        resources = await open_resources(
            self._settings,
            self._metrics,
            stack,
            connections=self._connections,
            circuit=None,
            migrate=False,
            channels=channels,
        )
        self._policies = resources.policies
        if self._channels is not channels:  # reloaded while this started
            self._policies.put(self._channels)
        bound = await Ingress(resources).start(stack, host, port)
        background(stack, "loop-lag-ingress", watch_lag(self._metrics.loop_lag.labels("ingress")))
        return bound
