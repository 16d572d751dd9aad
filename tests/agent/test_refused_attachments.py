"""How far a refused attachment is withheld (issue 47, item 2), against the loopback
vendors: a picture the provider names is withheld from the whole task and marked; one it
does not name is pinned on the only picture that could have caused it, or else withheld
from that route alone and marked nowhere; a tool's picture, known by its bytes, is withheld
from every later request of the task."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from agent import Image, Model, ProviderSettings, Route, RouteConfig, open_route
from agent.models.contract import (
    AssistantMessage,
    ModelRequest,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agent.models.task_model import TaskModel, Withheld, WithheldByTask
from tests.fakes.anthropic_api import AnthropicServer, Message
from tests.fakes.openai_api import Completion, OpenAIServer

PNG = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"p" * 16, "chart.png", key="m1#1")
OTHER_PNG = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"q" * 16, "map.png", key="m1#3")
# A PNG by its name and type, not by its bytes: what a provider refuses.
BROKEN = Image("image/png", b"JFIF not a png at all", "broken.png", key="m1#2")


def asked(*images: Image) -> ModelRequest:
    turn = UserMessage("<turn>what is this?</turn>", images)
    return ModelRequest((SystemMessage("be brief"), turn), max_output_tokens=100)


def tool_said(picture: Image) -> ModelRequest:
    """A round's step after a tool returned `picture` (not stored: no key)."""
    call = ToolCall("call_1", "fake__screenshot", {})
    result = ToolResultMessage("call_1", "fake__screenshot", "the shop", images=(picture,))
    turn = UserMessage("<turn>what does the shop look like?</turn>")
    messages = (SystemMessage("be brief"), turn, AssistantMessage("", (call,)), result)
    return ModelRequest(messages, max_output_tokens=100)


@dataclass
class Refusals:
    """`AttachmentRefusals` in memory: what the task's models recorded."""

    refused: list[tuple[tuple[str, ...], Route, str]] = field(default_factory=list)

    async def refuse(self, keys: Sequence[str], *, route: Route, reason: str) -> None:
        self.refused.append((tuple(keys), route, reason))


@pytest.fixture
async def opened() -> AsyncIterator[list[Model]]:
    models: list[Model] = []
    yield models
    for model in models:
        await model.aclose()


def route(models: list[Model], vendor: str, url: str, name: str = "vision-model") -> Model:
    model = open_route(
        RouteConfig(vendor, name, url), index=len(models), settings=ProviderSettings(stream=False)
    )
    models.append(model)
    return model


async def test_a_picture_the_route_took_before_is_not_suspected(opened: list[Model]) -> None:
    """OpenAI's 400 for a bad picture says not which. Before: every picture of the request
    was withheld and marked, the good one with the broken one. Now the picture this route
    answered with earlier in the task cannot be it: the broken one alone is withheld and
    marked, and the retry still carries the good one."""
    async with OpenAIServer() as server:
        server.default = lambda seen: Completion(text="answered")
        refusals = Refusals()
        model = TaskModel(route(opened, "openai", server.url), refusals=refusals)
        await model.request(asked(PNG))
        await model.request(asked(PNG, BROKEN))
    assert [r.images() for r in server.requests] == [
        [("image/png", PNG.data)],
        [("image/png", PNG.data), ("image/png", BROKEN.data)],
        [("image/png", PNG.data)],
    ]
    [(keys, _, reason)] = refusals.refused
    assert keys == ("m1#2",) and reason == "it could not be read"


async def test_a_refusal_nobody_can_pin_withholds_from_that_route_only(
    opened: list[Model],
) -> None:
    """Two pictures neither route has seen, and OpenAI's 400 that names none: both are
    withheld from OpenAI for the rest of the task and neither is marked. The fallback route
    (sharing the task's `Withheld`) is still sent both; Anthropic names the broken one,
    which alone is then marked and withheld everywhere — OpenAI included — while the good
    one goes on to Anthropic."""
    async with OpenAIServer() as server, AnthropicServer() as claude:
        server.default = lambda seen: Completion(text="answered")
        claude.default = lambda seen: Message(text="answered")
        refusals, withheld = Refusals(), Withheld()
        gpt = TaskModel(route(opened, "openai", server.url), refusals=refusals, withheld=withheld)
        sonnet = TaskModel(
            route(opened, "anthropic", claude.url), refusals=refusals, withheld=withheld
        )
        await gpt.request(asked(OTHER_PNG, BROKEN))
        assert refusals.refused == []  # not known which: marked nowhere
        await gpt.request(asked(OTHER_PNG, BROKEN))
        await sonnet.request(asked(OTHER_PNG, BROKEN))
        await sonnet.request(asked(OTHER_PNG, BROKEN))
    assert [len(r.images()) for r in server.requests] == [2, 0, 0]
    told = str(server.requests[1].body["messages"])
    assert "did not say which" in told and '"map.png"' in told and '"broken.png"' in told
    assert [r.images() for r in claude.requests] == [
        [("image/png", OTHER_PNG.data), ("image/png", BROKEN.data)],
        [("image/png", OTHER_PNG.data)],
        [("image/png", OTHER_PNG.data)],
    ]
    [(keys, refused_by, _)] = refusals.refused
    assert keys == ("m1#2",) and refused_by.provider == "anthropic"


async def test_a_tools_refused_picture_is_withheld_for_the_rest_of_the_task(
    opened: list[Model],
) -> None:
    """A tool returned a picture the provider refuses (Anthropic names it in the
    tool_result). Before: it was known by the object alone, so the same picture returned
    by the tool's next call — a new object, in a later step or round — went again and
    failed again. Now it is known by its bytes: every later request of the task is sent
    without it, the model told why; another task is not affected."""
    bad = Image("image/png", b"GIF-ish, not a png", "fake__screenshot image 1")
    async with AnthropicServer() as claude:
        claude.default = lambda seen: Message(text="answered")
        tasks, refusals = WithheldByTask(), Refusals()
        sonnet = route(opened, "anthropic", claude.url)
        first_round = TaskModel(sonnet, refusals=refusals, withheld=tasks.of("T1"))
        await first_round.request(tool_said(bad))
        again = Image("image/png", bytes(bad.data), bad.name)  # the tool called once more
        later_round = TaskModel(sonnet, refusals=refusals, withheld=tasks.of("T1"))
        await later_round.request(tool_said(again))
    assert [len(r.images()) for r in claude.requests] == [1, 0, 0]
    last = claude.requests[-1].body["messages"][-1]["content"][0]
    assert last["type"] == "tool_result"
    assert "the provider refused it: it could not be read" in str(last["content"])
    assert refusals.refused == []  # a tool's picture is not stored: nothing to mark
    assert tasks.of("T2").everywhere == {}
