"""What the app leaving a workspace does: Slack's `app_uninstalled`, or a `tokens_revoked`
naming the bot's tokens (gateway/inbound/bolt_app.py tells them apart), in either mode.

With many workspaces the installation goes; in both modes the workspace's tasks stop, its
schedules pause, and what threadgate stored of it is erased (storage/erasure.py): Slack's
API terms let a distributed app keep a workspace's data only while it needs it. An
operator running threadgate for one workspace (SLACK_BOT_TOKEN) subscribes to the same
events (gateway/slack/manifest.py), so an uninstall there erases the same way.
"""

from __future__ import annotations

import logging

from agent import Supervisor
from gateway.slack.events import Tenant
from gateway.slack.workspaces import SlackClients
from storage import (
    Database,
    Erasure,
    PostgresInstallations,
    cancel_workspace_tasks,
    pause_workspace,
    request_erasure,
    uninstall_seen,
)

log = logging.getLogger(__name__)

# Why a workspace's schedules stop running (and its content is erased) when the app leaves.
UNINSTALLED = "the app was uninstalled from its workspace (app_uninstalled)"
UNINSTALL_ACTOR = "slack:app_uninstalled"


class Uninstaller:
    """What an uninstall (or a revocation of the bot's tokens) does, once per delivery: the
    installation is deleted (many workspaces), its cached client dropped, the workspace's
    unfinished tasks cancelled through the operators' cancel path — so nothing more is
    posted there (the token is gone: a post could only fail and raise the alarm) — its
    schedules paused, and the erasure of what it stored requested (storage/erasure.py),
    then started in the background once settled; the workers' sweep finishes it if this
    process cannot. A redelivery of a handled uninstall changes nothing: after a reinstall,
    a late one must not take the new installation away.

    Each step may run twice (two replicas given the event at once): all are idempotent,
    and the delivery is marked seen only with the request, the last step, so a delivery
    that failed half-way is retried whole."""

    def __init__(
        self,
        db: Database,
        installations: PostgresInstallations | None,
        clients: SlackClients,
        erasure: Erasure,
        supervisor: Supervisor,
    ) -> None:
        self._db = db
        self._installations = installations
        self._clients = clients
        self._erasure = erasure
        self._supervisor = supervisor

    async def __call__(self, tenant: Tenant, event_id: str | None) -> None:
        if await uninstall_seen(self._db, event_id):
            log.info("uninstall of Slack workspace %s delivered again: handled", tenant.team)
            return
        team = tenant.installed_team
        if self._installations is not None:
            await self._installations.delete(tenant.enterprise, team)
            self._clients.forget(team, tenant.enterprise)
        cancelled = await cancel_workspace_tasks(
            self._db, team, enterprise_id=tenant.enterprise, actor=UNINSTALL_ACTOR
        )
        paused = (
            await pause_workspace(self._db, team, tenant.enterprise, UNINSTALLED) if team else 0
        )
        await request_erasure(self._db, tenant.team, reason=UNINSTALLED, event_id=event_id)
        self._supervisor.spawn(
            self._erasure.run_settled(tenant.team), name=f"erasure {tenant.team}"
        )
        log.warning(
            "threadgate was uninstalled from Slack workspace %s: %s%d unfinished task(s) "
            "cancelled, %d schedule(s) paused, its stored content to be erased",
            tenant.team,
            "installation deleted, " if self._installations is not None else "",
            len(cancelled),
            paused,
        )
