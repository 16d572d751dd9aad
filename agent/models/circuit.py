"""An open circuit per route after a credential refusal or an exhausted quota.

Invariant 8 (docs/ARCHITECTURE.md): once a key is refused, later tasks on the same route must fail fast
for a cool-down instead of hammering a dead key. `CircuitBreaker.trip` remembers the error;
`check` raises a fresh error of the same kind (same source, marked `from_circuit=True`)
until the cool-down has passed. One breaker is shared by every ladder in the process; the
clock is injectable so tests never wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.core.errors import CredentialRejected, QuotaExhausted, Route

DEFAULT_COOLDOWN = 300.0

Refusal = CredentialRejected | QuotaExhausted


@dataclass(frozen=True, slots=True)
class _Open:
    error: Refusal
    until: float


class CircuitBreaker:
    """Remembers refused routes and fails calls to them fast until the cool-down ends."""

    def __init__(
        self, *, cooldown: float = DEFAULT_COOLDOWN, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._open: dict[tuple[str, str, str], _Open] = {}

    def trip(self, route: Route, error: Refusal) -> None:
        """Open the circuit for `route` with the refusal that justified it."""
        self._open[_key(route)] = _Open(error, self._clock() + self.cooldown)

    def is_open(self, route: Route) -> bool:
        state = self._open.get(_key(route))
        if state is not None and self._clock() >= state.until:
            del self._open[_key(route)]
            return False
        return state is not None

    def check(self, route: Route) -> None:
        """Raise a refusal like the remembered one while the circuit for `route` is open."""
        if not self.is_open(route):
            return
        state = self._open[_key(route)]
        raise _replay(state.error, route, state.until - self._clock())

    def reset(self, route: Route) -> None:
        """Close the circuit, e.g. after an operator rotated the key."""
        self._open.pop(_key(route), None)


def _key(route: Route) -> tuple[str, str, str]:
    # The index does not matter (channels order their routes differently): a provider
    # and model reached with one credential are refused together.
    return (route.provider, route.model, route.credential)


def _replay(error: Refusal, route: Route, remaining: float) -> Refusal:
    message = f"{error} — not called again for {remaining:.0f} s (circuit open)"
    replay: Refusal
    if isinstance(error, CredentialRejected):
        replay = CredentialRejected(
            message, source=error.source, route=route, status_code=error.status_code
        )
    else:
        replay = QuotaExhausted(message, route=route, status_code=error.status_code)
    replay.from_circuit = True
    return replay
