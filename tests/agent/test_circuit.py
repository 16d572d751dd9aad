"""The circuit breaker: refused routes fail fast for a cool-down, on an injected clock."""

from __future__ import annotations

import pytest

from agent.core.errors import CredentialRejected, QuotaExhausted, Route
from agent.models.circuit import CircuitBreaker

ROUTE = Route("openai", "gpt-test", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_closed_until_tripped() -> None:
    """A route that was never refused passes the check."""
    circuit = CircuitBreaker(clock=Clock())
    circuit.check(ROUTE)
    assert not circuit.is_open(ROUTE)


def test_open_replays_the_same_kind_of_refusal_until_the_cooldown_ends() -> None:
    """While open, check raises a copy of the refusal marked from_circuit; then it closes."""
    clock = Clock()
    circuit = CircuitBreaker(cooldown=30, clock=clock)
    circuit.trip(ROUTE, CredentialRejected("gateway refused", source="gateway", status_code=401))
    clock.now += 29
    with pytest.raises(CredentialRejected) as caught:
        circuit.check(ROUTE)
    assert caught.value.from_circuit and caught.value.source == "gateway"
    assert caught.value.status_code == 401 and "circuit open" in str(caught.value)
    clock.now += 1
    circuit.check(ROUTE)
    assert not circuit.is_open(ROUTE)


def test_quota_refusals_replay_as_quota() -> None:
    """An exhausted quota is replayed as QuotaExhausted."""
    circuit = CircuitBreaker(clock=Clock())
    circuit.trip(ROUTE, QuotaExhausted("no credit", status_code=429))
    with pytest.raises(QuotaExhausted) as caught:
        circuit.check(ROUTE)
    assert caught.value.from_circuit


def test_the_slot_does_not_matter_but_the_model_does() -> None:
    """The same provider and model in another slot share the circuit; another model does not."""
    circuit = CircuitBreaker(clock=Clock())
    circuit.trip(ROUTE, CredentialRejected("x", source="provider"))
    assert circuit.is_open(Route("openai", "gpt-test", 1))
    assert not circuit.is_open(Route("openai", "gpt-other", 0))


def test_reset_closes_the_circuit() -> None:
    """An operator reset closes an open circuit at once."""
    circuit = CircuitBreaker(clock=Clock())
    circuit.trip(ROUTE, CredentialRejected("x", source="unknown"))
    circuit.reset(ROUTE)
    circuit.check(ROUTE)
