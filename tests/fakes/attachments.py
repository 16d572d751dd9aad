"""What the fake vendors check of a request's pictures and documents, as the real ones do.

Both vendors look at the bytes of every picture and PDF a request carries and refuse the
request with a 400 naming the part when one is not what it says it is (a picture is not a
png, jpeg, gif or webp by its magic bytes; a PDF does not start `%PDF-`), or when the
model takes no pictures at all (`no_vision`: the models a server answers as text-only).
The bodies are the vendors' own (their references and issue trackers quote them):

- OpenAI, a model without vision: `Invalid content type. image_url is only supported by
  certain models.` with `param` `messages.[i].content.[j].type`; a bad picture: `You
  uploaded an unsupported image. …` with code `invalid_image_format`, no param; a bad PDF:
  `The file data you provided does not represent a valid PDF.` with `param`
  `messages.[i].content.[j].file.file_data`;
- Anthropic, a bad picture: `messages.i.content.j.image.source.base64.data: The image was
  specified using the image/png media type, but does not appear to be a valid png image`;
  a bad PDF: `messages.i.content.j.document.source.base64.data: The PDF specified was not
  valid.`; a model without vision: `messages.i.content.j: this model does not support
  image input`.

`image_parts` and `document_parts` find the parts, with their place, in either body.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any

_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}


@dataclass(frozen=True)
class Part:
    """One picture or document of a request body: where, its type, bytes and title."""

    message: int
    index: int
    media_type: str
    data: bytes
    title: str = ""
    nested: bool = False  # inside a tool_result (Anthropic)


def is_picture(media_type: str, data: bytes) -> bool:
    if media_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    return any(data.startswith(m) for m in _MAGIC.get(media_type, ()))


def parts(body: Any) -> Iterator[Part]:
    """Every picture and document of an OpenAI or Anthropic request body, in order."""
    for i, message in enumerate(body.get("messages", []) if isinstance(body, dict) else []):
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else []):
            yield from _parts_of(i, j, block)
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for nested in inner if isinstance(inner, list) else []:
                for part in _parts_of(i, j, nested):
                    yield replace(part, nested=True)


def _parts_of(i: int, j: int, block: dict[str, Any]) -> Iterator[Part]:
    kind = block.get("type")
    if kind == "image_url":
        head, _, data = block["image_url"]["url"].partition(";base64,")
        yield Part(i, j, head.removeprefix("data:"), base64.b64decode(data))
    elif kind in ("image", "document"):
        source = block["source"]
        yield Part(
            i, j, source["media_type"], base64.b64decode(source["data"]), block.get("title", "")
        )
    elif kind == "file":
        file = block["file"]
        head, _, data = file["file_data"].partition(";base64,")
        yield Part(
            i, j, head.removeprefix("data:"), base64.b64decode(data), file.get("filename", "")
        )


def openai_refusal(body: Any, no_vision: Collection[str]) -> dict[str, Any] | None:
    """The error object OpenAI answers the body with, or None."""
    model = body.get("model") if isinstance(body, dict) else None
    for part in parts(body):
        where = f"messages.[{part.message}].content.[{part.index}]"
        if part.media_type.startswith("image/") and model in no_vision:
            return _openai(
                "Invalid content type. image_url is only supported by certain models.",
                f"{where}.type",
            )
        if part.media_type.startswith("image/") and not is_picture(part.media_type, part.data):
            return _openai(
                "You uploaded an unsupported image. Please make sure your image is below 20 MB "
                "in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
                None,
                "invalid_image_format",
            )
        if part.media_type == "application/pdf" and not part.data.startswith(b"%PDF-"):
            return _openai(
                "The file data you provided does not represent a valid PDF.",
                f"{where}.file.file_data",
            )
    return None


def anthropic_refusal(body: Any, no_vision: Collection[str]) -> str | None:
    """The message of the 400 Anthropic answers the body with, or None."""
    model = body.get("model") if isinstance(body, dict) else None
    for part in parts(body):
        where = f"messages.{part.message}.content.{part.index}"
        if part.media_type.startswith("image/") and model in no_vision:
            return f"{where}: this model does not support image input"
        if part.media_type.startswith("image/") and not is_picture(part.media_type, part.data):
            subtype = part.media_type.removeprefix("image/")
            return (
                f"{where}.image.source.base64.data: The image was specified using the "
                f"{part.media_type} media type, but does not appear to be a valid {subtype} image"
            )
        if part.media_type == "application/pdf" and not part.data.startswith(b"%PDF-"):
            return f"{where}.document.source.base64.data: The PDF specified was not valid."
    return None


def _openai(message: str, param: str | None, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }
