"""The ingress assembly: Slack's events in, verified, admitted and acked.

An ingress listens for events (HTTP `/slack/events`, or a Socket Mode connection with
`/healthz` and `/readyz` on its port), hands each to the gatekeeper of the event's
workspace, and acks once the turn and its task are committed. It opens no model. It
serves role `ingress`, the ingress thread of role `all` (gateway/process/ingress_thread.py)
and role `all` on one loop alike; all it needs is `Resources` (gateway/process/resources.py).

Files people attach are read before the ack through one downloader and the decoder
processes (gateway/inbound/files.py, gateway/inbound/decoders.py), made with the first
gatekeeper that needs them and closed with the ingress.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import httpx
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from gateway.delivery.approval import ApprovalMessages
from gateway.delivery.schedule_approval import ScheduleApprovals
from gateway.inbound.app_home import AppHome
from gateway.inbound.attachments import FileReader
from gateway.inbound.bolt_app import Listeners, build_bolt_app
from gateway.inbound.bots import BotGate
from gateway.inbound.decoders import Decoders
from gateway.inbound.files import FileDownloader
from gateway.inbound.gatekeeper import (
    Gatekeeper,
    GatekeeperPorts,
    GatekeeperSettings,
    InFlight,
    Policy,
)
from gateway.inbound.interactions import Interactions
from gateway.inbound.pins import Pins
from gateway.inbound.revisions import Revisions
from gateway.inbound.schedule_clicks import ScheduleClicks
from gateway.inbound.shortcuts import Shortcuts
from gateway.inbound.socket_mode import SocketModeConnection, start_socket_mode
from gateway.inbound.stops import Stops
from gateway.models.routes import reads_documents
from gateway.models.tls import verified_tls
from gateway.process.channel_policies import limits
from gateway.process.http import Readiness, build_http_app, listen
from gateway.process.resources import Resources
from gateway.process.surfaces import home_tab, slash_commands
from gateway.slack.file_info import FileInfo
from gateway.slack.oauth import INSTALL_PATH, InstallAllowlist, InstalledIdentity
from gateway.slack.uninstall import Uninstaller
from gateway.telemetry.readiness import CachedReadiness
from storage import PinRoom, PostgresInstallations, StoredInstallation

log = logging.getLogger(__name__)


class Ingress:
    """Takes Slack's events for `resources`; `start` it on a stack that stops it."""

    def __init__(self, resources: Resources) -> None:
        self._r = resources
        s = resources.settings
        policy = Policy(
            allowed_channels=s.access.allowed_channels,
            allowed_users=s.access.allowed_users,
            continue_threads=s.access.continue_threads,
            backfill_messages=s.memory.backfill_messages,
            channel_context_messages=s.memory.channel_context_messages,
            dm_threads_apart=not s.assistant.agent_view,
        )
        # The same for every event: built once, not per gatekeeper.
        self._gatekeeping = GatekeeperSettings(
            policy=policy,
            lookup_budget_seconds=s.process.lookup_budget_seconds,
            limits=limits(s),
            rules=resources.policies.rules_of,
        )
        self._in_flight = InFlight()  # messages being admitted with downloads, process-wide
        self._home = home_tab(resources)  # the App Home, kept current while the ingress runs
        self._files: _Files | None = None
        self._socket: SocketModeConnection | None = None
        self._stack: AsyncExitStack | None = None

    async def start(self, stack: AsyncExitStack, host: str, port: int) -> int:
        """Listen on host:port (and connect Socket Mode when configured); the port it got."""
        self._stack = stack
        s, factory = self._r.settings, self._r.slack
        installations = factory.installations(self._r.db)
        bolt = await self._bolt(installations)
        secret = s.slack.signing_secret
        app = build_http_app(
            bolt=bolt,
            signing_secret=secret.get_secret_value() if secret else None,
            ready=self._readiness(),
            metrics=self._r.metrics,
            events=not s.slack.socket_mode,
            oauth=factory.oauth_flow(self._r.db, self._r.clients) if installations else None,
        )
        bound = await listen(stack, app, host, port)
        self._r.supervisor.spawn(self._home.keep_current(), name="home-refresh")
        if s.slack.socket_mode:
            await self._start_socket_mode(stack, bolt, bound)
        else:
            log.info("threadgate listening on http://%s:%d/slack/events", host, bound)
        if installations:
            log.info("install threadgate at http://%s:%d%s", host, bound, INSTALL_PATH)
        return bound

    async def _bolt(self, installations: PostgresInstallations | None) -> AsyncApp:
        r, s = self._r, self._r.settings
        clients, db = r.clients, r.db
        secret = s.slack.signing_secret
        listeners = Listeners(
            self.gatekeeper,
            r.metrics,
            pins=self.pins,
            revisions=self.revisions,
            on_uninstalled=Uninstaller(db, installations, clients, r.erasure(), r.supervisor),
            stops=Stops(db, clients),
            app_home=AppHome(
                clients,
                s.assistant.suggested_prompts if s.assistant.agent_view else (),
                budget_seconds=s.process.lookup_budget_seconds,
            ),
            home=self._home,
        )
        return build_bolt_app(
            # Bolt's client holds no token: bolt lends each event's client the token of its
            # authorization (ours, `identity` or `authorize`), and given one here too it
            # warns that it "will be ignored". We call Slack through our own clients anyway.
            client=r.slack.tokenless(),
            signing_secret=secret.get_secret_value() if secret else None,
            listeners=listeners,
            identity=r.identity,
            authorize=self._identity() if installations else None,
            interactions=self._interactions(),
            # "Ask threadgate about this message", held to each workspace's gatekeeper.
            shortcuts=Shortcuts(self.gatekeeper, clients, r.metrics),
            commands=slash_commands(r),
        )

    def _identity(self) -> InstalledIdentity:
        """Each event's installation; a workspace off THREADGATE_INSTALL_ALLOWLIST is
        refused before anything of its event is read (counted as `not_allowed`)."""
        r = self._r
        refused = r.metrics.events.labels("not_allowed")
        allowlist = InstallAllowlist(r.settings.slack.install_allowlist)
        return InstalledIdentity(r.clients, allowlist, on_refused=refused.inc)

    async def gatekeeper(self, team_id: str | None, enterprise_id: str | None) -> Gatekeeper:
        """The gatekeeper of the event's workspace: names and back-fill read with its token."""
        r = self._r
        workspace = await r.clients.workspace(team_id, enterprise_id)
        return Gatekeeper(
            self._gatekeeping,
            GatekeeperPorts(
                db=r.db,
                users=workspace.users,
                threads=workspace.threads,
                files=self._file_reader(workspace.client),
                sharing=workspace.sharing,
                in_flight=self._in_flight,
                tracer=r.tracer,
                on_limited=r.metrics.message_limited,
                on_redacted=lambda found: r.metrics.redacted(found.kinds),
                bots=self._bots(workspace.installation),
            ),
        )

    def _bots(self, installation: StoredInstallation | None) -> BotGate | None:
        """The bot policy and loop guard (gateway/inbound/bots.py); None when no bot is
        answered. Its alert goes out in the background: the ack waits for no post."""
        r, access = self._r, self._r.settings.access
        if access.bot_policy.mode == "none":
            return None
        alerts = r.operator_alerts()

        def alert(key: str, text: str) -> None:
            r.supervisor.spawn(alerts.notice(key, text), name=f"alert-{key}")

        own = installation.bot_id if installation else r.identity.bot_id if r.identity else None
        return BotGate(
            r.db,
            access.bot_policy,
            access.loop_guard,
            own_bot_id=own,
            alert=alert,
            on_decided=r.metrics.bot_turn,
        )

    async def pins(self, team_id: str | None, enterprise_id: str | None) -> Pins:
        s = self._r.settings
        workspace = await self._r.clients.workspace(team_id, enterprise_id)
        return Pins(
            self._r.db,
            workspace.users,
            room=PinRoom.of(s.memory.pinned_max, s.memory.history_chars),
            lookup_budget_seconds=s.process.lookup_budget_seconds,
            client=workspace.client,
            on_listed=self._r.metrics.pins_listed,
        )

    async def revisions(self, team_id: str | None, enterprise_id: str | None) -> Revisions:
        return Revisions(
            self._r.db,
            await self.gatekeeper(team_id, enterprise_id),
            lookup_budget_seconds=self._r.settings.process.lookup_budget_seconds,
        )

    def _interactions(self) -> Interactions:
        """Clicks on approval and feedback buttons: stored, then shown (the decision on
        its request's message, updated from here: an ingress posts nothing else)."""
        r = self._r
        shown = ScheduleApprovals(r.clients, r.outbox()).show
        return Interactions(
            r.db,
            r.clients,
            approvers=r.settings.tools.approvers,
            show=ApprovalMessages(r.clients, r.outbox()).show,
            supervisor=r.supervisor,
            metrics=r.metrics,
            schedules=ScheduleClicks(r.db, shown, r.supervisor),
        )

    def _readiness(self) -> Readiness:
        """Ready: the database answers with no migration pending and, in Socket Mode, the
        connection to Slack is up (not before it first is, not while it reconnects). The
        database is asked at most once a second (gateway/telemetry/readiness.py)."""

        database_ready = CachedReadiness(self._r.db.is_ready)  # one query a second at most

        async def ready() -> bool:
            if self._r.settings.slack.socket_mode and (
                self._socket is None or not await self._socket.is_connected()
            ):
                return False
            return await database_ready()

        return ready

    def _file_reader(self, slack: AsyncWebClient) -> FileReader | None:
        """Reads message files with the workspace's client (`files.info`) and bot token
        through the process's one downloader and decoder processes; None without a token."""
        token = slack.token
        if token is None:
            return None
        if self._files is None:
            assert self._stack is not None  # started
            self._files = _Files.open(self._r, self._stack)
        return self._files.reader(token, slack)

    async def _start_socket_mode(self, stack: AsyncExitStack, bolt: AsyncApp, port: int) -> None:
        s = self._r.settings
        connection = await start_socket_mode(
            bolt,
            app_token=s.require("SLACK_APP_TOKEN"),
            api_url=s.slack.api_url,
            metrics=self._r.metrics,
            connect_timeout=s.slack.socket_connect_timeout,
        )
        self._socket = connection
        stack.push_async_callback(connection.close)
        log.info("threadgate connected in Socket Mode (health on port %d)", port)


class _Files:
    """The ingress's one downloader (its own HTTP client) and decoder processes."""

    def __init__(self, r: Resources, downloads: FileDownloader, decoders: Decoders) -> None:
        self._r = r
        self._downloads = downloads
        self._decoders = decoders
        self._documents = reads_documents(r.settings)  # once: the routes do not change

    @classmethod
    def open(cls, r: Resources, stack: AsyncExitStack) -> _Files:
        s = r.settings
        client = httpx.AsyncClient(timeout=s.process.lookup_budget_seconds, verify=verified_tls())
        stack.push_async_callback(client.aclose)
        decoders = Decoders(
            processes=s.files.decoders,
            memory_bytes=s.files.decode_memory_mb * 2**20,
        )
        stack.push_async_callback(decoders.close)
        downloads = FileDownloader(client, max_bytes=s.files.max_bytes, api_url=s.slack.api_url)
        return cls(r, downloads, decoders)

    def reader(self, token: str, slack: AsyncWebClient) -> FileReader:
        return FileReader(
            self._downloads,
            self._decoders,
            token,
            self._r.settings.files.kinds,
            on_read=self._r.metrics.file_read,
            info=FileInfo(slack),
            documents=self._documents,
        )
