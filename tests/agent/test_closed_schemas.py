"""Closed schemas (issue 47, item 7): what a tool or a structured answer offers a model
says `additionalProperties: false` on every object that lists its properties, in both
wire formats; what an author declared open on purpose stays; `no_reply` reads a call
leniently, like the other controls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent import ModelRequest, ToolSpec, UserMessage
from agent.core.schedules import Silence
from agent.models.contract import ToolCall
from agent.models.providers import anthropic_wire, openai_wire
from agent.models.schemas import closed_schema
from agent.rounds.control import NoReply


def objects(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object schema in `node` (nested anywhere: properties, items, anyOf, $defs),
    with where it is."""
    if isinstance(node, list):
        for n, item in enumerate(node):
            yield from objects(item, f"{where}[{n}]")
    elif isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield where, node
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples", "required"):
                yield from objects(value, f"{where}.{key}")


def open_objects(schema: dict[str, Any]) -> list[str]:
    """Where an object takes keys it neither lists nor declares."""
    return [
        where
        for where, node in objects(schema)
        if node.get("additionalProperties") is not False
        and ("properties" in node or not isinstance(node.get("additionalProperties"), dict))
    ]


NESTED = ToolSpec(
    "nested",
    "A tool whose input nests objects in every place a schema can.",
    {
        "type": "object",
        "properties": {
            "one": {"type": "object", "properties": {"a": {"type": "string"}}},
            "many": {"type": "array", "items": {"properties": {"b": {"type": "integer"}}}},
            "either": {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "kept": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    },
)


def test_both_wire_formats_send_a_plugins_nested_schema_closed() -> None:
    """A plugin's ToolSpec written open reaches OpenAI and Anthropic closed at every level;
    what its author declared open on purpose (a map, `additionalProperties: true`) stays."""
    request = ModelRequest((UserMessage("hi"),), tools=(NESTED,))
    sent = [
        openai_wire.build_body(request, "gpt", stream=False)["tools"][0]["function"]["parameters"],
        anthropic_wire.build_body(request, "claude", stream=False)["tools"][0]["input_schema"],
    ]
    for schema in sent:
        assert open_objects(schema) == [".properties.kept"]
        assert schema["additionalProperties"] is False
        assert schema["properties"]["many"]["items"]["additionalProperties"] is False
        assert schema["properties"]["either"]["anyOf"][0]["additionalProperties"] is False
        assert schema["properties"]["map"]["additionalProperties"] == {"type": "integer"}


def test_an_output_schema_is_sent_strict_where_openai_takes_it_so() -> None:
    """A structured answer's schema goes closed to both wire formats; to OpenAI with
    `strict: true` when every property is required, without it when one is optional."""
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "tags": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"t": {"type": "string"}},
                    "required": ["t"],
                },
            },
        },
        "required": ["n", "tags"],
    }
    request = ModelRequest((UserMessage("count"),), output_schema=schema)
    sent = openai_wire.build_body(request, "gpt", stream=False)["response_format"]["json_schema"]
    assert sent["strict"] is True and open_objects(sent["schema"]) == []
    claude = anthropic_wire.build_body(request, "claude", stream=False)["output_format"]
    assert open_objects(claude["schema"]) == []
    optional = ModelRequest((UserMessage("count"),), output_schema={**schema, "required": ["n"]})
    loose = openai_wire.build_body(optional, "gpt", stream=False)["response_format"]
    assert (
        "strict" not in loose["json_schema"] and open_objects(loose["json_schema"]["schema"]) == []
    )


def test_closing_is_idempotent_and_leaves_the_given_schema_alone() -> None:
    """Closing a closed schema returns it as it is; the schema given is never changed."""
    given = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    closed = closed_schema(given)
    assert closed_schema(closed) is closed
    assert (
        "additionalProperties" not in given
        and "additionalProperties" not in given["properties"]["a"]
    )
    assert closed["properties"]["a"]["additionalProperties"] is False


def test_no_reply_drops_a_key_its_schema_does_not_have() -> None:
    """`no_reply` with a key it does not know is still silence, with its reason (before,
    the key was refused and cost the round a repair)."""
    call = ToolCall.from_raw("c1", "no_reply", '{"reason": "nothing new", "mood": "calm"}')
    assert NoReply().parse(call) == Silence("nothing new")
    assert NoReply.spec.parameters["additionalProperties"] is False
