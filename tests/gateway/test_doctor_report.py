"""`threadgate doctor` reads like a report for a person: it understands routes, names every
problem at once, gives up on a hung endpoint within its bound while saying what it waits
for, and shows no class names and no library log lines."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, error_reply
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import run_cli_output
from tests.gateway.rig import BOT_TOKEN, gateway_env
from tests.pg import create_database, with_database

# What an exception's class name looks like in a line (InvalidPasswordError, ConnectError).
CLASS_NAME = re.compile(r"\b(?:[A-Z][a-z0-9]+)+(?:Error|Exception|Rejected|Exhausted)\b")


class Silent:
    """A loopback server that accepts every connection and never says a word."""

    def __init__(self) -> None:
        self._done = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Silent:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done.set()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._done.wait()
        writer.close()


def test_the_class_name_pattern_finds_the_names_the_report_used_to_show() -> None:
    """The pattern the report is checked with finds what it printed before."""
    shown = "CredentialRejected: … (InvalidPasswordError) (ConnectError) (ClientConnectorError)"
    assert len(CLASS_NAME.findall(shown)) == 4
    assert CLASS_NAME.findall("Error: the Slack Web API could not be reached") == []


def lines(out: str, status: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(status)]


async def test_routes_are_understood(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """With THREADGATE_ROUTES and no THREADGATE_MODEL the settings are complete and each
    route is probed (it said "THREADGATE_MODEL is not set")."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_routes"))
    del env["THREADGATE_MODEL"], env["OPENAI_BASE_URL"]
    env["THREADGATE_ROUTES"] = json.dumps(
        [{"model": "openai:gpt-test", "baseUrl": model.url, "apiKey": "${OPENAI_API_KEY}"}]
    )
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 0 and "THREADGATE_MODEL" not in out, out + err
    assert lines(out, "ok   settings:") == ["ok   settings: complete for HTTP mode"]
    [probe] = lines(out, "ok   model:")
    assert probe.startswith("ok   model: openai:gpt-test: ok in")


async def test_every_problem_is_reported_at_once(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """Two malformed values and a missing one: a line each, none hiding another; the check
    that depends on a malformed value is skipped, the others still run."""
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_all_at_once"))
    del env["SLACK_SIGNING_SECRET"]
    env |= {"THREADGATE_WORKERS": "-1", "OPENAI_BASE_URL": "http://model.example/v1"}
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1 and "Traceback" not in err
    settings = [line.removeprefix("FAIL settings: ") for line in lines(out, "FAIL settings:")]
    assert [line.split(" ", 1)[0] for line in settings] == [
        "OPENAI_BASE_URL",
        "THREADGATE_WORKERS",
        "SLACK_SIGNING_SECRET",
    ], out
    assert lines(out, "skip model:") == [
        "skip model: not checked: OPENAI_BASE_URL is malformed (see settings)"
    ]
    assert lines(out, "ok   slack:") and lines(out, "ok   database:")
    assert out.splitlines()[-1] == "3 problem(s) found."


async def test_a_hung_endpoint_is_given_up_on_while_doctor_says_what_it_waits_for(
    tmp_path: Path,
) -> None:
    """Slack, the model and the database all at a server that accepts and never answers:
    each check fails at its bound naming what to check, and meanwhile stderr names the
    checks still waiting (it was 30 s of silence)."""
    async with Silent() as silent:
        where = f"127.0.0.1:{silent.port}"
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": "s3cr3t-value",
            "SLACK_API_URL": f"http://{where}/api/",
            "THREADGATE_MODEL": "openai:gpt-test",
            "OPENAI_API_KEY": "sk-test-key",
            "OPENAI_BASE_URL": f"http://{where}/v1",
            "DATABASE_URL": f"postgresql://app:pw@{where}/app",
        }
        status, out, err = await run_cli_output(["doctor", "--timeout", "3"], env, tmp_path)
    assert status == 1 and "Traceback" not in err
    assert lines(out, "FAIL slack:") == [
        "FAIL slack: the Slack Web API could not be reached (no answer within 3 s); check "
        "SLACK_API_URL and the network."
    ]
    assert lines(out, "FAIL model:") == [
        "FAIL model: openai:gpt-test: no answer within 3 s; check that a server answers at "
        "OPENAI_BASE_URL, or allow longer with `threadgate doctor --timeout`"
    ]
    assert lines(out, "FAIL database:") == [
        f"FAIL database: The database app on {where} as app: no answer within 3 s; check "
        "DATABASE_URL and the network."
    ]
    waits = err.splitlines()
    assert waits and all(line.startswith("threadgate doctor: still waiting for ") for line in waits)
    assert "Slack, the model and the database" in waits[0]


def refuse_key(seen: RecordedRequest) -> Reply:
    return error_reply(401, "Incorrect API key provided", code="invalid_api_key")


async def test_a_broken_configuration_reads_as_sentences_without_log_lines(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A refused model key, a Slack that cannot be reached and an unknown database: every
    line is a sentence without a class name, and no library's log line is printed."""
    model.default = refuse_key
    env = gateway_env(slack, model, with_database(postgres_dsn, "tg_no_such_database"))
    env["SLACK_API_URL"] = "http://127.0.0.1:1/api/"
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 1
    failures = lines(out, "FAIL")
    assert len(failures) == 3 and [CLASS_NAME.findall(line) for line in failures] == [[], [], []]
    slack_line, model_line, database_line = failures
    assert "could not be reached (connection refused: nothing listens there)" in slack_line
    assert "(OPENAI_API_KEY) was refused by the provider" in model_line
    assert '(database "tg_no_such_database" does not exist): create that database' in database_line
    assert all(line.startswith("threadgate doctor: still waiting") for line in err.splitlines())


async def test_doctor_reports_a_misspelled_variable_of_the_env_file(
    slack: FakeSlack, model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A typo in `.env` is a warning line of doctor's report, naming the file and the
    closest name; it is no failure of its own."""
    (tmp_path / ".env").write_text("THREADGATE_ALOW_BOTS=all\n")
    env = gateway_env(slack, model, await create_database(postgres_dsn, "doctor_typo"))
    status, out, err = await run_cli_output(["doctor"], env, tmp_path, dotenv=True)
    assert status == 0, out + err
    assert lines(out, "warn settings:") == [
        "warn settings: THREADGATE_ALOW_BOTS (in .env) is not a setting threadgate reads: "
        "did you mean THREADGATE_ALLOW_BOTS?"
    ]
