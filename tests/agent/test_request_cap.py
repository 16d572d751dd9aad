"""The cap on model requests per message, and the usage every response is charged.

The meter here is in memory (the Postgres one is tested in tests/storage/test_limits.py);
what is tested is the responder's side: every response is charged, with its tokens, to the
task — in rounds and in subtasks — and at the cap no further request is made.
"""

from __future__ import annotations

from collections import Counter

from agent.core.delegation import RoundInput, Subtask, SubtaskRequest
from agent.core.errors import ModelBudgetExceeded
from agent.core.ports import ModelCharge, StoredMessage, Task
from agent.durable.notices import DEFAULT_NOTICES
from agent.durable.responder import ModelResponder, ResponderPorts, ResponderSettings
from agent.models.contract import ModelRequest, ModelResponse, Usage
from agent.models.function_model import FunctionModel, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.control import Decision
from agent.rounds.settings import RoundSettings
from agent.rounds.subagent import builtin_subtask_types
from agent.rounds.tools import builtin_tools
from tests.agent.test_runner import TASK, Agent, Rig

WINDOW = (StoredMessage("m1", TASK.session_id, "user", "turn", "<turn>now</turn>"),)


class Meter:
    """`UsageMeter` in memory: requests per task, tokens per task."""

    def __init__(self, already: int = 0) -> None:
        self.requests: Counter[str] = Counter({TASK.id: already})
        self.tokens: Counter[tuple[str, str]] = Counter()

    async def record(self, task: Task, charge: ModelCharge) -> int:
        self.requests[task.id] += 1
        self.tokens[task.id, "input"] += charge.input_tokens
        self.tokens[task.id, "output"] += charge.output_tokens
        return self.requests[task.id]


async def _no_sleep(delay: float) -> None:
    return None


def with_usage(response: ModelResponse) -> ModelResponse:
    return ModelResponse(
        response.text, response.tool_calls, response.finish_reason, Usage(100, 7), response.model
    )


def tool_looper() -> FunctionModel:
    """A model that never ends its round: it asks for the time, again and again."""
    return FunctionModel(lambda request: with_usage(tool_response("current_time", {})))


def responder(meter: Meter, *models: FunctionModel, cap: int) -> ModelResponder:
    return ModelResponder(
        AttemptLadder(list(models), sleep=_no_sleep),
        tools=builtin_tools(),
        subtasks=builtin_subtask_types(),
        ports=ResponderPorts(meter=meter),
        settings=ResponderSettings(round=RoundSettings(max_steps=1000), max_model_requests=cap),
    )


async def run_round(respond: ModelResponder) -> Decision:
    return await respond(RoundInput(TASK, WINDOW))


async def test_a_model_that_keeps_calling_tools_stops_at_the_cap() -> None:
    """Exactly `cap` requests are made and charged; the next one is refused, and no other
    model slot is tried (the cap is the message's, not the model's)."""
    meter, looper, fallback = Meter(), tool_looper(), tool_looper()
    respond = responder(meter, looper, fallback, cap=5)
    try:
        await run_round(respond)
    except ModelBudgetExceeded as exc:
        assert "5" in str(exc)
    else:
        raise AssertionError("the round was not stopped")
    assert len(looper.requests) == 5 and fallback.requests == []
    assert meter.requests[TASK.id] == 5
    assert meter.tokens[TASK.id, "input"] == 500 and meter.tokens[TASK.id, "output"] == 35


async def test_the_count_is_the_tasks_across_rounds() -> None:
    """A round of a task that already used its allowance (earlier rounds, other replicas)
    is stopped on the first count it reads, with that answer unused."""
    meter, model = (
        Meter(already=5),
        FunctionModel(lambda request: with_usage(tool_response("final_reply", {"text": "done"}))),
    )
    try:
        decision = await run_round(responder(meter, model, cap=5))
    except ModelBudgetExceeded:
        decision = None
    assert decision is None
    assert meter.requests[TASK.id] == 6


async def test_a_round_under_the_cap_is_charged_and_answers() -> None:
    meter, model = (
        Meter(),
        FunctionModel(lambda request: with_usage(tool_response("final_reply", {"text": "done"}))),
    )
    decision = await run_round(responder(meter, model, cap=5))
    assert decision is not None and meter.requests[TASK.id] == 1
    assert meter.tokens[TASK.id, "input"] == 100


async def test_subtask_requests_count_for_their_task() -> None:
    """The built-in sub-agent's requests are charged to the task that delegated."""
    meter = Meter()

    def answer(request: ModelRequest) -> ModelResponse:
        return with_usage(tool_response("final_reply", {"text": "found"}))

    model = FunctionModel(answer)
    respond = responder(meter, model, cap=5)
    subtask = Subtask(TASK.id, 0, 0, SubtaskRequest("agent", {"instructions": "look"}))
    await respond.run_subtask(subtask, TASK)
    assert meter.requests[TASK.id] == len(model.requests) >= 1


async def test_the_runner_tells_the_user_the_message_used_up_its_allowance() -> None:
    def over(_: RoundInput) -> Decision:
        raise ModelBudgetExceeded("the task made 60 model requests, its limit is 60")

    rig = Rig(Agent(over))
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.limit)]
    assert "allowance" in DEFAULT_NOTICES.limit
    assert TASK.id in rig.queue.failed
