"""Crash anywhere: SIGKILL the real gateway at named and random moments, restart, repeat.

Each cycle starts `threadgate serve`, sends new messages into a few threads, and kills the
process at one of these moments (landed with the fakes' hooks, not with timing):

- `before_ack`   while the event's HTTP request may still be in flight (a random few ms);
- `after_ack`    right after the 200;
- `model_call`   while the model is answering (a `Hang`);
- `subtask`      after a delegation's acknowledgment, while its subtask runs;
- `post_unknown` after chat.postMessage reached Slack but before its answer came back
                 (`FakeSlack.hold`, released only after the kill, so the post lands);
- `post_dropped` after a post landed and its connection was cut (`drop_after_recording`);
- `random`       a random delay after a burst of messages;
- `collect_kill` (under `collect`) while the model is answering a message that two more
                 in its thread wait behind: after the restart its run covers them.

Unacked events are redelivered to the next process as Slack does (`X-Slack-Retry-Num`).
At the end every message must be answered exactly once, in order within each thread.
Under `THREADGATE_THREAD_QUEUE=collect` a message may be answered by the reply that covers
it (tests/chaos/harness.py `assert_each_answered_once`); those cycles are the moments
where messages wait in a thread while its task works or is killed.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import pytest

from agent.rounds.subagent import SUBAGENT_PROMPT
from storage.database import Database
from tests.chaos.harness import (
    NO_MESSAGE_LIMITS,
    Conversation,
    SentEvent,
    answered,
    answered_through,
    assert_each_answered_once,
    assert_exactly_once_in_order,
    conversations,
    deliver_once,
    deliver_until_acked,
    marker_of,
    scaled,
    wait_until_settled,
)
from tests.fakes.openai_api import Hang, OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

MOMENTS = (
    "before_ack",
    "after_ack",
    "model_call",
    "subtask",
    "post_unknown",
    "post_dropped",
    "random",
)
# In the normal run each moment once: every restart costs a gateway's start-up.
KILLS = scaled(100, len(MOMENTS))
# Under collect, the moments where messages wait behind a working or killed task (a
# delegating task covers what came while its subtask ran; a stored reply covers nothing
# more): each once in the normal run, which adds a third of the followup run's time.
COLLECT_MOMENTS = ("collect_kill", "subtask", "post_unknown", "model_call")
COLLECT_KILLS = scaled(40, len(COLLECT_MOMENTS))


def is_subagent(seen: RecordedRequest) -> bool:
    return bool(seen.body["messages"][0]["content"] == SUBAGENT_PROMPT)


def is_next_round(seen: RecordedRequest) -> bool:
    return not is_subagent(seen) and seen.body["messages"][-1]["role"] == "tool"


class ChaosModel:
    """The echo model, plus: markers that hang once, and markers that delegate first."""

    def __init__(self) -> None:
        self.hang_once: set[str] = set()
        self.delegating: set[str] = set()
        self.reached: dict[str, asyncio.Event] = {}

    def expect(self, marker: str) -> asyncio.Event:
        return self.reached.setdefault(marker, asyncio.Event())

    def __call__(self, seen: RecordedRequest) -> Reply:
        marker = marker_of(seen) or ""
        if marker in self.reached:
            self.reached[marker].set()
        if marker in self.hang_once:
            self.hang_once.discard(marker)
            return Hang()
        if marker not in self.delegating:
            return echo(seen)
        if is_subagent(seen):
            return reply_with_tool("final_reply", {"text": f"finding {marker}"})
        if is_next_round(seen):
            return reply_with_tool("final_reply", {"text": f"re: {marker} after digging"})
        subtasks = [{"type": "agent", "params": {"instructions": f"look up {marker}"}}]
        return reply_with_tool(
            "delegate", {"acknowledgment": f"on it {marker}", "subtasks": subtasks}
        )


class Crasher:
    """Runs kill cycles against a restartable gateway process."""

    def __init__(
        self,
        env: dict[str, str],
        cwd: Path,
        slack: FakeSlack,
        model: ChaosModel,
        http: aiohttp.ClientSession,
        rng: random.Random,
    ) -> None:
        self.env, self.cwd, self.slack, self.model, self.http = env, cwd, slack, model, http
        self.rng = rng
        self.threads = conversations(4, prefix="C0CRASH")
        self.sent: list[SentEvent] = []
        self.gateway: GatewayProcess | None = None

    def url(self) -> str:
        assert self.gateway is not None
        return self.gateway.events_url

    async def restart(self) -> None:
        self.gateway = GatewayProcess(self.env, self.cwd)
        await self.gateway.start()
        for sent in self.sent:  # Slack keeps retrying what was never acknowledged
            if not sent.acked:
                await deliver_until_acked(self.http, self.url, sent)

    async def kill(self) -> None:
        assert self.gateway is not None and self.gateway.proc is not None
        if self.gateway.proc.returncode is None:
            await self.gateway.kill()

    def message(self, thread: Conversation | None = None) -> SentEvent:
        sent = (thread or self.rng.choice(self.threads)).next_message()
        self.sent.append(sent)
        return sent

    async def cycle(self, moment: str) -> None:
        await self.restart()
        await getattr(self, moment)()
        await self.kill()

    async def before_ack(self) -> None:
        sent = self.message()
        delivery = asyncio.create_task(deliver_once(self.http, self.url(), sent))
        await asyncio.sleep(self.rng.uniform(0, 0.02))  # a random kill moment, not a wait
        await self.kill()
        await delivery

    async def after_ack(self) -> None:
        await deliver_until_acked(self.http, self.url, self.message())

    async def collect_kill(self) -> None:
        """The model hangs on a message; two more in its thread are admitted behind it."""
        thread = self.rng.choice(self.threads)
        await self.model_call(thread)
        for _ in range(2):
            await deliver_until_acked(self.http, self.url, self.message(thread))

    async def model_call(self, thread: Conversation | None = None) -> None:
        sent = self.message(thread)
        self.model.hang_once.add(sent.marker)
        reached = self.model.expect(sent.marker)
        await deliver_until_acked(self.http, self.url, sent)
        await asyncio.wait_for(reached.wait(), 30)

    async def subtask(self) -> None:
        sent = self.message()
        self.model.delegating.add(sent.marker)
        await deliver_until_acked(self.http, self.url, sent)
        await self.slack.wait_until(
            lambda: any(p.text == f"on it {sent.marker}" for p in self.slack.posts),
            30,
            what=f"the acknowledgment of {sent.marker}",
        )

    async def post_unknown(self) -> None:
        before = len(self.slack.calls_to("chat.postMessage"))
        gate = self.slack.hold("chat.postMessage")
        try:
            # Whichever post comes first (per-thread order may put another ahead of ours).
            await deliver_until_acked(self.http, self.url, self.message())
            await self.slack.wait_until(
                lambda: len(self.slack.calls_to("chat.postMessage")) > before,
                30,
                what="a post in flight",
            )
            await self.kill()
        finally:
            gate.set()  # the held posts now land, after their poster died

    async def post_dropped(self) -> None:
        drops = self._drops()
        self.slack.drop_after_recording("chat.postMessage")
        await deliver_until_acked(self.http, self.url, self.message())
        await self.slack.wait_until(lambda: self._drops() > drops, 30, what="a dropped post")

    def _drops(self) -> int:
        return sum(c.fault == "drop" for c in self.slack.calls_to("chat.postMessage"))

    async def random(self) -> None:
        # Distinct threads: within one thread, concurrent messages have no order to keep.
        burst = [self.message(t) for t in self.rng.sample(self.threads, 3)]
        await asyncio.gather(*(deliver_once(self.http, self.url(), s) for s in burst))
        await asyncio.sleep(self.rng.uniform(0, 1.0))  # a random kill moment, not a wait


@pytest.mark.parametrize("queue_mode", ["followup", "collect"])
async def test_sigkill_at_any_moment_still_answers_every_message_once_in_order(
    postgres_dsn: str, tmp_path: Path, queue_mode: str
) -> None:
    """SIGKILLs before/after the ack, mid-model, mid-subtask and mid-post, then a restart:
    every message is answered exactly once (by its own reply, or under collect maybe by
    the one that covers it), in order within its thread."""
    dsn = await create_database(postgres_dsn, f"chaos_crash_{queue_mode}")
    collect = queue_mode == "collect"
    moments, kills = (COLLECT_MOMENTS, COLLECT_KILLS) if collect else (MOMENTS, KILLS)
    rng = random.Random(20240601)
    model = ChaosModel()
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as fake_model,
        aiohttp.ClientSession() as http,
    ):
        fake_model.default = model
        # At full scale one user writes ~150 messages into four threads within the hour.
        env = gateway_env(slack, fake_model, dsn) | NO_MESSAGE_LIMITS
        env["THREADGATE_LEASE_SECONDS"] = "3"
        env["THREADGATE_THREAD_QUEUE"] = queue_mode
        # Slack shows a stored post at once here; the margins only pace the test (a post
        # whose poster was killed mid-call is looked for once they passed).
        env["THREADGATE_SLACK_TIMEOUT_SECONDS"] = "3"
        env["THREADGATE_SLACK_SETTLE_SECONDS"] = "0.5"
        crasher = Crasher(env, tmp_path, slack, model, http, rng)
        for kill in range(kills):
            await crasher.cycle(moments[kill % len(moments)])
        await crasher.restart()
        done = answered_through if collect else answered
        try:
            await slack.wait_until(done(slack, crasher.sent), 120, what="every reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db, deadline=60)
        finally:
            assert crasher.gateway is not None
            await crasher.gateway.stop()
    if collect:  # collect_kill's two waiting messages at least were covered
        assert await assert_each_answered_once(slack, crasher.sent, dsn) >= 2
    else:
        assert_exactly_once_in_order(slack, crasher.sent)
    delegated = [s for s in crasher.sent if s.marker in model.delegating]
    for sent in delegated:
        # Under collect a delegating message may be covered by an earlier one's task.
        acks = [p.text for p in slack.posts].count(f"on it {sent.marker}")
        assert acks == 1 or (collect and acks == 0)
