"""One round: ask the model until it ends the round through a control tool.

Each step the model answers with tool calls, and the step is one of:

- **a decision**: a control tool was called (and no work tool, see below); the first
  control in precedence order that was called decides (`delegate` before `final_reply`),
  its `select` picks the call that counts and its `parse` turns it into the round's
  `Decision`. The round ends; the other calls of the step need no results. A reply also
  keeps the document passages the provider cited in that answer's text (`with_passages`).
- **work**: work tools were called. They run (concurrently, see `agent.rounds.tools`), their
  results are fed back — each framed as data, not instructions (`agent.rounds.framing`) —
  and the model is asked again. At most `max_steps` work steps run
  per round.
- **a pause**: work tools were called, and some need a person's approval first
  (`Toolbox.needs_approval`). Nothing of the step runs; the round ends `Paused`, with
  everything it had (agent/rounds/pause.py) so that its next run goes on from this step
  (`so_far`) once people decided (agent/core/approval.py).
- **a repair**: prose without a tool call, a call to a tool that does not exist, a control
  call `select` or `parse` rejects, work asked for after the step budget is spent, or an
  answer the output limit cut off (`finish_reason` `length`: never run, never shown). The
  model is told what was wrong — as a failed tool result for every call of the step, or a
  runtime note for prose — and asked again. After `max_repairs` repairs the round fails
  with `RoundFailed` and the attempt ladder decides what happens next. When the step made
  several control calls, the repair quotes the one that counted (precedence, then the
  tool's `select`) in every control call's result: the model cannot be expected to know
  which of its calls was read.

A step that mixes work tools and a control call runs **the work, not the control**: the
control call was written before the model saw the results it asked for, so the answer it
carries may be premised on them. The control call gets a "not run" result saying to call
it again after reading the results. Once the step budget is spent, work calls are refused
and a control call in the same step decides as usual.

Repairs and work steps have separate bounds: a model that reads the thread eight times
has not misbehaved, and one that keeps writing prose should not get more room because it
also used tools.

With a `Steer` (the `steer` queue mode, agent/rounds/steering.py), the thread's new
messages are taken after each work step, before the model is asked again, and added as
turns; the reply then says it answers them too (`Reply.steered`).

With a `Draft`, the reply is shown while the model writes it (`agent.rounds.live_reply`);
every step that does not end as the round's reply — work, a repair, a delegation, an
attempt that fails — discards what was shown. Each model request is told the draft's
`showing`: its stream is read less often once the reply shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias, TypeVar

from agent.core.approval import GatedCall, Paused
from agent.core.citations import Citation
from agent.core.errors import ControlCallError, RoundFailed
from agent.core.notes import RuntimeNote
from agent.core.ports import Draft
from agent.core.text import storable_text
from agent.models.contract import (
    AssistantMessage,
    CacheHint,
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agent.rounds.citations import Citable
from agent.rounds.control import MAX_CITATIONS, ControlTool, Decision, Reply, declared
from agent.rounds.framing import frame_output
from agent.rounds.live_reply import ReplyTap
from agent.rounds.pause import RoundSoFar, round_state
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings
from agent.rounds.steering import Steer
from agent.rounds.tools import Toolbox

T = TypeVar("T")

PROSE_NOTE = RuntimeNote(
    "repair",
    "Your last message was not shown to anyone. End this round by calling one of the tools "
    "you were given; to answer the user, call final_reply.",
).rendered()
NOT_RUN = "Not run: another call in the same step was rejected. Fix that call and try again."
CONTROL_DEFERRED = (
    "Not run: you called work tools in the same step, and this call was written before you "
    "saw their results. Read the results, then call {name} again."
)
CUT_OFF = (
    "Not run: your answer was cut off at the output limit{limit} before it was complete, "
    "so nothing was run or shown to anyone. Call {controls} again with a shorter answer: "
    "keep to what the question needs, summarise instead of listing everything."
)
# The results of a step's control calls when the one that counted was rejected.
CHOSEN = "Of the {count} control calls in this step, this one counted: {call}. It was rejected: "
OTHER_CONTROL = (
    "Not run: of the {count} control calls in this step only one counts, {call}, and it was "
    "rejected (its result says why). Fix that call and try again."
)
# How much of a call's arguments a repair quotes.
QUOTE_CHARS = 300
STEPS_SPENT = (
    "Not run: this round has used all of its work steps. End the round now by "
    "calling {controls} with what you have."
)


@dataclass(frozen=True, slots=True)
class _Work:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class _Repair:
    feedback: list[ModelMessage]


Step: TypeAlias = Decision | _Work | _Repair


async def run_round(
    model: Model,
    messages: Sequence[ModelMessage],
    controls: Sequence[ControlTool],
    settings: RoundSettings = DEFAULT_ROUND,
    *,
    toolbox: Toolbox | None = None,
    draft: Draft | None = None,
    citable: Citable | None = None,
    so_far: RoundSoFar | None = None,
    cache: CacheHint | None = None,
    steer: Steer | None = None,
) -> Decision:
    """Run one round on `model` and return the decision of its control call; with a
    `draft`, the reply is shown while it is written. What the model is shown (the
    messages, then each work result) is noted in `citable`, which `final_reply` checks
    its citations against. `so_far`: the round continues after these messages of its
    own (a paused round, its paused step settled: agent/rounds/resume.py). `cache`: every
    request of the round carries it (agent/rounds/caching.py). `steer`: the thread's new
    messages are taken after each work step (module docstring)."""
    seen = citable if citable is not None else Citable()
    seen.note(messages)
    start = so_far or RoundSoFar()
    seen.note(start.tail)
    asked = _Asked(controls, settings, toolbox, seen, start, cache, steer)
    if draft is None:
        return await _run_round(model, messages, asked, None)
    try:
        decision = await _run_round(model, messages, asked, draft)
    except BaseException:
        await draft.discard()
        raise
    if not isinstance(decision, Reply):
        await draft.discard()
    return decision


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a round is run with besides its model, messages and draft."""

    controls: Sequence[ControlTool]
    settings: RoundSettings
    toolbox: Toolbox | None
    citable: Citable
    start: RoundSoFar
    cache: CacheHint | None
    steer: Steer | None


