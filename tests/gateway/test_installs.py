"""Who may install, and use, a gateway of many workspaces (issue 44, item 6): the install
allowlist holds for events too (a workspace off it gets no model call), a refused
install's token is revoked (`auth.revoke`), and no number of anonymous visits of the
install page locks a real installer out (states are signed, stored only once used)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gateway.config.settings import load_settings
from gateway.operator.doctor import off_the_allowlist
from gateway.slack.oauth import OPEN_INSTALLS
from storage import InstallationSummary
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.rig import SECRET, Rig
from tests.pg import wait_for_task

TEAMS = {"T2": "C2ALPHA", "T3": "C3BRAVO"}


def tokens_of(rig: Rig, team: str) -> list[str]:
    assert rig.slack.oauth is not None
    return [t for t, w in rig.slack.oauth.tokens.items() if w.team_id == team]


async def test_a_refused_install_stores_nothing_and_its_token_is_revoked(fresh_dsn: str) -> None:
    """An install off THREADGATE_INSTALL_ALLOWLIST ends on the refusal page, stores
    nothing, and the token Slack issued it is revoked with auth.revoke; a listed one
    installs and keeps its token live."""
    async with Rig(fresh_dsn, oauth=True, overrides={"THREADGATE_INSTALL_ALLOWLIST": "T2"}) as rig:
        assert rig.slack.oauth is not None
        kept = await rig.install("T2")
        status, page = await rig.finish_install(
            rig.slack.oauth.grant("T3"), await rig.begin_install()
        )
        assert status == 403 and "THREADGATE_INSTALL_ALLOWLIST" in page
        (refused,) = tokens_of(rig, "T3")
        assert rig.slack.oauth.revoked == {refused} and kept not in rig.slack.oauth.revoked
        revokes = rig.slack.calls_to("auth.revoke")
        assert [c.token for c in revokes] == [refused]
        rows = await rig.db.pool.fetch("SELECT team_id FROM slack_installations")
        assert [r["team_id"] for r in rows] == ["T2"]


async def test_events_of_a_workspace_off_the_allowlist_get_no_model_call(
    fresh_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A workspace installed before the allowlist left it out: its events are acked and
    admitted nowhere (no task, no model request), counted as not_allowed and logged once;
    a listed workspace's event is answered."""
    async with Rig(fresh_dsn, oauth=True, workspaces=TEAMS) as rig:
        for team in TEAMS:
            await rig.install(team)
        gated = await rig.start_gateway(
            socket_mode=False, overrides={"THREADGATE_INSTALL_ALLOWLIST": "T2"}
        )
        url = f"http://127.0.0.1:{gated.port}/slack/events"
        for n in range(2):
            event = app_mention_event(text=f"<@UBOT> hi {n}", channel=TEAMS["T3"], team="T3")
            status, _ = await deliver(rig.http, url, event_callback(event, team_id="T3"), SECRET)
            assert status == 200
        allowed = app_mention_event(text="<@UBOT> hello", channel=TEAMS["T2"], team="T2")
        assert (await deliver(rig.http, url, event_callback(allowed, team_id="T2"), SECRET))[
            0
        ] == 200
        await wait_for_task(rig.db, f"T2:{TEAMS['T2']}:{allowed['ts']}", "done")
        assert await rig.count("tasks") == 1 and len(rig.model.requests) == 1
        refused = gated.metrics.registry.get_sample_value(
            "threadgate_events_total", {"outcome": "not_allowed"}
        )
        assert refused == 2
        logged = [
            r for r in caplog.records if "not on THREADGATE_INSTALL_ALLOWLIST" in r.getMessage()
        ]
        assert len(logged) == 1 and "T3" in logged[0].getMessage()


async def test_a_burst_of_anonymous_visits_stores_nothing_and_locks_no_installer_out(
    fresh_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A thousand anonymous GETs of the install page each get a state and store nothing;
    a real installer then installs; a state used once, or forged, is refused. (Without
    an allowlist, start-up warns that anyone may install.)"""
    async with Rig(fresh_dsn, oauth=True) as rig:
        assert OPEN_INSTALLS in caplog.text and rig.slack.oauth is not None
        semaphore = asyncio.Semaphore(20)

        async def visit() -> int:
            async with semaphore, rig.http.get(f"{rig.base_url}/slack/install") as response:
                return response.status

        statuses = await asyncio.gather(*(visit() for _ in range(1000)))
        assert set(statuses) == {200}
        assert await rig.count("slack_oauth_states") == 0
        state = await rig.begin_install()
        code = rig.slack.oauth.grant("T2")
        assert (await rig.finish_install(code, state))[0] == 200
        assert await rig.count("slack_installations") == 1
        replayed = await rig.finish_install(rig.slack.oauth.grant("T2"), state)
        forged = state[:-1] + ("0" if state[-1] != "0" else "1")
        refused = await rig.finish_install(rig.slack.oauth.grant("T2"), forged)
        assert replayed[0] >= 400 and refused[0] >= 400
        assert await rig.count("slack_installations") == 1


def test_doctor_warns_of_installations_the_allowlist_leaves_out() -> None:
    """`doctor` names each installed workspace off THREADGATE_INSTALL_ALLOWLIST (a warn:
    its events are refused); none without a list or when every one is on it."""
    at = datetime.now(UTC)
    found = [
        InstallationSummary(None, team, None, None, False, "UBOT", at) for team in ("T2", "T3")
    ]
    base = {"env_file": None, "slack_client_id": "1.2", "slack_client_secret": "s"}
    assert off_the_allowlist(load_settings(**base), found) == []
    (warned,) = off_the_allowlist(load_settings(**base, threadgate_install_allowlist="T2"), found)
    assert warned.status == "warn" and warned.detail.startswith("T3 is installed but not on")
