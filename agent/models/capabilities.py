"""What a model accepts, declared per provider and model, and requests fitted to it.

Each route declares its `Capabilities` (agent/models/routes.py): by default the table
here says them for the provider and the model's name, and a route may override any of
them (`THREADGATE_ROUTES`' `capabilities`). `fit_request` then turns a request into one
the model takes, before the wire format writes it:

- `vision`: pictures are sent beside their turn; without it each is named in a runtime
  note after the turn (agent/core/attachments.py) instead of failing the request with a
  400. A tool's pictures the same way.
- `documents`: PDFs go as the vendor's document blocks (read natively, scans included,
  citable by page), and the turn's copy of their text layer is left out: the model reads
  each PDF once (`Document.without_text`). Without it they are left out — every model
  reads a PDF's text layer in the turn (gateway/inbound/attachments.py) — and the note
  says so. A tool's
  PDFs the same way: sent inside its result to a model that reads documents, named to one
  that does not.
- `parallel_tool_calls`: without it, the request asks for one tool call per step
  (OpenAI `parallel_tool_calls: false`, Anthropic `disable_parallel_tool_use`).
- `structured_output`: a request's `output_schema` goes as the vendor's JSON-schema
  response format; without it the schema is said in the system prompt.
- `sampling`: whether `temperature` and `top_p` are accepted (OpenAI's reasoning models
  refuse them with a 400); without it they are not sent.

A request that carries no document once fitted (none attached, or the model reads none)
offers each tool in its `without_documents` form: `final_reply` asks for document
citations only where a document is attached.

The defaults are what the vendors document for their own APIs. An OpenAI-compatible
server elsewhere (vLLM, Ollama, a gateway) is assumed to take pictures, as before, and no
document parts, which none of them reads; a route says otherwise when it knows better.
A model that refuses pictures anyway (a 400 saying it takes none) is remembered as
without vision for the life of the process (agent/models/providers/http_model.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from agent.core.attachments import describe, not_shown_note
from agent.core.documents import Document
from agent.core.images import Image
from agent.core.notes import RuntimeNote, render_notes
from agent.models.contract import (
    ModelMessage,
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a model accepts (module docstring)."""

    vision: bool = True
    documents: bool = False
    parallel_tool_calls: bool = True
    structured_output: bool = False
    sampling: bool = True

    def overridden(self, overrides: Mapping[str, bool]) -> Capabilities:
        """These capabilities with `overrides` (by field name) in their place."""
        return replace(self, **dict(overrides))


CAPABILITY_NAMES = tuple(f.name for f in fields(Capabilities))

# OpenAI's own models by name. Reasoning models (o1, o3, o4-mini, gpt-5…) take no
# temperature or top_p; text-only ones take no pictures; the vision models read PDFs as
# `file` parts and honour a JSON-schema response format.
_REASONING = re.compile(r"(?:^|/)(?:o\d|gpt-5)")
_TEXT_ONLY = re.compile(
    r"(?:^|/)(?:gpt-3\.5|gpt-4(?:-\d{4})?(?:-32k)?$|gpt-4-32k|o1-mini|o1-preview|o3-mini|"
    r"text-|davinci|babbage)"
)
_OPENAI_MULTIMODAL = re.compile(r"(?:^|/)(?:gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4)")
_CLAUDE_TEXT_ONLY = re.compile(r"^claude-(?:2|instant)")

NO_VISION = "this model cannot see pictures"
NO_TOOL_DOCUMENTS = "this model does not read documents"
NO_DOCUMENTS = (
    "this model reads documents only by their text, given in the turn where a PDF has one"
)


def default_capabilities(provider: str, model: str, *, own_api: bool = True) -> Capabilities:
    """What `provider:model` accepts by default; `own_api`: the route talks to the
    vendor's own API (not an OpenAI-compatible server elsewhere)."""
    if provider == "anthropic":
        text_only = bool(_CLAUDE_TEXT_ONLY.match(model))
        return Capabilities(vision=not text_only, documents=not text_only)
    if provider != "openai":
        return Capabilities()
    sampling = not _REASONING.search(model)
    if not own_api:
        return Capabilities(sampling=sampling)
    if _TEXT_ONLY.search(model):
        return Capabilities(vision=False, sampling=sampling)
    multimodal = bool(_OPENAI_MULTIMODAL.search(model))
    return Capabilities(documents=multimodal, structured_output=multimodal, sampling=sampling)


def fit_request(request: ModelRequest, capabilities: Capabilities) -> ModelRequest:
    """`request` as a model with `capabilities` takes it (module docstring)."""
    messages = tuple(_fit(m, capabilities) for m in request.messages)
    fitted = replace(
        request,
        messages=messages,
        parallel_tool_calls=request.parallel_tool_calls and capabilities.parallel_tool_calls,
    )
    if not any(isinstance(m, UserMessage | ToolResultMessage) and m.documents for m in messages):
        fitted = replace(fitted, tools=tuple(t.without_documents or t for t in request.tools))
    if not capabilities.sampling:
        fitted = replace(fitted, temperature=None, top_p=None)
    if request.output_schema is not None and not capabilities.structured_output:
        fitted = _schema_in_prompt(fitted, request.output_schema)
    return fitted


def _fit(message: ModelMessage, capabilities: Capabilities) -> ModelMessage:
    if isinstance(message, UserMessage):
        return _fit_user(message, capabilities)
    if isinstance(message, ToolResultMessage):
        return _fit_tool_result(message, capabilities)
    return message


def _fit_tool_result(message: ToolResultMessage, capabilities: Capabilities) -> ToolResultMessage:
    if message.images and not capabilities.vision:
        note = _not_shown("picture", message.images, NO_VISION)
        message = replace(message, content=message.content + render_notes(note), images=())
    if message.documents and not capabilities.documents:
        note = _not_shown("document", message.documents, NO_TOOL_DOCUMENTS)
        message = replace(message, content=message.content + render_notes(note), documents=())
    return message


def _fit_user(message: UserMessage, capabilities: Capabilities) -> UserMessage:
    notes: list[RuntimeNote] = []
    images, documents = message.images, message.documents
    if images and not capabilities.vision:
        notes += _not_shown("picture", images, NO_VISION)
        images = ()
    if documents and not capabilities.documents:
        notes += _not_shown("document", documents, NO_DOCUMENTS)
        documents = ()
    text = message.text
    for document in documents:  # sent as itself: its text is not sent a second time
        text = document.without_text(text)
    if not notes and text == message.text:
        return message
    return UserMessage(text + render_notes(notes), images, documents)


def _not_shown(kind: str, items: Sequence[Image | Document], why: str) -> list[RuntimeNote]:
    note = not_shown_note(
        [describe(kind, i.name, len(i.data)) for i in items], why, "attachment_not_shown"
    )
    return [note] if note is not None else []


def _schema_in_prompt(request: ModelRequest, schema: Mapping[str, Any]) -> ModelRequest:
    """The schema said in a system message, for a model without a native format."""
    said = SystemMessage(
        "Answer with exactly one JSON object, and nothing else, that matches this JSON "
        f"Schema:\n{json.dumps(schema, ensure_ascii=False, sort_keys=True)}"
    )
    return replace(request, messages=(*request.messages, said), output_schema=None)
