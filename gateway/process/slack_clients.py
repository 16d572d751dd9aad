"""How the process's Slack clients are made, and who the bot is.

One kind of client for the whole process (SLACK_API_URL, the call time limit, metrics, the
token alarm, one shared connection pool), made for one workspace (SLACK_BOT_TOKEN) or for
each installation (OAuth mode), so every role and the install flow call Slack alike.
Start-up asks Slack who the bot is (`auth.test`) once, and seals stored tokens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow

from agent import NO_TRACER, ConfigError, Supervisor, Tracer
from gateway.config.settings import Settings
from gateway.delivery.alerts import TokenAlarm
from gateway.slack.client import MeteredWebClient, slack_client
from gateway.slack.errors import SlackError, SlackOutcomeUnknown, SlackRefused
from gateway.slack.oauth import InstallAllowlist, oauth_flow
from gateway.slack.read_pacing import ReadPacing
from gateway.slack.scopes import bot_scopes
from gateway.slack.workspaces import SlackClients, label
from gateway.telemetry.metrics import Metrics
from storage import (
    Database,
    PostgresInstallations,
    PostgresOAuthStates,
    StoredInstallation,
    TokenCipher,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlackClientFactory:
    """How the gateway's Slack clients are made: one kind of client (SLACK_API_URL, the call
    time limit, metrics, the token alarm, one shared connection pool), for one workspace
    (SLACK_BOT_TOKEN) or for each installation (OAuth mode)."""

    settings: Settings
    metrics: Metrics
    supervisor: Supervisor
    session: aiohttp.ClientSession
    alarm: TokenAlarm
    tracer: Tracer = NO_TRACER

    def _client(self, token: str | None, **options: Any) -> MeteredWebClient:
        return slack_client(
            token,
            self.settings.slack.api_url,
            timeout=self.settings.slack.timeout_seconds,
            metrics=self.metrics,
            supervisor=self.supervisor,
            session=self.session,
            tracer=self.tracer,
            **options,
        )

    def single(self) -> MeteredWebClient:
        return self._client(self.settings.require("SLACK_BOT_TOKEN"), on_token_refused=self.alarm)

    def checking(self) -> MeteredWebClient:
        """The one workspace's client without the token alarm: for start-up's `auth.test`,
        whose refusal ends the start in one sentence (`identify`), not in an alarm too."""
        return self._client(self.settings.require("SLACK_BOT_TOKEN"))

    def tokenless(self) -> MeteredWebClient:
        """For bolt and the install flow: calls that bring their own token (or none)."""
        return self._client(None)

    def installations(self, db: Database) -> PostgresInstallations | None:
        s = self.settings
        if not s.slack.oauth_mode:
            return None
        return PostgresInstallations(db, s.require("SLACK_CLIENT_ID"), cipher=token_cipher(s))

    def many(self, db: Database, pacing: ReadPacing | None = None) -> SlackClients:
        installations = self.installations(db)
        assert installations is not None  # OAuth mode

        def for_installation(found: StoredInstallation) -> MeteredWebClient:
            name = label(found)
            on_refused = self.alarm.for_workspace(name)

            async def refused(method: str, error: str) -> None:
                # Dropped: a reinstall's new token is read at the next use.
                clients.forget(found.team_id, found.enterprise_id)
                await on_refused(method, error)

            return self._client(found.bot_token, on_token_refused=refused, workspace=name)

        clients = SlackClients(
            installations=installations,
            make_client=for_installation,
            operator_team=self.settings.alerts.operator_team,
            pacing=pacing,
        )
        return clients

    def oauth_flow(self, db: Database, clients: SlackClients) -> AsyncOAuthFlow:
        s = self.settings
        installations = self.installations(db)
        assert installations is not None and s.slack.client_secret is not None
        return oauth_flow(
            client=self.tokenless(),
            client_id=s.require("SLACK_CLIENT_ID"),
            client_secret=s.slack.client_secret.get_secret_value(),
            redirect_uri=s.slack.oauth_redirect_url,
            installations=installations,
            states=PostgresOAuthStates(db),
            clients=clients,
            scopes=bot_scopes(
                continue_threads=s.access.continue_threads,
                workspace_search=s.tools.workspace_search,
            ),
            allowlist=InstallAllowlist(s.slack.install_allowlist),
        )


async def seal_stored_tokens(installations: PostgresInstallations | None) -> None:
    """Seal the bot tokens stored before THREADGATE_TOKEN_KEY was set (every role, every
    start: safe beside other replicas doing the same, and nothing to do the next time)."""
    sealed = await installations.seal_stored() if installations is not None else 0
    if sealed:
        log.info("sealed %d stored bot token(s) with THREADGATE_TOKEN_KEY", sealed)


def token_cipher(settings: Settings) -> TokenCipher | None:
    """What seals the stored bot tokens (THREADGATE_TOKEN_KEY), if anything."""
    key = settings.slack.token_key
    return TokenCipher(key.get_secret_value()) if key is not None else None


async def identify(client: MeteredWebClient, token: str) -> AuthorizeResult:
    """Who we are in Slack (`auth.test`); a refused token, or a Slack that failed or
    could not be reached, stops start-up in one sentence."""
    try:
        response = await client.auth_test()
    except SlackRefused as refused:
        raise ConfigError(
            f"SLACK_BOT_TOKEN was refused by Slack ({refused.error}): put a valid bot token "
            "(xoxb-…) there."
        ) from None
    except SlackOutcomeUnknown as failure:
        raise ConfigError(
            f"Slack failed on auth.test at SLACK_API_URL ({failure.reason}); try again, or "
            "check the URL."
        ) from None
    except SlackError as failure:
        raise ConfigError(
            f"Slack could not be reached at SLACK_API_URL ({failure.reason}); check the network "
            "or the URL."
        ) from None
    return AuthorizeResult.from_auth_test_response(auth_test_response=response, bot_token=token)
