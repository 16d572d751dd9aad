"""Slack installations and OAuth states in Postgres (storage/installations.py)."""

from __future__ import annotations

import json
import time

import pytest
from cryptography.fernet import Fernet

from storage import (
    Admission,
    Database,
    PostgresInstallations,
    PostgresOAuthStates,
    StoredInstallation,
    TokenCipher,
    TokenKeyError,
    admit,
    cancel_workspace_tasks,
)

CLIENT = "111.222"


def installed(
    team: str | None, token: str, *, enterprise: str | None = None, org: bool = False
) -> StoredInstallation:
    return StoredInstallation(
        client_id=CLIENT,
        enterprise_id=enterprise,
        team_id=team,
        bot_token=token,
        bot_user_id=f"U{token[-3:]}",
        team_name=f"name of {team}",
        is_enterprise_install=org,
    )


async def test_the_latest_install_of_a_workspace_wins(fresh_db: Database) -> None:
    """A reinstall adds a row; `find` answers the newest token, `installations` one entry."""
    store = PostgresInstallations(fresh_db, CLIENT)
    await store.save(installed("T1", "xoxb-old"))
    await store.save(installed("T1", "xoxb-new"))
    await store.save(installed("T2", "xoxb-two"))
    found = await store.find(None, "T1")
    assert found is not None and found.bot_token == "xoxb-new"
    assert [s.team_id for s in await store.installations()] == ["T1", "T2"]


async def test_workspaces_are_apart_by_enterprise_and_by_app(fresh_db: Database) -> None:
    """The same team id under another enterprise, or another app's install, is not ours."""
    store = PostgresInstallations(fresh_db, CLIENT)
    await store.save(installed("T1", "xoxb-grid", enterprise="E1"))
    assert await store.find(None, "T1") is None
    assert await PostgresInstallations(fresh_db, "999.999").find("E1", "T1") is None
    found = await store.find("E1", "T1")
    assert found is not None and found.bot_token == "xoxb-grid"


async def test_an_org_wide_install_belongs_to_its_enterprise(fresh_db: Database) -> None:
    """An org-wide install is stored without a team and found by its enterprise with
    `is_enterprise_install`, whatever team the event came from."""
    store = PostgresInstallations(fresh_db, CLIENT)
    await store.save(installed("T9", "xoxb-org", enterprise="E1", org=True))
    found = await store.find("E1", "T5", is_enterprise_install=True)
    assert found is not None and found.bot_token == "xoxb-org" and found.team_id is None
    assert await store.find("E1", "T5") is None  # not a per-workspace install of T5


async def test_delete_forgets_the_workspace_and_delete_bot_its_tokens(fresh_db: Database) -> None:
    """`delete` removes every install of a workspace; `delete_bot` keeps the record but no
    token is found any more; other workspaces are untouched."""
    store = PostgresInstallations(fresh_db, CLIENT)
    for team, token in (("T1", "xoxb-a"), ("T1", "xoxb-b"), ("T2", "xoxb-c"), ("T3", "xoxb-d")):
        await store.save(installed(team, token))
    assert await store.delete(None, "T1") == 2
    await store.delete_bot(None, "T2")
    assert await store.find(None, "T1") is None and await store.find(None, "T2") is None
    assert [s.team_id for s in await store.installations()] == ["T3"]
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM slack_installations") == 2


async def test_what_operators_see_carries_no_token(fresh_db: Database) -> None:
    """Neither the listing nor a found installation's repr shows the bot token."""
    store = PostgresInstallations(fresh_db, CLIENT)
    await store.save(installed("T1", "xoxb-secret-value"))
    listed = await store.installations()
    assert "xoxb-secret-value" not in repr(listed)
    assert "xoxb-secret-value" not in repr(await store.find(None, "T1"))


