"""Routes on the wire (issue 35, items 2 and 3), against the loopback vendors: each route
its own base URL and key, sampling settings, the end user's id, pictures a model cannot
take named instead of sent, a refused picture withheld and remembered, PDFs as document
blocks, and the provider's page citations read back."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from pydantic import SecretStr

from agent import (
    Document,
    Image,
    Model,
    ProviderSettings,
    Route,
    RouteConfig,
    Sampling,
    open_route,
    route_of,
)
from agent.core.errors import ConfigError
from agent.models.contract import ModelRequest, PageCitation, SystemMessage, UserMessage
from agent.models.task_model import TaskModel
from tests.fakes.anthropic_api import AnthropicServer, Message, page_citation
from tests.fakes.anthropic_api import reply_with_tool as anthropic_reply
from tests.fakes.openai_api import Completion, OpenAIServer

PNG = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"p" * 16, "chart.png", key="m1#1")
# A PNG by its name and type, not by its bytes: what a provider refuses.
BROKEN = Image("image/png", b"JFIF not a png at all", "broken.png", key="m1#2")
PDF = Document(b"%PDF-1.7 pages of a scan", "scan.pdf", pages=3, key="m1#3", label="document 1")


def asked(*images: Image, documents: tuple[Document, ...] = ()) -> ModelRequest:
    turn = UserMessage("<turn>what is this?</turn>", images, documents)
    return ModelRequest((SystemMessage("be brief"), turn), max_output_tokens=100)


@dataclass
class Opened:
    """The models a test opened, closed when it ends."""

    models: list[Model] = field(default_factory=list)

    def open(self, route: RouteConfig, index: int = 0, **settings: object) -> Model:
        given = {"stream": False, **settings}
        model = open_route(route, index=index, settings=ProviderSettings(**given))  # type: ignore[arg-type]
        self.models.append(model)
        return model


@pytest.fixture
async def opened() -> AsyncIterator[Opened]:
    models = Opened()
    yield models
    for model in models.models:
        await model.aclose()


@dataclass
class Refusals:
    """`AttachmentRefusals` in memory: what the task's model recorded."""

    refused: list[tuple[tuple[str, ...], Route, str]] = field(default_factory=list)

    async def refuse(self, keys: Sequence[str], *, route: Route, reason: str) -> None:
        self.refused.append((tuple(keys), route, reason))


async def test_each_route_has_its_own_base_url_and_key(opened: Opened) -> None:
    """Two routes of one vendor go to two places with two keys; the vendor's own key goes
    only to the route that uses the vendor's settings, never to one with a URL of its own."""
    async with OpenAIServer() as server:
        server.default = lambda seen: Completion(text="ok")
        vendor = ProviderSettings(
            openai_api_key=SecretStr("sk-vendor"), openai_base_url=server.url, stream=False
        )
        first = open_route(
            RouteConfig("openai", "gpt-a", f"{server.origin}/a/v1", SecretStr("sk-a"), "KEY_A"),
            index=0,
            settings=vendor,
        )
        second = open_route(RouteConfig("openai", "gpt-b"), index=1, settings=vendor)
        keyless = open_route(
            RouteConfig("openai", "gpt-c", f"{server.origin}/c/v1"), index=2, settings=vendor
        )
        opened.models += [first, second, keyless]
        for model in (first, second, keyless):
            await model.request(asked())
    seen = [(r.path, r.headers.get("authorization"), r.body["model"]) for r in server.requests]
    assert seen == [
        ("/a/v1/chat/completions", "Bearer sk-a", "gpt-a"),
        ("/v1/chat/completions", "Bearer sk-vendor", "gpt-b"),
        ("/c/v1/chat/completions", None, "gpt-c"),
    ]
    assert [route_of(m) for m in (first, second)] == [
        Route("openai", "gpt-a", 0),
        Route("openai", "gpt-b", 1),
    ]
    assert route_of(first).credential == "KEY_A"


