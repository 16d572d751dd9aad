"""Slack's OAuth v2 install flow on bolt, with installations and states in Postgres.

bolt's `AsyncOAuthFlow` does the flow itself (the install page, the `state`, the code
exchange with `oauth.v2.access`, the `auth.test` for the bot id); this module only gives it
what it stores through: `InstallationStore` and `OAuthStateStore` adapt slack_sdk's store
interfaces to `storage.installations` (storage/ knows no Slack types), and `InstalledIdentity`
is bolt's authorization from those installations.

bolt tells a refused code exchange from a crash by catching `SlackApiError`, which of our
client's failures only `SlackRefused` is; `InstallFlow` ends the other outcomes (Slack
failed on the exchange, or was not reached) on the same failure page.

bolt's own `InstallationStoreAuthorize` calls `auth.test` (with a client of its own, which
bypasses our metrics and token alarm) for every event it has not cached; the installation
already holds what it would learn, so `InstalledIdentity` answers from it, through the
workspace cache of `SlackClients`.

Only bot tokens are stored: threadgate asks for no user scopes (gateway/slack/scopes.py).

Who may install is the operator's to say: every installed workspace can spend the model
quota. With an allowlist (`InstallAllowlist`), an install whose team and enterprise are
both off it ends on a page saying so, and nothing is stored. The install page itself is
public and each visit issues an OAuth state (a row): past `PostgresOAuthStates`'s bound
the page answers 429 until states expire or are used. Its `?team=` (which workspace Slack
should offer first) is the visitor's text: slack_sdk puts it in the authorize link as it
came, so `?team=T1%26redirect_uri%3D…` would add parameters of the visitor's choosing to
our link; `InstallFlow` encodes it as one value.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.error import BoltError
from slack_bolt.oauth.async_callback_options import AsyncFailureArgs
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.errors import SlackError
from gateway.slack.workspaces import NotInstalled, SlackClients
from storage import PostgresInstallations, PostgresOAuthStates, StoredInstallation

log = logging.getLogger(__name__)

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"


class InstallationStore(AsyncInstallationStore):
    """slack_sdk's installation store on `PostgresInstallations` (bot tokens only)."""

    def __init__(self, installations: PostgresInstallations, clients: SlackClients) -> None:
        self._installations = installations
        self._clients = clients

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        if installation.bot_token is None:
            raise ValueError("an installation without a bot token (threadgate asks for a bot)")
        await self._installations.save(stored(installation))
        # A reinstall replaces the token: the next call of that workspace reads it.
        self._clients.forget(installation.team_id, installation.enterprise_id)
        log.info(
            "installed in Slack workspace %s", installation.team_id or installation.enterprise_id
        )

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        found = await self._clients.installation(
            team_id, enterprise_id, is_enterprise_install=bool(is_enterprise_install)
        )
        return None if found is None else as_installation(found).to_bot()

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        found = await self._installations.find(
            enterprise_id,
            team_id,
            is_enterprise_install=bool(is_enterprise_install),
            user_id=user_id,
        )
        return None if found is None else as_installation(found)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self._installations.delete_bot(enterprise_id, team_id)
        self._clients.forget(team_id, enterprise_id)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        await self._installations.delete(enterprise_id, team_id, user_id=user_id)
        self._clients.forget(team_id, enterprise_id)

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.async_delete_installation(enterprise_id=enterprise_id, team_id=team_id)


class OAuthStateStore(AsyncOAuthStateStore):
    """slack_sdk's OAuth state store on `PostgresOAuthStates` (one use, with expiry)."""

    def __init__(self, states: PostgresOAuthStates) -> None:
        self._states = states

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = await self._states.issue()
        if state is None:
            raise TooManyInstalls(self._states.max_outstanding)
        return state

    async def async_consume(self, state: str) -> bool:
        return await self._states.consume(state)


class TooManyInstalls(Exception):
    """As many installs as the bound allows are under way: no state is issued."""


class InstallRefused(BoltError):
    """The installing team and enterprise are not on THREADGATE_INSTALL_ALLOWLIST."""

    def __init__(self, installation: Installation) -> None:
        super().__init__(
            f"install refused: team {installation.team_id}, enterprise "
            f"{installation.enterprise_id} not on THREADGATE_INSTALL_ALLOWLIST"
        )


@dataclass(frozen=True, slots=True)
class InstallAllowlist:
    """The teams (`T…`) and enterprises (`E…`) that may install; empty: anyone may."""

    ids: frozenset[str] = frozenset()

    def allows(self, installation: Installation) -> bool:
        if not self.ids:
            return True
        return bool({installation.team_id, installation.enterprise_id} & self.ids)


def stored(installation: Installation) -> StoredInstallation:
    assert installation.bot_token is not None  # checked by the caller
    return StoredInstallation(
        client_id="",  # the store's own
        enterprise_id=installation.enterprise_id,
        team_id=installation.team_id,
        bot_token=installation.bot_token,
        bot_id=installation.bot_id,
        bot_user_id=installation.bot_user_id,
        bot_scopes=",".join(installation.bot_scopes or ()),
        enterprise_name=installation.enterprise_name,
        team_name=installation.team_name,
        is_enterprise_install=bool(installation.is_enterprise_install),
        app_id=installation.app_id,
        installer_user_id=installation.user_id,
    )