async def _run_round(
    model: Model, messages: Sequence[ModelMessage], asked: _Asked, draft: Draft | None
) -> Decision:
    settings = asked.settings
    steered = asked.steer.turns if asked.steer else ()
    conversation = [*messages, *asked.start.tail, *steered]
    tools = offered(asked.controls, asked.toolbox)
    repairs, steps = asked.start.repairs, asked.start.steps
    # The draft says when it shows, and the model's stream slows then (Model.request).
    showing = draft.showing if draft is not None else None
    while True:
        tap = ReplyTap(draft) if draft is not None else None
        request = _request(conversation, tools, settings, asked.cache)
        response = await model.request(request, watch=tap, showing=showing)
        conversation.append(AssistantMessage(response.text, response.tool_calls))
        step = decide(
            response,
            asked.controls,
            asked.toolbox,
            steps_left=settings.max_steps - steps,
            output_limit=settings.max_output_tokens,
        )
        if draft is not None and tap is not None and tap.shown and not isinstance(step, Reply):
            # Shown while it was written, but the step is not the reply: take it back.
            await draft.discard()
        if isinstance(step, _Work):
            own = conversation[len(messages) :]
            if (paused := _paused(asked, step, own, steps, repairs)) is not None:
                return paused
            conversation.extend(await _worked(asked, step))
            steps += 1
            continue
        if not isinstance(step, _Repair):
            return _answered(asked, step, response)
        repairs += 1
        if repairs > settings.max_repairs:
            raise RoundFailed(
                f"{model.name} did not end the round with a valid control call "
                f"after {settings.max_repairs} repairs."
            )
        conversation.extend(step.feedback)


