"""The slash command (`/threadgate` by default): a person steering the bot without writing
to it, answered privately, on the ack.

Bolt hands each invocation (gateway/inbound/bolt_app.py; HTTP and Socket Mode alike) to
`SlashCommands.respond`, whose text rides on the ack as an ephemeral answer — the HTTP
200's body, or the Socket Mode ack's payload (gateway/inbound/socket_mode.py), as Slack's
reference for slash commands says. The answer is worked out within the look-up budget, well
inside Slack's 3 s; one that is not ready by then (a slow database) is acked with "working
on it" and follows through the command's `response_url` (gateway/slack/responses.py).

The gates are a message's: the allowlists (THREADGATE_ALLOWED_USERS, and
THREADGATE_ALLOWED_CHANNELS outside DMs), the channel's Slack Connect policy (the channel's
sharing looked up as for a message, gateway/slack/sharing.py; a channel that cannot be
checked is refused), and the person's hourly message limit, which counts commands too.
`stop` is the exception to the limit only: like Slack's Stop button, it always works.

What each subcommand reads or changes is the asker's own (storage/own_work.py): `status`
lists their open tasks here; `stop` stops their working task here and cancels their queued
ones (storage/stops.py, `stop_own_on`: the path of the Stop button, restricted to theirs);
`new` clears the DM's conversation (storage/sessions.py, as `threadgate sessions clear`
does), refused while a task of it is open; `usage` their spend today and this month, and
the channel's for an approver (THREADGATE_APPROVERS); `schedules` theirs, and `schedules
delete ID` one of theirs. The three that change something run once per invocation, keyed
by its `trigger_id` (`act_once`): a redelivered command is answered and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agent import Supervisor
from gateway.inbound import slash_answers as say
from gateway.inbound.channel_rules import RulesOf
from gateway.slack.commands import SlashCommand, Subcommand, Unknown, parse_subcommand
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics
from storage import (
    UNLIMITED,
    Again,
    Database,
    Limits,
    OwnStop,
    SessionBusy,
    StorageError,
    UnknownSession,
    act_once,
    clear_session_on,
    count_command,
    delete_schedule_on,
    list_schedules,
    open_tasks,
    stop_own_on,
    usage_of,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# Posts a late answer to a command's response_url (gateway/slack/responses.py).
PostLate = Callable[[str, str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class SlashSettings:
    """The command's name, who may use it where, the hourly limit it counts against, the
    approvers (who see a channel's usage), and the time its answer has before the ack."""

    command: str
    budget_seconds: float
    rules: RulesOf
    allowed_users: frozenset[str] = frozenset()
    allowed_channels: frozenset[str] = frozenset()
    limits: Limits = UNLIMITED  # the deployment's; a channel's own rules may replace them
    approvers: frozenset[str] = frozenset()


class SlashCommands:
    """Answers `/threadgate` (module docstring)."""

    def __init__(
        self,
        settings: SlashSettings,
        db: Database,
        clients: SlackClients,
        *,
        metrics: Metrics,
        supervisor: Supervisor,
        post_late: PostLate,
    ) -> None:
        self._s = settings
        self._db = db
        self._clients = clients
        self._metrics = metrics
        self._supervisor = supervisor
        self._post_late = post_late

    async def respond(self, command: SlashCommand) -> str:
        """The answer for the ack: ready within the budget, or "working on it" and the
        answer posted to the command's response_url when it is."""
        work = asyncio.ensure_future(self.answer(command))
        done, _ = await asyncio.wait({work}, timeout=self._s.budget_seconds)
        if work in done:
            return work.result()
        self._supervisor.spawn(self._follow_up(work, command), name=f"late-{command.trigger_id}")
        return say.WORKING

    async def _follow_up(self, work: asyncio.Future[str], command: SlashCommand) -> None:
        await self._post_late(command.response_url, await work)

    async def answer(self, command: SlashCommand) -> str:
        """What the command does, and the words saying so; counted by subcommand and
        outcome."""
        parsed = parse_subcommand(command.text)
        word: str = parsed.word if isinstance(parsed, Subcommand) else "unknown"
        if isinstance(parsed, Subcommand) and parsed.schedule_id is not None:
            word = "schedules_delete"
        try:
            text, outcome = await self._gated(command, parsed, word)
        except StorageError as exc:
            log.warning("%s %s failed: %s", command.command, word, exc)
            text, outcome = say.FAILED, "failed"
        self._metrics.slash_commands.labels(word, outcome).inc()
        return text

    async def _gated(
        self, command: SlashCommand, parsed: Subcommand | Unknown, word: str
    ) -> tuple[str, str]:
        if not self._allowed(command) or not await self._not_shared(command):
            return say.NOT_ALLOWED, "refused"
        limits = self._s.rules(command.channel).limits or self._s.limits
        per_hour = limits.user_messages_per_hour
        if word != "stop" and not await count_command(
            self._db, command.team, command.user, per_hour=per_hour
        ):
            return say.LIMITED, "limited"
        if isinstance(parsed, Unknown):
            return say.unknown_text(command.command, parsed), "answered"
        return await self._do(command, parsed)

    def _allowed(self, command: SlashCommand) -> bool:
        s = self._s
        if s.allowed_users and command.user not in s.allowed_users:
            return False
        return command.direct or not s.allowed_channels or command.channel in s.allowed_channels

    async def _not_shared(self, command: SlashCommand) -> bool:
        """The channel's Slack Connect policy allows it (looked up as for a message)."""
        rules = self._s.rules(command.channel)
        if rules.external == "allow":
            return True
        workspace = await self._clients.workspace(command.team, command.enterprise)
        if workspace.sharing is None:
            return True
        deadline = asyncio.get_running_loop().time() + self._s.budget_seconds / 2
        shared = await workspace.sharing.sharing(command.channel, deadline)
        return rules.refusal({"internal": False, "external": True}.get(shared)) is None

    async def _do(self, command: SlashCommand, parsed: Subcommand) -> tuple[str, str]:
        c = command
        if parsed.word == "status":
            tasks = await open_tasks(self._db, c.team, c.user, channel=c.channel)
            return say.status_text(tasks, direct=c.direct), "answered"
        if parsed.word == "stop":
            stop = OwnStop(c.team, c.user, channel=c.channel)
            stopped = await act_once(self._db, c.key, lambda conn: stop_own_on(conn, stop))
            return _or_again(stopped, lambda s: say.stop_text(s, direct=c.direct))
        if parsed.word == "new":
            return await self._new(c)
        if parsed.word == "usage":
            return await self._usage(c), "answered"
        if parsed.word == "schedules":
            return await self._schedules(c, parsed.schedule_id)
        return say.help_text(c.command), "answered"

    async def _new(self, c: SlashCommand) -> tuple[str, str]:
        if not c.direct:
            return (
                "In a channel every mention starts a conversation of its own (a thread), so "
                "there is nothing to start afresh; `new` clears the conversation of a DM.",
                "answered",
            )
        session = f"{c.team}:{c.channel}"
        actor, reason = f"slack:{c.user}", f"{c.command} new"
        try:
            cleared = await act_once(
                self._db,
                c.key,
                lambda conn: clear_session_on(conn, session, actor=actor, reason=reason),
            )
        except UnknownSession:
            return "This conversation is already fresh: there is nothing to forget.", "answered"
        except SessionBusy:
            text = (
                f"I'm still working on something here; wait for it or `{c.command} stop` it first."
            )
            return text, "busy"
        return _or_again(
            cleared, lambda _: "Done: my next answer here starts a fresh conversation."
        )

    async def _usage(self, c: SlashCommand) -> str:
        mine = await usage_of(self._db, "user", c.team, c.user)
        approver = c.user in self._s.approvers and not c.direct
        channel = await usage_of(self._db, "channel", c.team, c.channel) if approver else None
        return say.usage_text(mine, channel)

    async def _schedules(self, c: SlashCommand, schedule_id: str | None) -> tuple[str, str]:
        owner = f"{c.team}:{c.user}"
        if schedule_id is None:
            schedules = await list_schedules(self._db, owner=owner, limit=50)
            return say.schedules_text(schedules, c.command), "answered"
        deleted = await act_once(
            self._db, c.key, lambda conn: delete_schedule_on(conn, schedule_id, owner=owner)
        )
        return _or_again(deleted, lambda d: say.deleted_text(schedule_id, d))


def _or_again(result: T | Again, words: Callable[[T], str]) -> tuple[str, str]:
    """The words for what was done, or (a redelivery) that it was done before."""
    if isinstance(result, Again):
        return say.AGAIN, "again"
    return words(result), "answered"
