"""Memory in the agent: a round is asked under its session's pinned prompt, its decision
says which prompt and route produced it, and pinned messages are marked for the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from agent.core.delegation import RoundInput
from agent.core.errors import NonTransientModelError, Route
from agent.core.ports import AnswerOrigin, Overflow, PromptEpoch, StoredMessage, Summary, Task
from agent.durable.compaction import Compaction
from agent.durable.responder import ModelResponder, ResponderPorts, ResponderSettings
from agent.durable.runner import RunnerPorts, RunnerSettings, TaskRunner
from agent.models.contract import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    UserMessage,
)
from agent.models.function_model import FunctionModel, text_response, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.control import Decision, Reply
from agent.rounds.prompt import PINNED_FIRST, prompt_epoch, system_prompt, transcript
from agent.rounds.references import ReferenceCatalog
from agent.rounds.subtask_types import SubtaskRegistry
from tests.agent.memory import (
    MemoryAlerts,
    MemoryDelegations,
    MemoryHistory,
    MemoryPublisher,
    MemoryQueue,
)
from tests.agent.test_responder import TASK, WINDOW, _no_sleep, scripted
from tests.agent.test_runner import PROMPT, TURN, Agent, delegate
from tests.agent.test_runner import TASK as RUN

OLD = prompt_epoch("You are the prompt this thread started with.")


class PinnedMemory:
    """A session pinned to OLD; remembers what was stamped."""

    def __init__(self) -> None:
        self.asked: list[PromptEpoch] = []

    async def pin_prompt(self, session_id: str, current: PromptEpoch) -> PromptEpoch:
        self.asked.append(current)
        return OLD

    async def stamp(self, message_id: str, origin: AnswerOrigin) -> None:
        raise AssertionError("the responder stores nothing")

    async def stamp_subtask(
        self, task_id: str, round_number: int, index: int, attempt: int, epoch: str
    ) -> None:
        raise AssertionError("no subtask runs here")


def replying_hi(seen: list[ModelRequest]) -> Callable[[ModelRequest], ModelResponse]:
    """A model that answers every request with a `final_reply`, noting it in `seen`."""

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return tool_response("final_reply", {"text": "hi"})

    return answer


async def test_a_round_is_asked_under_the_sessions_pinned_prompt() -> None:
    """The system prompt is the session's (OLD), not this deployment's; the deployment's is
    what a new session would be pinned to."""
    seen: list[ModelRequest] = []
    memory = PinnedMemory()
    responder = ModelResponder(
        AttemptLadder([FunctionModel(replying_hi(seen))], sleep=_no_sleep),
        ports=ResponderPorts(memory=memory),
        settings=ResponderSettings(instructions="Be brief."),
    )
    decision = await responder(RoundInput(TASK, WINDOW))
    assert seen[0].messages[0] == SystemMessage(OLD.text)
    assert memory.asked == [responder.epoch_of(TASK)]
    assert memory.asked[0].text == system_prompt(SubtaskRegistry(), "Be brief.")
    assert decision.origin is not None and decision.origin.prompt_epoch == OLD.hash


async def test_a_round_handed_its_sessions_prompt_does_not_read_it_again() -> None:
    """The runner reads the pinned prompt beside the window (`RoundInput.prompt`): the
    round is asked under it, with no second read of the memory."""
    seen: list[ModelRequest] = []
    memory = PinnedMemory()
    responder = ModelResponder(
        AttemptLadder([FunctionModel(replying_hi(seen))], sleep=_no_sleep),
        ports=ResponderPorts(memory=memory),
    )
    assert await responder.pin_prompt(TASK) == OLD and len(memory.asked) == 1
    pinned = replace(responder.epoch_of(TASK), hash="old", text=OLD.text)  # the same offer
    decision = await responder(RoundInput(TASK, WINDOW, prompt=pinned))
    assert seen[0].messages[0] == SystemMessage(OLD.text) and len(memory.asked) == 1
    assert decision.origin is not None and decision.origin.prompt_epoch == "old"


async def test_a_round_handed_an_epoch_with_another_offer_asks_the_memory() -> None:
    """An epoch read beside the window that offers other tools than this round's (a
    deploy in between) is not used as it is: the memory decides (a new epoch)."""
    seen: list[ModelRequest] = []
    memory = PinnedMemory()
    responder = ModelResponder(
        AttemptLadder([FunctionModel(replying_hi(seen))], sleep=_no_sleep),
        ports=ResponderPorts(memory=memory),
    )
    stale = replace(responder.epoch_of(TASK), hash="stale", offer_hash="another offer")
    await responder(RoundInput(TASK, WINDOW, prompt=stale))
    assert memory.asked == [responder.epoch_of(TASK)]


async def test_a_decision_names_the_route_that_answered() -> None:
    """When the primary fails for good, the fallback's route (slot 1) is the origin."""
    broken = scripted(NonTransientModelError("bad request"))
    fallback = FunctionModel(lambda r: tool_response("final_reply", {"text": "ok"}))
    fallback.name = "anthropic:claude-test"
    responder = ModelResponder(AttemptLadder([broken, fallback], sleep=_no_sleep))
    decision = await responder(RoundInput(TASK, WINDOW))
    assert decision.origin == AnswerOrigin(
        responder.epoch_of(TASK).hash, Route("anthropic", "claude-test", 1)
    )


