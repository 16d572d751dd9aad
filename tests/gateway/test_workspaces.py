"""Many workspaces end to end: installed through Slack's OAuth flow, each answered with its
own token, one uninstalled without the others noticing.

The gateway runs for real (bolt's OAuth flow, our installation store on Postgres, the
task runner) against the fake Slack's OAuth side (tests/fakes/slack_oauth.py), which
refuses a workspace's token on another workspace's channel — so a post made with the
wrong token would fail, not pass unnoticed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.fernet import Fernet

from gateway.inbound.bolt_app import uninstalls
from gateway.inbound.gatekeeper import LIMIT_NOTICES
from gateway.slack.events import Tenant, event_tenant, inbound_turn
from gateway.slack.oauth import OAuthStateStore
from storage import Database, PostgresOAuthStates
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.process import run_cli_output
from tests.gateway.rig import BOTH, CLIENT_SECRET, Rig, echo, gateway_env, oauth_env
from tests.gateway.test_files_end_to_end import png
from tests.pg import wait_for_task

TEAMS = {"T2": "C2ALPHA", "T3": "C3BRAVO"}


pytestmark = pytest.mark.rig(oauth=True, workspaces=TEAMS, modes=BOTH)

# The HTTP-only tests run with the bot tokens sealed in the database.
SEALED = {"THREADGATE_TOKEN_KEY": Fernet.generate_key().decode()}
http_only = pytest.mark.rig(oauth=True, workspaces=TEAMS, overrides=SEALED)


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` on a loopback port; yields the URL of its /hook."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    finally:
        await runner.cleanup()


def mention(team: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    event = app_mention_event(text=f"<@UBOT> {text}", channel=TEAMS[team], team=team)
    return event, event_callback(event, team_id=team)


async def send(rig: Rig, envelope: dict[str, Any]) -> None:
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    else:
        status, body = await rig.send(envelope)
        assert status == 200, body


async def test_each_workspace_is_answered_with_its_own_token(rig: Rig) -> None:
    """Two workspaces installed through the flow; a mention in each is answered in its
    channel, with the bot token that workspace's install gave (HTTP and Socket Mode)."""
    tokens = {team: await rig.install(team, f"Team {team}") for team in TEAMS}
    assert len(set(tokens.values())) == 2
    assert await rig.count("slack_installations") == 2
    for team in TEAMS:
        await send(rig, mention(team, f"hello from {team}")[1])
    posts = await rig.slack.wait_for_posts(2)
    assert sorted(p.channel for p in posts) == sorted(TEAMS.values())
    carried = {(c.params["channel"], c.token) for c in rig.slack.calls_to("chat.postMessage")}
    assert carried == {(TEAMS[team], tokens[team]) for team in TEAMS}
    assert not [c for c in rig.slack.calls if c.token == "xoxb-test"]  # no single-mode token


@dataclass(frozen=True)
class Held:
    """A model answer that waits until the test releases it."""

    release: asyncio.Event

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        await self.release.wait()
        return await echo(seen).send(request, seen)


@http_only
async def test_an_uninstalled_workspace_gets_nothing_and_the_other_is_still_answered(
    rig: Rig,
) -> None:
    """app_uninstalled while a task's model answer is held: its installation is deleted,
    the task cancelled (actor slack:app_uninstalled) and nothing posted there; the other
    workspace is answered as before."""
    assert rig.slack.oauth is not None
    for team in TEAMS:
        await rig.install(team)
    asked, release = asyncio.Event(), asyncio.Event()

    def hold(seen: RecordedRequest) -> Reply:
        asked.set()
        return Held(release)

    rig.model.script(hold)
    gone, _ = mention("T2", "answer me slowly")
    await send(rig, event_callback(gone, team_id="T2"))
    await asyncio.wait_for(asked.wait(), 10)
    rig.slack.oauth.uninstall("T2")
    await send(rig, event_callback({"type": "app_uninstalled"}, team_id="T2"))
    task_id = f"T2:{gone['channel']}:{gone['ts']}"
    await wait_for_task(rig.db, task_id, "cancelled")
    release.set()
    await send(rig, mention("T3", "still here?")[1])
    posts = await rig.slack.wait_for_posts(1)
    assert [p.channel for p in posts] == [TEAMS["T3"]]
    actor = await rig.db.pool.fetchval(
        "SELECT actor FROM task_interventions WHERE task_id = $1", task_id
    )
    assert actor == "slack:app_uninstalled"
    teams = await rig.db.pool.fetch("SELECT team_id FROM slack_installations")
    assert [r["team_id"] for r in teams] == ["T3"]
    # Nothing was even tried in the uninstalled workspace after the uninstall.
    assert not [
        c for c in rig.slack.calls_to("chat.postMessage") if c.params["channel"] == gone["channel"]
    ]