def as_installation(found: StoredInstallation) -> Installation:
    return Installation(
        app_id=found.app_id,
        enterprise_id=found.enterprise_id,
        enterprise_name=found.enterprise_name,
        team_id=found.team_id,
        team_name=found.team_name,
        bot_token=found.bot_token,
        bot_id=found.bot_id,
        bot_user_id=found.bot_user_id,
        bot_scopes=found.bot_scopes,
        user_id=found.installer_user_id or "",
        is_enterprise_install=found.is_enterprise_install,
        installed_at=found.installed_at.timestamp() if found.installed_at else None,
    )


class InstalledIdentity(AsyncAuthorize):
    """bolt's authorization from the event's installation: its own team's, or (Enterprise
    Grid) its enterprise's org-wide one. None (bolt refuses the event) when not installed."""

    def __init__(self, clients: SlackClients) -> None:
        self._clients = clients

    async def __call__(self, **kwargs: Any) -> AuthorizeResult | None:
        team_id, enterprise_id = kwargs.get("team_id"), kwargs.get("enterprise_id")
        try:
            workspace = await self._clients.workspace(team_id, enterprise_id)
        except NotInstalled:
            log.warning("event from Slack workspace %s, where threadgate is not installed", team_id)
            return None
        found = workspace.installation
        assert found is not None  # OAuth mode
        return AuthorizeResult(
            enterprise_id=found.enterprise_id,
            team_id=found.team_id or team_id,
            team=found.team_name,
            bot_user_id=found.bot_user_id,
            bot_id=found.bot_id,
            bot_token=found.bot_token,
            bot_scopes=found.bot_scopes,
        )


def oauth_flow(
    *,
    client: AsyncWebClient,
    client_id: str,
    client_secret: str,
    redirect_uri: str | None,
    installations: PostgresInstallations,
    states: PostgresOAuthStates,
    clients: SlackClients,
    scopes: Sequence[str],
    allowlist: InstallAllowlist = InstallAllowlist(),
) -> AsyncOAuthFlow:
    """bolt's install flow asking for `scopes` (gateway/slack/scopes.py), storing in Postgres;
    `client` (no token, `SLACK_API_URL`) makes its `oauth.v2.access` and `auth.test`."""
    settings = AsyncOAuthSettings(
        client_id=client_id,
        client_secret=client_secret,
        scopes=list(scopes),
        user_scopes=[],
        redirect_uri=redirect_uri,
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        installation_store=InstallationStore(installations, clients),
        installation_store_bot_only=True,
        state_store=OAuthStateStore(states),
        state_expiration_seconds=int(states.expiration_seconds),
        logger=log,
    )
    return InstallFlow(client=client, settings=settings, allowlist=allowlist)


# What `doctor` and the start-up log say while THREADGATE_INSTALL_ALLOWLIST is unset.
OPEN_INSTALLS = (
    "THREADGATE_INSTALL_ALLOWLIST is unset: any Slack workspace may install threadgate "
    "and spend its model quota; set it to the team (T…) and enterprise (E…) ids allowed"
)
REFUSED_PAGE = (
    "<html><body><h1>threadgate cannot be installed here</h1><p>This threadgate serves "
    "only the Slack workspaces its operator allowed, and yours is not one of them. Ask "
    "the operator to add your workspace (or organization) ID to "
    "THREADGATE_INSTALL_ALLOWLIST.</p></body></html>"
)
BUSY_PAGE = (
    "<html><body><h1>Too many installs under way</h1><p>Please try again in a few "
    "minutes.</p></body></html>"
)


class InstallFlow(AsyncOAuthFlow):
    """bolt's flow, where an exchange of the code that did not succeed for any reason shows
    the installer bolt's failure page (bolt itself catches only a refusal), an install the
    allowlist refuses is stored nowhere and says why, an install page past the bound on
    outstanding states is a 429, and `?team=` is one encoded value of the link."""

    def __init__(self, *, allowlist: InstallAllowlist, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._allowlist = allowlist
        failure = self.failure_handler

        async def refused_or_failed(args: AsyncFailureArgs) -> BoltResponse:
            if isinstance(args.error, InstallRefused):
                return BoltResponse(status=403, body=REFUSED_PAGE, headers=dict(_HTML))
            return await failure(args)

        self.failure_handler = refused_or_failed

    async def build_authorize_url(self, state: str, request: AsyncBoltRequest) -> str:
        url = self.settings.authorize_url_generator.generate(state=state)
        teams = request.query.get("team")
        return f"{url}&{urlencode({'team': teams[0]})}" if teams else url

    async def handle_installation(self, request: AsyncBoltRequest) -> BoltResponse:
        try:
            return await super().handle_installation(request)
        except TooManyInstalls as busy:
            log.warning("install page refused: %s OAuth states outstanding", busy.args[0])
            return BoltResponse(status=429, body=BUSY_PAGE, headers=_HTML | _RETRY)

    async def store_installation(
        self, request: AsyncBoltRequest, installation: Installation
    ) -> None:
        if not self._allowlist.allows(installation):
            log.warning(
                "install refused: team %s, enterprise %s not on THREADGATE_INSTALL_ALLOWLIST",
                installation.team_id,
                installation.enterprise_id,
            )
            raise InstallRefused(installation)
        await super().store_installation(request, installation)

    async def run_installation(self, code: str) -> Installation | None:
        try:
            return await super().run_installation(code)
        except SlackError as failure:
            log.warning("install not completed: %s failed (%s)", failure.method, failure.reason)
            return None


_HTML: dict[str, str | Sequence[str]] = {"Content-Type": "text/html; charset=utf-8"}
_RETRY: dict[str, str | Sequence[str]] = {"Retry-After": "60"}
