"""MCP servers as work tools: one long-lived connection per server, and a tool per tool.

threadgate is an MCP client through the official SDK (`mcp`), which only
`agent.rounds.mcp_session` touches: this module imports it when a connection first
connects, so a gateway without MCP servers never loads the SDK. The SDK runs on anyio,
and a session lives inside its context managers, so each server gets one asyncio task of
its own (`McpConnection.run`) that enters them, initializes, lists the tools, and then
holds the session open, pinging it, until it breaks; then it waits (with growing backoff)
and connects again, forever. Calls from rounds use the held session directly; a call
that finds the connection broken tells the task, which reconnects at once instead of at
its next ping.

Each allowed tool of a connected server is a `McpTool` in the deployment's
`ToolRegistry`, named `server__tool` (providers accept `^[a-zA-Z0-9_-]{1,64}$`; other
characters become `_`, and a name that would be too long or clash keeps a short hash of
the original). A tool is offered only while its server is connected and lists it, and,
in a sub-agent, only to the subtask types the config gives its server to. A tool this
client cannot call (`uncallable`: one that runs only as an MCP task) is not offered at
all, and the log says so once per connection that changes the list.

A call carries a progress token when the round asks for progress (`ToolContext.progress`):
what the server reports while the tool runs goes there, its secrets replaced like every
word of the server's, and the thread shows it on the tool's card.

Arguments are validated here with the JSON Schema the server declared, at a cost bounded
before the check starts (`agent.rounds.mcp_schemas`: a backtracking `pattern` cannot
freeze the process): the model reads a precise complaint and can repair its call without
a round trip to the server, or is told which field could not be checked. A schema that
cannot be compiled (an invalid one, or a `$ref` that does not resolve) is not held
against the model: the arguments go through and the server validates them. What the
server says about a tool reaches the model as data too: its description and the
descriptions and titles in its schema are stripped of invisible characters and their
turn tags escaped (`agent.core.text`). The server's limits (`timeoutSeconds`,
`maxOutputChars`) override the round's for its tools; the `Toolbox` applies both, and
frames the output as data like every other tool result, turn tags escaped.

Nothing a server does can crash a round: a tool error (`isError`), a protocol error, a
dead connection and a timeout all become failed tool results. The secrets of a server's
config (its `${VAR}` values, headers and env) are replaced in every error text before it
reaches a log line or the model, and in what a stdio server writes on its stderr: that
goes through a pipe into our log, a line at a time and named after the server, never
straight to the gateway's own stderr, where a server printing its token would show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import BaseModel, ConfigDict

from agent.core.errors import ToolFailed
from agent.core.ports import ToolProgress
from agent.core.text import neutralize_turns, sanitize_text
from agent.models.schemas import closed_schema
from agent.rounds.mcp_config import McpConfig, McpServerConfig
from agent.rounds.mcp_schemas import SchemaCheck, schema_check
from agent.rounds.tools import ProgressReport, ToolContext, ToolOutput, ToolRegistry, WorkTool

if TYPE_CHECKING:
    import mcp_types

    from agent.rounds.mcp_session import Session

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
_STDERR_CHUNK = 65536  # bytes read from a stdio server's stderr at once
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_DESCRIPTION = 1024
_ANNOTATIONS = frozenset({"description", "title"})  # schema words shown, never checked


class McpToolError(ToolFailed):
    """The server answered the call with an error (or a result it could not describe)."""


class McpServerUnavailable(ToolFailed):
    """The server is not connected (or the connection broke during the call)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds between reconnection attempts: `first`, doubling up to `most`."""

    first: float = 1.0
    most: float = 60.0


@dataclass(frozen=True, slots=True)
class Connecting:
    """How connections are kept: reconnection backoff, idle ping, connect time limit, and
    where a stdio server's stderr goes (None: the gateway's own)."""

    backoff: Backoff = Backoff()
    ping_seconds: float = 15.0
    connect_seconds: float = 30.0
    errlog: TextIO | None = None


@dataclass(frozen=True, slots=True)
class McpServerState:
    """How a server is doing, for `threadgate doctor` and the logs."""

    name: str
    transport: str
    connected: bool
    tools: tuple[str, ...]  # the names offered to the model
    error: str | None  # why the last attempt failed (secrets redacted), if it did
    skipped: tuple[tuple[str, str], ...] = ()  # allowed tools not offered: (name, why)


class McpConnection:
    """One server's session, held open by `run` (a task of its own) and used by calls."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        on_tools: Callable[[McpConnection], None] = lambda _: None,
        connecting: Connecting = Connecting(),
    ) -> None:
        self.config = config
        self._on_tools = on_tools
        self._backoff = connecting.backoff
        self._ping_seconds = connecting.ping_seconds
        self._connect_seconds = connecting.connect_seconds
        self._errlog = connecting.errlog
        self._session: Session | None = None
        self.tools: dict[str, mcp_types.Tool] = {}  # by the server's name, allowed ones only
        self.skipped: dict[str, str] = {}  # allowed tools it cannot call: why, by name
        self.error: str | None = None
        self.settled = asyncio.Event()  # the first attempt connected or failed
        self._broken = asyncio.Event()
        self._stopping = False
        self._in_flight = 0
        self._secrets = sorted((s for s in config.secrets if len(s) >= 4), key=len, reverse=True)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def connected(self) -> bool:
        return self._session is not None

    def offers(self, tool: str) -> bool:
        return self._session is not None and tool in self.tools

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    async def run(self) -> None:
        """Connect, hold the session until it breaks, wait, connect again — until cancelled."""
        delay = self._backoff.first
        while not self._stopping:
            try:
                await self._serve_once()
                delay = self._backoff.first  # it was up; the next failure starts afresh
            except Exception as exc:
                self.error = self.redact(_describe(exc))
                log.warning("MCP server %s: %s; retrying in %g s", self.name, self.error, delay)
            self._session = None
            self.settled.set()
            if self._stopping:
                return
            await asyncio.sleep(delay)  # backoff between attempts, not synchronization
            delay = min(delay * 2, self._backoff.most)

    def stop(self) -> None:
        """Ask `run` to close the session and return. Closing from inside, rather than by
        cancelling the task, lets the SDK's shutdown (close stdin, wait, terminate) run
        without an asyncio cancellation landing in the middle of it."""
        self._stopping = True
        self._broken.set()

    async def _serve_once(self) -> None:
        from agent.rounds import mcp_session  # the SDK: imported once a server is used

        async with AsyncExitStack() as stack:
            errlog = self._errlog
            if errlog is None and self.config.command is not None:
                errlog = self._stderr_relay(stack)  # entered first, so closed last
            session = await stack.enter_async_context(
                mcp_session.open_session(
                    self.config, errlog=errlog, connect_seconds=self._connect_seconds
                )
            )
            async with asyncio.timeout(self._connect_seconds):
                await session.initialize()
                listed = await session.tools()
            self._take_tools(listed)
            self._broken.clear()
            self._session, self.error = session, None
            log.info("MCP server %s connected: %d tool(s) offered", self.name, len(self.tools))
            self._on_tools(self)
            self.settled.set()
            await self._watch(session)
        if not self._stopping:
            log.warning("MCP server %s: the connection was lost; reconnecting", self.name)

    def _take_tools(self, listed: list[mcp_types.Tool]) -> None:
        """Offer the allowed tools this client can call; say once which it cannot, and why
        (again only if that changes when the server is reconnected)."""
        allowed = [t for t in listed if self.config.allows(t.name)]
        skipped = {t.name: why for t in allowed if (why := uncallable(t)) is not None}
        self.tools = {t.name: t for t in allowed if t.name not in skipped}
        if skipped and skipped != self.skipped:
            log.warning(
                "MCP server %s: not offering %s",
                self.name,
                "; ".join(f"{name} ({why})" for name, why in skipped.items()),
            )
        self.skipped = skipped

    def _stderr_relay(self, stack: AsyncExitStack) -> TextIO:
        """The write end of a pipe for the server's stderr, whose lines `_relay` logs. On
        `stack`'s exit — after the server's, which was entered later — the write end is
        closed and the last lines read; a grandchild still holding the pipe (a server
        started through `npx`) is not waited for past a second."""
        read_end, write_end = os.pipe()
        errlog = os.fdopen(write_end, "w")
        relay = asyncio.create_task(self._relay(read_end), name=f"mcp-stderr-{self.name}")

        async def close() -> None:
            errlog.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(relay)
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay

        stack.push_async_callback(close)
        return errlog

    async def _relay(self, read_end: int) -> None:
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_end, "rb", buffering=0)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            pending = b""
            while chunk := await reader.read(_STDERR_CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > _STDERR_CHUNK:  # a line without end: logged in pieces
                    lines, pending = [*lines, pending], b""
                for line in lines:
                    self._say(line)
            self._say(pending)
        finally:
            transport.close()

    def _say(self, line: bytes) -> None:
        text = line.decode(errors="replace").rstrip()
        if text:
            log.info("MCP server %s: %s", self.name, self.redact(text))

    async def _watch(self, session: Session) -> None:
        """Return when the connection is broken: a call said so, or a ping went unanswered.
        No ping while calls are in flight: a big result may hold the line longer than a
        ping may wait, and a broken line fails those calls anyway."""
        while True:
            try:
                async with asyncio.timeout(self._ping_seconds):
                    await self._broken.wait()
                return
            except TimeoutError:
                pass
            if self._in_flight == 0:
                async with asyncio.timeout(self._ping_seconds):
                    await session.ping()

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: ProgressReport | None = None
    ) -> ToolOutput:
        """The tool's output (its text, and the pictures it returned); `McpToolError` or
        `McpServerUnavailable` if none. With `progress`, the call carries a progress token
        and what the server reports goes there while it runs."""
        source = f"MCP server {self.name}, tool {tool}"
        session = self._session
        if session is None:
            raise McpServerUnavailable(
                f"the MCP server {self.name} is not connected ({self.error or 'connecting'}); "
                "try again later or go on without it",
                source=source,
            )
        self._in_flight += 1
        try:
            answer = await session.call(tool, arguments, self._shown(progress))
        except Exception as exc:
            self._broken.set()
            raise McpServerUnavailable(
                f"the connection to the MCP server {self.name} broke during the call "
                f"({type(exc).__name__}); it is being reconnected",
                source=source,
            ) from None
        finally:
            self._in_flight -= 1
        if answer.closed:
            self._broken.set()
        text = self.redact(answer.text)
        if answer.failed:
            raise McpToolError(text, source=source)
        return ToolOutput(text, answer.images, answer.documents)

    def _shown(self, progress: ProgressReport | None) -> ProgressReport | None:
        """`progress` given the server's messages with this server's secrets replaced."""
        if progress is None:
            return None

        async def report(update: ToolProgress) -> None:
            message = None if update.message is None else self.redact(update.message)
            await progress(ToolProgress(update.progress, update.total, message))

        return report

    def state(self) -> McpServerState:
        return McpServerState(
            self.name,
            self.config.transport,
            self.connected,
            tuple(offered_name(self.name, t) for t in self.tools) if self.connected else (),
            self.error,
            tuple(self.skipped.items()) if self.connected else (),
        )