# An uninstall's content is erased at once (not after the default delay).
ERASE_AT_ONCE = {"THREADGATE_ERASURE_DELAY_SECONDS": "0"}


async def until(db: Database, query: str, deadline: float = 30) -> None:
    """Wait until `query` is true: erasure runs in the background and wakes no one."""
    async with asyncio.timeout(deadline):
        while not await db.pool.fetchval(query):  # noqa: ASYNC110 - rows, polled
            await asyncio.sleep(0.02)  # polling a condition, under the deadline above


# What is stored of one workspace ($1): its messages, and what hangs on its sessions.
_STORED = """
SELECT (SELECT count(*) FROM messages WHERE split_part(session_id, ':', 1) = $1) AS messages,
       (SELECT count(*) FROM messages WHERE split_part(session_id, ':', 1) = $1
          AND text LIKE '%launch moved to March%') AS file_text,
       (SELECT count(*) FROM sessions WHERE split_part(id, ':', 1) = $1) AS sessions,
       (SELECT count(*) FROM tasks WHERE split_part(session_id, ':', 1) = $1) AS tasks,
       (SELECT count(*) FROM model_usage WHERE workspace = $1) AS usage
"""


NOTHING = {"messages": 0, "file_text": 0, "sessions": 0, "tasks": 0, "usage": 0}


async def stored(rig: Rig, team: str) -> dict[str, int]:
    row = await rig.db.pool.fetchrow(_STORED, team)
    assert row is not None
    return dict(row)


@pytest.mark.rig(oauth=True, workspaces=TEAMS, overrides=ERASE_AT_ONCE)
async def test_an_uninstall_erases_that_workspaces_messages_pictures_and_files(rig: Rig) -> None:
    """Two workspaces answered, one shown a picture and a text file: app_uninstalled there
    leaves no stored message, picture or file text of it (nor task, session or usage),
    and the other keeps all of its own. After a reinstall, whose mention is answered, the
    same delivery again (Slack's retry) changes nothing: the new installation stays."""
    assert rig.slack.oauth is not None
    tokens = {team: await rig.install(team) for team in TEAMS}
    rig.slack.files.bot_token = tokens["T2"]  # the fake hosts T2's files
    picture = rig.slack.files.add_file("chart.png", png(), mimetype="image/png")
    notes = rig.slack.files.add_file("notes.txt", b"launch moved to March")
    shown, _ = mention("T2", "what do these say?")
    await send(rig, event_callback(shown | {"files": [picture, notes]}, team_id="T2"))
    other, envelope = mention("T3", "hello from T3")
    await send(rig, envelope)
    for event in (shown, other):
        await wait_for_task(rig.db, f"{event['team']}:{event['channel']}:{event['ts']}", "done")
    before = await stored(rig, "T2")
    assert before["file_text"] >= 1 and before["usage"] >= 1
    assert await rig.count("message_attachments") == 1  # T2's picture
    kept = await stored(rig, "T3")
    rig.slack.oauth.uninstall("T2")
    uninstall = event_callback({"type": "app_uninstalled"}, team_id="T2")
    await send(rig, uninstall)
    await until(rig.db, "SELECT NOT EXISTS (SELECT 1 FROM workspace_erasures)")
    assert await stored(rig, "T2") == NOTHING
    assert await rig.count("message_attachments") == 0
    assert await stored(rig, "T3") == kept
    await rig.install("T2")
    back, envelope = mention("T2", "back again")
    await send(rig, envelope)
    await wait_for_task(rig.db, f"T2:{back['channel']}:{back['ts']}", "done")
    await send(rig, uninstall)
    teams = await rig.db.pool.fetch("SELECT team_id FROM slack_installations")
    assert sorted(r["team_id"] for r in teams) == ["T2", "T3"]
    assert await rig.count("workspace_erasures") == 0
    assert (await stored(rig, "T2"))["messages"] == 2  # the mention and its answer


