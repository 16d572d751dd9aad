"""On-call reads what became of each message in the log: admitted, answered, refused and
why, deferred, given up — one line each, with the task and channel as fields.

The in-process tests read the JSON lines the gateway's own handler writes
(`gateway.telemetry.logs.log_handler`) for the outcome loggers; what is the process's —
the allowlist refusal, the answered task, the JSON timestamps, refused Slack requests —
runs a real `threadgate serve` (tests/gateway/test_oncall_process.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agent.durable.notices import DEFAULT_NOTICES
from gateway.telemetry.logs import log_handler
from gateway.telemetry.outcomes import REASONS
from storage import LIMIT_SCOPES
from tests.fakes import WAIT_SECONDS
from tests.fakes.openai_api import RecordedRequest, Reply, error_reply
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    app_mention_event,
    event_callback,
)
from tests.gateway.rig import Rig
from tests.gateway.test_bots import bot_mention

# Where the outcome lines come from: the gateway's outcomes, and the runner's give-ups.
LOGGERS = ("gateway.telemetry.outcomes", "agent.durable.runner")

Line = dict[str, Any]


class Lines(io.TextIOBase):
    """The JSON lines a handler writes here, from any thread, waited for with a deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.lines: list[Line] = []
        self._loop = loop
        self._changed = asyncio.Event()

    def write(self, text: str) -> int:
        self.lines += [json.loads(line) for line in text.splitlines() if line.strip()]
        self._loop.call_soon_threadsafe(self._changed.set)
        return len(text)

    def having(self, **fields: str) -> list[Line]:
        return [line for line in self.lines if fields.items() <= line.items()]

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while not predicate():
                    self._changed.clear()
                    if not predicate():
                        await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"never logged {what}: {self.lines}") from None


@contextmanager
def outcome_lines() -> Iterator[Lines]:
    """The outcome loggers' lines at INFO and above, as `THREADGATE_LOG_FORMAT=json` writes them."""
    lines = Lines(asyncio.get_running_loop())
    handler = log_handler("json", stream=lines)  # type: ignore[arg-type]  # a TextIO enough
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def task_id(event: dict[str, Any]) -> str:
    return f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"


def test_every_refusal_says_why_naming_what_decides_it() -> None:
    """Each limit, budget and Slack Connect refusal the admission can give has its words,
    and each names the setting (or Slack's check) behind it."""
    assert set(LIMIT_SCOPES) <= set(REASONS)
    assert all("THREADGATE_" in why or "Slack Connect" in why for why in REASONS.values())


@pytest.mark.rig(overrides={"THREADGATE_USER_MESSAGES_PER_HOUR": "1"})
async def test_admitted_answered_limited_and_a_bots_mention_each_log_one_line(rig: Rig) -> None:
    """A mention logs `admitted` then `answered` with its task; the next past the hourly
    limit logs `refused` with reason `user`; a bot's mention `refused`, `bot_not_allowed`."""
    first = app_mention_event(text="<@UBOT> one")
    second = app_mention_event(text="<@UBOT> two")
    bot = bot_mention("<@UBOT> from a bot")
    with outcome_lines() as lines:
        for event in (first, second, bot):
            assert (await rig.send(event_callback(event)))[0] == 200
        await lines.wait_for(
            lambda: len(lines.having(outcome="answered")) == 2, "both answers (one a notice)"
        )
    mine = lines.having(task=task_id(first))
    assert [(line["outcome"], line["level"]) for line in mine] == [
        ("admitted", "INFO"),
        ("answered", "INFO"),
    ]
    assert mine[0]["channel"] == DEFAULT_CHANNEL
    [limited] = lines.having(task=task_id(second), outcome="refused")
    assert limited["reason"] == "user" and "THREADGATE_USER_MESSAGES_PER_HOUR" in limited["message"]
    [refused_bot] = lines.having(task=task_id(bot))
    assert refused_bot["reason"] == "bot_not_allowed" and refused_bot["level"] == "INFO"
    assert "THREADGATE_ALLOW_BOTS" in refused_bot["message"]


def down(seen: RecordedRequest) -> Reply:
    return error_reply(503, "overloaded", "server_error")


@pytest.mark.rig(
    overrides={
        "THREADGATE_MAX_DEFERRAL_SECONDS": "2",
        "THREADGATE_MODELS_DOWN_NOTICE_SECONDS": "60",
        "THREADGATE_MODEL_RETRY_SECONDS": "0.01",
    }
)
async def test_every_model_down_logs_each_deferral_then_one_give_up(rig: Rig) -> None:
    """While the model answers 503, each try's end logs `deferred` at INFO, and the end
    of the task one `given_up` at WARNING with why (`unavailable`), all with its task."""
    rig.model.default = down
    event = app_mention_event(text="<@UBOT> anyone?")
    with outcome_lines() as lines:
        assert (await rig.send(event_callback(event)))[0] == 200
        await rig.slack.wait_until(
            lambda: any(p.text == DEFAULT_NOTICES.unavailable for p in rig.slack.posts),
            what="the give-up notice",
        )
        await lines.wait_for(lambda: bool(lines.having(outcome="given_up")), "the give-up")
    mine = lines.having(task=task_id(event))
    outcomes = [line["outcome"] for line in mine]
    assert outcomes[0] == "admitted" and outcomes[-1] == "given_up"
    assert set(outcomes[1:-1]) == {"deferred"}
    assert all(line["level"] == "INFO" for line in mine[:-1])
    assert (mine[-1]["level"], mine[-1]["reason"]) == ("WARNING", "unavailable")