def test_pinned_messages_are_marked_and_a_leading_answer_gets_a_note() -> None:
    """A pinned message carries the marker; a window that starts with our pinned answer
    starts with a user message all the same (Anthropic refuses anything else)."""
    window = (
        StoredMessage("a", "s1", "assistant", "reply", "the plan: ship friday", pinned=True),
        StoredMessage("m2", "s1", "user", "turn", "<turn>now</turn>"),
    )
    round_input = RoundInput(TASK, window)
    messages = transcript(round_input, ReferenceCatalog.from_window(window), SubtaskRegistry())
    assert messages[1] == UserMessage(PINNED_FIRST.rendered())
    assert messages[1].text.startswith('<runtime source="pinned_first">')
    assert messages[2] == AssistantMessage("[pinned] [ref 1] the plan: ship friday")
    assert messages[3] == UserMessage("[ref 2] <turn>now</turn>")


class Summaries:
    """A store whose overflow is fixed; remembers what was stored."""

    def __init__(self, overflow: Overflow | None) -> None:
        self._overflow = overflow
        self.stored: list[Summary] = []
        self.epochs: list[PromptEpoch] = []  # the epochs begun with them

    async def overflow(
        self, task: Task, *, edge_id: str, max_chars: int, max_messages: int
    ) -> Overflow | None:
        return self._overflow

    async def store_summary(self, session_id: str, summary: Summary, epoch: PromptEpoch) -> None:
        self.stored.append(summary)
        self.epochs.append(epoch)


DROPPED = Overflow(1, 7, None, [StoredMessage("old", "s1", "user", "turn", "<turn>old</turn>")])


async def test_a_summary_that_cannot_be_had_is_counted_and_changes_nothing() -> None:
    """The summarizer failing (here: no usable text on the only slot) is no failure of the
    task: nothing is stored, `failed` is observed."""
    outcomes: list[str] = []
    responder = ModelResponder(AttemptLadder([scripted(text_response(""))], sleep=_no_sleep))
    store = Summaries(DROPPED)
    compaction = Compaction(store, responder.ask_text, epoch=OLD, observe=outcomes.append)
    assert not await compaction(TASK, WINDOW)
    assert store.stored == [] and outcomes == ["failed"]


async def test_nothing_dropped_asks_nothing() -> None:
    """A window that still shows everything past the latest summary is left alone."""
    asked: list[object] = []

    async def ask(task: Task, messages: object, *, max_output_tokens: int) -> str:
        asked.append(messages)
        return "never"

    shown_again = Overflow(1, 7, None, list(WINDOW[:1]))
    for overflow in (None, shown_again):
        assert not await Compaction(Summaries(overflow), ask, epoch=OLD)(TASK, WINDOW)
    assert asked == []


async def test_a_summary_covers_the_overflow_and_re_pins_the_prompt() -> None:
    """The summary is stored with the span it covers, and with it (one call, one
    transaction in storage) the session begins this deployment's epoch."""
    responder = ModelResponder(AttemptLadder([scripted(text_response("S"))], sleep=_no_sleep))
    store = Summaries(DROPPED)
    compaction = Compaction(store, responder.ask_text, epoch=OLD)
    assert await compaction(TASK, WINDOW)
    assert store.stored == [Summary(1, 7, "S")] and store.epochs == [OLD]


