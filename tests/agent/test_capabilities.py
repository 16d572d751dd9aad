"""What each model accepts, declared per provider and model, and requests fitted to it
(issue 35, item 2): pictures named and not sent to a model without vision, documents left
to their text where a model reads none, sampling and parallel calls as declared."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import Capabilities, Document, Image, default_capabilities
from agent.models.capabilities import NO_DOCUMENTS, NO_VISION, fit_request
from agent.models.contract import (
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from agent.models.providers import anthropic_wire, openai_wire

PNG = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"x" * 20, "screen.png")
PDF = Document(b"%PDF-1.7 scan", "scan.pdf", pages=2, label="document 1")
TURN = UserMessage("<turn>look at these</turn>", (PNG,), (PDF,))


@pytest.mark.parametrize(
    ("provider", "model", "own_api", "expected"),
    [
        ("openai", "gpt-4.1-mini", True, Capabilities(documents=True, structured_output=True)),
        ("openai", "gpt-3.5-turbo", True, Capabilities(vision=False)),
        ("openai", "gpt-4", True, Capabilities(vision=False)),
        ("openai", "o3-mini", True, Capabilities(vision=False, sampling=False)),
        (
            "openai",
            "o4-mini",
            True,
            Capabilities(documents=True, structured_output=True, sampling=False),
        ),
        ("openai", "llama3:8b", False, Capabilities()),
        ("openai", "openai/o3-mini", False, Capabilities(sampling=False)),
        ("anthropic", "claude-sonnet-4-5", True, Capabilities(documents=True)),
        ("anthropic", "claude-2.1", True, Capabilities(vision=False, documents=False)),
        ("acme", "anything", True, Capabilities()),
    ],
)
def test_the_defaults_follow_what_the_vendors_document(
    provider: str, model: str, own_api: bool, expected: Capabilities
) -> None:
    """A text-only OpenAI model takes no pictures, a reasoning one no temperature; a vision
    model on OpenAI's own API reads PDFs; every Claude since 3 takes both; a server that
    only speaks OpenAI's format is assumed to take pictures and no document parts."""
    assert default_capabilities(provider, model, own_api=own_api) == expected


def test_a_model_without_vision_gets_its_pictures_named_not_sent() -> None:
    """No image part reaches either wire; the turn is followed by a note naming it."""
    fitted = fit_request(ModelRequest((TURN,)), Capabilities(vision=False, documents=True))
    [user] = fitted.messages
    assert isinstance(user, UserMessage) and user.images == () and user.documents == (PDF,)
    assert user.text.startswith(TURN.text)
    said = f'Not shown to you ({NO_VISION}): the picture "screen.png" (28 bytes).'
    assert f'<runtime source="attachment_not_shown">{said}</runtime>' in user.text
    assert "image" not in str(openai_wire.build_body(fitted, "gpt-3.5-turbo", stream=False))
    body = anthropic_wire.build_body(fitted, "claude-2.1", stream=False)
    assert [b["type"] for b in body["messages"][0]["content"]] == ["text", "document"]


def test_a_model_that_reads_no_documents_is_told_it_has_their_text() -> None:
    """The PDF is left out (its text layer is in the turn already) and the note says so."""
    [user] = fit_request(ModelRequest((TURN,)), Capabilities()).messages
    assert isinstance(user, UserMessage) and user.documents == () and user.images == (PNG,)
    assert NO_DOCUMENTS in user.text and '"scan.pdf"' in user.text


def test_a_tools_pictures_are_named_to_a_model_without_vision() -> None:
    """A tool result's pictures become a note in the result."""
    result = ToolResultMessage("c1", "shot", "the page", images=(PNG,))
    [fitted] = fit_request(ModelRequest((result,)), Capabilities(vision=False)).messages
    assert isinstance(fitted, ToolResultMessage) and fitted.images == ()
    assert fitted.content.startswith("the page") and "screen.png" in fitted.content


def test_sampling_and_parallel_calls_follow_the_declaration() -> None:
    """A model declared without sampling gets no temperature nor top_p; one without
    parallel tool calls is asked for one call per step, on both wires."""
    request = ModelRequest((UserMessage("hi"),), temperature=0.3, top_p=0.9)
    fitted = fit_request(request, Capabilities(sampling=False, parallel_tool_calls=False))
    assert (fitted.temperature, fitted.top_p, fitted.parallel_tool_calls) == (None, None, False)
    with_tools = ModelRequest(
        (UserMessage("hi"),),
        tools=(openai_tool(),),
        tool_choice="required",
        parallel_tool_calls=False,
    )
    assert openai_wire.build_body(with_tools, "m", stream=False)["parallel_tool_calls"] is False
    choice = anthropic_wire.build_body(with_tools, "m", stream=False)["tool_choice"]
    assert choice == {"type": "any", "disable_parallel_tool_use": True}


def test_structured_output_is_native_where_declared_and_said_elsewhere() -> None:
    """An output schema is OpenAI's `json_schema` response format (closed) when the route
    declares structured output, and a system message stating the schema when it does not."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    request = ModelRequest((UserMessage("count"),), output_schema=schema)
    native = fit_request(request, Capabilities(structured_output=True))
    body = openai_wire.build_body(native, "gpt-4.1", stream=False)
    closed = {**schema, "additionalProperties": False}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": closed},
    }
    said = fit_request(request, Capabilities())
    assert said.output_schema is None
    assert isinstance(said.messages[-1], SystemMessage)
    assert '"n": {"type": "integer"}' in said.messages[-1].text


@given(st.text(max_size=60))
def test_no_file_name_can_end_the_note_or_open_a_tag(name: str) -> None:
    """Whatever a picture is called, the note has exactly its own two tags."""
    turn = UserMessage("<turn>x</turn>", (Image("image/png", b"\x89PNG\r\n\x1a\n", name),))
    [user] = fit_request(ModelRequest((turn,)), Capabilities(vision=False)).messages
    assert isinstance(user, UserMessage)
    note = user.text.removeprefix("<turn>x</turn>")
    assert re.findall(r"</?[A-Za-z]", note) == ["<r", "</r"]


def openai_tool() -> openai_wire.ToolSpec:
    return openai_wire.ToolSpec("final_reply", "Reply.", {"type": "object"})
