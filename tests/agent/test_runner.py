"""The task runner: rounds, delegation, and every way a task or subtask can end."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agent.core.delegation import Delegation, RoundInput, Subtask, SubtaskRequest
from agent.core.errors import (
    CredentialRejected,
    ModelsUnavailable,
    NonTransientModelError,
    RoundFailed,
    Route,
    SubtaskFailed,
)
from agent.core.ports import Delivered, PromptEpoch, Step, StoredMessage, Task, Window
from agent.durable.notices import DEFAULT_NOTICES, FailureNotices
from agent.durable.runner import DEFAULT_RUNNER, RunnerPorts, RunnerSettings, TaskRunner
from agent.durable.subtask_runs import INTERNAL_ERROR, TIMED_OUT
from agent.rounds.control import Decision, Reply
from tests.agent.memory import (
    MemoryAlerts,
    MemoryDelegations,
    MemoryHistory,
    MemoryLiveView,
    MemoryPublisher,
    MemoryQueue,
)

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})
# The task claimed again (after its subtasks ended, or after a crash): a later attempt.
RERUN = dataclasses.replace(TASK, attempts=2)
TURN = StoredMessage(TASK.user_message_id, TASK.session_id, "user", "turn", "question")


def delegate(*kinds: str) -> Delegation:
    requests = tuple(SubtaskRequest(kind, {"instructions": f"do {kind}"}) for kind in kinds)
    raw = {
        "acknowledgment": "Working on it",
        "subtasks": [{"type": r.type, "params": dict(r.params)} for r in requests],
    }
    return Delegation("Working on it", requests, "call_d", json.dumps(raw))


PROMPT = PromptEpoch("hash-of-the-sessions-prompt", "v-test", "You are the test agent.")


class Agent:
    """A scripted agent: rounds answer from `decide`, subtasks from `subtask`."""

    def __init__(
        self,
        decide: Callable[[RoundInput], Decision],
        subtask: Callable[[Subtask], str] | None = None,
    ):
        self.decide, self.subtask = decide, subtask or (lambda s: f"result of {s.request.type}")
        self.rounds: list[RoundInput] = []

    async def __call__(self, round_input: RoundInput) -> Decision:
        self.rounds.append(round_input)
        return self.decide(round_input)

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        return PROMPT

    async def run_subtask(self, subtask: Subtask, task: Task) -> str:
        return self.subtask(subtask)


class Rig:
    def __init__(
        self,
        agent: Agent,
        settings: RunnerSettings = DEFAULT_RUNNER,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        live: MemoryLiveView | None = None,
        publisher: MemoryPublisher | None = None,
    ) -> None:
        self.agent, self.queue, self.delegations = agent, MemoryQueue([TASK]), MemoryDelegations()
        self.history, self.publisher, self.alerts = (
            MemoryHistory([(TASK.user_message_id, TURN)]),
            publisher or MemoryPublisher(),
            MemoryAlerts(),
        )
        self.runner = TaskRunner(
            RunnerPorts(
                queue=self.queue,
                delegations=self.delegations,
                history=self.history,
                publisher=self.publisher,
                alerts=self.alerts,
                live=live,
            ),
            agent,
            settings=settings,
            clock=clock,
        )

    async def run_subtasks(self) -> None:
        while (claimed := await self.delegations.claim_subtask()) is not None:
            await self.runner.run_subtask(*claimed)


def raising(error: Exception) -> Callable[[object], Decision]:
    def fail(_: object) -> Decision:
        raise error

    return fail


async def test_answered_task_is_stored_published_and_finished() -> None:
    """The reply is stored under task:{id}:reply, published once, and the task finished."""
    rig = Rig(Agent(lambda r: Reply(f"answer to {r.window[-1].text}")))
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.reply_id, "answer to question")]
    assert rig.queue.finished == [TASK.id] and (await rig.history.get(TASK.reply_id)) is not None


async def test_the_replys_posts_are_recorded_by_the_tasks_finish() -> None:
    """A reply is published `finishing`, and what that publish left to record goes with
    the finish (`agent.Delivered`); the failure notice of a failed task is not."""
    rig = Rig(Agent(lambda r: Reply("answer")))
    await rig.runner.run_task(TASK)
    assert rig.queue.delivered == [(TASK.reply_id, None)]
    failing = Rig(Agent(raising(RoundFailed("no"))))
    await failing.runner.run_task(TASK)
    assert failing.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.text("error"))]
    assert failing.queue.delivered == []


async def test_the_round_gets_the_sessions_prompt_read_beside_its_window() -> None:
    """The runner reads the window and the session's pinned prompt side by side (both
    are waited for before the model is asked) and hands the prompt to the round."""
    rig = Rig(Agent(lambda r: Reply("done")))
    await rig.runner.run_task(TASK)
    [round_input] = rig.agent.rounds
    assert round_input.prompt == PROMPT and round_input.window[-1].text == "question"


async def test_a_failed_window_read_leaves_no_prompt_read_running() -> None:
    """The pin read beside a window that could not be read is stopped with it (the task
    is retried as after any failure), and no round is asked."""

    class Unreadable(MemoryHistory):
        async def window(self, task: Task, *, max_chars: int, max_messages: int) -> Window:
            await pinning.wait()  # the pin read is under way
            raise RuntimeError("the history could not be read")

    class SlowPin(Agent):
        async def pin_prompt(self, task: Task) -> PromptEpoch:
            pinning.set()
            await asyncio.Event().wait()
            raise AssertionError("never reached: stopped with the window")

    pinning = asyncio.Event()
    agent, queue = SlowPin(lambda r: Reply("never")), MemoryQueue([TASK])
    runner = TaskRunner(
        RunnerPorts(
            queue=queue,
            delegations=MemoryDelegations(),
            history=Unreadable([(TASK.user_message_id, TURN)]),
            publisher=MemoryPublisher(),
            alerts=MemoryAlerts(),
        ),
        agent,
    )
    await runner.run_task(TASK)
    assert agent.rounds == [] and queue.finished == []
    assert not [t for t in asyncio.all_tasks() if t.get_name() == f"pin-{TASK.id}"]


async def test_a_rerun_publishes_the_stored_reply_without_asking_the_model() -> None:
    """After a crash between storing and posting, the re-run posts the stored text."""
    rig = Rig(Agent(lambda r: Reply("fresh inference")))
    await rig.history.append(
        StoredMessage(TASK.reply_id, TASK.session_id, "assistant", "reply", "stored"),
        answers=TASK.user_message_id,
    )
    await rig.runner.run_task(TASK)
    assert rig.agent.rounds == [] and rig.publisher.posts == [(TASK.reply_id, "stored")]


async def test_a_task_claimed_without_a_stored_reply_does_not_look_for_one() -> None:
    """The claim says whether the task's reply is stored; one that said no goes straight
    to its round (the read that finds a stored reply is made only when it may find one)."""
    rig = Rig(Agent(lambda r: Reply("fresh inference")))
    await rig.history.append(
        StoredMessage(TASK.reply_id, TASK.session_id, "assistant", "reply", "stored"),
        answers=TASK.user_message_id,
    )
    await rig.runner.run_task(dataclasses.replace(TASK, stored_reply=False))
    assert len(rig.agent.rounds) == 1


async def test_delegation_posts_the_ack_runs_subtasks_then_the_next_round_replies() -> None:
    """delegate → acknowledgment → subtasks → round 1 sees the outcomes → final reply."""
    agent = Agent(
        lambda r: (
            delegate("agent", "agent")
            if r.number == 0
            else Reply(f"{len(r.rounds[0].outcomes)} results")
        )
    )
    rig = Rig(agent)
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [
        (TASK.ack_id(0), "Working on it")
    ] and rig.delegations.waiting == [TASK.id]
    await rig.run_subtasks()
    await rig.runner.run_task(RERUN)
    assert rig.publisher.posts[-1] == (TASK.reply_id, "2 results")
    last = agent.rounds[-1]
    assert last.number == 1 and [o.state for o in last.rounds[0].outcomes] == ["done", "done"]


async def test_a_crash_after_recording_the_delegation_does_not_ask_again() -> None:
    """A re-run that finds the round's delegation stored posts its ack and waits; no inference."""
    agent = Agent(lambda r: delegate("agent"))
    rig = Rig(agent)
    await rig.delegations.record(TASK, 0, delegate("agent"), timeout_seconds=60)
    await rig.runner.run_task(RERUN)
    assert agent.rounds == [] and rig.publisher.posts == [(TASK.ack_id(0), "Working on it")]


