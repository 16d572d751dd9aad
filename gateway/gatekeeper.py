"""The gatekeeper: from an inbound Slack message to a durable, provenance-tagged task.

It resolves display names, turns Slack markup into plain text, wraps it in a `<turn>` tag
and admits it in one transaction. The caller acks Slack only after `admit` returns: an
acked event is never lost. Name lookups are bounded in time, so a slow `users.info`
delays the ack by at most that bound (the id stands in for the name).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from gateway.inbound import InboundTurn, MalformedEvent
from gateway.markup import mentioned_user_ids, slack_to_text
from gateway.provenance import Turn, render_turn
from gateway.users import UserDirectory
from storage.admission import Admission, admit
from storage.database import Database


class Gatekeeper:
    def __init__(
        self, db: Database, users: UserDirectory, *, name_timeout_seconds: float = 1.0
    ) -> None:
        self._db = db
        self._users = users
        self._name_timeout = name_timeout_seconds

    async def admit(self, inbound: InboundTurn, *, bot_user_id: str | None) -> bool:
        """Store the turn and its task; False when Slack delivered it before."""
        rendered = await self.render(inbound, bot_user_id=bot_user_id)
        return await admit(
            self._db,
            Admission(
                event_id=inbound.event_id,
                task_id=inbound.task_id,
                session_id=inbound.session_id,
                address={
                    "team": inbound.team,
                    "channel": inbound.channel,
                    "thread_ts": inbound.reply_thread_ts,
                },
                turn_text=rendered,
            ),
        )

    async def render(self, inbound: InboundTurn, *, bot_user_id: str | None) -> str:
        names = await self._names([inbound.user, *mentioned_user_ids(inbound.text)])
        body = slack_to_text(inbound.text, user_names=names, bot_user_id=bot_user_id)
        turn = Turn(
            names.get(inbound.user, inbound.user),
            inbound.user,
            inbound.channel,
            slack_time(inbound.ts),
            body,
        )
        return render_turn(turn)

    async def _names(self, user_ids: list[str]) -> dict[str, str]:
        try:
            return await asyncio.wait_for(self._users.names(user_ids), self._name_timeout)
        except TimeoutError:
            return {}


def slack_time(ts: str) -> datetime:
    """A Slack message ts ("1700000000.000100") as an aware UTC datetime."""
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise MalformedEvent(f"not a Slack timestamp: {ts[:40]!r}") from exc
