"""Each channel its own boundary, in a real `threadgate serve`: a channel's model request
offers exactly its tools (MCP ones by glob), carries its instructions and goes to its
model, a call to a withheld tool is refused and never runs; SIGHUP puts a changed file in
force and keeps the old policy when the new file is malformed; a malformed file stops
`serve` in one sentence, and `doctor` prints each channel's effective policy."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import aiohttp

from gateway.inbound.gatekeeper import LIMIT_NOTICES
from storage import Database
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import Completion, OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import DEFAULT_CHANNEL, app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli, run_cli_output
from tests.gateway.rig import BOT_TOKEN, SECRET, Rig, echo, gateway_env
from tests.pg import create_database

SUPPORT = "C0SUPPORT01"
DESK = "You are the support desk: answer about orders only."


def channel_file(tmp_path: Path, support: dict[str, Any]) -> Path:
    path = tmp_path / "channels.json"
    path.write_text(json.dumps({"default": {"tools": ["*"]}, "channels": {SUPPORT: support}}))
    return path


def tools_of(seen: RecordedRequest) -> list[str]:
    return [tool["function"]["name"] for tool in seen.body["tools"]]


def system_of(seen: RecordedRequest) -> str:
    return str(seen.body["messages"][0]["content"])


class Channels:
    """Mentions into a running gateway, each answered before the next is sent."""

    def __init__(self, slack: FakeSlack, gateway: GatewayProcess, http: aiohttp.ClientSession):
        self.slack, self.gateway, self.http = slack, gateway, http

    async def ask(self, channel: str, text: str) -> None:
        posted = len(self.slack.posts)
        envelope = event_callback(app_mention_event(text=f"<@UBOT> {text}", channel=channel))
        assert (await deliver(self.http, self.gateway.events_url, envelope, SECRET))[0] == 200
        await self.slack.wait_for_posts(posted + 1, timeout=60)

    async def reload(self, expect: bytes) -> None:
        assert self.gateway.proc is not None
        self.gateway.proc.send_signal(signal.SIGHUP)
        await self.gateway.wait_for_log(expect)


async def test_each_channel_is_offered_its_tools_instructions_and_model_and_sighup_reloads(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The support channel's request offers the controls and its MCP tool only, says its
    instructions and names its model; the withheld tool it calls is refused, never run;
    another channel gets every tool and the deployment's model. After SIGHUP the changed
    file is in force; after one more with a malformed file, still that one."""
    dsn = await create_database(postgres_dsn, "channel_policy")
    mcp = {
        "mcpServers": {"fake": stdio_entry(tmp_path / "pid", allowedTools=["echo", "token_is_set"])}
    }
    (tmp_path / "mcp.json").write_text(json.dumps(mcp))
    config = channel_file(
        tmp_path, {"instructions": DESK, "model": "openai:gpt-support", "tools": ["fake__echo"]}
    )
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        model.script(reply_with_tool("fake__token_is_set", {}, call_id="call_withheld"))
        env = {
            **gateway_env(slack, model, dsn),
            "THREADGATE_MCP_CONFIG": str(tmp_path / "mcp.json"),
            "THREADGATE_CHANNEL_CONFIG": str(config),
        }
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        channels = Channels(slack, gateway, http)
        try:
            await channels.ask(SUPPORT, "where is order 7?")
            first, refused = model.requests[0], model.requests[1]
            assert tools_of(first) == ["final_reply", "delegate", "fake__echo"]
            assert first.body["model"] == "gpt-support" and DESK in system_of(first)
            result = [m for m in refused.body["messages"] if m["role"] == "tool"][-1]
            assert "no tool named 'fake__token_is_set'" in result["content"]
            await channels.ask(DEFAULT_CHANNEL, "anything else?")
            other = model.requests[2]
            assert other.body["model"] == "gpt-test" and DESK not in system_of(other)
            assert {"current_time", "read_thread", "fake__echo", "fake__token_is_set"} <= set(
                tools_of(other)
            )

            channel_file(tmp_path, {"instructions": "Now the ops desk.", "tools": ["current_time"]})
            await channels.reload(rb"THREADGATE_CHANNEL_CONFIG reloaded: 1 channel")
            await channels.ask(SUPPORT, "and now?")
            after = model.requests[-1]
            assert tools_of(after) == ["final_reply", "delegate", "current_time"]
            assert "Now the ops desk." in system_of(after) and after.body["model"] == "gpt-test"

            config.write_text(json.dumps({"channels": {SUPPORT: {"tool": ["*"]}}}))
            await channels.reload(rb"was not reloaded, the channel policy in force is kept")
            await channels.ask(SUPPORT, "still you?")
            assert tools_of(model.requests[-1]) == ["final_reply", "delegate", "current_time"]
        finally:
            assert await gateway.stop() == 0
    async with Database(dsn) as db:
        ran = await db.pool.fetch("SELECT name FROM tool_calls")
    assert [r["name"] for r in ran] == []  # the withheld call never ran
    log = gateway.log.decode(errors="replace")
    assert f"channels.{SUPPORT}.tool: extra inputs are not permitted" in log