@pytest.mark.rig(overrides=ERASE_AT_ONCE)
async def test_with_one_workspace_a_revoked_bot_token_erases_its_content_too(rig: Rig) -> None:
    """With SLACK_BOT_TOKEN (no installations), tokens_revoked naming the bot erases the
    workspace's messages, tasks and sessions as an uninstall does."""
    event = app_mention_event(text="<@UBOT> remember this")
    await rig.send(event_callback(event))
    await wait_for_task(rig.db, f"{event['team']}:{event['channel']}:{event['ts']}", "done")
    assert (await stored(rig, event["team"]))["messages"] == 2
    revoked = {"type": "tokens_revoked", "tokens": {"bot": ["UBOT"]}}
    status, body = await rig.send(event_callback(revoked, team_id=event["team"]))
    assert status == 200, body
    await until(rig.db, "SELECT NOT EXISTS (SELECT 1 FROM workspace_erasures)")
    assert await stored(rig, event["team"]) == NOTHING


def connect_mention(host: str, writer: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A mention in `host`'s channel by someone of `writer`'s workspace (Slack Connect):
    the envelope's team is the writer's, its authorization `host`'s installation."""
    event = app_mention_event(
        text=f"<@UBOT> {text}", user="UWRITER", channel=TEAMS[host], team=writer
    )
    event["user_team"] = event["source_team"] = writer
    envelope = event_callback(event, team_id=writer)
    envelope["authorizations"][0]["team_id"] = host
    envelope["is_ext_shared_channel"] = True
    return event, envelope


async def test_a_slack_connect_message_belongs_to_the_installation_it_was_delivered_for(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """A mention delivered for T2's installation but written from T3 (Slack Connect, in a
    deployment that answers there) is a task of T2: answered into T2's channel with T2's
    token, counted against T2's limits, and not cancelled when T3 uninstalls."""
    config = tmp_path / "channels.json"
    config.write_text(json.dumps({"default": {"externalChannels": "allow"}}))
    overrides = {
        "THREADGATE_USER_MESSAGES_PER_HOUR": "1",
        "THREADGATE_CHANNEL_CONFIG": str(config),
    }
    async with Rig(fresh_dsn, oauth=True, overrides=overrides) as rig:
        assert rig.slack.oauth is not None
        for team, channel in TEAMS.items():
            rig.slack.oauth.place(channel, team)
        tokens = {team: await rig.install(team) for team in TEAMS}
        asked, release = asyncio.Event(), asyncio.Event()

        def hold(seen: RecordedRequest) -> Reply:
            asked.set()
            return Held(release)

        rig.model.script(hold)
        event, envelope = connect_mention("T2", "T3", "answer me from across the way")
        await send(rig, envelope)
        await asyncio.wait_for(asked.wait(), 10)
        rig.slack.oauth.uninstall("T3")
        await send(rig, event_callback({"type": "app_uninstalled"}, team_id="T3"))
        task_id = f"T2:{event['channel']}:{event['ts']}"
        row = await rig.db.pool.fetchrow("SELECT state, user_id, address FROM tasks")
        assert row is not None
        assert (row["state"], row["user_id"]) == ("running", "T2:UWRITER")
        assert json.loads(row["address"])["user_team"] == "T3"  # the writer's, as data
        release.set()
        await wait_for_task(rig.db, task_id, "done")
        counted = await rig.db.pool.fetch("SELECT scope, key FROM admission_counts")
        assert {(r["scope"], r["key"]) for r in counted} >= {("user", "T2:UWRITER")}
        assert not [r for r in counted if r["key"].startswith("T3:")]
        # The writer's second message in T2 this hour is over T2's limit: one notice, in T2.
        await send(rig, connect_mention("T2", "T3", "and again")[1])
        posts = await rig.slack.wait_for_posts(2)
        assert [p.channel for p in posts] == [TEAMS["T2"]] * 2
        assert "more messages this hour" in posts[1].text
        used = {c.token for c in rig.slack.calls_to("chat.postMessage")}
        assert used == {tokens["T2"]}


async def test_an_install_from_outside_the_allowlist_is_refused_and_stores_nothing(
    fresh_dsn: str,
) -> None:
    """With THREADGATE_INSTALL_ALLOWLIST, a listed team or enterprise installs; any other
    ends on a page naming the setting, and nothing of it is stored."""
    overrides = {"THREADGATE_INSTALL_ALLOWLIST": "T2, E9"}
    async with Rig(fresh_dsn, oauth=True, overrides=overrides) as rig:
        assert rig.slack.oauth is not None
        await rig.install("T2")
        status, page = await rig.finish_install(
            rig.slack.oauth.grant("T3"), await rig.begin_install()
        )
        assert status == 403
        assert "THREADGATE_INSTALL_ALLOWLIST" in page
        org = rig.slack.oauth.grant(None, enterprise_id="E9", org=True)
        status, page = await rig.finish_install(org, await rig.begin_install())
        assert status == 200, page
        rows = await rig.db.pool.fetch("SELECT team_id, enterprise_id FROM slack_installations")
        assert sorted((r["team_id"] or "", r["enterprise_id"] or "") for r in rows) == [
            ("", "E9"),
            ("T2", ""),
        ]


async def test_the_budget_of_every_workspace_together_stops_the_next_workspace(
    fresh_dsn: str,
) -> None:
    """THREADGATE_DAILY_TOKENS_ALL_WORKSPACES spent by T2's answer (15 tokens): a mention
    in T3 gets the notice in its own channel, with its own token, and a second one
    from the same person that day leaves no task at all."""
    overrides = {"THREADGATE_DAILY_TOKENS_ALL_WORKSPACES": "15"}
    async with Rig(fresh_dsn, oauth=True, overrides=overrides) as rig:
        assert rig.slack.oauth is not None
        for team, channel in TEAMS.items():
            rig.slack.oauth.place(channel, team)
        tokens = {team: await rig.install(team) for team in TEAMS}
        first, envelope = mention("T2", "spend it")
        await send(rig, envelope)
        await wait_for_task(rig.db, f"T2:{first['channel']}:{first['ts']}", "done")
        await send(rig, mention("T3", "anything left?")[1])
        posts = await rig.slack.wait_for_posts(2)
        assert (posts[1].channel, posts[1].text) == (TEAMS["T3"], LIMIT_NOTICES["all_tokens"])
        assert rig.slack.calls_to("chat.postMessage")[-1].token == tokens["T3"]
        again, envelope = mention("T3", "and now?")
        await send(rig, envelope)
        assert not await rig.db.pool.fetchval(
            "SELECT true FROM tasks WHERE id = $1", f"T3:{again['channel']}:{again['ts']}"
        )
        assert len(rig.model.requests) == 1


@http_only
async def test_a_replayed_state_is_refused(rig: Rig) -> None:
    """The redirect's `state` works once: sent again (with a fresh code), it is refused and
    nothing more is installed."""
    assert rig.slack.oauth is not None
    state = await rig.begin_install()
    status, _ = await rig.finish_install(rig.slack.oauth.grant("T2"), state)
    assert status == 200
    status, _ = await rig.finish_install(rig.slack.oauth.grant("T3"), state)
    assert status >= 400
    assert await rig.count("slack_installations") == 1


@http_only
async def test_a_code_exchange_slack_failed_on_ends_on_the_failure_page(rig: Rig) -> None:
    """oauth.v2.access answered 503 shows the installer bolt's failure page, as a refused
    code does (not a server error), and installs nothing."""
    assert rig.slack.oauth is not None
    state = await rig.begin_install()
    rig.slack.fail("oauth.v2.access", status=503)
    status, _ = await rig.finish_install(rig.slack.oauth.grant("T2"), state)
    assert 400 <= status < 500
    assert len(rig.slack.calls_to("oauth.v2.access")) == 1
    assert await rig.count("slack_installations") == 0


@http_only
async def test_an_expired_state_is_refused(rig: Rig) -> None:
    """A `state` past its expiry (signed by the app's key all the same) is refused, even
    on its first use."""
    assert rig.slack.oauth is not None
    issued_expired = OAuthStateStore(
        PostgresOAuthStates(rig.db, expiration_seconds=-1), CLIENT_SECRET
    )
    state = await issued_expired.async_issue()
    status, _ = await rig.finish_install(rig.slack.oauth.grant("T2"), state)
    assert status >= 400
    assert await rig.count("slack_installations") == 0


@http_only
async def test_an_event_from_a_workspace_without_the_app_is_not_admitted(rig: Rig) -> None:
    """A mention from a workspace with no installation queues nothing (and the gateway
    does not fall back on any other workspace's token)."""
    await rig.install("T3")
    await send(rig, mention("T2", "who are you?")[1])
    assert await rig.count("tasks") == 0


@http_only
async def test_an_org_wide_install_answers_every_workspace_of_its_enterprise(rig: Rig) -> None:
    """Enterprise Grid: installed once for the org, a mention from any of its workspaces
    (the event's enterprise_id and is_enterprise_install) is answered with the org's token."""
    assert rig.slack.oauth is not None
    state = await rig.begin_install()
    status, body = await rig.finish_install(
        rig.slack.oauth.grant(None, enterprise_id="E1", org=True), state
    )
    assert status == 200, body
    (org_token,) = rig.slack.oauth.tokens
    event, envelope = mention("T2", "hello from the grid")
    envelope["enterprise_id"] = envelope["context_enterprise_id"] = "E1"
    envelope["authorizations"][0] |= {
        "enterprise_id": "E1",
        "team_id": None,
        "is_enterprise_install": True,
    }
    await send(rig, envelope)
    posts = await rig.slack.wait_for_posts(1)
    assert [(p.channel, p.thread_ts) for p in posts] == [(event["channel"], event["ts"])]
    assert [c.token for c in rig.slack.calls_to("chat.postMessage")] == [org_token]
    address = await rig.db.pool.fetchval("SELECT address FROM tasks")
    assert json.loads(address)["enterprise"] == "E1"


@http_only
async def test_doctor_lists_installations_and_tries_each_token(rig: Rig, tmp_path: Path) -> None:
    """`doctor` in OAuth mode names every installed workspace (never a token) and runs
    auth.test with each one's token: a revoked one is a FAIL naming its workspace."""
    assert rig.slack.oauth is not None
    tokens = [await rig.install(team, f"Team {team}") for team in TEAMS]
    rig.slack.oauth.uninstall("T3")
    env = oauth_env(gateway_env(rig.slack, rig.model, rig.database_url)) | SEALED
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1, out + err
    assert "ok   slack: workspace T2 (Team T2): its token works" in out
    assert "FAIL slack: workspace T3 (Team T3): Slack refused its bot token (token_revoked)" in out
    assert "many workspaces (OAuth)" in out
    assert "warn install: THREADGATE_INSTALL_ALLOWLIST is unset" in out
    assert not [t for t in tokens if t in out + err]
    stored = await rig.db.pool.fetch("SELECT bot_token FROM slack_installations")
    assert all(r["bot_token"].startswith("fernet:") for r in stored)  # sealed at rest


async def test_a_refused_token_alarms_naming_its_workspace(fresh_dsn: str) -> None:
    """A workspace whose token Slack stopped taking (no uninstall event came): the alarm
    names that workspace, by id and name, and the other workspace is still answered."""
    received: list[str] = []
    alarmed = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.json())["text"])
        alarmed.set()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with serving(app) as url:
        overrides = {"THREADGATE_ALERT_WEBHOOK_URL": url}
        async with Rig(fresh_dsn, oauth=True, workspaces=TEAMS, overrides=overrides) as rig:
            assert rig.slack.oauth is not None
            for team in TEAMS:
                await rig.install(team, f"Team {team}")
            rig.slack.oauth.uninstall("T2")
            await send(rig, mention("T2", "anyone?")[1])
            await send(rig, mention("T3", "anyone?")[1])
            posts = await rig.slack.wait_for_posts(1)
            assert [p.channel for p in posts] == [TEAMS["T3"]]
            await asyncio.wait_for(alarmed.wait(), 10)
    assert "workspace T2 (Team T2)" in received[0] and "token_revoked" in received[0]


