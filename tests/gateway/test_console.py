"""`threadgate console`: a terminal chat through the real gatekeeper, store and round loop."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, error_reply
from tests.gateway.process import run_cli_output
from tests.pg import create_database


def console_env(model: OpenAIServer, database_url: str) -> dict[str, str]:
    """Only the model and the database: the console needs no Slack settings."""
    return {
        "THREADGATE_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "sk-test-key",
        "OPENAI_BASE_URL": model.url,
        "DATABASE_URL": database_url,
        "USER": "ada",
    }


def user_turns(seen: RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in seen.body["messages"] if m.get("role") == "user"]


async def test_a_piped_line_is_answered_on_stdout(
    model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A line on stdin gets the model's reply on stdout; EOF then ends the console with 0."""
    env = console_env(model, await create_database(postgres_dsn, "console_one"))
    status, out, err = await run_cli_output(["console"], env, tmp_path, stdin=b"what is 2+2?\n")
    assert status == 0, err
    assert "re: " in out and "what is 2+2?" in out
    assert "Traceback" not in err


async def test_lines_are_one_conversation_answered_in_order(
    model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """Each line waits for its reply; the second request carries the first exchange, and
    the turn is tagged with $USER's name and escaped like Slack text."""
    env = console_env(model, await create_database(postgres_dsn, "console_two"))
    stdin = b"first <b>&\n\nsecond\n"
    status, out, err = await run_cli_output(["console"], env, tmp_path, stdin=stdin)
    assert status == 0, err
    assert out.index("first") < out.index("second")
    assert len(model.requests) == 2
    first, second = (user_turns(seen) for seen in model.requests)
    assert len(second) == len(first) + 1 and second[: len(first)] == first
    assert "ada" in first[-1] and "first <b>&" not in first[-1]  # the tag escapes the body


async def test_a_refused_key_prints_the_notice_and_alerts_on_stderr(
    model: OpenAIServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """A 401 from the model: the user's failure notice on stdout, the operator alert on stderr."""

    def refuse(seen: RecordedRequest) -> Reply:
        return error_reply(401, "Incorrect API key provided", code="invalid_api_key")

    model.default = refuse
    env = console_env(model, await create_database(postgres_dsn, "console_401"))
    status, out, err = await run_cli_output(["console"], env, tmp_path, stdin=b"hello\n")
    assert status == 0
    assert "couldn't answer" in out
    assert "OPENAI_API_KEY" in err and "sk-test-key" not in out + err


async def test_without_a_model_it_names_the_variable(tmp_path: Path) -> None:
    """No THREADGATE_MODEL: one sentence naming it, exit 2; Slack settings are never asked for."""
    env = {"DATABASE_URL": "postgresql://127.0.0.1:1/none"}
    status, out, err = await run_cli_output(["console"], env, tmp_path, stdin=b"hi\n")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "THREADGATE_MODEL" in err and "SLACK" not in err
