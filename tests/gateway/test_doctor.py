"""`threadgate doctor` names every problem of a deployment in one run, one line each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config.settings import Settings
from gateway.operator.doctor import Limits, check_erasures, check_retention, check_slack
from gateway.slack.scopes import SCOPE_REASONS, bot_scopes
from storage import Database, request_erasure
from storage.migrations import available_migrations
from tests.fakes.openai_api import (
    Completion,
    Hang,
    OpenAIServer,
    RecordedRequest,
    Reply,
    error_reply,
)
from tests.fakes.slack_api import FakeSlack
from tests.fakes.socket_mode import FakeSocketMode
from tests.gateway.process import run_cli_output
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN, gateway_env, socket_mode_env
from tests.pg import create_database


def answer_ok(seen: RecordedRequest) -> Reply:
    return Completion(text="ok")


def refuse_key(seen: RecordedRequest) -> Reply:
    return error_reply(401, "Incorrect API key provided", code="invalid_api_key")


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        fake.granted_scopes = list(bot_scopes(continue_threads=True))
        yield fake


@pytest.fixture
async def model() -> AsyncIterator[OpenAIServer]:
    async with OpenAIServer() as server:
        server.default = answer_ok
        yield server


def lines(out: str, status: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(status)]


async def test_a_good_configuration_passes(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """Settings, token, scopes, model and a migrated database all pass: exit 0."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_good"))
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 0, out + err
    assert lines(out, "FAIL") == [] and lines(out, "skip") == []
    assert "workspace Threadgate Test (T1), bot @threadgate (UBOT)" in out
    assert "openai:gpt-test: ok in" in out and "schema is up to date" in out
    assert slack.calls_to("auth.test") and len(model.requests) == 1
    # What a replica of role all opens: 20, the LISTEN session, 8 for its ingress thread, 2.
    assert "ok   database connections: a process of role all opens up to 31" in out


async def test_a_broken_configuration_names_every_problem_in_one_run(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """No signing secret, a revoked token, a 401 model: three lines; pending migrations on a
    fresh database are what `serve` will apply, not a failure."""
    slack.revoke_token()
    model.default = refuse_key
    new = await create_database(postgres_dsn, "doctor_broken", empty=True)
    env = gateway_env(slack, model, new)
    del env["SLACK_SIGNING_SECRET"]
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1 and "Traceback" not in err
    failures = lines(out, "FAIL")
    assert len(failures) == 3, out
    settings, token, key = failures
    assert "SLACK_SIGNING_SECRET is not set" in settings
    assert "token_revoked" in token and "SLACK_BOT_TOKEN" in token
    assert key.startswith("FAIL model: openai:gpt-test: ") and "(OPENAI_API_KEY) was refused" in key
    [database] = [line for line in lines(out, "ok") if "database:" in line]
    pending = len(available_migrations())  # every one: the database is new
    assert f"`threadgate serve` will apply {pending} pending migration(s) at start" in database
    assert "001_initial.sql, 002_delegation.sql" in database and "threadgate migrate" in database
    assert out.splitlines()[-1] == "3 problem(s) found."
    assert "sk-test-key" not in out + err


async def test_every_missing_variable_is_named_not_only_the_first(tmp_path: Path) -> None:
    """With nothing configured, each required variable gets its own line; dependent checks
    are skipped rather than reported twice."""
    env = {"DATABASE_URL": "postgresql://127.0.0.1:1/none"}
    status, out, _ = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1
    settings = [line for line in lines(out, "FAIL") if "settings:" in line]
    named = ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "THREADGATE_MODEL"]
    assert len(settings) == 3 and all(v in line for v, line in zip(named, settings, strict=True))
    assert len(lines(out, "skip")) == 2  # Slack and the model: their settings are missing
    assert any("database:" in line and "DATABASE_URL" in line for line in lines(out, "FAIL"))


async def test_socket_mode_requires_the_app_token_instead_of_the_signing_secret(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """With SLACK_APP_TOKEN set, a missing signing secret is fine; a bad app token is not."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_socket"))
    del env["SLACK_SIGNING_SECRET"]
    status, out, _ = await run_cli_output(
        ["doctor"], {**env, "SLACK_APP_TOKEN": "not-an-app-token"}, tmp_path
    )
    assert status == 1
    [failure] = lines(out, "FAIL")
    assert failure.startswith("FAIL settings: SLACK_APP_TOKEN does not look like an app token")


async def test_socket_mode_is_checked_by_opening_a_connection(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """With SLACK_APP_TOKEN set, doctor opens a Socket Mode connection until Slack says
    hello and closes it; a token Slack refuses is one FAIL line naming SLACK_APP_TOKEN."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_sockets"))
    env = socket_mode_env(env)
    async with FakeSocketMode() as sockets:
        slack.socket_mode, slack.app_token = sockets, APP_TOKEN
        status, out, err = await run_cli_output(["doctor"], env, tmp_path)
        assert status == 0, out + err
        [socket] = [line for line in lines(out, "ok") if "socket mode:" in line]
        assert "SLACK_APP_TOKEN works: Slack said hello" in socket
        await sockets.wait_until(lambda: len(sockets.links) == 1 and not sockets.open_links)
        status, out, _ = await run_cli_output(
            ["doctor"], {**env, "SLACK_APP_TOKEN": "xapp-1-A0APP00001-wrong"}, tmp_path
        )
    assert status == 1
    [failure] = lines(out, "FAIL")
    assert failure.startswith(
        "FAIL socket mode: SLACK_APP_TOKEN was refused by Slack (invalid_auth)"
    )
    assert "xapp-1-A0APP00001-wrong" not in out


async def test_each_missing_scope_is_named_with_its_reason(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A token lacking two scopes: one line per scope, saying why the bot needs it."""
    slack.granted_scopes = [
        s
        for s in bot_scopes(continue_threads=True)
        if s not in ("assistant:write", "metadata.message:read")
    ]
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_scopes"))
    status, out, _ = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1
    failures = lines(out, "FAIL")
    assert len(failures) == 2, out
    for scope, line in zip(("assistant:write", "metadata.message:read"), failures, strict=True):
        assert line.startswith(f"FAIL slack scopes: {scope} is not granted")
        assert SCOPE_REASONS[scope] in line


async def test_the_scopes_checked_follow_continue_threads(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """mpim:history is needed to continue group DM threads: missing it fails by default and
    passes with THREADGATE_CONTINUE_THREADS=false."""
    slack.granted_scopes = list(bot_scopes(continue_threads=False))
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_continue"))
    status, out, _ = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1
    [failure] = lines(out, "FAIL")
    assert failure.startswith("FAIL slack scopes: mpim:history is not granted"), out
    quiet = {**env, "THREADGATE_CONTINUE_THREADS": "false"}
    status, out, _ = await run_cli_output(["doctor"], quiet, tmp_path)
    assert (status, lines(out, "FAIL")) == (0, []), out


async def test_workspace_search_on_without_its_scopes_is_named(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """An installation granted everything but Real-time Search's scopes passes while
    THREADGATE_WORKSPACE_SEARCH is off, and fails naming each search scope and why once
    it is on."""
    slack.granted_scopes = list(bot_scopes(continue_threads=True))
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_search"))
    status, out, _ = await run_cli_output(["doctor"], env, tmp_path)
    assert (status, lines(out, "FAIL")) == (0, []), out
    searching = {**env, "THREADGATE_WORKSPACE_SEARCH": "true"}
    status, out, _ = await run_cli_output(["doctor"], searching, tmp_path)
    assert status == 1
    failures = lines(out, "FAIL")
    search = [s for s in bot_scopes(continue_threads=True, workspace_search=True) if "search" in s]
    assert len(failures) == len(search) == 4, out
    for scope, line in zip(search, failures, strict=True):
        assert line.startswith(f"FAIL slack scopes: {scope} is not granted")
        assert "THREADGATE_WORKSPACE_SEARCH" in line


async def test_a_model_that_never_answers_is_bounded_in_time(
    slack: FakeSlack, postgres_dsn: str, tmp_path: Path
) -> None:
    """A model server that accepts and never answers fails its check; the run still ends."""
    async with OpenAIServer() as hanging:
        hanging.default = lambda seen: Hang()
        env = gateway_env(slack, hanging, await create_database(postgres_dsn, "doctor_hang"))
        status, out, _ = await run_cli_output(["doctor", "--timeout", "1"], env, tmp_path)
    assert status == 1
    # Only the model's line is this test's: on a loaded machine the other checks may run
    # out of the same 1 s too.
    [model] = [line for line in lines(out, "FAIL") if line.startswith("FAIL model:")]
    assert model.startswith("FAIL model: openai:gpt-test: no answer within 1 s; check that")


async def test_a_slack_that_fails_or_cannot_be_reached_does_not_blame_the_token(
    slack: FakeSlack,
) -> None:
    """auth.test answered with Slack's internal error says to try again; an address where
    nothing listens says Slack could not be reached."""
    slack.refuse("auth.test", "internal_error")
    [failed] = await check_slack(Settings(slack_bot_token=BOT_TOKEN, slack_api_url=slack.url), 5)
    assert str(failed) == (
        "FAIL slack: the Slack Web API failed on auth.test (internal_error); try again, or "
        "check SLACK_API_URL."
    )
    nowhere = Settings(slack_bot_token=BOT_TOKEN, slack_api_url="http://127.0.0.1:9/api/")
    [unreached] = await check_slack(nowhere, 5)
    assert unreached.failed and "the Slack Web API could not be reached" in unreached.detail


async def test_a_server_without_room_for_a_process_s_connections_is_a_warning(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """`doctor` warns, naming both fixes, when the server's max_connections has no room
    for the connections a process of this role opens."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_conns"))
    crowded = {**env, "THREADGATE_DB_CONNECTIONS": "500"}
    status, out, err = await run_cli_output(["doctor"], crowded, tmp_path)
    [warned] = lines(out, "warn")
    assert status == 0 and "opens up to 511" in warned, out + err
    assert "raise max_connections or lower THREADGATE_DB_CONNECTIONS" in warned


