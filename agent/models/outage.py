"""Whether every model route is unavailable right now, for the whole process.

While every route is down the tasks that found it so wait (agent/durable/runner.py, "Every
model down"), each until its own backed-off try. Knowing when the outage began and when a
model answered again lets the process act on both at once instead of task by task: say it
once (one WARNING line naming each route's last failure, an operator alert), and wake every
waiting task the moment any model answers. One `OutageTracker` is shared by every ladder of
the process (the deployment's and each channel's), like the circuit: the ladders tell it
how each attempt went (`answered`, `failed`) and when a whole chain gave up for now
(`unavailable`).

An outage begins when a ladder gave up with every route of its chain unavailable *and*
every route the tracker has heard of lately (within `fresh_seconds`) failed at its last
attempt: one channel's models being down while the deployment's answer is no outage, and
a route last heard of an hour ago tells nothing about now. It ends when any route answers
(a model that answered badly, `RoundFailed`, answered: it is reachable).

Replicas share one queue, so one replica's outage is every replica's: `heard` takes what
another replica announced (through Postgres, storage/model_waits.py), so a replica whose
own tasks never failed still announces the recovery when its model answers first. Heard
outages are not logged here (the replica that saw it logs it).

What the process does about an outage is the listeners' (`OutageListener`): the tracker
knows, and logs, and nothing else. Its log lines are throttled: one WARNING per
`log_every` seconds at most (outages that began in between are counted into the next
one), and one INFO when an outage whose WARNING was logged ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.core.errors import Route

log = logging.getLogger(__name__)

# A route's last attempt says something about now for this long (a route not tried for
# longer counts as neither up nor down).
FRESH_SECONDS = 300.0
# At most one WARNING line per this many seconds (flapping outages are counted, not logged).
LOG_EVERY_SECONDS = 60.0
# A failure's reason is cut to this many characters in the log line and the alert.
REASON_CHARS = 160


@dataclass(frozen=True, slots=True)
class RouteState:
    """How a route's last attempt went: `up` when it answered, else the failure's reason."""

    route: Route
    up: bool
    reason: str
    at: float  # the tracker's clock

    def describe(self) -> str:
        """The route and how it last went (a failure's message names its route already)."""
        name = f"{self.route.provider}:{self.route.model}"
        if self.up:
            return f"{name} answered"
        return self.reason if name in self.reason else f"{name}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Outage:
    """Every route unavailable: since when (the tracker's clock), each route's last state,
    and whether it was only heard of from another replica."""

    started: float
    routes: tuple[RouteState, ...]
    heard: bool = False

    def describe(self) -> str:
        """The routes and their last reasons, for a log line or an alert."""
        return "; ".join(state.describe() for state in self.routes) or "no route tried yet"


@dataclass(frozen=True, slots=True)
class Recovery:
    """An outage ended: which route answered (None when another replica said so), and
    after how many seconds."""

    outage: Outage
    answered: Route | None
    seconds: float


class OutageListener(Protocol):
    """Hears the tracker's changes. Called synchronously from a ladder's attempt: every
    method must be cheap and never raise (work that waits belongs in a background task)."""

    def route_changed(self, state: RouteState) -> None: ...

    def outage_began(self, outage: Outage) -> None: ...

    def outage_ended(self, recovery: Recovery) -> None: ...


RouteKey = tuple[str, str, str]


class OutageTracker:
    """The process's one view of whether every model route is down (module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        fresh_seconds: float = FRESH_SECONDS,
        log_every: float = LOG_EVERY_SECONDS,
    ) -> None:
        self._clock = clock
        self._fresh = fresh_seconds
        self._log_every = log_every
        self._routes: dict[RouteKey, RouteState] = {}
        self._outage: Outage | None = None
        self._listeners: list[OutageListener] = []
        self._last_warning: float | None = None
        self._held_back = 0  # outages begun since the last WARNING, not logged
        self._logged = False  # the current outage's WARNING was logged

    def subscribe(self, listener: OutageListener) -> None:
        self._listeners.append(listener)

    @property
    def outage(self) -> Outage | None:
        """The outage going on, or None."""
        return self._outage

    def routes(self) -> list[RouteState]:
        """Every route's last state, as last heard."""
        return list(self._routes.values())

    def answered(self, route: Route) -> None:
        """A route answered: it is up, and an outage going on is over."""
        self._note(RouteState(route, True, "", self._clock()))
        if self._outage is not None:
            self._end(route)

    def failed(self, route: Route, error: BaseException) -> None:
        """An attempt on `route` failed with `error` (its message is the reason shown)."""
        self._note(RouteState(route, False, reason_of(error), self._clock()))

    def unavailable(self) -> None:
        """A ladder gave up for now with every route of its chain unavailable: an outage
        begins if every route heard of lately is down too."""
        if self._outage is not None:
            return
        fresh = self._fresh_routes()
        if fresh and not any(state.up for state in fresh):
            self._begin(Outage(self._clock(), tuple(fresh)))

    def heard(self, *, down: bool) -> None:
        """Another replica announced an outage (`down`) or its end."""
        if down and self._outage is None:
            self._begin(Outage(self._clock(), tuple(self._fresh_routes()), heard=True))
        elif not down and self._outage is not None:
            self._end(None)

    def _note(self, state: RouteState) -> None:
        key = _key(state.route)
        before = self._routes.get(key)
        self._routes[key] = state
        if before is None or before.up != state.up:
            self._tell(lambda listener: listener.route_changed(state))

    def _fresh_routes(self) -> list[RouteState]:
        now = self._clock()
        return [s for s in self._routes.values() if now - s.at <= self._fresh]

    def _begin(self, outage: Outage) -> None:
        self._outage = outage
        self._logged = False
        if not outage.heard:
            self._warn(outage)
        self._tell(lambda listener: listener.outage_began(outage))

    def _end(self, answered: Route | None) -> None:
        outage, self._outage = self._outage, None
        assert outage is not None
        recovery = Recovery(outage, answered, max(0.0, self._clock() - outage.started))
        if self._logged:
            log.info("%s", describe_recovery(recovery))
        self._tell(lambda listener: listener.outage_ended(recovery))

    def _warn(self, outage: Outage) -> None:
        """One WARNING per `log_every` seconds at most; those held back are counted."""
        if self._last_warning is not None and outage.started - self._last_warning < self._log_every:
            self._held_back += 1
            return
        more = (
            f" ({self._held_back} more outage(s) since the last such line)"
            if self._held_back
            else ""
        )
        log.warning("every model route is unavailable: %s%s", outage.describe(), more)
        self._last_warning, self._held_back, self._logged = outage.started, 0, True

    def _tell(self, call: Callable[[OutageListener], None]) -> None:
        for listener in self._listeners:
            try:
                call(listener)
            except Exception:  # a listener's bug must not fail the attempt that told it
                log.exception("an outage listener failed")


def describe_recovery(recovery: Recovery) -> str:
    """The INFO line (and the alert) of an outage's end."""
    who = (
        f"{recovery.answered.provider}:{recovery.answered.model} answered"
        if recovery.answered is not None
        else "another replica's model answered"
    )
    return f"the models are available again after {recovery.seconds:.0f} s: {who}"


def reason_of(error: BaseException) -> str:
    """A failure's reason on one line, cut to `REASON_CHARS`: its class when it says nothing."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _key(route: Route) -> RouteKey:
    # As the circuit keys routes: a channel's chain orders them differently, and one model
    # reached with two keys is two routes.
    return (route.provider, route.model, route.credential)
