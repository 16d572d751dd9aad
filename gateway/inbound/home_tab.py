"""The App Home tab: each person sees what the bot is doing for them, and can stop it.

When someone opens the Home tab (`app_home_opened`, `tab: "home"`), their view
(gateway/slack/home_view.py) is published with `views.publish` — in the background, so
the event's ack waits for no Slack call; a Home tab left blank looks broken, so it is
published on every opening. Its buttons come back as `block_actions` clicks (HTTP or
Socket Mode, through the bolt app's action listener): Stop stops that task through the path
of the slash command's `stop` (storage/stops.py, `stop_own_on`, restricted to the one
task) and Delete deletes that schedule (storage/schedules.py); each finds only the
clicker's own task or schedule, so a click on anyone else's — a forged payload — changes
nothing. What the click does is stored before the ack; the view is published again after.

**Kept current, boundedly.** Slack does not say when someone leaves the tab, so the people
who opened it in the last `WATCH_SECONDS` (at most `MAX_WATCHED`, the most recent) are
watched: every `refresh_seconds` (THREADGATE_HOME_REFRESH_SECONDS; 0: never) their state
is read again — one indexed query each — and their view published only when what it shows
changed (a task finished or started, a schedule changed, their usage moved), not for the
ages, which change every second. Each ingress watches those who opened Home through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ValidationError

from agent import Supervisor
from gateway.slack.errors import SlackError, SlackRefused
from gateway.slack.events import HomeOpened, MalformedEvent, SlackId, summary
from gateway.slack.home_view import HOME_DELETE, HOME_STOP, HomeState, home_view
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics
from storage import (
    Database,
    OwnStop,
    StorageError,
    UnknownSchedule,
    delete_schedule,
    list_schedules,
    open_tasks,
    stop_own,
    usage_of,
)

log = logging.getLogger(__name__)

WATCH_SECONDS = 900.0
MAX_WATCHED = 1000
Reason: TypeAlias = Literal["opened", "changed", "clicked"]
ClickOutcome: TypeAlias = Literal["stopped", "deleted", "not_yours", "ignored"]


@dataclass(frozen=True, slots=True)
class Person:
    """Whose Home: the tenant's team (and enterprise), and the user."""

    team: str
    user: str
    enterprise: str | None = None


class _Id(BaseModel):
    id: SlackId


class _Action(BaseModel):
    action_id: str
    value: str = ""


class _HomeClick(BaseModel):
    user: _Id
    team: _Id | None = None
    enterprise: _Id | None = None
    is_enterprise_install: bool = False
    actions: list[_Action]


def clicker(payload: Mapping[str, Any]) -> tuple[Person, list[_Action]]:
    """Who clicked on their Home, and what; `MalformedEvent` if the payload says neither."""
    try:
        click = _HomeClick.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"home click: {summary(exc)}") from exc
    enterprise = click.enterprise.id if click.enterprise else None
    team = enterprise if click.is_enterprise_install and enterprise else None
    team = team or (click.team.id if click.team else None)
    if team is None:
        raise MalformedEvent("home click: no team")
    return Person(team, click.user.id, enterprise), click.actions


class HomeTab:
    """Publishes people's Home views, acts on their buttons, keeps them current."""

    def __init__(
        self,
        db: Database,
        clients: SlackClients,
        *,
        command: str,
        metrics: Metrics,
        supervisor: Supervisor,
        refresh_seconds: float,
    ) -> None:
        self._db = db
        self._clients = clients
        self._command = command
        self._metrics = metrics
        self._supervisor = supervisor
        self._refresh = refresh_seconds
        # Person → (when they opened it, the fingerprint of what they were last shown).
        self._watched: OrderedDict[Person, tuple[float, tuple[object, ...] | None]] = OrderedDict()

    async def opened(self, home: HomeOpened) -> str:
        """Publish the person's view (in the background) and watch it; the event's outcome."""
        person = Person(home.team, home.user, home.enterprise)
        self._watch(person)
        self._supervisor.spawn(self.publish(person, "opened"), name=f"home-{home.user}")
        return "home_opened"

    async def click(self, payload: Mapping[str, Any]) -> list[ClickOutcome]:
        """Act on the clicks (stored before the caller acks), then publish the view again."""
        person, actions = clicker(payload)
        outcomes = [await self._act(person, a) for a in actions]
        self._watch(person)
        self._supervisor.spawn(self.publish(person, "clicked"), name=f"home-{person.user}")
        return outcomes

    async def _act(self, person: Person, action: _Action) -> ClickOutcome:
        if action.action_id == HOME_STOP and action.value:
            stop = OwnStop(person.team, person.user, task_id=action.value, reason="App Home Stop")
            stopped = await stop_own(self._db, stop)
            return "stopped" if stopped else "not_yours"
        if action.action_id == HOME_DELETE and action.value:
            owner = f"{person.team}:{person.user}"
            try:
                deleted = await delete_schedule(self._db, action.value, owner=owner)
            except UnknownSchedule:
                deleted = False
            return "deleted" if deleted else "not_yours"
        return "ignored"

    async def publish(self, person: Person, reason: Reason) -> None:
        """Read the person's state and publish their view; display only: a failure is
        logged and counted, never raised."""
        try:
            state = await self.state_of(person)
            client = await self._clients.for_team(person.team, person.enterprise)
            view = home_view(state, command=self._command)
            await client.views_publish(user_id=person.user, view=view)
        except (StorageError, SlackError) as exc:
            outcome = exc.error if isinstance(exc, SlackRefused) else type(exc).__name__
            log.info("the Home view of %s was not published: %s", person.user, exc)
            self._metrics.home_views.labels(reason, outcome).inc()
            return
        self._metrics.home_views.labels(reason, "ok").inc()
        if person in self._watched:
            self._watched[person] = (self._watched[person][0], state.fingerprint)

    async def state_of(self, person: Person) -> HomeState:
        """What the person's Home shows: theirs only."""
        owner = f"{person.team}:{person.user}"
        tasks = await open_tasks(self._db, person.team, person.user)
        schedules = await list_schedules(self._db, owner=owner, limit=50)
        usage = await usage_of(self._db, "user", person.team, person.user)
        return HomeState(tasks, schedules, usage)

    def _watch(self, person: Person) -> None:
        shown = self._watched.pop(person, (0.0, None))[1]
        self._watched[person] = (time.monotonic(), shown)
        while len(self._watched) > MAX_WATCHED:
            self._watched.popitem(last=False)

    async def refresh(self) -> int:
        """Publish again the views of those watched whose state changed; how many."""
        cutoff = time.monotonic() - WATCH_SECONDS
        for person, (opened_at, _) in list(self._watched.items()):
            if opened_at < cutoff:
                del self._watched[person]
        published = 0
        for person, (_, shown) in list(self._watched.items()):
            try:
                state = await self.state_of(person)
            except StorageError as exc:
                log.info("Home views not refreshed: %s", exc)
                return published
            if state.fingerprint != shown:
                await self.publish(person, "changed")
                published += 1
        return published

    async def keep_current(self) -> None:
        """`refresh` every `refresh_seconds`, until cancelled (nothing when 0)."""
        while self._refresh > 0:
            await asyncio.sleep(self._refresh)
            await self.refresh()
