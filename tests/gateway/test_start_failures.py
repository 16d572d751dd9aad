"""Every failure at start is one sentence naming the setting, where it points and the
server's own reason, and a healthy start says nothing misleading: each through a real
`threadgate` process."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest

from gateway.config.settings import load_settings
from storage import is_token_key
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli
from tests.gateway.rig import SECRET, gateway_env, oauth_env
from tests.pg import create_database, with_database

PASSWORD = "hunter2-not-for-logs"
# Only the sentence: the start's INFO lines (metrics, role) are not this test's.
QUIET = {"THREADGATE_LOG_LEVEL": "WARNING"}


def one_sentence(stderr: str) -> str:
    """The one line a failed start printed: no traceback, nothing else."""
    assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    assert stderr.startswith("threadgate: "), stderr
    return stderr.removeprefix("threadgate: ").strip()


@pytest.mark.parametrize("command", ["serve", "migrate"])
@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"postgres://app:{PASSWORD}@db.example:notaport/app", "a port in it is not a number"),
        (f"mysql://app:{PASSWORD}@db.example/app", "expected a postgresql://"),
        (f"postgresql://app:{PASSWORD}@db.example/app?sslmode", "its query (after ?)"),
    ],
)
async def test_a_malformed_database_url_is_one_sentence(
    command: str, url: str, why: str, slack: FakeSlack, model: OpenAIServer, tmp_path: Path
) -> None:
    """A DATABASE_URL asyncpg cannot parse ends the command in one sentence naming it and
    what is wrong, without its password (it was a 41-line traceback)."""
    env = {**gateway_env(slack, model, url), **QUIET}
    status, stderr = await run_cli([command], env, tmp_path)
    sentence = one_sentence(stderr)
    assert status == 2 and sentence.startswith("DATABASE_URL is invalid (") and why in sentence
    assert PASSWORD not in stderr


@pytest.fixture
async def password_role(postgres_dsn: str) -> str:
    """A role of the suite's server that must give its password (`scram-sha-256` in the
    server's pg_hba.conf for it alone); the DSN of its login with the wrong one."""
    if os.environ.get("DATABASE_URL"):
        pytest.skip("the server is not the suite's own: its pg_hba.conf is not ours to edit")
    conn = await asyncpg.connect(postgres_dsn)
    try:
        ask_password(Path(await conn.fetchval("SHOW hba_file")))
        exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = 'tg_password_probe'")
        if not exists:
            await conn.execute("CREATE ROLE tg_password_probe LOGIN PASSWORD 'the-right-one'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    parts = urlsplit(postgres_dsn)
    wrong = parts._replace(netloc=f"tg_password_probe:{PASSWORD}@").geturl()
    await _until_refused(wrong)
    return wrong


def ask_password(hba: Path) -> None:
    """Put the rule asking tg_password_probe for its password first in `hba`, once."""
    rule = "local all tg_password_probe scram-sha-256\n"
    with hba.open("r+") as file:  # in place: the file keeps its owner
        rules = file.read()
        if rule not in rules:
            file.seek(0)
            file.write(rule + rules)


async def _until_refused(dsn: str) -> None:
    """Wait (with a deadline) until the server asks that role for its password: a reload
    is applied by the server on its own time."""
    async with asyncio.timeout(30):
        while True:
            try:
                conn = await asyncpg.connect(dsn)
            except asyncpg.InvalidPasswordError:
                return
            await conn.close()
            await asyncio.sleep(0.05)  # polling the server's state, not synchronizing ours


async def test_a_wrong_database_password_names_the_database_and_the_server_reason(
    password_role: str, slack: FakeSlack, model: OpenAIServer, tmp_path: Path
) -> None:
    """A wrong password: the database, the socket and the user, the server's own words and
    which part of DATABASE_URL to fix (it was only `InvalidPasswordError`)."""
    env = {**gateway_env(slack, model, password_role), **QUIET}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    sentence = one_sentence(stderr)
    assert status == 1 and "database postgres on the socket in " in sentence
    assert 'as tg_password_probe (password authentication failed for user "tg_password_probe")' in (
        sentence
    )
    assert sentence.endswith(": check the password in DATABASE_URL.") and PASSWORD not in stderr


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda dsn: f"postgresql://app:{PASSWORD}@127.0.0.1:1/app",
            [
                "Cannot connect to the database app on 127.0.0.1:1 as app (connection refused",
                "check the host and port in DATABASE_URL",
            ],
        ),
        (
            lambda dsn: with_database(dsn, "tg_no_such_database"),
            [
                '(database "tg_no_such_database" does not exist)',
                "create that database, or put the right name in DATABASE_URL.",
            ],
        ),
        (
            lambda dsn: urlsplit(dsn)._replace(netloc=f"tg_nobody:{PASSWORD}@").geturl(),
            ['(role "tg_nobody" does not exist)', "check the user in DATABASE_URL"],
        ),
        (
            lambda dsn: f"{dsn}&sslmode=sometimes",
            ["DATABASE_URL is not a usable database URL (`sslmode` parameter must be one of"],
        ),
    ],
    ids=["refused", "unknown-database", "unknown-role", "bad-sslmode"],
)
async def test_each_database_failure_is_one_sentence_with_the_fix(
    change: Callable[[str], str],
    says: list[str],
    postgres_dsn: str,
    slack: FakeSlack,
    model: OpenAIServer,
    tmp_path: Path,
) -> None:
    """Whatever the database answers at start, `serve` ends with one sentence: where it
    tried, what the server or the network said, what to check; never the password."""
    env = {**gateway_env(slack, model, change(postgres_dsn)), **QUIET}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    sentence = one_sentence(stderr)
    assert status == 1 and all(part in sentence for part in says), sentence
    assert PASSWORD not in stderr


