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
both off it ends on a page saying so, nothing is stored, and the token Slack issued it is
revoked (`auth.revoke`); an event of a workspace off it (installed before the allowlist
said otherwise) is refused by `InstalledIdentity` before anything of it is read or
admitted — no model call — counted, and logged once per workspace. The install page
itself is public: each visit gets an OAuth state that is signed, not stored
(`OAuthStateStore`), so no number of anonymous visits can fill a bound and lock real
installers out. Its `?team=` (which workspace Slack
should offer first) is the visitor's text: slack_sdk puts it in the authorize link as it
came, so `?team=T1%26redirect_uri%3D…` would add parameters of the visitor's choosing to
our link; `InstallFlow` encodes it as one value.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
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


# A state: its expiry (Unix seconds), a nonce, and their HMAC-SHA256 (hex).
_STATE = re.compile(r"([0-9]{1,12})\.([A-Za-z0-9_-]{16,64})\.([0-9a-f]{64})")


class OAuthStateStore(AsyncOAuthStateStore):
    """slack_sdk's OAuth state store: a state is signed, not stored, when the install page
    issues it (its expiry and a nonce, under a key derived from the app's client secret),
    and written only when it comes back (`PostgresOAuthStates.use`: once, while fresh).
    Anonymous visits of the install page therefore cost nothing and cannot fill a bound
    that would lock out a real installer; bolt's state cookie still ties the state to the
    browser that asked for it."""

    def __init__(self, states: PostgresOAuthStates, client_secret: str) -> None:
        self._states = states
        self._key = hashlib.sha256(b"threadgate oauth state\0" + client_secret.encode()).digest()

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        expires = int(time.time() + self._states.expiration_seconds)
        body = f"{expires}.{secrets.token_urlsafe(18)}"
        return f"{body}.{self._sign(body)}"

    async def async_consume(self, state: str) -> bool:
        found = _STATE.fullmatch(state)
        if found is None:
            return False
        expires, nonce, signature = found.groups()
        body = f"{expires}.{nonce}"
        if not hmac.compare_digest(self._sign(body), signature):
            return False
        return await self._states.use(body, float(expires))

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


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
        return self.allows_workspace(installation.team_id, installation.enterprise_id)

    def allows_workspace(self, team_id: str | None, enterprise_id: str | None) -> bool:
        return not self.ids or bool({team_id, enterprise_id} & self.ids)


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
    Grid) its enterprise's org-wide one. None (bolt acks the event and runs no listener)
    when not installed, or when `allowlist` does not name the workspace or its enterprise:
    such an event is counted (`on_refused`) and logged once per workspace."""

    def __init__(
        self,
        clients: SlackClients,
        allowlist: InstallAllowlist = InstallAllowlist(),
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._clients = clients
        self._allowlist = allowlist
        self._on_refused = on_refused
        self._told: set[tuple[str | None, str | None]] = set()  # workspaces logged already

    async def __call__(self, **kwargs: Any) -> AuthorizeResult | None:
        team_id, enterprise_id = kwargs.get("team_id"), kwargs.get("enterprise_id")
        if not self._allowlist.allows_workspace(team_id, enterprise_id):
            self._refuse(team_id, enterprise_id)
            return None
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

    def _refuse(self, team_id: str | None, enterprise_id: str | None) -> None:
        self._on_refused()
        if (team_id, enterprise_id) not in self._told and len(self._told) < 10_000:
            self._told.add((team_id, enterprise_id))
            log.warning(
                "events from Slack workspace %s (enterprise %s) are refused: it is not on "
                "THREADGATE_INSTALL_ALLOWLIST (logged once per workspace)",
                team_id,
                enterprise_id,
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
        state_store=OAuthStateStore(states, client_secret),
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


class InstallFlow(AsyncOAuthFlow):
    """bolt's flow, where an exchange of the code that did not succeed for any reason shows
    the installer bolt's failure page (bolt itself catches only a refusal), an install the
    allowlist refuses is stored nowhere, its token revoked, and says why, and `?team=` is
    one encoded value of the link."""

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

    async def store_installation(
        self, request: AsyncBoltRequest, installation: Installation
    ) -> None:
        if not self._allowlist.allows(installation):
            log.warning(
                "install refused: team %s, enterprise %s not on THREADGATE_INSTALL_ALLOWLIST",
                installation.team_id,
                installation.enterprise_id,
            )
            await self._revoke(installation)
            raise InstallRefused(installation)
        await super().store_installation(request, installation)

    async def _revoke(self, installation: Installation) -> None:
        """Slack issued the refused install a token all the same: `auth.revoke` it, so no
        live token of a workspace we refused is left anywhere (a failure is logged, and
        the install refused all the same)."""
        if installation.bot_token is None:
            return
        try:
            await self.client.auth_revoke(token=installation.bot_token)
        except SlackError as failure:
            log.warning("the refused install's token was not revoked (%s)", failure.reason)

    async def run_installation(self, code: str) -> Installation | None:
        try:
            return await super().run_installation(code)
        except SlackError as failure:
            log.warning("install not completed: %s failed (%s)", failure.method, failure.reason)
            return None


_HTML: dict[str, str | Sequence[str]] = {"Content-Type": "text/html; charset=utf-8"}
