"""Many workspaces on the fake Slack: the OAuth v2 code exchange and per-workspace tokens.

`FakeSlack` (tests/fakes/slack_api.py) serves one workspace with one bot token. Give it a
`FakeOAuth` (`slack.oauth = FakeOAuth(...)`) and it also speaks for every workspace
installed through the OAuth flow, as Slack does:

    oauth.v2.access   exchanges a code from `grant(team_id, …)` for a new bot token of that
                      team; the client id and secret must match, sent as HTTP basic auth
                      (slack_sdk's way) or as form fields. An unknown or used code:
                      `invalid_code`; wrong credentials: `invalid_client_id` /
                      `bad_client_secret`.
    auth.test         per token: the team, bot user and bot id the token belongs to.
    every method      with a workspace's token may touch only that workspace's channels
                      (`place(channel, team)`): another's answers `channel_not_found`.
                      Channels placed nowhere belong to the FakeSlack's own team.
    apps.uninstall    revokes the calling token's workspace (as `uninstall(team_id)` does):
                      its tokens answer `token_revoked` from then on.
    auth.revoke       revokes the calling token (tests/fakes/slack_revoke.py).

The record: `installed` (the workspaces with live tokens), and every `Call` carries the
token it was made with, so a test can assert which workspace's token each post used.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakes import slack_revoke

Body = dict[str, Any]

# The methods that name the channel they touch in a parameter of this name.
_CHANNEL_PARAMS = ("channel", "channel_id")
_counter = itertools.count(2)


@dataclass(frozen=True, slots=True)
class FakeWorkspace:
    """A workspace the app can be installed in (an org, when `is_enterprise_install`)."""

    team_id: str | None
    team_name: str
    bot_user_id: str
    bot_id: str
    enterprise_id: str | None = None
    enterprise_name: str | None = None
    is_enterprise_install: bool = False


class FakeOAuth:
    """The fake Slack's OAuth side: codes, per-workspace tokens, channel ownership."""

    def __init__(self, *, client_id: str, client_secret: str, app_id: str, home_team: str) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.app_id = app_id
        self.home_team = home_team  # the FakeSlack's own team: channels placed nowhere
        self.tokens: dict[str, FakeWorkspace] = {}
        self.revoked: set[str] = set()
        self.channels: dict[str, str] = {}
        self._codes: dict[str, FakeWorkspace] = {}

    # -- for tests ---------------------------------------------------------------------------

    def grant(
        self,
        team_id: str | None,
        team_name: str = "",
        *,
        enterprise_id: str | None = None,
        org: bool = False,
    ) -> str:
        """A code that oauth.v2.access exchanges for a new bot token of this workspace
        (of the enterprise `enterprise_id`, for an org-wide install with `org`)."""
        n = next(_counter)
        workspace = FakeWorkspace(
            team_id=None if org else team_id,
            team_name=team_name or f"Workspace {team_id}",
            bot_user_id=f"UBOT{n:05d}",
            bot_id=f"B0BOT{n:05d}",
            enterprise_id=enterprise_id,
            enterprise_name=f"Org {enterprise_id}" if enterprise_id else None,
            is_enterprise_install=org,
        )
        code = f"code-{secrets.token_hex(8)}"
        self._codes[code] = workspace
        return code

    def place(self, channel: str, team_id: str) -> None:
        """`channel` belongs to workspace `team_id`."""
        self.channels[channel] = team_id

    def token_of(self, team_id: str) -> str:
        """The live bot token of a workspace (the latest one issued)."""
        live = [t for t, w in self.tokens.items() if w.team_id == team_id and t not in self.revoked]
        if not live:
            raise KeyError(f"no live token for {team_id}")
        return live[-1]

    def uninstall(self, team_id: str | None, enterprise_id: str | None = None) -> None:
        """Every token of the workspace answers `token_revoked` from now on."""
        for token, workspace in self.tokens.items():
            if (workspace.team_id, workspace.enterprise_id) == (team_id, enterprise_id):
                self.revoked.add(token)

    @property
    def installed(self) -> list[FakeWorkspace]:
        return list({w: None for t, w in self.tokens.items() if t not in self.revoked})

    # -- for FakeSlack -------------------------------------------------------------------------

    def handles(self, method: str, token: str | None) -> bool:
        """Whether this method call is ours to answer (rather than the FakeSlack's)."""
        return method == "oauth.v2.access" or token in self.tokens

    def answer(
        self, method: str, token: str | None, params: Mapping[str, Any], authorization: str | None
    ) -> Body:
        if method == "oauth.v2.access":
            return self._access(params, authorization)
        assert token is not None
        if token in self.revoked:
            return _error("token_revoked")
        workspace = self.tokens[token]
        if method == "auth.test":
            return self._auth_test(workspace)
        if method == slack_revoke.METHOD:  # tests/fakes/slack_revoke.py
            return slack_revoke.revoke(token, params, self.revoked.add)
        if method == "apps.uninstall":
            self.uninstall(workspace.team_id, workspace.enterprise_id)
            return {"ok": True}
        return {}  # authorized: the FakeSlack answers the method itself

    def refusal(self, token: str, params: Mapping[str, Any]) -> str | None:
        """Why a workspace's token may not make this call (another workspace's channel)."""
        workspace = self.tokens[token]
        for name in _CHANNEL_PARAMS:
            channel = params.get(name)
            if isinstance(channel, str) and channel:
                owner = self.channels.get(channel, self.home_team)
                if workspace.team_id is not None and owner != workspace.team_id:
                    return "channel_not_found"
        return None

    def _access(self, params: Mapping[str, Any], authorization: str | None) -> Body:
        client_id, client_secret = _basic(authorization) or (
            params.get("client_id"),
            params.get("client_secret"),
        )
        if client_id != self.client_id:
            return _error("invalid_client_id")
        if client_secret != self.client_secret:
            return _error("bad_client_secret")
        workspace = self._codes.pop(str(params.get("code")), None)
        if workspace is None:
            return _error("invalid_code")
        token = f"xoxb-{workspace.team_id or workspace.enterprise_id}-{secrets.token_hex(6)}"
        self.tokens[token] = workspace
        enterprise = (
            {"id": workspace.enterprise_id, "name": workspace.enterprise_name}
            if workspace.enterprise_id
            else None
        )
        team = {"id": workspace.team_id, "name": workspace.team_name} if workspace.team_id else None
        return {
            "ok": True,
            "app_id": self.app_id,
            "authed_user": {"id": "UINSTALLER"},
            "scope": "app_mentions:read,chat:write,users:read",
            "token_type": "bot",
            "access_token": token,
            "bot_user_id": workspace.bot_user_id,
            "team": team,
            "enterprise": enterprise,
            "is_enterprise_install": workspace.is_enterprise_install,
        }

    @staticmethod
    def _auth_test(workspace: FakeWorkspace) -> Body:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": workspace.team_name,
            "user": "threadgate",
            "team_id": workspace.team_id,
            "user_id": workspace.bot_user_id,
            "bot_id": workspace.bot_id,
            "enterprise_id": workspace.enterprise_id,
            "is_enterprise_install": workspace.is_enterprise_install,
        }


def _basic(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user, password


def _error(error: str) -> Body:
    return {"ok": False, "error": error}