async def test_a_state_is_used_once(fresh_db: Database) -> None:
    """A fresh state is good for one redirect; a replay is refused."""
    states = PostgresOAuthStates(fresh_db)
    expires = time.time() + 600
    assert await states.use("1.nonce", expires) is True
    assert await states.use("1.nonce", expires) is False
    assert await states.use("2.other", expires) is True


async def test_an_expired_state_is_refused_and_swept(fresh_db: Database) -> None:
    """A state past its expiry is refused even on first use; used ones past theirs are
    swept as the next one is written."""
    states = PostgresOAuthStates(fresh_db)
    assert await states.use("stale", time.time() - 1) is False
    assert await states.use("used", time.time() + 600) is True
    await fresh_db.pool.execute("UPDATE slack_oauth_states SET expires_at = now() - interval '1 s'")
    assert await states.use("next", time.time() + 600) is True
    rows = await fresh_db.pool.fetch("SELECT state FROM slack_oauth_states")
    assert [r["state"] for r in rows] == ["next"]


async def test_cancelling_a_workspace_stops_only_its_unfinished_tasks(fresh_db: Database) -> None:
    """Every queued task of the uninstalled team is cancelled by the named actor; another
    team's task stays queued."""
    for team, ts in (("T1", "1.000001"), ("T1", "1.000002"), ("T2", "1.000003")):
        address = {"team": team, "channel": "C1", "thread_ts": ts, "user": "U1"}
        await admit(
            fresh_db,
            Admission(
                event_id=f"Ev{ts}",
                task_id=f"{team}:C1:{ts}",
                session_id=f"{team}:C1:{ts}",
                address=address,
                turn_text="hi",
            ),
        )
    cancelled = await cancel_workspace_tasks(fresh_db, "T1", actor="slack:app_uninstalled")
    assert sorted(cancelled) == ["T1:C1:1.000001", "T1:C1:1.000002"]
    rows = await fresh_db.pool.fetch("SELECT id, state, address FROM tasks ORDER BY id")
    assert {r["id"]: r["state"] for r in rows} == {
        "T1:C1:1.000001": "cancelled",
        "T1:C1:1.000002": "cancelled",
        "T2:C1:1.000003": "queued",
    }
    assert json.loads(rows[2]["address"])["team"] == "T2"
    actors = await fresh_db.pool.fetch("SELECT DISTINCT actor FROM task_interventions")
    assert [r["actor"] for r in actors] == ["slack:app_uninstalled"]


KEY = Fernet.generate_key().decode()


async def test_with_a_key_tokens_are_stored_sealed_and_found_open(fresh_db: Database) -> None:
    """THREADGATE_TOKEN_KEY: the column holds no token, `find` gives it back as issued, and
    a row stored before the key was set still reads."""
    await PostgresInstallations(fresh_db, CLIENT).save(installed("T0", "xoxb-from-before"))
    store = PostgresInstallations(fresh_db, CLIENT, cipher=TokenCipher(KEY))
    await store.save(installed("T1", "xoxb-sealed-token"))
    stored = await fresh_db.pool.fetchval(
        "SELECT bot_token FROM slack_installations WHERE team_id = 'T1'"
    )
    assert stored.startswith("fernet:") and "xoxb-sealed-token" not in stored
    found, before = await store.find(None, "T1"), await store.find(None, "T0")
    assert found is not None and found.bot_token == "xoxb-sealed-token"
    assert before is not None and before.bot_token == "xoxb-from-before"


async def test_a_sealed_token_without_its_key_names_the_variable(fresh_db: Database) -> None:
    """Read without a key, or with another one: an error naming THREADGATE_TOKEN_KEY."""
    await PostgresInstallations(fresh_db, CLIENT, cipher=TokenCipher(KEY)).save(
        installed("T1", "xoxb-x")
    )
    for cipher in (None, TokenCipher(Fernet.generate_key().decode())):
        with pytest.raises(TokenKeyError, match="THREADGATE_TOKEN_KEY"):
            await PostgresInstallations(fresh_db, CLIENT, cipher=cipher).find(None, "T1")
