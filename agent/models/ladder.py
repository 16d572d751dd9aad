"""The attempt ladder: which model runs a round, and what a failure costs (invariant 4).

`AttemptLadder.run(attempt)` runs a whole attempt (one round, repairs included) against
slot 0, and climbs on failure:

    TransientModelError              retry the same slot after a jittered exponential backoff,
                                     or exactly `retry_after` when the server said so; past
                                     the bound (or a Retry-After longer than the cap) the slot
                                     is exhausted for now and the next one is tried
    NonTransientModelError,          the slot is burnt: try the next one
      RoundFailed
    CredentialRejected,              raise at once — no retry, no fallback — and open the
      QuotaExhausted                 route's circuit so later runs fail fast

When every slot is used up: if any slot failed only transiently the task can succeed later,
so `ModelsUnavailable(retry_after=…)` is raised (the runner re-queues the task); if every
slot failed for good, the last error is re-raised. Sleep, random jitter and the circuit's
clock are injected, so tests record delays instead of waiting.

With an `OutageTracker` (agent/models/outage.py, shared by every ladder of the process)
each attempt's outcome is told to it, and a give-up with every slot unavailable too, so
the process knows when every route is down and when one answers again.

`run` returns what the attempt returned together with the route (provider, model, and
its index in the chain as `slot`) it ran on (`Answered`), so whoever stores the answer can
record which route wrote it (`tasks show`, `messages.route_index`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeAlias, TypeVar

from agent.core.errors import (
    AttachmentRefused,
    CredentialRejected,
    ModelError,
    ModelsUnavailable,
    QuotaExhausted,
    RoundFailed,
    Route,
    TransientModelError,
)
from agent.models.circuit import CircuitBreaker
from agent.models.contract import Model
from agent.models.outage import OutageTracker

T = TypeVar("T")

Outcome: TypeAlias = Literal["ok", "transient", "failed", "credential", "quota", "circuit_open"]
AttemptObserver: TypeAlias = Callable[[Route, Outcome], None]


@dataclass(frozen=True, slots=True)
class Answered(Generic[T]):
    """What an attempt returned, and the route (provider, model, slot) it ran on."""

    value: T
    route: Route


class Attempts(Protocol):
    """Runs an attempt on model slots until one succeeds (the attempt ladder)."""

    async def run(self, attempt: Callable[[Model], Awaitable[T]]) -> Answered[T]: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard one slot is tried before the ladder moves on."""

    attempts_per_slot: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0

    def backoff(self, retry: int, jitter: float) -> float:
        """Exponential backoff for the `retry`-th retry, scaled into [50 %, 100 %] by jitter."""
        return min(self.max_delay, self.base_delay * 2.0**retry) * (0.5 + jitter / 2)


class _SlotExhausted(Exception):
    def __init__(self, error: TransientModelError) -> None:
        self.error = error


class AttemptLadder:
    """Runs attempts over the routes of the fallback chain, in order (0 the primary:
    `THREADGATE_ROUTES`' first, or THREADGATE_MODEL; then THREADGATE_FALLBACK_MODEL…)."""

    def __init__(
        self,
        models: Sequence[Model],
        *,
        policy: RetryPolicy | None = None,
        circuit: CircuitBreaker | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        on_attempt: AttemptObserver | None = None,
        outage: OutageTracker | None = None,
    ) -> None:
        if not models:
            raise ValueError("the ladder needs at least one model")
        self.models = tuple(models)
        self.policy = policy or RetryPolicy()
        self.circuit = circuit or CircuitBreaker()
        self._sleep = sleep
        self._jitter = jitter
        self._observe = on_attempt or (lambda route, outcome: None)
        self.outage = outage

    async def run(self, attempt: Callable[[Model], Awaitable[T]]) -> Answered[T]:
        """Run `attempt` on the first slot that succeeds; what it returned, and where."""
        transient: list[TransientModelError] = []
        last: Exception | None = None
        for slot, model in enumerate(self.models):
            route = route_of(model, slot)
            try:
                return Answered(await self._slot(route, model, attempt), route)
            except _SlotExhausted as exhausted:
                transient.append(exhausted.error)
            except (CredentialRejected, QuotaExhausted):
                raise
            except (ModelError, RoundFailed) as exc:
                last = exc
        error = self._give_up(transient, last)
        if isinstance(error, ModelsUnavailable) and self.outage is not None:
            self.outage.unavailable()
        raise error

    async def _slot(
        self, route: Route, model: Model, attempt: Callable[[Model], Awaitable[T]]
    ) -> T:
        for retry in range(self.policy.attempts_per_slot):
            self._check_circuit(route)
            try:
                result = await attempt(model)
            except Exception as exc:
                await self._failed(route, exc, retry)
                continue
            self._observe(route, "ok")
            if self.outage is not None:
                self.outage.answered(route)
            return result
        raise AssertionError("unreachable: the last retry raises _SlotExhausted")

    def _check_circuit(self, route: Route) -> None:
        try:
            self.circuit.check(route)
        except ModelError as exc:
            self._observe(route, "circuit_open")
            self._tell_outage(route, exc)
            raise

    async def _failed(self, route: Route, exc: Exception, retry: int) -> None:
        """Re-raise `exc` (stamped with the route) unless it is worth another try."""
        if isinstance(exc, ModelError):
            exc.route = route
        self._tell_outage(route, exc)
        if isinstance(exc, CredentialRejected | QuotaExhausted):
            self._refused(route, exc)
        if not isinstance(exc, TransientModelError):
            if isinstance(exc, ModelError | RoundFailed):
                self._observe(route, "failed")
            raise exc
        self._observe(route, "transient")
        delay = self._delay(retry, exc)
        if delay is None:
            raise _SlotExhausted(exc) from exc
        await self._sleep(delay)

    def _tell_outage(self, route: Route, exc: Exception) -> None:
        """A model error: the route failed. A round that failed (no valid control call) or
        an attachment the provider refused had a model answer: the route is up."""
        if self.outage is None:
            return
        if isinstance(exc, RoundFailed | AttachmentRefused):
            self.outage.answered(route)
        elif isinstance(exc, ModelError):
            self.outage.failed(route, exc)

    def _refused(self, route: Route, exc: CredentialRejected | QuotaExhausted) -> None:
        self.circuit.trip(route, exc)
        self._observe(route, "credential" if isinstance(exc, CredentialRejected) else "quota")
        raise exc

    def _delay(self, retry: int, error: TransientModelError) -> float | None:
        """Seconds before the next try of this slot, or None when the slot is done for now."""
        if retry + 1 >= self.policy.attempts_per_slot:
            return None
        if error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.policy.max_delay else None
        return self.policy.backoff(retry, self._jitter())

    def _give_up(self, transient: list[TransientModelError], last: Exception | None) -> Exception:
        if transient or last is None:
            return _unavailable(transient)
        return last


def _unavailable(errors: list[TransientModelError]) -> ModelsUnavailable:
    hints = [e.retry_after for e in errors if e.retry_after is not None]
    summary = "; ".join(str(e) for e in errors)
    message = f"every model slot is unavailable for now, the task will be retried later: {summary}"
    return ModelsUnavailable(message, retry_after=min(hints) if hints else None)


def route_of(model: Model, slot: int) -> Route:
    """The route of `model` in `slot`: its `route` if it has one, else parsed from its name."""
    route = getattr(model, "route", None)
    if isinstance(route, Route):
        return Route(route.provider, route.model, slot, route.credential)
    provider, _, name = model.name.partition(":")
    return Route(provider, name or provider, slot)