async def test_a_json_object_in_routes_is_told_to_be_a_list_or_a_file(
    slack: FakeSlack, model: OpenAIServer, tmp_path: Path
) -> None:
    """THREADGATE_ROUTES holding one route object (not a list) is said to need a file path
    or a JSON list, not reported as a file that cannot be read."""
    env = gateway_env(slack, model, "postgresql://127.0.0.1:1/none")
    del env["THREADGATE_MODEL"]
    env["THREADGATE_ROUTES"] = '{"model": "openai:gpt-test"}'
    status, stderr = await run_cli(["serve"], {**env, **QUIET}, tmp_path)
    assert status == 2 and one_sentence(stderr) == (
        "THREADGATE_ROUTES is invalid (expected a file path or a JSON list, not a JSON "
        "object); fix or unset it."
    )


async def test_the_token_key_command_in_the_error_works_when_pasted(
    slack: FakeSlack, model: OpenAIServer, tmp_path: Path
) -> None:
    """The command a malformed THREADGATE_TOKEN_KEY's sentence suggests, run in a shell as
    printed, prints a key the setting takes (it was lower-cased, and failed)."""
    env = {**gateway_env(slack, model, "postgresql://127.0.0.1:1/none"), **QUIET}
    status, stderr = await run_cli(["serve"], {**env, "THREADGATE_TOKEN_KEY": "short"}, tmp_path)
    sentence = one_sentence(stderr)
    assert status == 2 and sentence.startswith("THREADGATE_TOKEN_KEY is invalid")
    [command] = re.findall(r"`([^`]+)`", sentence)
    shell = await asyncio.create_subprocess_shell(
        command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await shell.communicate()
    key = out.decode().strip()
    assert shell.returncode == 0 and is_token_key(key), err
    assert load_settings(threadgate_token_key=key).slack.token_key is not None


async def test_a_refused_bot_token_is_said_once(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A bot token Slack refuses at start: the one sentence naming SLACK_BOT_TOKEN, and no
    CRITICAL log line saying it again."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "refused_once"))
    env["SLACK_BOT_TOKEN"] = "xoxb-revoked-long-ago"
    status, stderr = await run_cli(["serve"], env, tmp_path)  # at INFO, as by default
    assert status == 2 and "Traceback" not in stderr
    said = [line for line in stderr.splitlines() if "refused" in line]
    assert said == [
        "threadgate: SLACK_BOT_TOKEN was refused by Slack (invalid_auth): put a valid bot "
        "token (xoxb-…) there."
    ], stderr


@pytest.mark.parametrize("workspaces", ["one", "many"])
async def test_a_healthy_start_says_nothing_of_bolt_s_own(
    workspaces: str, slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A healthy start logs no slack-bolt line: no "SLACK_BOT_TOKEN will be ignored", no
    file-based OAuth stores it would set up from SLACK_CLIENT_ID; and it answers."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, f"bolt_{workspaces}"))
    env = env if workspaces == "one" else oauth_env(env)
    gateway = GatewayProcess(env, tmp_path)
    await gateway.start()
    try:
        if workspaces == "one":
            async with aiohttp.ClientSession() as http:
                event = event_callback(app_mention_event(text="<@UBOT> hello"))
                assert (await deliver(http, gateway.events_url, event, SECRET))[0] == 200
            await slack.wait_for_posts(1)
    finally:
        assert await gateway.stop() == 0
    log = gateway.log.decode(errors="replace")
    assert "slack_bolt" not in log and "will be ignored" not in log and "will be unused" not in log
    assert "file-based" not in log and "threadgate listening on" in log
