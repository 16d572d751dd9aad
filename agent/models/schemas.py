"""Every JSON Schema offered to a model is closed: no object in it takes keys it does not list.

A tool's parameters and a structured answer's schema say to the model what to write. An
object that lists its properties and says nothing of others is open in JSON Schema — any
other key is valid — and a model reads that as leave to add keys: a `reason`, a `note`,
a misspelt twin of a real one. OpenAI's and Anthropic's strict modes (structured outputs,
strict tool use) go further and refuse a schema unless every object in it, nested ones
included (in `properties`, `items`, `anyOf`…), says `additionalProperties: false`. So
`closed_schema` adds it to each such object, wherever the schema came from: our control
tools, work tools' pydantic models (pydantic writes it only for `extra="forbid"`), the
subtask types' params inside `delegate`, an MCP server's `inputSchema`, a plugin's tool,
an `output_schema`. `ToolSpec` and `ModelRequest` close theirs when made
(agent/models/contract.py), so nothing reaches a wire format open.

Closed is what the schema *says*; what the round *accepts* is its own decision: control
calls drop a key they do not know (agent/rounds/control.py), an MCP tool's arguments are
checked against the server's own schema (agent/rounds/mcp_schemas.py).

Left as their author wrote them, because closing them would change what they mean rather
than say it: an object that declares its other keys (`additionalProperties` `true` or a
schema — a map of labels —, `patternProperties`, `unevaluatedProperties`), an object with
no `properties` keyword at all (a free-form value: closed, only `{}` would fit), and the
branches of an `allOf` (each closed, no value could satisfy them together). A strict
provider mode would refuse those schemas either way; none is ours.

`openai_strict` says whether a closed schema also meets OpenAI's other rule for strict
structured outputs — every property listed in `required` — so that the wire writer asks
for strict decoding only where OpenAI would accept the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ClosedSchema", "closed_schema", "openai_strict"]

# Keywords whose value is a map of subschemas, a list of them, or one.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalItems", "contains", "not", "additionalProperties")
# An object that says this much about keys it does not list has decided; keep it.
_DECLARES_OTHERS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_MAX_DEPTH = 64  # deeper than any schema a tool needs; the rest is kept as it is


class ClosedSchema(dict[str, Any]):
    """A schema `closed_schema` returned: closing it again costs nothing."""


def closed_schema(schema: Mapping[str, Any]) -> ClosedSchema:
    """`schema` with `additionalProperties: false` on every object that lists its
    properties and says nothing of others (module docstring); `schema` is not changed."""
    if isinstance(schema, ClosedSchema):
        return schema
    closed = _closed(schema, 0)
    return ClosedSchema(closed if isinstance(closed, dict) else {})


def _closed(node: Any, depth: int) -> Any:
    if not isinstance(node, Mapping) or isinstance(node, ClosedSchema) or depth > _MAX_DEPTH:
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _closed(sub, depth + 1) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_closed(sub, depth + 1) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = (
                [_closed(sub, depth + 1) for sub in value]
                if isinstance(value, list)
                else _closed(value, depth + 1)
            )
        else:
            out[key] = value
    if _closable(node):
        out["additionalProperties"] = False
    return out


def _closable(node: Mapping[str, Any]) -> bool:
    """An object schema that lists its properties and leaves the others unsaid."""
    kind = node.get("type")
    is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    return (
        (is_object or kind is None)
        and "properties" in node
        and "allOf" not in node
        and not any(key in node for key in _DECLARES_OTHERS)
    )


def openai_strict(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI takes `schema` (closed) in strict mode: every object closed, with
    every property it lists required."""
    return _strict(schema, 0)


def _strict(node: Any, depth: int) -> bool:
    if isinstance(node, list):
        return all(_strict(sub, depth + 1) for sub in node)
    if not isinstance(node, Mapping):
        return True
    if depth > _MAX_DEPTH or "allOf" in node or "patternProperties" in node:
        return False
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        if node.get("additionalProperties") is not False:
            return False
        if not set(properties) <= set(node.get("required") or ()):
            return False
    elif node.get("type") == "object" and node.get("additionalProperties") is not False:
        return False
    subschemas = [
        *(properties.values() if isinstance(properties, Mapping) else ()),
        *(node[key] for key in (*_SCHEMA_LISTS, *_SCHEMA_ONE) if key in node),
        *(
            sub
            for key in ("$defs", "definitions")
            if isinstance(node.get(key), Mapping)
            for sub in node[key].values()
        ),
    ]
    return all(_strict(sub, depth + 1) for sub in subschemas if sub is not False)