async def test_the_final_round_gets_final_and_own_acks_are_not_history() -> None:
    """The last allowed round is marked final, and the task's own acks are not in its window."""
    agent = Agent(lambda r: Reply("done") if r.final else delegate("agent"))
    rig = Rig(agent, RunnerSettings(max_rounds=2))
    await rig.runner.run_task(TASK)
    await rig.history.append(
        StoredMessage(TASK.ack_id(0), TASK.session_id, "assistant", "ack", "Working on it"),
        answers=TASK.user_message_id,
    )
    await rig.run_subtasks()
    await rig.runner.run_task(RERUN)
    assert [r.final for r in agent.rounds] == [False, True]
    assert [m.id for m in agent.rounds[1].window] == [TASK.user_message_id]


async def test_a_window_cut_after_a_reply_starts_with_a_turn() -> None:
    """When the budget keeps an earlier reply but not the question it answered, the window
    starts at the next person's turn: a model is never shown a conversation that opens
    with its own message."""
    agent = Agent(lambda r: Reply("ok"))
    rig = Rig(agent, RunnerSettings(history_chars=len(TURN.text) + 40))
    earlier = "T1:C1:0.5"
    rig.history.messages[:0] = [
        (
            earlier,
            StoredMessage(f"task:{earlier}:user", TASK.session_id, "user", "turn", "q" * 500),
        ),
        (
            earlier,
            StoredMessage(
                f"task:{earlier}:reply", TASK.session_id, "assistant", "reply", "an answer"
            ),
        ),
    ]
    await rig.runner.run_task(TASK)
    [round_input] = agent.rounds
    assert [m.id for m in round_input.window] == [TASK.user_message_id]


