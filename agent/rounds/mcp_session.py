"""The MCP SDK's side of a connection: the transport, the session, listing and calling.

Everything here touches the official SDK (`mcp`, `mcp_types`, `httpx2`), and nothing else
does: `McpConnection` (`agent.rounds.mcp_tools`) imports this module when it first
connects a server. Importing the SDK is a large part of a start-up, which every
`threadgate` command — `migrate`, `tasks`, a gateway without MCP servers — paid before.

`stdio_client` or `streamable_http_client` is the transport, `ClientSession` the protocol.
The SDK checks a tool's structured result against the output schema its server declared,
with `jsonschema` on the event loop, where a backtracking `pattern` in that schema would
freeze the gateway as surely as one in an input schema: `CheckedSession` overrides that
check (`validate_tool_result`, the SDK's public hook) with the bounded one of
`agent.rounds.mcp_schemas`. A result the check refuses is a failed tool result.

A result's image content is a picture for the model (`Answer.images`): at most
`MAX_TOOL_IMAGES` of them, each a png, jpeg, gif or webp by its own bytes (not only by the
type the server claims) within `MAX_TOOL_IMAGE_BYTES`, what the providers take; its text
names each one, and any other image as not shown, with why. A PDF it returns as an
embedded resource (a blob, `%PDF-` by its own bytes) is a document for the model
(`Answer.documents`), sent as the vendor's document block to a model that reads them
(agent/models/capabilities.py): at most `MAX_TOOL_DOCUMENTS`, each within
`MAX_TOOL_DOCUMENT_BYTES`. A text blob is its text. Audio and any other binary are named —
kind, type, size, where it came from — never sent: no model here hears audio, and bytes
nobody can read would only cost tokens.

A server is told who calls it (`clientInfo`): threadgate and the installed package's
version, not the SDK's default (`mcp 0.1.0`), so its operators can tell our calls apart in
their logs and know which client to blame.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TextIO

import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent.core.documents import PDF, Document
from agent.core.images import Image
from agent.core.ports import ToolProgress
from agent.rounds.mcp_config import McpServerConfig
from agent.rounds.mcp_schemas import SchemaCheck, schema_check

# One SSE event carries one whole tool result; the SDK's default (1 MiB) would fail a
# verbose tool outright instead of letting the output cap cut it.
MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # in a server's name, for its directory's
_PAGES = 100  # a server that pages its tool list forever cannot hang start-up
# Pictures of one tool result: as many as a request's own bound allows for one call, each
# within what the providers take (agent/core/images.py, gateway/inbound/file_contents.py).
MAX_TOOL_IMAGES = 4
MAX_TOOL_IMAGE_BYTES = 3_750_000
# PDFs of one tool result: as many and as large as a request's own bounds allow for one
# call (agent/core/documents.py) — the pages are not counted here, so fewer than a turn's.
MAX_TOOL_DOCUMENTS = 2
MAX_TOOL_DOCUMENT_BYTES = 8_000_000
# A blob of these types is text, shown as such.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/yaml")
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


@dataclass(frozen=True, slots=True)
class Answer:
    """A call's outcome: the text for the model, whether it is a failure, and whether the
    server's connection closed under it."""

    text: str
    failed: bool = False
    closed: bool = False
    images: tuple[Image, ...] = ()
    documents: tuple[Document, ...] = ()


def client_info() -> mcp_types.Implementation:
    """Who we are to a server: threadgate, and the version installed (module docstring)."""
    try:
        version = metadata.version("threadgate")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown"
    return mcp_types.Implementation(name="threadgate", version=version)


class CheckedSession(ClientSession):
    """The SDK's session, with structured results checked at a bounded cost."""

    def __init__(self, read: Any, write: Any) -> None:
        super().__init__(read, write, client_info=client_info())
        # By tool name: its output schema's check, or None when it has one we cannot use.
        self.output_checks: dict[str, SchemaCheck | None] = {}

    async def validate_tool_result(self, name: str, result: mcp_types.CallToolResult) -> None:
        """Raise `RuntimeError` (the SDK's way) for a result its output schema refuses."""
        check = self.output_checks.get(name)
        if check is None:  # no output schema, or one we cannot use: the text is shown as is
            return
        if result.structured_content is None:
            raise RuntimeError(f"{name} has an output schema but returned no structured content")
        verdict = check.verdict(result.structured_content)
        if verdict.unchecked:
            raise RuntimeError(
                f"the structured result of {name} could not be checked against its output "
                f"schema: a pattern there is too costly to match (at {', '.join(verdict.unchecked)})"
            )
        if verdict.problems:
            raise RuntimeError(
                f"{name} returned a result its output schema refuses: {verdict.problems[0]}"
            )


