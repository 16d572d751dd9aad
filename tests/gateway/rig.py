"""A whole gateway on loopback: fake Slack, fake OpenAI, real Postgres, real HTTP.

`Rig` starts the real composition root (`gateway.process.service.Gateway`) in this process with
settings pointing at the fakes, and helps tests send signed events and read the outcome
from the fake Slack's record and the database.

Tests take one through the `rig` fixture (tests/gateway/conftest.py), set up by a `rig`
mark. With `socket_mode=True` the gateway gets an app token instead of a signing secret and
takes its events from the loopback Socket Mode server (`rig.sockets`); `start_gateway`
adds more gateways (replicas, in either mode) on the same fakes, stopped with the rig.

With `oauth=True` the gateway serves many workspaces (Slack's OAuth install flow) instead
of one `SLACK_BOT_TOKEN`: the fake Slack gets a `FakeOAuth` (`rig.slack.oauth`), and
`rig.install(team_id)` installs the app in a workspace through the gateway's own
`/slack/install` and `/slack/oauth_redirect`, as a browser would.

Its settings are the rig's and nothing else: no `.env` is read (`rig_settings`), and the
conftest has removed the shell's gateway variables from the environment (`tests.hermetic`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.config.settings import Settings, load_settings
from gateway.process.service import Gateway
from storage import Database
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver
from tests.fakes.slack_oauth import FakeOAuth
from tests.fakes.socket_mode import FakeSocketMode

SECRET = "signing-secret-for-tests"
BOT_TOKEN = "xoxb-test"
APP_TOKEN = "xapp-1-A0APP00001-test"
CLIENT_ID = "1234567890.9876543210"
CLIENT_SECRET = "0123456789abcdef0123456789abcdef"
STATE_COOKIE = "slack-app-oauth-state"


def oauth_env(env: Mapping[str, str]) -> dict[str, str]:
    """The same settings for many workspaces: the app's client id and secret, no bot token."""
    return {k: v for k, v in env.items() if k != "SLACK_BOT_TOKEN"} | {
        "SLACK_CLIENT_ID": CLIENT_ID,
        "SLACK_CLIENT_SECRET": CLIENT_SECRET,
    }


def last_user_text(body: Any) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    if isinstance(content, list):  # text and image parts: the text is what is echoed
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else str(content)


def echo(seen: RecordedRequest) -> Reply:
    """The default model: answers every request by quoting the last user message."""
    return reply_with_tool("final_reply", {"text": f"re: {last_user_text(seen.body)}"})


def gateway_env(slack: FakeSlack, model: OpenAIServer, database_url: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.url,
        "DATABASE_URL": database_url,
        "THREADGATE_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "sk-test-key",
        "OPENAI_BASE_URL": model.url,
        "THREADGATE_OPERATOR_CHANNEL": "COPS",
        # Any free port: gateways in one run (replicas, child processes) each get their own.
        "THREADGATE_METRICS_ADDRESS": "127.0.0.1:0",
        # Most tests read replies as chat.postMessage posts; the streaming tests (and the
        # chaos scenario that kills a gateway mid-stream) turn it back on, as it is by default.
        "THREADGATE_STREAMING": "false",
        # Most tests count one reply per message (and the chaos suite's checks do): they
        # answer each message on its own. tests/gateway/test_thread_queue.py runs the
        # default (`collect`) and the other modes; the crash and duplicate chaos scenarios
        # run under `collect` too, with a check of their own (tests/chaos/harness.py).
        "THREADGATE_THREAD_QUEUE": "followup",
        # The most the pre-ack look-ups may take: the suite's three workers, their gateways
        # and Postgres share two cores, and a picture fetched from the fake Slack once took
        # longer than the default 1.5 s, so the turn was stored without it.
        "THREADGATE_LOOKUP_BUDGET_SECONDS": "2.5",
    }


STREAMING = {"THREADGATE_STREAMING": "true", "THREADGATE_STREAM_INTERVAL_SECONDS": "0.05"}


def rig_settings(env: Mapping[str, str]) -> Settings:
    """Settings for an in-process gateway from `env` (variable names as keys).

    `env_file=None` on purpose: the working directory of a test run is the repository,
    where a developer's `.env` for `make run` lives."""
    return load_settings(env_file=None, **{k.lower(): v for k, v in env.items()})


