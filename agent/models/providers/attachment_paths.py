"""Which attachment of a request a vendor's 400 names, from where it says it was.

Both vendors point at the part they refused by its place in the request body: Anthropic's
message starts with it (`messages.2.content.1.image.source.base64: …`), OpenAI's `param`
is it (`messages.[3].content.[1]`). The body's attachment parts — `image` and `document`
blocks (inside a `tool_result` too), `image_url` and `file` parts — come in the same order
as `attachments_of` lists the request's pictures and documents (each wire writes a
message's pictures, then its documents, message by message, a tool result's too; OpenAI's
tool pictures and files follow their run of tool messages, still in order), so the n-th
part found is the n-th attachment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from agent.core.documents import Document
from agent.core.images import Image
from agent.models.contract import ModelRequest, ToolResultMessage, UserMessage

_PARTS = frozenset({"image", "document", "image_url", "file"})


def attachments_of(request: ModelRequest) -> list[Image | Document]:
    """The request's pictures and documents, in the order the wire formats write them."""
    found: list[Image | Document] = []
    for message in request.messages:
        if isinstance(message, UserMessage | ToolResultMessage):
            found += [*message.images, *message.documents]
    return found


def refused_attachment(
    body: Mapping[str, Any], request: ModelRequest, path: tuple[int, ...] | None
) -> Image | Document | None:
    """The attachment at `path` (message, content index) of `body`, written from
    `request`; None when there is no path or nothing there. A refusal without a path in a
    request with one attachment means that one."""
    attachments = attachments_of(request)
    if path is None:
        return attachments[0] if len(attachments) == 1 else None
    for position, where in enumerate(_part_paths(body)):
        if where == path and position < len(attachments):
            return attachments[position]
    return None


def _part_paths(body: Mapping[str, Any]) -> Iterator[tuple[int, int]]:
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, Mapping):
                continue
            if block.get("type") in _PARTS:
                yield (i, j)
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for part in inner if isinstance(inner, list) else ():
                if isinstance(part, Mapping) and part.get("type") in _PARTS:
                    yield (i, j)