class Session:
    """A connected server: its tools, calls to them, and pings."""

    def __init__(self, session: CheckedSession) -> None:
        self._session = session

    async def initialize(self) -> None:
        await self._session.initialize()

    async def ping(self) -> None:
        await self._session.send_ping()

    async def tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages), their output schemas compiled."""
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._session.list_tools(params=params)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        self._session.output_checks = {
            t.name: schema_check(t.output_schema) for t in tools if t.output_schema is not None
        }
        return tools

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        report: Callable[[ToolProgress], Awaitable[None]] | None = None,
    ) -> Answer:
        """The call's outcome; an exception means the connection broke during it. With
        `report`, the request carries a progress token (the SDK's), and each progress
        notification the server sends for it goes there."""

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            assert report is not None
            await report(ToolProgress(progress, total, message))

        try:
            result = await self._session.call_tool(
                tool, dict(arguments), progress_callback=on_progress if report else None
            )
        except MCPError as exc:
            closed = exc.code == mcp_types.CONNECTION_CLOSED
            return Answer(f"the server refused the call: {exc.message}", True, closed)
        except RuntimeError as exc:  # the SDK's complaint about a result, e.g. its schema
            return Answer(str(exc), failed=True)
        read = read_result(result, tool)
        return Answer(
            read.text, failed=bool(result.is_error), images=read.images, documents=read.documents
        )


@asynccontextmanager
async def open_session(
    config: McpServerConfig, *, errlog: TextIO | None, connect_seconds: float
) -> AsyncIterator[Session]:
    """The server's transport and session, open until the block ends (not initialized)."""
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(
            _transport(config, stack, errlog, connect_seconds)
        )
        session = await stack.enter_async_context(CheckedSession(read, write))
        yield Session(session)


def _own_directory(name: str, stack: AsyncExitStack) -> str:
    """A working directory of the server's own (mode 0700), removed once its connection is
    closed. Not the gateway's: a `.env` there holds the gateway's secrets, and many servers
    load the `.env` of their working directory at start (dotenv); the embedded database's
    files may be there too."""
    path = tempfile.mkdtemp(prefix=f"threadgate-mcp-{_UNSAFE.sub('_', name)[:40]}-")
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    return path


def _transport(
    config: McpServerConfig, stack: AsyncExitStack, errlog: TextIO | None, connect_seconds: float
) -> AbstractAsyncContextManager[Any]:
    if config.command is not None:
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            # The SDK adds its safe set (HOME, LOGNAME, PATH, SHELL, TERM, USER) and nothing
            # else of the gateway's environment: the config's `env` is all a server is given.
            env=dict(config.env) or None,
            cwd=config.cwd or _own_directory(config.name, stack),
        )
        return stdio_client(params) if errlog is None else stdio_client(params, errlog=errlog)
    assert config.url is not None  # the config has one or the other
    client = httpx2.AsyncClient(
        headers=config.headers, timeout=httpx2.Timeout(connect_seconds, read=300.0)
    )
    stack.push_async_callback(client.aclose)
    return streamable_http_client(
        config.url, http_client=client, max_sse_event_size=MAX_SSE_EVENT_BYTES
    )