def oauth_settings(**more: object) -> Settings:
    return Settings(slack_client_id="1.2", slack_client_secret="s" * 32, **more)


def test_a_distributed_install_keeping_messages_past_30_days_is_warned() -> None:
    """With many workspaces, retention off or over 30 days is a warning naming the setting
    and the number; 30 or fewer passes; with one workspace the setting is only reported."""
    for days in (0, 31):
        finding = check_retention(oauth_settings(threadgate_retention_days=days))
        assert finding.status == "warn", finding
        assert "THREADGATE_RETENTION_DAYS to 30 or fewer" in finding.detail
    assert "kept forever" in check_retention(oauth_settings()).detail
    assert check_retention(oauth_settings(threadgate_retention_days=30)).status == "ok"
    single = Settings(slack_bot_token=BOT_TOKEN)
    assert check_retention(single).status == "ok"
    assert "kept forever" in check_retention(single).detail


async def test_an_erasure_not_done_well_after_its_delay_is_warned(postgres_dsn: str) -> None:
    """An uninstalled workspace whose content waits past the delay and two sweeps is a
    warning naming it; one requested just now is reported as being erased."""
    dsn = await create_database(postgres_dsn, "doctor_erasure")
    settings = Settings(slack_bot_token=BOT_TOKEN, database_url=dsn)
    assert [f.status for f in await check_erasures(settings, Limits())] == ["ok"]
    async with Database(dsn, min_size=1, max_size=1) as db:
        await request_erasure(db, "T9", reason="uninstalled")
        [fresh] = await check_erasures(settings, Limits())
        assert fresh.status == "ok" and "1 uninstalled workspace(s) being erased" in fresh.detail
        await db.pool.execute(
            "UPDATE workspace_erasures SET requested_at = now() - '1 hour'::interval"
        )
    [late] = await check_erasures(settings, Limits())
    assert late.status == "warn" and "(T9)" in late.detail and "worker" in late.detail