def test_a_route_to_the_vendor_without_a_key_names_the_setting_to_fill() -> None:
    """A route of its own to api.openai.com without a key is refused before anything runs."""
    route = RouteConfig("openai", "gpt-4.1", "https://api.openai.com/v1")
    with pytest.raises(
        ConfigError, match=r"THREADGATE_ROUTES sends openai:gpt-4\.1 to api\.openai"
    ):
        open_route(route, index=0, settings=ProviderSettings())


async def test_sampling_comes_from_the_route_then_the_deployment(opened: Opened) -> None:
    """THREADGATE_TEMPERATURE and _TOP_P under the route's own, stop sequences as set; a
    request's own temperature wins; a reasoning model is sent no sampling at all; on
    Anthropic `top_p` only without `temperature` (its models refuse both)."""
    deployment = Sampling(temperature=0.7, top_p=0.9, stop=("\n\nUser:",))
    async with OpenAIServer() as server, AnthropicServer() as claude:
        server.default = lambda seen: Completion(text="ok")
        claude.default = lambda seen: Message(text="ok")
        own = RouteConfig("openai", "gpt-4.1", server.url, sampling=Sampling(temperature=0.1))
        reasoning = RouteConfig("openai", "o3", server.url)
        anthropic = RouteConfig("anthropic", "claude-sonnet-4-5", claude.url)
        await opened.open(own, sampling=deployment).request(asked())
        await opened.open(own, sampling=deployment).request(
            ModelRequest((UserMessage("hi"),), temperature=1.2)
        )
        await opened.open(reasoning, sampling=deployment).request(asked())
        await opened.open(anthropic, sampling=deployment).request(asked())
    first, second, third = (r.body for r in server.requests)
    assert (first["temperature"], first["top_p"], first["stop"]) == (0.1, 0.9, ["\n\nUser:"])
    assert second["temperature"] == 1.2
    assert "temperature" not in third and "top_p" not in third
    body = claude.requests[0].body
    assert (body["temperature"], "top_p" in body, body["stop_sequences"]) == (
        0.7,
        False,
        ["\n\nUser:"],
    )


async def test_the_end_user_goes_as_each_vendors_field(opened: Opened) -> None:
    """The task's opaque id is `user` on Chat Completions and `metadata.user_id` on the
    Messages API; without one, neither field is sent."""
    async with OpenAIServer() as server, AnthropicServer() as claude:
        server.default = lambda seen: Completion(text="ok")
        claude.default = lambda seen: Message(text="ok")
        gpt = opened.open(RouteConfig("openai", "gpt-4.1", server.url))
        sonnet = opened.open(RouteConfig("anthropic", "claude-sonnet-4-5", claude.url))
        await TaskModel(gpt, end_user="tg-0123").request(asked())
        await TaskModel(sonnet, end_user="tg-0123").request(asked())
        await gpt.request(asked())
    assert server.requests[0].body["user"] == "tg-0123"
    assert claude.requests[0].body["metadata"] == {"user_id": "tg-0123"}
    assert "user" not in server.requests[1].body


async def test_a_model_declared_without_vision_is_never_sent_a_picture(opened: Opened) -> None:
    """Before: the picture was sent and the request failed with the vendor's 400. Now the
    route declares no vision: the request carries no image part, names the picture, and is
    answered."""
    async with OpenAIServer(no_vision={"gpt-3.5-turbo"}) as server:
        server.default = lambda seen: Completion(text="I cannot see it, but I know it is there")
        route = RouteConfig("openai", "gpt-3.5-turbo", server.url, capabilities={"vision": False})
        answer = await opened.open(route).request(asked(PNG))
    assert answer.text.startswith("I cannot see it")
    [request] = server.requests
    assert request.images() == []
    assert '"chart.png"' in str(request.body["messages"][1]["content"])


