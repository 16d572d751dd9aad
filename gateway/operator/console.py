"""`threadgate console`: a chat in the terminal through the real gatekeeper, store and loop.

Trying a model or a prompt should not need a Slack workspace, and what it shows should be
what Slack users will get. So only Slack itself is replaced: each line typed becomes an
`InboundTurn` (escaped the way Slack escapes text), goes through the same `Gatekeeper`
into the same Postgres store, and is answered by the same task runner (`build_runner`);
replies come back through a `TerminalPublisher` instead of `chat.postMessage`, and
operator alerts go to stderr. A console session is one conversation, like one Slack thread.

Lines are read on a daemon thread that reads only when asked, so stdin may be a terminal
(with line editing) or a pipe, and Ctrl-C never waits on a blocked read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from queue import SimpleQueue
from typing import TextIO

from agent import (
    NOTHING_DELIVERED,
    Citation,
    Delivered,
    ModelError,
    Step,
    Task,
    default_registries,
)
from gateway.config.settings import Settings, database_dsn
from gateway.delivery.alerts import headline, what_to_check
from gateway.inbound.gatekeeper import Gatekeeper, GatekeeperPorts, GatekeeperSettings, Policy
from gateway.models.routes import open_models
from gateway.process.runner import RunnerParts, build_runner, start_mcp
from gateway.slack.events import InboundTurn
from gateway.text.markup import escape_entities
from storage import Database, PostgresToolCalls

TEAM = "TCONSOLE"
CHANNEL = "CCONSOLE"
USER = "ULOCAL"


class LocalNames:
    """`gateway.slack.users.NameDirectory` for one local user."""

    def __init__(self, user_id: str, name: str) -> None:
        self._user_id = user_id
        self._name = name

    async def names(self, user_ids: list[str]) -> dict[str, str]:
        return {user_id: self._name for user_id in user_ids if user_id == self._user_id}


class TerminalPublisher:
    """`agent.Publisher` printing to a stream, once per message id; it also tells the
    console when a task's last message (its reply or its failure notice) was printed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._printed: set[str] = set()
        self._done: dict[str, asyncio.Event] = {}

    async def publish(
        self,
        task: Task,
        message_id: str,
        text: str,
        *,
        steps: Sequence[Step] = (),
        citations: Sequence[Citation] = (),
        finishing: bool = False,
    ) -> Delivered:
        if message_id not in self._printed:
            self._printed.add(message_id)
            sources = ", ".join(c.url or f"message {c.message_id}" for c in citations)
            shown = f"{text}\n\nSources: {sources}" if sources else text
            print(f"{shown}\n", file=self._out, flush=True)
        if message_id in (task.reply_id, task.failure_id):
            self._finished(task.id).set()
        return NOTHING_DELIVERED  # printed is recorded: nothing is left to the finish

    @contextlib.asynccontextmanager
    async def working(self, task: Task) -> AsyncIterator[None]:
        yield  # the console waits visibly anyway: the prompt comes back with the answer

    async def wait_answered(self, task_id: str) -> None:
        await self._finished(task_id).wait()
        del self._done[task_id]

    def _finished(self, task_id: str) -> asyncio.Event:
        return self._done.setdefault(task_id, asyncio.Event())


class TerminalAlerts:
    """`agent.AlertSink` for the console: the operator is the person at the terminal."""

    def __init__(self, err: TextIO) -> None:
        self._err = err

    async def credential_failure(self, task: Task, error: Exception) -> bool:
        route = error.route if isinstance(error, ModelError) else None
        provider = route.provider if route else "the provider"
        print(
            f"threadgate: {headline(error, provider)} {what_to_check(error, provider)}",
            file=self._err,
            flush=True,
        )
        return True


class LineReader:
    """Lines from stdin, read on a daemon thread one at a time when asked; None at EOF."""

    def __init__(self, prompt: str) -> None:
        self._prompt = prompt
        self._asks: SimpleQueue[asyncio.Future[str | None]] = SimpleQueue()
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._serve, name="console-stdin", daemon=True).start()

    async def read(self) -> str | None:
        answer: asyncio.Future[str | None] = self._loop.create_future()
        self._asks.put(answer)
        return await answer

    def _serve(self) -> None:
        while True:
            answer = self._asks.get()
            try:
                line: str | None = input(self._prompt)
            except (EOFError, OSError, ValueError):  # ValueError: stdin was closed
                line = None
            self._loop.call_soon_threadsafe(_settle, answer, line)
            if line is None:
                return


def _settle(answer: asyncio.Future[str | None], line: str | None) -> None:
    if not answer.done():
        answer.set_result(line)


class Conversation:
    """The console session as one Slack-like thread: every line after the first replies
    in the thread the first one started."""

    def __init__(self, user: str) -> None:
        self._user = user
        self._thread_ts: str | None = None
        self._last = 0.0

    def turn(self, line: str) -> InboundTurn:
        ts = self._next_ts()
        turn = InboundTurn(
            team=TEAM,
            channel=CHANNEL,
            user=self._user,
            text=escape_entities(line),  # as Slack escapes typed text
            ts=ts,
            thread_ts=self._thread_ts,
            direct=False,
            event_id=None,
            ext_shared=False,  # a terminal is nobody else's organization
        )
        self._thread_ts = self._thread_ts or ts
        return turn

    def _next_ts(self) -> str:
        self._last = max(time.time(), self._last + 0.000001)
        return f"{self._last:.6f}"


def local_name() -> str:
    return os.environ.get("USER") or "you"


async def run_console(settings: Settings) -> int:
    """Chat until EOF; each line is answered before the next is read."""
    models = open_models(settings)
    # One line per model call on stderr would drown the chat; warnings still show.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    settings = settings.replace(threadgate_workers=1)
    publisher = TerminalPublisher(sys.stdout)
    async with AsyncExitStack() as stack:
        for model in models:
            stack.push_async_callback(model.aclose)
        db = await stack.enter_async_context(Database(await database_dsn(settings)))
        await db.migrate()
        registries = default_registries()
        await start_mcp(settings, registries[0], stack)  # the same MCP tools as `serve`
        parts = RunnerParts(
            publisher,
            TerminalAlerts(sys.stderr),
            registries=registries,
            tool_observer=PostgresToolCalls(db),
        )
        runner = build_runner(settings, db, models, parts)
        runner.start()
        stack.push_async_callback(runner.stop)
        gatekeeper = Gatekeeper(
            GatekeeperSettings(
                # Everyone at the terminal may talk; there is no thread to read back.
                policy=Policy(
                    continue_threads=settings.access.continue_threads,
                    backfill_messages=settings.memory.backfill_messages,
                ),
                lookup_budget_seconds=settings.process.lookup_budget_seconds,
            ),
            GatekeeperPorts(db=db, users=LocalNames(USER, local_name())),
        )
        await chat(gatekeeper, publisher)
    return 0


async def chat(gatekeeper: Gatekeeper, publisher: TerminalPublisher) -> None:
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - importing it gives input() line editing and history
    reader = LineReader("you> " if interactive else "")
    conversation = Conversation(USER)
    while (line := await reader.read()) is not None:
        if not line.strip():
            continue
        turn = conversation.turn(line)
        await gatekeeper.admit(turn, bot_user_id=None)
        await publisher.wait_answered(turn.task_id)
    if interactive:
        print()  # after Ctrl-D, the shell's prompt starts on a line of its own
