"""Tool-call stream events in the order the contract promises, whatever order the wire used.

Both wire formats key a call's fragments by index, but servers differ in what comes when:
OpenAI sends the call's `id` and `function.name` on its first fragment only, while some
OpenAI-compatible servers send arguments before the name or repeat the id on every
fragment. A consumer that taps the stream (to show one tool's argument as it is written)
needs to know which tool a fragment belongs to before it sees the fragment, so the readers
hand every fragment to `CallEvents`, which emits, per index: one `ToolCallStart` (once the
call's name is known, or when the wire says the call started), then its `ToolCallDelta`s in
arrival order (fragments that came before the start are held and released with it), then
one `ToolCallEnd`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from agent.models.contract import StreamEvent, ToolCallDelta, ToolCallEnd, ToolCallStart


@dataclass(slots=True)
class _Call:
    id: str = ""
    started: bool = False
    ended: bool = False
    held: list[str] = field(default_factory=list)


class CallEvents:
    """Sequences one response's tool-call fragments into start, deltas, end per index.

    `fallback_id(index)` names a call whose id never arrived (e.g. `call_0`).
    """

    def __init__(self, fallback_id: Callable[[int], str]) -> None:
        self._fallback_id = fallback_id
        self._calls: dict[int, _Call] = {}

    def fragment(
        self,
        index: int,
        *,
        call_id: str | None = None,
        name: str | None = None,
        arguments: str = "",
    ) -> Iterator[StreamEvent]:
        """Events for one fragment of call `index`. The call starts at the first fragment
        carrying a name; its id is the first one seen up to then (later ids are repeats)."""
        call = self._calls.setdefault(index, _Call())
        call.id = call.id or call_id or ""
        if name and not call.started:
            yield from self._start(index, call, name)
        if not arguments:
            return
        if call.started:
            yield ToolCallDelta(index, arguments)
        else:
            call.held.append(arguments)

    def start(self, index: int, call_id: str | None, name: str) -> Iterator[StreamEvent]:
        """The wire says call `index` starts here (Anthropic's `content_block_start`), named
        or not."""
        call = self._calls.setdefault(index, _Call())
        call.id = call.id or call_id or ""
        if not call.started:
            yield from self._start(index, call, name)

    def end(self, index: int) -> Iterator[StreamEvent]:
        """The wire says call `index` is complete; a call never started starts unnamed."""
        call = self._calls.get(index)
        if call is None or call.ended:
            return
        if not call.started:
            yield from self._start(index, call, "")
        call.ended = True
        yield ToolCallEnd(index)

    def finish(self) -> Iterator[StreamEvent]:
        """At the end of a complete stream: end every call still open, in index order."""
        for index in sorted(self._calls):
            yield from self.end(index)

    def _start(self, index: int, call: _Call, name: str) -> Iterator[StreamEvent]:
        call.started = True
        yield ToolCallStart(index, call.id or self._fallback_id(index), name)
        if call.held:
            yield ToolCallDelta(index, "".join(call.held))
            call.held.clear()