def _paused(
    asked: _Asked, step: _Work, own: Sequence[ModelMessage], steps: int, repairs: int
) -> Paused | None:
    """The round paused at this work step when a call of it needs approval, else None."""
    toolbox = asked.toolbox
    assert toolbox is not None  # work is only recognised when there is a toolbox
    gated = [c for c in step.calls if toolbox.needs_approval(c.name)]
    if not gated:
        return None
    # Taken turns are covered: the next run reads them from its window.
    tail = [m for m in own if not (asked.steer and asked.steer.took(m))]
    return Paused(
        round_state(tail, steps=steps, repairs=repairs, unkept=toolbox.unkept),
        tuple(GatedCall(c.id, c.name, c.raw_arguments) for c in gated),
    )


async def _worked(asked: _Asked, step: _Work) -> list[ModelMessage]:
    """The step's results, then the turns steering took meanwhile (noted as seen)."""
    assert asked.toolbox is not None
    results = await _run_work(asked.toolbox, step.calls)
    if asked.steer is not None:
        results.extend(await asked.steer.new_turns())
    asked.citable.note(results)
    return results


def _answered(asked: _Asked, step: Decision, response: ModelResponse) -> Decision:
    """The round's decision with the passages its answer cited, and the newest turn it
    answers when it took new ones."""
    if isinstance(step, Reply) and response.citations:
        step = with_passages(step, asked.citable.cited_passages(response.citations))
    if isinstance(step, Reply) and asked.steer is not None and asked.steer.taken:
        step = replace(step, steered=asked.steer.taken)
    return step


def with_passages(reply: Reply, passages: Sequence[Citation]) -> Reply:
    """The reply with the passages the provider cited in the answer's text (Anthropic's
    document citations) after its own citations, each once, within the bound of one
    reply's sources."""
    cited = tuple(dict.fromkeys((*reply.citations, *passages)))[:MAX_CITATIONS]
    return replace(reply, citations=cited)


def offered(controls: Sequence[ControlTool], toolbox: Toolbox | None) -> tuple[ToolSpec, ...]:
    """What a round offers the model, in the order the request lists it: the controls as
    declared (`final_reply` first, agent.rounds.control), then the work tools."""
    return declared(controls) + (toolbox.specs if toolbox else ())


def _request(
    conversation: list[ModelMessage],
    tools: tuple[ToolSpec, ...],
    settings: RoundSettings,
    cache: CacheHint | None,
) -> ModelRequest:
    return ModelRequest(
        tuple(conversation),
        tools=tools,
        tool_choice="required",
        max_output_tokens=settings.max_output_tokens,
        temperature=settings.temperature,
        cache=cache,
    )


def decide(
    response: ModelResponse,
    controls: Sequence[ControlTool],
    toolbox: Toolbox | None,
    *,
    steps_left: int,
    output_limit: int | None = None,
) -> Step:
    """What this step is: the round's decision, work to run, or a repair to ask for."""
    calls = response.tool_calls
    if response.finish_reason == "length":
        # The output limit cut the answer: whatever the calls carry is incomplete (a cut
        # reply can even be valid JSON), so nothing of this step runs or reaches anyone.
        return _cut_off(calls, controls, output_limit)
    if not calls:
        return _Repair([UserMessage(PROSE_NOTE)])
    by_name = {c.spec.name: c for c in controls}
    work_names = toolbox.names if toolbox else frozenset()
    unknown = [c for c in calls if c.name not in by_name and c.name not in work_names]
    if unknown:
        known = sorted({*by_name, *work_names})
        return _Repair(_feedback(calls, {c.id: _unknown_tool(c, known) for c in unknown}))
    work = [call for call in calls if call.name in work_names]
    if work and steps_left > 0:
        return _Work(calls)
    # Controls are offered in precedence order: the first one called decides the step.
    control = next((c for c in controls if any(call.name == c.spec.name for call in calls)), None)
    if control is None:
        spent = STEPS_SPENT.format(controls=" or ".join(by_name))
        return _Repair(_feedback(calls, dict.fromkeys((c.id for c in work), spent)))
    return _control_step(control, calls, [c for c in calls if c.name in by_name])


