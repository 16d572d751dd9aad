"""A whole gateway on loopback: fake Slack, fake OpenAI, real Postgres, real HTTP.

`Rig` starts the real composition root (`gateway.service.Gateway`) in this process with
settings pointing at the fakes, and helps tests send signed events and read the outcome
from the fake Slack's record and the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.config import load_settings
from gateway.service import Gateway
from storage.database import Database
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver

SECRET = "signing-secret-for-tests"
BOT_TOKEN = "xoxb-test"


def last_user_text(body: Any) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
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
    }


@dataclass
class Rig:
    database_url: str
    overrides: Mapping[str, str] = field(default_factory=dict)

    async def __aenter__(self) -> Rig:
        self.slack = await FakeSlack(bot_token=BOT_TOKEN).__aenter__()
        self.model = await OpenAIServer().__aenter__()
        self.model.default = echo
        env = {**gateway_env(self.slack, self.model, self.database_url), **self.overrides}
        settings = load_settings(**{k.lower(): v for k, v in env.items()})
        self.gateway = Gateway(settings)
        await self.gateway.start("127.0.0.1", 0)
        self.http = aiohttp.ClientSession()
        self.db = await Database(self.database_url, min_size=1, max_size=2).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.db.close()
        await self.http.close()
        await self.gateway.stop()
        await self.model.__aexit__(*exc)
        await self.slack.__aexit__(*exc)

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}/slack/events"

    async def send(self, envelope: Mapping[str, Any], **options: Any) -> tuple[int, str]:
        return await deliver(self.http, self.events_url, dict(envelope), SECRET, **options)

    async def count(self, table: str) -> int:
        return int(await self.db.pool.fetchval(f"SELECT count(*) FROM {table}"))