async def test_failing_and_timed_out_subtasks_are_reported_to_the_model() -> None:
    """A subtask that raises or runs out of time ends failed / timed_out with a message."""

    def work(subtask: Subtask) -> str:
        if subtask.request.type == "broken":
            raise SubtaskFailed("the tool said no")
        if subtask.request.type == "crash":
            raise RuntimeError("bug")
        return "fine"

    rig = Rig(Agent(lambda r: delegate("ok", "broken", "crash"), work))
    await rig.runner.run_task(TASK)
    await rig.run_subtasks()
    assert [rig.delegations.outcomes[(TASK.id, 0, i)] for i in range(3)] == [
        ("done", "fine"),
        ("failed", "the tool said no"),
        ("failed", INTERNAL_ERROR),
    ]


async def test_a_subtask_past_its_time_limit_is_timed_out() -> None:
    """A subtask that does not finish within its timeout ends as timed_out."""

    class Slow(Agent):
        async def run_subtask(self, subtask: Subtask, task: Task) -> str:
            await asyncio.Event().wait()
            return "never"

    rig = Rig(Slow(lambda r: delegate("agent")))
    await rig.runner.run_subtask(
        Subtask(TASK.id, 0, 0, SubtaskRequest("agent", {}), timeout_seconds=0), TASK
    )
    assert rig.delegations.outcomes[(TASK.id, 0, 0)] == ("timed_out", TIMED_OUT)


async def test_models_unavailable_requeues_the_task() -> None:
    """Every slot transiently down: the task goes back to the queue, not failed."""
    rig = Rig(Agent(raising(ModelsUnavailable("all busy", retry_after=12.0))))
    await rig.runner.run_task(TASK)
    assert rig.queue.retried == {TASK.id: 12.0} and not rig.queue.failed and not rig.publisher.posts


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def clocked(agent: Agent, settings: RunnerSettings = DEFAULT_RUNNER) -> Rig:
    """A rig whose runner's clock stands still at NOW."""
    return Rig(agent, settings, clock=lambda: NOW)


def aged(seconds: float, attempts: int = 1) -> Task:
    return dataclasses.replace(TASK, attempts=attempts, created_at=NOW - timedelta(seconds=seconds))