def uncallable(tool: mcp_types.Tool) -> str | None:
    """Why this client cannot call `tool`, or None when it can.

    The 2025-11 spec lets a server mark a tool `execution.taskSupport: "required"`: it
    answers only task-augmented calls (a `task` in the request, then `tasks/get` polling).
    The SDK we use declares the types but makes no such calls, so a plain call fails every
    time; offering the tool would only teach the model a tool that never works. ("optional"
    tools answer plain calls, and are offered.)"""
    execution = tool.execution
    if execution is not None and execution.task_support == "required":
        return "it runs only as an MCP task (execution.taskSupport: required), which threadgate does not make"
    return None


def _describe(exc: BaseException) -> str:
    """An exception (group) as one line: the innermost causes, by type and message."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_describe(inner) for inner in exc.exceptions))
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def offered_name(server: str, tool: str) -> str:
    """`server__tool` as providers accept it; changed names keep a hash of the original."""
    plain = f"{server}__{tool}"
    if _TOOL_NAME.fullmatch(plain):
        return plain
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    cleaned = _NOT_IN_NAME.sub("_", plain)[: 64 - 9]
    return f"{cleaned}_{digest}"


class McpArguments(BaseModel):
    """The arguments of an MCP tool call, as the model wrote them (validated by schema)."""

    model_config = ConfigDict(frozen=True)
    values: dict[str, Any]


class McpTool(WorkTool[McpArguments]):
    """One tool of one MCP server, offered while the server is connected."""

    input_model = McpArguments

    def __init__(self, connection: McpConnection, tool: str, subtask_types: frozenset[str]) -> None:
        self.connection = connection
        self.server = connection.name
        self.tool = tool
        self.name = offered_name(self.server, tool)
        self.description = ""
        self.timeout_seconds = connection.config.timeout_seconds
        self.output_chars = connection.config.max_output_chars
        self.requires_approval = connection.config.needs_approval(tool)
        self._subtask_types = subtask_types
        self._schema: dict[str, Any] = {"type": "object", "properties": {}}
        self._check: SchemaCheck | None = None

    def update(self, definition: mcp_types.Tool) -> None:
        """Take the server's current description and schema (it may change on reconnect)."""
        about = definition.description or definition.title or definition.name
        described = f"{_shown(about)} (from the MCP server {self.server})"
        self.description = described[:_MAX_DESCRIPTION]
        schema = dict(definition.input_schema)
        schema.setdefault("type", "object")
        if schema.get("type") == "object":
            schema.setdefault("properties", {})
        # Closed once here (agent/models/schemas.py), not at every request's ToolSpec; the
        # arguments are checked against the server's own schema.
        self._schema = closed_schema(_annotations_shown(schema))
        self._check = schema_check(schema)

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._schema

    def available(self, context: ToolContext) -> bool:
        if context.subtask_type is not None and context.subtask_type not in self._subtask_types:
            return False
        return self.connection.offers(self.tool)

    def parse_input(self, arguments: Mapping[str, Any]) -> McpArguments:
        values = dict(arguments)
        verdict = self._check.verdict(values) if self._check is not None else None
        if verdict is not None and verdict.unchecked:
            raise ValueError(
                f"{self.name} input could not be checked: the pattern the MCP server "
                f"{self.server} gives for {', '.join(verdict.unchecked)} is too costly to "
                "match against that value. Call it again with a shorter or simpler value, "
                "or go on without this tool."
            )
        if verdict is not None and verdict.problems:
            raise ValueError(
                f"{self.name} input is invalid ({'; '.join(verdict.problems)}). "
                "Call it again with input matching its schema."
            )
        return McpArguments(values=values)

    async def execute(self, context: ToolContext, input: McpArguments) -> ToolOutput:
        return await self.connection.call(self.tool, input.values, context.progress)