def render_result(result: mcp_types.CallToolResult) -> str:
    """A tool result as text for the model: text as is, other content described."""
    return read_result(result).text


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A tool result for the model: its text, and the pictures and PDFs it sends beside."""

    text: str
    images: tuple[Image, ...] = ()
    documents: tuple[Document, ...] = ()


def read_result(result: mcp_types.CallToolResult, tool: str = "the tool") -> ReadResult:
    """A tool result for the model: its text (text as is, other content described) and
    the pictures and PDFs it returned (module docstring)."""
    parts: list[str] = []
    images: list[Image] = []
    documents: list[Document] = []
    for block in result.content:
        picture = _picture(block, len(images), tool)
        document = _document(block, len(documents), tool)
        if isinstance(picture, Image):
            images.append(picture)
            parts.append(
                f"[image {len(images)} ({picture.media_type}, {len(picture.data):,} bytes): attached]"
            )
        elif isinstance(document, Document):
            documents.append(document)
            parts.append(
                f"[document {len(documents)} ({PDF}, {len(document.data):,} bytes): attached]"
            )
        else:
            parts.append(picture or document or _render_block(block))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(the tool returned nothing)"
    return ReadResult(text, tuple(images), tuple(documents))


def _document(block: mcp_types.ContentBlock, taken: int, tool: str) -> Document | str | None:
    """A PDF blob as a document, or the text saying what a blob is (its own text, or why
    it is not shown); None for a block of another kind."""
    if not isinstance(block, mcp_types.EmbeddedResource):
        return None
    contents = block.resource
    if not isinstance(contents, mcp_types.BlobResourceContents):
        return None
    kind = contents.mime_type or "type unknown"
    try:
        data = base64.b64decode(contents.blob, validate=True)
    except (binascii.Error, ValueError):
        return f"[resource {_uri(contents)} ({kind}) not shown: not valid base64]"
    if kind.startswith(_TEXT_TYPES):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return f"[resource {_uri(contents)} ({kind}, {len(data):,} bytes) not shown: not UTF-8]"
    if not data.startswith(b"%PDF-"):
        return f"[binary resource {_uri(contents)} ({kind}, {len(data):,} bytes) not shown]"
    if taken >= MAX_TOOL_DOCUMENTS:
        return f"[document ({PDF}) not shown: more than {MAX_TOOL_DOCUMENTS} in one result]"
    if len(data) > MAX_TOOL_DOCUMENT_BYTES:
        return f"[document ({PDF}, {len(data):,} bytes) not shown: larger than a model takes]"
    return Document(data, f"{tool} document {taken + 1}")


def _uri(contents: mcp_types.BlobResourceContents) -> str:
    """The resource's URI, quoted: the server's text, which cannot end the bracket."""
    return json.dumps(str(contents.uri)[:200], ensure_ascii=True)


def _picture(block: mcp_types.ContentBlock, taken: int, tool: str) -> Image | str | None:
    """An image block as a picture, or the text saying why it is not shown; None for a
    block of another kind."""
    if not isinstance(block, mcp_types.ImageContent):
        return None
    if taken >= MAX_TOOL_IMAGES:
        return f"[image ({block.mime_type}) not shown: more than {MAX_TOOL_IMAGES} in one result]"
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return f"[image ({block.mime_type}) not shown: not valid base64]"
    media_type = _media_type(data)
    if media_type is None:
        return f"[image ({block.mime_type}) not shown: not a png, jpeg, gif or webp picture]"
    if len(data) > MAX_TOOL_IMAGE_BYTES:
        return f"[image ({media_type}, {len(data):,} bytes) not shown: larger than a model takes]"
    return Image(media_type, data, f"{tool} image {taken + 1}")


def _media_type(data: bytes) -> str | None:
    """The picture type of `data` by its magic bytes (webp: RIFF….WEBP)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), None)


def _size(data: str) -> str:
    """The size of base64 `data` once decoded, as a note names it."""
    try:
        return f"{len(base64.b64decode(data, validate=True)):,} bytes"
    except (binascii.Error, ValueError):
        return "not valid base64"


def _render_block(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.AudioContent):
        return (
            f"[audio ({block.mime_type}, {_size(block.data)}) not shown: no model here hears audio]"
        )
    if isinstance(block, mcp_types.ImageContent):
        return f"[{block.type} ({block.mime_type}) not shown]"
    if isinstance(block, mcp_types.EmbeddedResource):
        contents = block.resource
        text = getattr(contents, "text", None)
        return text if isinstance(text, str) else f"[binary resource {contents.uri} not shown]"
    return f"[resource link: {block.uri}]"