async def test_deferrals_end_after_their_count_with_one_notice() -> None:
    """The max_deferrals-th claim that finds every model down tells the user the models are
    unavailable and fails the task, which frees the thread."""
    settings = RunnerSettings(max_deferrals=3)
    rig = clocked(Agent(raising(ModelsUnavailable("all busy", retry_after=1.0))), settings)
    await rig.runner.run_task(aged(10, attempts=2))
    assert rig.queue.retried == {TASK.id: 1.0} and not rig.publisher.posts
    await rig.runner.run_task(aged(11, attempts=3))
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.unavailable)]
    assert TASK.id in rig.queue.failed


async def test_deferrals_end_after_their_time() -> None:
    """A deferral that would end past max_deferral_seconds after the message arrived is
    not made: the user is told now."""
    settings = RunnerSettings(max_deferral_seconds=600)
    rig = clocked(Agent(raising(ModelsUnavailable("all busy", retry_after=30.0))), settings)
    await rig.runner.run_task(aged(580))
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.unavailable)]
    assert not rig.queue.retried


@pytest.mark.parametrize("retry_after", [86_400.0, 1e303, math.inf])
async def test_a_retry_after_past_the_bound_ends_the_task_at_once(retry_after: float) -> None:
    """`Retry-After: 86400` does not park a thread for a day, and 1e303 (which overflows
    Postgres's interval) does not loop: the user is told at once."""
    rig = clocked(Agent(raising(ModelsUnavailable("down", retry_after=retry_after))))
    await rig.runner.run_task(aged(0))
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.unavailable)]
    assert not rig.queue.retried


async def test_a_nonsense_retry_after_falls_back_to_the_schedule() -> None:
    """A negative or NaN Retry-After is ignored in favour of the runner's own schedule."""
    for retry_after in (-5.0, math.nan, None):
        rig = clocked(Agent(raising(ModelsUnavailable("down", retry_after=retry_after))))
        await rig.runner.run_task(aged(0))
        assert rig.queue.retried == {TASK.id: pytest.approx(180 * 0.9 / 15)}


async def down_until_given_up(rig: Rig, claim_seconds: float) -> list[float]:
    """Claim the task as the queue would while every model stays down, each claim taking
    `claim_seconds`; the age of the message at the start of each claim."""
    starts, age = [], 0.0
    for attempts in range(1, 100):
        starts.append(age)
        age += claim_seconds
        await rig.runner.run_task(aged(age, attempts))
        if TASK.id in rig.queue.failed:
            return starts
        age += rig.queue.retried.pop(TASK.id)
    raise AssertionError("the task was deferred forever")


@pytest.mark.parametrize("claim_seconds", [0.0, 5.0, 15.0])
async def test_without_retry_after_the_tries_are_spread_over_the_window(
    claim_seconds: float,
) -> None:
    """With the defaults, a message is tried 5 times: each wait longer than the one before
    (twice as long when a try takes no time), the last try starting at nine tenths of the
    180 s window however long a try takes."""
    rig = clocked(Agent(raising(ModelsUnavailable("down"))))
    starts = await down_until_given_up(rig, claim_seconds)
    waits = [b - a - claim_seconds for a, b in itertools.pairwise(starts)]
    assert len(starts) == DEFAULT_RUNNER.max_deferrals == 5
    assert all(0 < earlier < later for earlier, later in itertools.pairwise(waits))
    if claim_seconds == 0:
        assert waits == pytest.approx([162 / 15 * 2**n for n in range(4)])
    assert starts[-1] == pytest.approx(162)


async def test_the_person_is_told_once_the_next_try_is_past_the_notice_delay() -> None:
    """The first deferral whose next try comes 30 s or more after the message posts the
    still-trying notice; later ones post nothing new (the outbox keeps it once), and the
    give-up follows it."""
    rig = clocked(Agent(raising(ModelsUnavailable("down"))))
    await rig.runner.run_task(aged(5))  # next try at about 15 s
    assert rig.publisher.posts == []
    await rig.runner.run_task(aged(5 + rig.queue.retried.pop(TASK.id) + 5, attempts=2))
    assert rig.publisher.posts == [(TASK.interim_id, DEFAULT_NOTICES.still_trying)]
    await rig.runner.run_task(aged(100, attempts=4))
    await rig.runner.run_task(aged(170, attempts=5))
    assert rig.publisher.posts == [
        (TASK.interim_id, DEFAULT_NOTICES.still_trying),
        (TASK.failure_id, DEFAULT_NOTICES.unavailable),
    ]


