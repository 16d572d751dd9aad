"""Slack's Stop button: an `agent_session_stopped` event becomes a stop stored in Postgres.

The event names a thread (gateway/slack/events.py, `SessionStopped`). `Stops.apply` stores
the stop before the listener returns, so the ack comes only once it is durable — the same
rule as a message's admission — and storage/stops.py does the rest on every replica: the
thread's work ends within moments, a worker says once that it was stopped and ends the
thread's agent session, and the next message is answered as usual.

When nothing was working in the thread (the task had just finished, or a crashed process
left the session showing `processing`), there is nobody to end the session, so it is ended
here, at once, with `agents.sessions.setStatus` — display only: a failure is logged and
the event acked all the same. Slack never does it itself.
"""

from __future__ import annotations

import logging
from typing import Literal, TypeAlias

from gateway.slack.errors import SlackError
from gateway.slack.events import SessionStopped
from gateway.slack.workspaces import SlackClients
from storage import Database, ThreadStop, stop_thread

log = logging.getLogger(__name__)

StopOutcome: TypeAlias = Literal["stopped", "nothing_to_stop"]


class Stops:
    """Stores the stops of one gateway's workspaces (module docstring)."""

    def __init__(self, db: Database, clients: SlackClients) -> None:
        self._db = db
        self._clients = clients

    async def apply(self, stop: SessionStopped) -> StopOutcome:
        """Store the stop (durable when this returns); end an idle session's `processing`."""
        stopped = await stop_thread(
            self._db, ThreadStop(stop.team, stop.channel, stop.thread_ts, stop.user)
        )
        if stopped:
            log.info("stop in %s/%s: task %s", stop.channel, stop.thread_ts, stopped.task_id)
            return "stopped"
        await self._end_session(stop)
        return "nothing_to_stop"

    async def _end_session(self, stop: SessionStopped) -> None:
        try:
            client = await self._clients.for_team(stop.team, stop.enterprise)
            await client.agents_sessions_setStatus(
                channel_id=stop.channel, thread_ts=stop.thread_ts, status="active"
            )
        except SlackError as exc:
            log.info("ending the agent session of %s/%s: %s", stop.channel, stop.thread_ts, exc)
