"""Setting THREADGATE_TOKEN_KEY on a gateway that already has installations seals the bot
tokens stored before it, as the gateways start — two replicas at once here — and the
workspaces are answered with their tokens as before (issue 37, item 8)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cryptography.fernet import Fernet

from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import run_cli_output
from tests.gateway.rig import SECRET, Rig, gateway_env, oauth_env

TEAMS = {"T2": "C2ALPHA", "T3": "C3BRAVO"}


async def test_a_key_set_later_seals_the_stored_tokens_at_start_up(fresh_dsn: str) -> None:
    """Installed without a key, the tokens are stored as issued; two gateways started with
    a key seal every one of them once, and a mention is still answered with its token."""
    key = Fernet.generate_key().decode()
    async with Rig(fresh_dsn, oauth=True, workspaces=TEAMS) as rig:
        tokens = {team: await rig.install(team, f"Team {team}") for team in TEAMS}
        rows = await rig.db.pool.fetch("SELECT team_id, bot_token FROM slack_installations")
        assert {row["team_id"]: row["bot_token"] for row in rows} == tokens  # as issued
        await rig.gateway.stop()
        sealed = {"THREADGATE_TOKEN_KEY": key}
        replicas = await asyncio.gather(
            *(rig.start_gateway(socket_mode=False, overrides=sealed) for _ in range(2))
        )
        rows = await rig.db.pool.fetch("SELECT team_id, bot_token FROM slack_installations")
        fernet = Fernet(key.encode())
        for row in rows:
            assert row["bot_token"].startswith("fernet:")
            opened = fernet.decrypt(row["bot_token"].removeprefix("fernet:").encode()).decode()
            assert opened == tokens[row["team_id"]]
        event = app_mention_event(text="<@UBOT> still there?", channel=TEAMS["T3"], team="T3")
        url = f"http://127.0.0.1:{replicas[1].port}/slack/events"
        status, body = await deliver(rig.http, url, event_callback(event, team_id="T3"), SECRET)
        assert status == 200, body
        [post] = await rig.slack.wait_for_posts(1)
        assert post.channel == TEAMS["T3"]
        posted = rig.slack.calls_to("chat.postMessage")
        assert [call.token for call in posted] == [tokens["T3"]]


async def test_doctor_counts_the_tokens_not_sealed_yet(fresh_dsn: str, tmp_path: Path) -> None:
    """`doctor` with THREADGATE_TOKEN_KEY says how many stored tokens are still unsealed
    (and, with none left, that all are sealed) — never a token."""
    async with Rig(fresh_dsn, oauth=True, workspaces=TEAMS) as rig:
        tokens = [await rig.install(team, f"Team {team}") for team in TEAMS]
        env = oauth_env(gateway_env(rig.slack, rig.model, rig.database_url))
        sealed = env | {"THREADGATE_TOKEN_KEY": Fernet.generate_key().decode()}
        _, out, err = await run_cli_output(["doctor"], sealed, tmp_path)
        assert "warn tokens: 2 stored bot token(s) not sealed yet" in out, out
        _, out, _ = await run_cli_output(["doctor"], env, tmp_path)
        assert "warn tokens: THREADGATE_TOKEN_KEY is unset: 2 bot token(s)" in out, out
        assert not [t for t in tokens if t in out + err]