async def test_a_notice_delay_of_zero_tells_the_person_at_the_first_deferral() -> None:
    """THREADGATE_MODELS_DOWN_NOTICE_SECONDS=0: the first deferral posts the notice; one
    override text for failures does not replace it (it is not a failure)."""
    settings = RunnerSettings(
        still_trying_seconds=0, notices=FailureNotices(override="Custom failure text.")
    )
    rig = clocked(Agent(raising(ModelsUnavailable("down", retry_after=1.0))), settings)
    await rig.runner.run_task(aged(0))
    assert rig.publisher.posts == [(TASK.interim_id, DEFAULT_NOTICES.still_trying)]
    assert rig.queue.retried == {TASK.id: 1.0}


async def test_a_still_trying_notice_that_cannot_be_posted_does_not_stop_the_deferral() -> None:
    """Slack refusing the still-trying notice leaves the task deferred, not stuck or
    failed: the next deferral posts it."""

    class Refusing(MemoryPublisher):
        async def publish(self, task: Task, message_id: str, text: str, **kw: object) -> Delivered:
            raise RuntimeError("Slack is away")

    settings = RunnerSettings(still_trying_seconds=0)
    agent = Agent(raising(ModelsUnavailable("down")))
    rig = Rig(agent, settings, clock=lambda: NOW, publisher=Refusing())
    await rig.runner.run_task(aged(0))
    assert TASK.id in rig.queue.retried and not rig.queue.failed


class Stalled(Agent):
    """An agent whose round never ends on its own."""

    async def __call__(self, round_input: RoundInput) -> Decision:
        self.rounds.append(round_input)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_task_past_its_time_limit_runs_no_round() -> None:
    """A task older than task_timeout_seconds when its round would start: no model call,
    the time-limit notice, the task failed."""
    agent = Agent(lambda r: Reply("late"))
    rig = clocked(agent, RunnerSettings(task_timeout_seconds=60))
    await rig.runner.run_task(aged(61))
    assert agent.rounds == []
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.time_limit)]
    assert TASK.id in rig.queue.failed


async def test_a_round_is_cut_at_the_task_time_limit() -> None:
    """A round still running when the task's time is up is cut; nothing is stored."""
    agent = Stalled(lambda r: Reply("never"))
    rig = clocked(agent, RunnerSettings(task_timeout_seconds=60))
    await rig.runner.run_task(aged(59.8))
    assert len(agent.rounds) == 1
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.time_limit)]
    assert await rig.history.get(TASK.reply_id) is None


async def test_credential_refusal_alerts_the_operator_and_tells_the_user() -> None:
    """A refused credential: one alert, the failure notice in the thread, the task failed."""
    error = CredentialRejected(
        "refused", source="gateway", route=Route("openai", "m", 0), status_code=401
    )
    rig = Rig(Agent(raising(error)))
    await rig.runner.run_task(TASK)
    assert rig.alerts.alerts == [error]
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.credential)]
    assert "operators have been alerted" in DEFAULT_NOTICES.credential
    assert TASK.id in rig.queue.failed


async def test_a_notice_never_claims_an_alert_that_was_not_sent() -> None:
    """When no operator could be told (no channel, or the post failed), the user is asked
    to tell the people who run the bot instead."""
    error = CredentialRejected("refused", source="provider", route=Route("openai", "m", 0))
    rig = Rig(Agent(raising(error)))
    rig.alerts.delivered = False
    await rig.runner.run_task(TASK)
    [(_, notice)] = rig.publisher.posts
    assert notice == DEFAULT_NOTICES.credential_unalerted and "alerted" not in notice


async def test_one_configured_notice_replaces_every_kind() -> None:
    """THREADGATE_FAILURE_NOTICE, when set, is what every failed task says."""
    rig = Rig(
        Agent(raising(NonTransientModelError("400"))),
        RunnerSettings(notices=FailureNotices(override="Nope.")),
    )
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.failure_id, "Nope.")]


