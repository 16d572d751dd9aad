"""Settling the step a round paused at, once people decided (agent/core/approval.py).

Every call of the paused step runs as it would have run then (`agent.rounds.loop.run_work`),
except those that waited for a person:
- an approved call runs through the store's guard (`ApprovalStore.start_call`), so it is
  started at most once, whatever happens after; every later run reads its stored result;
- a denied or timed-out call does not run: its result is a failure that says so, written
  for the model, which goes on without it and tells the person.
The round then goes on after the step (`run_round(so_far=…)`).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.core.approval import ApprovalDecision, ApprovalRequest, ApprovalStore, PausedRound
from agent.models.contract import ToolCall, ToolResultMessage
from agent.rounds.loop import framed, run_work
from agent.rounds.pause import RoundSoFar
from agent.rounds.tools import Toolbox

DECLINED = (
    "Not run: this call needed a person's approval, and the person declined it. Do not call "
    "it again in this task: go on without it, and tell the person what you could not do."
)
TIMED_OUT = (
    "Not run: this call needed a person's approval, and nobody decided within the time "
    "allowed, which counts as declined. Go on without it, and tell the person so."
)
INTERRUPTED = (
    "This call was approved and started, but the gateway stopped while it ran, so its "
    "outcome is unknown: it may or may not have acted. It was not run again (it may act "
    "only once). Tell the person, so they can check."
)
GONE = "Not run: {name} is not available any more. Go on without it, and tell the person."


async def settle_step(paused: PausedRound, toolbox: Toolbox, store: ApprovalStore) -> RoundSoFar:
    """The paused round with the results of its paused step after the step's calls (one
    per call, in call order); approved calls run at most once (module docstring)."""
    so_far = RoundSoFar.load(paused.state)
    by_call = {r.call_id: r for r in paused.requests}
    calls = so_far.paused_calls
    settled = {
        call.id: await _settled(call, by_call[call.id], paused.decisions, toolbox, store)
        for call in calls
        if call.id in by_call
    }
    results = await run_work(toolbox, calls, settled)
    return RoundSoFar((*so_far.tail, *results), so_far.steps + 1, so_far.repairs)


async def _settled(
    call: ToolCall,
    request: ApprovalRequest,
    decisions: Mapping[str, ApprovalDecision],
    toolbox: Toolbox,
    store: ApprovalStore,
) -> ToolResultMessage:
    decision = decisions.get(request.id)
    if decision is None or decision.verdict == "timed_out":
        return ToolResultMessage(call.id, call.name, TIMED_OUT, is_error=True)
    if not decision.approved:
        return ToolResultMessage(call.id, call.name, DECLINED, is_error=True)
    task = toolbox.context.task
    run = await store.start_call(task, request.id)
    if run.state == "interrupted":
        return ToolResultMessage(call.id, call.name, INTERRUPTED, is_error=True)
    if run.state == "done":
        return framed(
            ToolResultMessage(call.id, call.name, run.output, is_error=run.is_error), toolbox
        )
    if call.name in toolbox:
        [result] = await toolbox.run([call])
    else:  # its server went away while the call waited
        result = ToolResultMessage(call.id, call.name, GONE.format(name=call.name), True)
    await store.finish_call(task, request.id, result.content, is_error=result.is_error)
    return framed(result, toolbox)