def test_the_tenant_is_the_authorization_and_the_envelope_team_only_without_one() -> None:
    """`event_tenant`: the first authorization's team (an org-wide install: its
    enterprise); the envelope's team only when a payload has no authorizations."""
    _, connect = connect_mention("T2", "T3", "hi")
    assert event_tenant(connect) == Tenant("T2")
    _, org = mention("T2", "hi")
    org["authorizations"][0] |= {"enterprise_id": "E1", "team_id": None}
    org["authorizations"][0]["is_enterprise_install"] = True
    assert event_tenant(org) == Tenant("E1", "E1", org_wide=True)
    _, bare = mention("T3", "hi")
    del bare["authorizations"]
    assert event_tenant(bare) == Tenant("T3")
    turn = inbound_turn(connect)
    assert turn is not None and (turn.team, turn.user_team) == ("T2", "T3")


def test_only_losing_the_bot_counts_as_an_uninstall() -> None:
    """app_uninstalled, or tokens_revoked naming bot tokens, takes the bot away; a
    revocation of user tokens alone does not."""
    assert uninstalls({"type": "app_uninstalled"})
    assert uninstalls({"type": "tokens_revoked", "tokens": {"bot": ["UBOT00002"]}})
    assert not uninstalls({"type": "tokens_revoked", "tokens": {"oauth": ["U1"]}})
    assert not uninstalls({"type": "app_mention"})