async def test_other_model_failures_tell_the_user_without_internals() -> None:
    """A non-transient failure posts the configured notice, not the error text."""
    rig = Rig(Agent(raising(NonTransientModelError("400 bad request: secret details"))))
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.error)]
    assert not rig.alerts.alerts and "operators" not in DEFAULT_NOTICES.error


async def test_unexpected_errors_are_retried_with_backoff() -> None:
    """A bug or an outage that is not the model's is retried later, not dropped."""
    rig = Rig(Agent(raising(RuntimeError("slack is down"))))
    await rig.runner.run_task(TASK)
    assert rig.queue.retried == {TASK.id: 2.0} and not rig.publisher.posts


async def test_an_acknowledgment_announces_its_subtasks_and_shows_them_settle() -> None:
    """The ack is published with its subtasks as pending steps; each subtask shows as in
    progress, then complete or error, under that ack; once all have settled, the next
    round publishes the ack again with the final states (completing a live plan)."""
    live = MemoryLiveView()
    agent = Agent(
        lambda r: delegate("agent", "broken") if r.number == 0 else Reply("done"),
        subtask=lambda s: _fail_if(s.request.type == "broken"),
    )
    rig = Rig(agent, live=live)
    await rig.runner.run_task(TASK)
    ack = TASK.ack_id(0)
    assert rig.publisher.steps == [
        (
            ack,
            (
                Step(f"{TASK.id}:0:0", "agent: do agent", "pending"),
                Step(f"{TASK.id}:0:1", "broken: do broken", "pending"),
            ),
        )
    ]
    await rig.run_subtasks()
    shown = [(message_id, step.id, step.state) for message_id, step in live.steps]
    assert shown == [
        (ack, f"{TASK.id}:0:0", "in_progress"),
        (ack, f"{TASK.id}:0:0", "complete"),
        (ack, f"{TASK.id}:0:1", "in_progress"),
        (ack, f"{TASK.id}:0:1", "error"),
    ]
    await rig.runner.run_task(RERUN)
    final = rig.publisher.steps[-1]
    assert final[0] == ack and [(s.title, s.state) for s in final[1]] == [
        ("agent: do agent", "complete"),
        ("broken: do broken", "error"),
    ]
    assert rig.publisher.posts[-1] == (TASK.reply_id, "done")


def _fail_if(broken: bool) -> str:
    if broken:
        raise SubtaskFailed("it broke")
    return "ok"


class WaitingQueue(MemoryQueue):
    """A queue whose workers' waits for work last until cancelled, each one recorded, and
    whose count of dropped wake-ups a test raises."""

    def __init__(self, tasks: list[Task]) -> None:
        super().__init__(tasks)
        self.waiting = asyncio.Event()
        self.dropped = 0

    async def wait_for_work(self, max_wait: float) -> None:
        self.waiting.set()
        await asyncio.Event().wait()

    def dropped_wakeups(self) -> int:
        return self.dropped


@pytest.mark.parametrize("dropped", [False, True])
async def test_after_a_task_a_worker_waits_unless_wake_ups_were_dropped(dropped: bool) -> None:
    """A worker does not look for work after every task: what came meanwhile woke a worker
    (`TaskQueue.finish`, the queue's kept wake-ups). Only when wake-ups were dropped while
    it ran (every worker busy, the bound reached) does it look again at once."""
    second = dataclasses.replace(TASK, id="T1:C1:2.0", session_id="T1:C1:2.0")
    queue = WaitingQueue([TASK, second])

    def decide(round_input: RoundInput) -> Decision:
        queue.dropped += dropped
        return Reply("answer")

    runner = TaskRunner(
        RunnerPorts(
            queue=queue,
            delegations=MemoryDelegations(),
            history=MemoryHistory([(TASK.user_message_id, TURN)]),
            publisher=MemoryPublisher(),
            alerts=MemoryAlerts(),
        ),
        Agent(decide),
        settings=dataclasses.replace(DEFAULT_RUNNER, workers=1),
    )
    runner.start()
    try:
        await asyncio.wait_for(queue.waiting.wait(), timeout=10)
    finally:
        await runner.stop()
    assert queue.finished == ([TASK.id, second.id] if dropped else [TASK.id])