def _control_step(
    control: ControlTool, calls: Sequence[ToolCall], control_calls: Sequence[ToolCall]
) -> Step:
    own = [call for call in calls if call.name == control.spec.name]
    try:
        chosen = control.select(own)
    except ControlCallError as exc:
        return _Repair(_feedback(calls, dict.fromkeys((c.id for c in own), str(exc))))
    try:
        return control.parse(chosen)
    except ControlCallError as exc:
        return _Repair(_feedback(calls, _rejected(chosen, str(exc), control_calls)))


def _rejected(chosen: ToolCall, error: str, control_calls: Sequence[ToolCall]) -> dict[str, str]:
    """The results of a step whose chosen control call was rejected: its error, and, when
    the step made several control calls, the chosen one quoted in each of theirs."""
    count = len(control_calls)
    if count < 2:
        return {chosen.id: error}
    quote = _quote(chosen)
    results = {c.id: OTHER_CONTROL.format(count=count, call=quote) for c in control_calls}
    return results | {chosen.id: CHOSEN.format(count=count, call=quote) + error}


def _quote(call: ToolCall) -> str:
    """A call as a repair quotes it: its name and (the start of) its arguments."""
    arguments = storable_text(call.raw_arguments)
    if len(arguments) > QUOTE_CHARS:
        arguments = arguments[: QUOTE_CHARS - 1] + "…"
    return f"{call.name} with {arguments}"


async def _run_work(toolbox: Toolbox, calls: Sequence[ToolCall]) -> list[ModelMessage]:
    return await run_work(toolbox, calls)


async def run_work(
    toolbox: Toolbox,
    calls: Sequence[ToolCall],
    settled: Mapping[str, ToolResultMessage] | None = None,
) -> list[ModelMessage]:
    """Results of a step's work calls, each framed as data (`agent.rounds.framing`); its
    control calls are deferred, not run. A call in `settled` (by call id) is not run: its
    result is given (a paused step's approval calls, agent/rounds/resume.py)."""
    given = settled or {}
    work = [call for call in calls if call.name in toolbox and call.id not in given]
    results = {r.call_id: framed(r, toolbox) for r in await toolbox.run(work)} | dict(given)
    return [
        results.get(call.id)
        or ToolResultMessage(
            call.id, call.name, CONTROL_DEFERRED.format(name=call.name), is_error=True
        )
        for call in calls
    ]


def _cut_off(
    calls: Sequence[ToolCall], controls: Sequence[ControlTool], output_limit: int | None
) -> _Repair:
    limit = f" ({output_limit} tokens)" if output_limit else ""
    note = CUT_OFF.format(limit=limit, controls=" or ".join(c.spec.name for c in controls))
    if not calls:
        return _Repair([UserMessage(RuntimeNote("repair", note).rendered())])
    return _Repair(_feedback(calls, dict.fromkeys((c.id for c in calls), note)))


def framed(result: ToolResultMessage, toolbox: Toolbox) -> ToolResultMessage:
    """A work tool's result as the model reads it: inside a frame that says it is data,
    with turn tags escaped unless they are the gateway's (`WorkTool.shows_turns`).
    Failures are framed too, turns escaped: an exception's message may quote anything."""
    keep_turns = toolbox.shows_turns(result.name) and not result.is_error
    return ToolResultMessage(
        result.call_id,
        result.name,
        frame_output(result.name, result.content, keep_turns=keep_turns),
        is_error=result.is_error,
        images=result.images,
        documents=result.documents,
    )


def _unknown_tool(call: ToolCall, known: Sequence[str]) -> str:
    return f"There is no tool named {call.name!r}. The tools you can call are: {', '.join(known)}."


def _feedback(calls: Sequence[ToolCall], errors: dict[str, str]) -> list[ModelMessage]:
    """A result for every call of the step (providers require one per call id)."""
    return [
        ToolResultMessage(call.id, call.name, errors.get(call.id, NOT_RUN), is_error=True)
        for call in calls
    ]