def socket_mode_env(env: Mapping[str, str]) -> dict[str, str]:
    """The same settings for Socket Mode: an app token, and no signing secret."""
    return {k: v for k, v in env.items() if k != "SLACK_SIGNING_SECRET"} | {
        "SLACK_APP_TOKEN": APP_TOKEN
    }


# Both ways a gateway takes its events: `pytest.mark.rig(modes=BOTH)` runs a test in each.
BOTH = ("http", "socket")


@dataclass
class Rig:
    database_url: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    socket_mode: bool = False
    oauth: bool = False
    # With `oauth`: the channel of each workspace (team id to channel id).
    workspaces: Mapping[str, str] = field(default_factory=dict)
    # People the fake Slack knows: user id to display name.
    users: Mapping[str, str] = field(default_factory=dict)

    async def __aenter__(self) -> Rig:
        self.slack = await FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN).__aenter__()
        for user_id, name in self.users.items():
            self.slack.add_user(user_id, name=name.lower(), display_name=name)
        if self.oauth:
            self.slack.oauth = FakeOAuth(
                client_id=CLIENT_ID,
                client_secret=CLIENT_SECRET,
                app_id=self.slack.app_id,
                home_team=self.slack.team_id,
            )
            for team, channel in self.workspaces.items():
                self.slack.oauth.place(channel, team)
        self.sockets = await FakeSocketMode(app_id=self.slack.app_id).__aenter__()
        self.slack.socket_mode = self.sockets
        self.model = await OpenAIServer().__aenter__()
        self.model.default = echo
        self.replicas: list[Gateway] = []
        self.gateway = await self._start_gateway(self.socket_mode, self.database_url, {})
        self.http = aiohttp.ClientSession()
        self.db = await Database(self.database_url, min_size=1, max_size=2).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.db.close()
        await self.http.close()
        for replica in reversed(self.replicas):
            await replica.stop()
        await self.gateway.stop()
        await self.model.__aexit__(*exc)
        await self.sockets.__aexit__(*exc)
        await self.slack.__aexit__(*exc)

    async def start_gateway(
        self,
        *,
        socket_mode: bool,
        database_url: str | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> Gateway:
        """Another gateway on the same fakes (and database, unless given); stopped with the rig."""
        url = database_url or self.database_url
        gateway = await self._start_gateway(socket_mode, url, overrides or {})
        self.replicas.append(gateway)
        return gateway

    async def _start_gateway(
        self, socket_mode: bool, database_url: str, overrides: Mapping[str, str]
    ) -> Gateway:
        env = {**gateway_env(self.slack, self.model, database_url), **self.overrides, **overrides}
        if socket_mode:
            env = socket_mode_env(env)
        if self.oauth:
            env = oauth_env(env)
        gateway = Gateway(rig_settings(env))
        try:
            await gateway.start("127.0.0.1", 0)
        except BaseException:
            await gateway.stop()
            raise
        return gateway

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}/slack/events"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.metrics_port}/metrics"

    async def send(self, envelope: Mapping[str, Any], **options: Any) -> tuple[int, str]:
        return await deliver(self.http, self.events_url, dict(envelope), SECRET, **options)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}"

    async def begin_install(self) -> str:
        """GET /slack/install as a browser: the `state` it issued (in its cookie and link)."""
        async with self.http.get(f"{self.base_url}/slack/install") as response:
            assert response.status == 200, await response.text()
            page = await response.text()
            cookie = response.headers.get("Set-Cookie", "")
        state = cookie.split(f"{STATE_COOKIE}=", 1)[1].split(";", 1)[0]
        assert f"state={state}" in page  # the "Add to Slack" link carries it
        return state

    async def finish_install(self, code: str, state: str) -> tuple[int, str]:
        """Slack's redirect back with `code` and `state` (the browser's cookie along)."""
        async with self.http.get(
            f"{self.base_url}/slack/oauth_redirect",
            params={"code": code, "state": state},
            headers={"Cookie": f"{STATE_COOKIE}={state}"},
        ) as response:
            return response.status, await response.text()

    async def install(self, team_id: str, team_name: str = "", **grant: Any) -> str:
        """Install the app in a workspace through the flow; its new bot token."""
        assert self.slack.oauth is not None, "Rig(oauth=True)"
        state = await self.begin_install()
        status, body = await self.finish_install(
            self.slack.oauth.grant(team_id, team_name, **grant), state
        )
        assert status == 200, body
        return self.slack.oauth.token_of(team_id)

    async def count(self, table: str) -> int:
        return int(await self.db.pool.fetchval(f"SELECT count(*) FROM {table}"))
