"""Which Slack client a piece of work uses: the one of its workspace.

One gateway serves one workspace (`SLACK_BOT_TOKEN`) or many (Slack's OAuth install flow,
gateway/slack/oauth.py). Either way every Slack call — admission's names and back-fill, the
status, streams and posts of a task, reconciliation, operator alerts — asks `SlackClients`
for the client of the workspace it concerns, by the team (and, on Enterprise Grid, the
enterprise) in the event or in the task's address. Nothing mixes workspaces: each has its
own client (its own token), and its own name cache (a user id is only unique within a
team), in one `Workspace`.

With one workspace, `SlackClients.single` answers that workspace's client for every team.
With many, a workspace is opened from its latest installation on first use and kept until
it is uninstalled, its tokens are revoked, or Slack refuses its token (`forget`): the next
use reads the installation again, so a reinstall's new token is picked up.

An org-wide install (Enterprise Grid) has no team of its own: a team without an
installation of its own is served by its enterprise's org-wide one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from agent import Task
from gateway.slack.client import MeteredWebClient
from gateway.slack.errors import SlackUnavailable
from gateway.slack.read_pacing import ReadPacing
from gateway.slack.sharing import ChannelSharing
from gateway.slack.threads import SlackThreads
from gateway.slack.users import UserDirectory
from storage import PostgresInstallations, StoredInstallation

# Builds the client of an installation (its token, metrics, the alarm naming it).
ClientFactory = Callable[[StoredInstallation], MeteredWebClient]


class NotInstalled(SlackUnavailable):
    """The app is not installed in the workspace a piece of work belongs to: to its callers
    a Slack call that never reached Slack, since none could be made (`method` is empty)."""

    def __init__(self, workspace: str | None) -> None:
        super().__init__("", "not_installed")
        self.args = (f"threadgate is not installed in Slack workspace {workspace}",)
        self.workspace = workspace


@dataclass(frozen=True, slots=True)
class Workspace:
    """One workspace's client and what reads through it."""

    client: AsyncWebClient  # a MeteredWebClient, but for tests that bring their own
    users: UserDirectory
    threads: SlackThreads
    installation: StoredInstallation | None = None  # None: the one SLACK_BOT_TOKEN workspace
    sharing: ChannelSharing | None = None  # which of its channels are shared (Slack Connect)


def open_workspace(
    client: AsyncWebClient,
    found: StoredInstallation | None = None,
    pacing: ReadPacing | None = None,
) -> Workspace:
    users = UserDirectory(client)
    threads = SlackThreads(client, users, pacing)
    return Workspace(client, users, threads, found, ChannelSharing(client))


def label(found: StoredInstallation) -> str:
    """How alerts and logs name a workspace: its team (or enterprise) id and name."""
    key = found.team_id or found.enterprise_id or "?"
    name = found.team_name or found.enterprise_name
    return f"{key} ({name})" if name else key


class SlackClients:
    """The Slack client (and name cache, thread reader) of each workspace."""

    def __init__(
        self,
        *,
        single: Workspace | None = None,
        installations: PostgresInstallations | None = None,
        make_client: ClientFactory | None = None,
        operator_team: str | None = None,
        pacing: ReadPacing | None = None,
    ) -> None:
        self._single = single
        self._pacing = pacing  # Slack's reads paced (gateway/slack/read_pacing.py)
        self._installations = installations
        self._make_client = make_client
        self._operator_team = operator_team
        self._open: dict[tuple[str | None, str | None], Workspace] = {}
        self._lock = asyncio.Lock()

    @classmethod
    def single(cls, client: AsyncWebClient, pacing: ReadPacing | None = None) -> SlackClients:
        """One workspace: `client` for every team (its reads paced by `pacing`)."""
        return cls(single=open_workspace(client, pacing=pacing), pacing=pacing)

    @property
    def pacing(self) -> ReadPacing | None:
        return self._pacing

    @property
    def many(self) -> bool:
        return self._single is None

    async def for_team(
        self, team_id: str | None, enterprise_id: str | None = None
    ) -> AsyncWebClient:
        return (await self.workspace(team_id, enterprise_id)).client

    async def for_address(self, address: Mapping[str, str]) -> AsyncWebClient:
        """The client of a task's workspace (its address names the team, and the
        enterprise when there is one)."""
        return await self.for_team(address.get("team"), address.get("enterprise"))

    async def workspace(self, team_id: str | None, enterprise_id: str | None = None) -> Workspace:
        """The workspace's client and readers; `NotInstalled` when the app is not there."""
        if self._single is not None:
            return self._single
        key = (enterprise_id, team_id)
        if (ready := self._open.get(key)) is not None:
            return ready
        async with self._lock:  # one client per workspace, however many events arrive at once
            if (ready := self._open.get(key)) is None:
                ready = self._open[key] = await self._opened(team_id, enterprise_id)
            return ready

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        """`agent.ThreadReader`: the task's thread, read with its workspace's token."""
        workspace = await self.workspace(task.address.get("team"), task.address.get("enterprise"))
        return await workspace.threads.read_thread(task, limit=limit)

    async def installation(
        self, team_id: str | None, enterprise_id: str | None, *, is_enterprise_install: bool = False
    ) -> StoredInstallation | None:
        """The installation serving a workspace: its own, else its enterprise's org-wide one."""
        assert self._installations is not None  # only asked in OAuth mode
        if not is_enterprise_install:
            found = await self._installations.find(enterprise_id, team_id)
            if found is not None or enterprise_id is None:
                return found
        return await self._installations.find(enterprise_id, None, is_enterprise_install=True)

    async def _opened(self, team_id: str | None, enterprise_id: str | None) -> Workspace:
        assert self._make_client is not None
        found = await self.installation(team_id, enterprise_id)
        if found is None:
            raise NotInstalled(team_id or enterprise_id)
        return open_workspace(self._make_client(found), found, self._pacing)

    def forget(self, team_id: str | None, enterprise_id: str | None = None) -> None:
        """Drop a workspace's client (uninstalled, revoked, refused): the next use reads
        its installation again. An org-wide one (no team) goes with every team it served."""
        for key, ready in list(self._open.items()):
            found = ready.installation
            if key == (enterprise_id, team_id) or (
                team_id is None and found is not None and found.enterprise_id == enterprise_id
            ):
                del self._open[key]

    async def operator(self) -> AsyncWebClient | None:
        """The client of the workspace the operator channel lives in: THREADGATE_OPERATOR_TEAM's,
        else the first one installed; None when there is none yet."""
        if self._single is not None:
            return self._single.client
        assert self._installations is not None
        team, enterprise = self._operator_team, None
        if team is None:
            installed = [s for s in await self._installations.installations() if s.team_id]
            if not installed:
                return None
            team, enterprise = installed[0].team_id, installed[0].enterprise_id
        try:
            return await self.for_team(team, enterprise)
        except NotInstalled:
            return None