class CountingSummaries(Summaries):
    """Counts the reads of what the window dropped."""

    reads = 0

    async def overflow(
        self, task: Task, *, edge_id: str, max_chars: int, max_messages: int
    ) -> Overflow | None:
        self.reads += 1
        return await super().overflow(
            task, edge_id=edge_id, max_chars=max_chars, max_messages=max_messages
        )


# Three older turns: with `history_chars=150`, a window of RUN's thread leaves them out.
EARLIER = [StoredMessage(f"old{n}", RUN.session_id, "user", "turn", "x" * 100) for n in range(3)]


async def summarize(task: Task, messages: object, *, max_output_tokens: int) -> str:
    return "the summary"


def compacting_runner(history: MemoryHistory, store: Summaries, agent: Agent) -> TaskRunner:
    """A runner for RUN whose window budget cuts EARLIER, compacting into `store`."""
    return TaskRunner(
        RunnerPorts(
            queue=MemoryQueue([RUN]),
            delegations=MemoryDelegations(),
            history=history,
            publisher=MemoryPublisher(),
            alerts=MemoryAlerts(),
        ),
        agent,
        settings=RunnerSettings(history_chars=150),
        compaction=Compaction(store, summarize, epoch=OLD),
    )


async def test_the_runner_compacts_only_a_window_the_budget_cut() -> None:
    """A thread whose window shows everything is not read again for what it dropped (the
    common case: one statement less per task); a thread the budget cut is."""
    for history, reads in (
        (MemoryHistory([(RUN.user_message_id, TURN)]), 0),
        (MemoryHistory([(m.id, m) for m in EARLIER] + [(RUN.user_message_id, TURN)]), 1),
    ):
        store = CountingSummaries(None)
        agent = Agent(lambda r: Reply("done"))
        await compacting_runner(history, store, agent).run_task(RUN)
        assert store.reads == reads
        [round_input] = agent.rounds
        assert round_input.prompt == PROMPT  # read beside the window; nothing compacted


async def test_after_a_compaction_the_round_reads_the_sessions_prompt_anew() -> None:
    """A compaction re-pins the session's prompt: the round is not handed the one read
    beside the window before it (None: the responder reads it)."""
    store, agent = Summaries(DROPPED), Agent(lambda r: Reply("done"))
    history = MemoryHistory([(m.id, m) for m in EARLIER] + [(RUN.user_message_id, TURN)])
    await compacting_runner(history, store, agent).run_task(RUN)
    assert store.stored != []  # it did compact
    [round_input] = agent.rounds
    assert round_input.prompt is None


class Stamps(PinnedMemory):
    """Records the stamps the runner makes."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[tuple[str, AnswerOrigin]] = []

    async def stamp(self, message_id: str, origin: AnswerOrigin) -> None:
        self.stamps.append((message_id, origin))


async def test_the_runner_stamps_each_answer_it_stored_with_its_origin() -> None:
    """The acknowledgment of a delegation is stamped, and the reply stored, with the origin
    their round reported."""
    first = AnswerOrigin(OLD.hash, Route("openai", "m", 0))
    second = AnswerOrigin(OLD.hash, Route("anthropic", "c", 1))

    def decide(r: RoundInput) -> Decision:
        if r.number == 0:
            return replace(delegate("agent"), origin=first)
        return Reply("done", origin=second)

    memory, history = Stamps(), MemoryHistory([(RUN.user_message_id, TURN)])
    delegations = MemoryDelegations()
    runner = TaskRunner(
        RunnerPorts(
            queue=MemoryQueue([RUN]),
            delegations=delegations,
            history=history,
            publisher=MemoryPublisher(),
            alerts=MemoryAlerts(),
            memory=memory,
        ),
        Agent(decide),
    )
    await runner.run_task(RUN)
    while (claimed := await delegations.claim_subtask()) is not None:
        await runner.run_subtask(*claimed)
    await runner.run_task(replace(RUN, attempts=2))  # claimed again once its subtasks ended
    assert memory.stamps == [(RUN.ack_id(0), first)]
    assert history.origins == {RUN.reply_id: second}