async def test_serve_with_a_malformed_channel_config_is_one_sentence(tmp_path: Path) -> None:
    """An unknown key stops `serve` with one line naming the variable, the file and the
    field."""
    config = channel_file(tmp_path, {"tolls": ["*"]})
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s3cr3t-value",
        "THREADGATE_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "sk-test",
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "THREADGATE_METRICS_ADDRESS": "off",
        "THREADGATE_CHANNEL_CONFIG": str(config),
    }
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1, stderr
    assert f"THREADGATE_CHANNEL_CONFIG ({config})" in stderr
    assert f"field channels.{SUPPORT}.tolls" in stderr


def answer_ok(seen: RecordedRequest) -> Reply:
    return Completion(text="ok")


async def test_doctor_prints_each_channels_effective_policy(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """One line for the default and one per configured channel: its models, tools (and
    the built-in ones they offer), Slack Connect, instructions and limits."""
    config = channel_file(
        tmp_path,
        {
            "instructions": DESK,
            "model": "openai:gpt-support",
            "tools": ["orders__*", "current_time"],
            "limits": {"userMessagesPerHour": 20},
        },
    )
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        model.default = answer_ok
        env = {
            **gateway_env(slack, model, await create_database(postgres_dsn, "doctor_channels")),
            "THREADGATE_CHANNEL_CONFIG": str(config),
        }
        _, out, _ = await run_cli_output(["doctor"], env, tmp_path)
    lines = [line for line in out.splitlines() if " channel " in line]
    assert lines == [
        "ok   channel default: the deployment's models; tools * (built-in offered:"
        " current_time, read_thread); Slack Connect refused; no instructions of its own;"
        " limits the deployment's",
        f"ok   channel {SUPPORT}: openai:gpt-support only; tools orders__*, current_time"
        " (built-in offered: current_time); Slack Connect refused; instructions"
        f' "{DESK}" ({len(DESK)} characters); limits userMessagesPerHour 20',
    ]


async def test_a_channels_own_limit_is_enforced_in_it_and_nowhere_else(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """`userMessagesPerHour: 1` in the support channel: a person's second message there
    gets the limit's notice, while the same person is answered elsewhere (the
    deployment's 60)."""
    config = channel_file(tmp_path, {"limits": {"userMessagesPerHour": 1}})
    async with Rig(fresh_dsn, overrides={"THREADGATE_CHANNEL_CONFIG": str(config)}) as rig:
        for channel in (SUPPORT, SUPPORT, DEFAULT_CHANNEL):
            await rig.send(event_callback(app_mention_event(text="<@UBOT> hi", channel=channel)))
        posts = await rig.slack.wait_for_posts(3)
        texts = {(p.channel, p.text) for p in posts}
        assert (SUPPORT, LIMIT_NOTICES["user"]) in texts
        assert (DEFAULT_CHANNEL, LIMIT_NOTICES["user"]) not in texts
        assert len(rig.model.requests) == 2
