"""The outage tracker: when every route is down, when one is back, and what it says."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest

from agent.core.errors import (
    CredentialRejected,
    ModelsUnavailable,
    RoundFailed,
    Route,
    TransientModelError,
)
from agent.models.contract import Model, ModelRequest, ModelResponse, UserMessage
from agent.models.function_model import FunctionModel, text_response
from agent.models.ladder import AttemptLadder, RetryPolicy
from agent.models.outage import (
    REASON_CHARS,
    Outage,
    OutageTracker,
    Recovery,
    RouteState,
    reason_of,
)

PRIMARY = Route("openai", "gpt-main", 0)
FALLBACK = Route("anthropic", "claude-b", 1)
CHANNEL = Route("openai", "gpt-channel", 0)
DOWN = TransientModelError(f"{PRIMARY} is unavailable for now (HTTP 503, server_error)")
REQUEST = ModelRequest((UserMessage("hi"),))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Heard:
    """A listener that records what it was told."""

    def __init__(self) -> None:
        self.began: list[Outage] = []
        self.ended: list[Recovery] = []
        self.changed: list[tuple[str, bool]] = []

    def route_changed(self, state: RouteState) -> None:
        self.changed.append((state.route.model, state.up))

    def outage_began(self, outage: Outage) -> None:
        self.began.append(outage)

    def outage_ended(self, recovery: Recovery) -> None:
        self.ended.append(recovery)


def tracked(clock: Clock | None = None) -> tuple[OutageTracker, Heard]:
    tracker = OutageTracker(clock=clock or Clock())
    heard = Heard()
    tracker.subscribe(heard)
    return tracker, heard


def both_down(tracker: OutageTracker) -> None:
    tracker.failed(PRIMARY, DOWN)
    tracker.failed(FALLBACK, TransientModelError("anthropic:claude-b timed out"))
    tracker.unavailable()


def test_every_route_down_begins_an_outage_and_any_answer_ends_it() -> None:
    """A give-up with every route failed begins one outage (told once); the first route to
    answer ends it, naming itself and how long it lasted."""
    clock = Clock()
    tracker, heard = tracked(clock)
    both_down(tracker)
    tracker.unavailable()  # another task's give-up in the same outage
    assert len(heard.began) == 1 and tracker.outage is not None
    clock.now += 42
    tracker.answered(FALLBACK)
    assert tracker.outage is None
    assert [(r.answered, r.seconds) for r in heard.ended] == [(FALLBACK, 42.0)]


def test_a_route_still_up_means_no_outage() -> None:
    """One channel's route down while another route last answered is no outage."""
    tracker, heard = tracked()
    tracker.answered(CHANNEL)
    tracker.failed(PRIMARY, DOWN)
    tracker.unavailable()
    assert heard.began == [] and tracker.outage is None


def test_a_route_not_heard_of_lately_does_not_count() -> None:
    """A route whose last answer is older than the freshness horizon says nothing about now."""
    clock = Clock()
    tracker, heard = tracked(clock)
    tracker.answered(CHANNEL)
    clock.now += 301
    tracker.failed(PRIMARY, DOWN)
    tracker.unavailable()
    assert [s.route for s in heard.began[0].routes] == [PRIMARY]


def test_failures_alone_begin_no_outage() -> None:
    """Routes failing without a ladder giving up (a fallback may still answer) are no outage."""
    tracker, heard = tracked()
    tracker.failed(PRIMARY, DOWN)
    tracker.failed(FALLBACK, DOWN)
    assert heard.began == []


def test_the_route_gauge_hears_only_changes() -> None:
    """Listeners hear a route's state when it is first seen and when it flips, not on
    every attempt."""
    tracker, heard = tracked()
    tracker.answered(PRIMARY)
    tracker.answered(PRIMARY)
    tracker.failed(PRIMARY, DOWN)
    tracker.failed(PRIMARY, DOWN)
    tracker.answered(PRIMARY)
    assert heard.changed == [("gpt-main", True), ("gpt-main", False), ("gpt-main", True)]


def test_another_replica_s_outage_is_heard_and_ended_by_a_local_answer() -> None:
    """An outage announced by another replica is taken as heard (no log line of ours), and
    this process's next answer ends it, so it announces the recovery."""
    tracker, heard = tracked()
    tracker.heard(down=True)
    assert heard.began[0].heard
    tracker.answered(PRIMARY)
    assert heard.ended[0].answered == PRIMARY


