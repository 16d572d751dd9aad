"""A `Model` whose answers come from a Python function.

Tests of everything above the model layer (the round loop, the ladder, the gateway) script
the model with it instead of HTTP and timing::

    model = FunctionModel(lambda request: tool_response("final_reply", {"text": "hi"}))
    ...
    assert model.requests[0].tool_choice == "required"

The function may return a `ModelResponse`, an awaitable of one, or raise any `agent.core.errors`
error, which the caller sees as if a provider had raised it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from agent.models.contract import (
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    Watch,
    events_of,
)

if TYPE_CHECKING:
    from agent.core.ports import Showing

ModelFunction: TypeAlias = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]


class FunctionModel(Model):
    """A scripted model that records every request it was asked."""

    def __init__(self, fn: ModelFunction, name: str = "function:test") -> None:
        self.name = name
        self.requests: list[ModelRequest] = []
        self._fn = fn

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        self.requests.append(request)
        result = self._fn(request)
        response = await result if inspect.isawaitable(result) else result
        if watch is not None:
            for event in events_of(response):
                await watch(event)
        return response

    def __repr__(self) -> str:
        return f"FunctionModel(name={self.name!r})"


def text_response(text: str, *, model: str = "function:test") -> ModelResponse:
    """A plain-text answer that ends with `stop`."""
    return ModelResponse(text, (), "stop", Usage(), model)


def tool_response(
    name: str,
    arguments: Mapping[str, Any],
    *,
    call_id: str = "call_1",
    model: str = "function:test",
) -> ModelResponse:
    """An answer consisting of one call of tool `name` with these arguments."""
    call = ToolCall.from_raw(call_id, name, json.dumps(dict(arguments)))
    return ModelResponse("", (call,), "tool_calls", Usage(), model)