async def test_a_model_that_turns_out_blind_is_asked_again_without_pictures_once(
    opened: Opened,
) -> None:
    """A route declared (by default) with vision whose model answers the vendor's "image_url
    is only supported by certain models" 400: the same request goes again without the
    picture, and every later one of that model is sent none — one 400, not one per round."""
    async with OpenAIServer(no_vision={"text-only"}) as server:
        server.default = lambda seen: Completion(text="answered")
        model = opened.open(RouteConfig("openai", "text-only", server.url))
        first = await model.request(asked(PNG))
        second = await model.request(asked(PNG))
    assert (first.text, second.text) == ("answered", "answered")
    assert [len(r.images()) for r in server.requests] == [1, 0, 0]


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_a_refused_picture_is_withheld_recorded_and_never_sent_again(
    opened: Opened, vendor: str
) -> None:
    """Before: a picture the provider refused was sent again with every later request of
    its thread, each failing. Now the vendor's 400 names it (Anthropic by its place in the
    body; OpenAI's says nothing, and there is one picture beside a good one… the broken one
    alone here), the request is sent again without it and answered, the refusal is
    recorded for the stored picture, and later requests of the task do not carry it."""
    async with OpenAIServer() as server, AnthropicServer() as claude:
        server.default = lambda seen: Completion(text="answered")
        claude.default = lambda seen: Message(text="answered")
        url = server.url if vendor == "openai" else claude.url
        refusals = Refusals()
        model = TaskModel(opened.open(RouteConfig(vendor, "vision-model", url)), refusals=refusals)
        pictures = (PNG, BROKEN) if vendor == "anthropic" else (BROKEN,)
        first = await model.request(asked(*pictures))
        second = await model.request(asked(*pictures))
        fake = server if vendor == "openai" else claude
    assert (first.text, second.text) == ("answered", "answered")
    good = [("image/png", PNG.data)] if vendor == "anthropic" else []
    assert [r.images() for r in fake.requests] == [
        [(i.media_type, i.data) for i in pictures],
        good,
        good,
    ]
    [(keys, route, reason)] = refusals.refused
    assert keys == ("m1#2",) and route.model == "vision-model" and reason == "it could not be read"
    told = str(fake.requests[1].body["messages"])
    assert '"broken.png"' in told and "the provider refused it: it could not be read" in told


@pytest.mark.parametrize("stream", [False, True])
async def test_a_pdf_is_a_cited_document_block_on_the_messages_api(
    opened: Opened, stream: bool
) -> None:
    """A PDF goes as a base64 `document` block titled as the prompt numbered it, citations
    enabled; the text's `page_location` citations come back with the answer, streamed
    (`citations_delta`) or not."""
    cited = page_citation("Revenue grew 12%.", title="document 1", page=2)
    async with AnthropicServer() as claude:
        claude.script(Message(text="It grew by 12%.", citations=[cited]))
        route = RouteConfig("anthropic", "claude-sonnet-4-5", claude.url)
        answer = await opened.open(route, stream=stream).request(asked(documents=(PDF,)))
    block = claude.requests[0].body["messages"][0]["content"][-1]
    assert block == {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(PDF.data).decode(),
        },
        "title": "document 1",
        "citations": {"enabled": True},
    }
    assert answer.citations == (PageCitation(0, "Revenue grew 12%.", 2, 3, "document 1"),)


async def test_a_pdf_is_a_file_part_on_chat_completions(opened: Opened) -> None:
    """On OpenAI's API a vision model gets the PDF as a `file` part named by its number."""
    async with OpenAIServer() as server:
        server.default = lambda seen: Completion(text="ok")
        route = RouteConfig("openai", "gpt-4.1", server.url, capabilities={"documents": True})
        await opened.open(route).request(asked(documents=(PDF,)))
    [request] = server.requests
    assert request.documents() == [("document 1.pdf", PDF.data)]


async def test_a_broken_pdf_is_refused_and_withheld_like_a_picture(opened: Opened) -> None:
    """The PDF the provider refuses is recorded and left to its text in the turn."""
    broken = Document(b"not a pdf", "x.pdf", pages=1, key="m2#1", label="document 1")
    async with AnthropicServer() as claude:
        claude.default = lambda seen: anthropic_reply("final_reply", {"text": "read it"})
        refusals = Refusals()
        route = RouteConfig("anthropic", "claude-sonnet-4-5", claude.url)
        model = TaskModel(opened.open(route), refusals=refusals)
        await model.request(asked(documents=(broken,)))
    assert [len(r.documents()) for r in claude.requests] == [1, 0]
    assert refusals.refused[0][0] == ("m2#1",)