def _shown(text: str) -> str:
    """A server's words as the model may read them: nothing hidden, no turn tag."""
    return neutralize_turns(sanitize_text(text))


def _annotations_shown(node: Any) -> Any:
    """`node` (a schema) with its descriptions and titles `_shown`; nothing checked changes."""
    if isinstance(node, list):
        return [_annotations_shown(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _shown(value)
        if key in _ANNOTATIONS and isinstance(value, str)
        else _annotations_shown(value)
        for key, value in node.items()
    }


class McpClients:
    """Every configured server's connection, and their tools in a `ToolRegistry`."""

    def __init__(
        self,
        config: McpConfig,
        registry: ToolRegistry,
        connecting: Connecting = Connecting(),
    ) -> None:
        self._config = config
        self._registry = registry
        self._tasks: list[asyncio.Task[None]] = []
        self._tools: dict[str, McpTool] = {}
        self.connections = [
            McpConnection(server, on_tools=self._register, connecting=connecting)
            for server in config.enabled
        ]

    def start(self) -> None:
        """Start every connection's task (each connects, and reconnects, on its own)."""
        for connection in self.connections:
            task = asyncio.create_task(connection.run(), name=f"mcp-{connection.name}")
            self._tasks.append(task)

    async def wait_settled(self, timeout: float) -> None:  # noqa: ASYNC109 - a bound, not a sleep
        """Return once every server's first attempt connected or failed, or at `timeout`."""
        waits = [asyncio.create_task(c.settled.wait()) for c in self.connections]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            for wait in pending:
                wait.cancel()

    async def aclose(self, grace: float = 10.0) -> None:
        """Close every session; a connection still busy after `grace` seconds is cancelled."""
        for connection in self.connections:
            connection.stop()
        if self._tasks:
            _, busy = await asyncio.wait(self._tasks, timeout=grace)
            for task in busy:
                task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException as exc:  # a cancelled task, or one that failed on its way out
                if not isinstance(exc, asyncio.CancelledError):
                    log.warning(
                        "MCP connection %s ended with %s", task.get_name(), type(exc).__name__
                    )
        self._tasks.clear()

    def origin(self, offered: str) -> tuple[str, str] | None:
        """The (server, tool) behind an offered name, or None for a tool not from MCP."""
        tool = self._tools.get(offered)
        return None if tool is None else (tool.server, tool.tool)

    def states(self) -> list[McpServerState]:
        return [connection.state() for connection in self.connections]

    def secrets(self) -> Iterable[str]:
        return self._config.secrets()

    def _register(self, connection: McpConnection) -> None:
        kinds = self._config.subtask_types_of(connection.name)
        for name, definition in connection.tools.items():
            offered = offered_name(connection.name, name)
            tool = self._tools.get(offered)
            if tool is None:
                tool = McpTool(connection, name, kinds)
                try:
                    self._registry.register(tool)
                except ValueError:
                    log.warning(
                        "MCP tool %s of server %s is not offered: the name %s is taken",
                        name,
                        connection.name,
                        offered,
                    )
                    continue
                self._tools[offered] = tool
            tool.update(definition)