def test_another_replica_s_recovery_ends_our_outage() -> None:
    """A recovery announced elsewhere ends the outage here, with no route of ours named."""
    tracker, heard = tracked()
    both_down(tracker)
    tracker.heard(down=False)
    tracker.heard(down=False)
    assert tracker.outage is None and [r.answered for r in heard.ended] == [None]


def test_the_log_says_it_once_with_each_route_s_reason_then_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One WARNING naming every route and its last failure, one INFO on recovery."""
    caplog.set_level(logging.INFO, logger="agent.models.outage")
    tracker, _ = tracked()
    both_down(tracker)
    tracker.unavailable()
    tracker.answered(PRIMARY)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            "WARNING",
            "every model route is unavailable: openai:gpt-main (slot 0) is unavailable for "
            "now (HTTP 503, server_error); anthropic:claude-b timed out",
        ),
        ("INFO", "the models are available again after 0 s: openai:gpt-main answered"),
    ]


def test_flapping_outages_are_counted_into_the_next_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Outages beginning within a minute of the last WARNING are held back (their ends
    too) and counted in the next one."""
    caplog.set_level(logging.INFO, logger="agent.models.outage")
    clock = Clock()
    tracker, heard = tracked(clock)
    for _ in range(3):
        both_down(tracker)
        clock.now += 10
        tracker.answered(PRIMARY)
    clock.now += 60
    both_down(tracker)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    infos = [r for r in caplog.records if r.levelname == "INFO"]
    assert len(heard.began) == 4 and len(warnings) == 2 and len(infos) == 1
    assert warnings[1].endswith("(2 more outage(s) since the last such line)")


def test_a_failing_listener_does_not_fail_the_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """A listener's bug is logged; the tracker and the other listeners go on."""

    class Broken(Heard):
        def outage_began(self, outage: Outage) -> None:
            raise RuntimeError("bug")

    tracker = OutageTracker(clock=Clock())
    after = Heard()
    tracker.subscribe(Broken())
    tracker.subscribe(after)
    both_down(tracker)
    assert len(after.began) == 1 and "an outage listener failed" in caplog.text


def test_a_reason_is_one_bounded_line() -> None:
    """Whitespace collapses, a long message is cut, an empty one names its class."""
    assert reason_of(TransientModelError("a\n  b")) == "a b"
    assert len(reason_of(TransientModelError("x" * 1000))) == REASON_CHARS
    assert reason_of(TimeoutError()) == "TimeoutError"


def scripted(name: str, results: list[Exception | str]) -> FunctionModel:
    def answer(request: ModelRequest) -> ModelResponse:
        item = results.pop(0)
        if isinstance(item, Exception):
            raise item
        return text_response(item, model=name)

    return FunctionModel(answer, name=f"function:{name}")


async def no_sleep(delay: float) -> None:
    return None


def ladder_of(tracker: OutageTracker, *models: Model) -> AttemptLadder:
    return AttemptLadder(
        models, policy=RetryPolicy(attempts_per_slot=1), sleep=no_sleep, outage=tracker
    )


def asking(text: str) -> Callable[[Model], Awaitable[ModelResponse]]:
    async def attempt(model: Model) -> ModelResponse:
        return await model.request(ModelRequest((UserMessage(text),)))

    return attempt


async def test_a_ladder_whose_chain_is_down_begins_the_outage_and_its_answer_ends_it() -> None:
    """The ladder tells the tracker each attempt and its give-up: both slots transient
    begins the outage; the primary answering at the next run ends it."""
    tracker, heard = tracked()
    primary = scripted("a", [TransientModelError("a down"), "back"])
    fallback = scripted("b", [TransientModelError("b down")])
    chain = ladder_of(tracker, primary, fallback)
    with pytest.raises(ModelsUnavailable):
        await chain.run(asking("hi"))
    assert [s.reason for s in heard.began[0].routes] == ["a down", "b down"]
    await chain.run(asking("hi"))
    assert [r.answered and r.answered.model for r in heard.ended] == ["a"]


async def test_a_failed_round_or_a_refused_key_is_no_outage() -> None:
    """A model that answered without a valid control call is up; a refused credential
    stops the ladder at once (the credential alert's business), beginning no outage."""
    tracker, heard = tracked()
    answered_badly = scripted("a", [RoundFailed("no control call")])
    refused = scripted("b", [CredentialRejected("refused", source="provider")])
    with pytest.raises(RoundFailed):
        await ladder_of(tracker, answered_badly).run(asking("hi"))
    with pytest.raises(CredentialRejected):
        await ladder_of(tracker, refused).run(asking("hi"))
    assert heard.began == [] and heard.changed == [("a", True), ("b", False)]
