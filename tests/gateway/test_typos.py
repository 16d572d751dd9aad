"""A THREADGATE_… or SLACK_… variable no setting reads is warned of, with the closest name
that is one, at `serve` (and in `doctor`: tests/gateway/test_doctor_report.py); names
read by Slack's own libraries are not."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gateway.config.environment import FOREIGN, closest, unknown_variables
from gateway.config.settings import PLACES, load_settings
from tests.gateway.process import run_cli

NOWHERE = "postgresql://127.0.0.1:1/none"
SERVE = {
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
    "DATABASE_URL": NOWHERE,
    "THREADGATE_METRICS_ADDRESS": "off",
    "THREADGATE_LOG_LEVEL": "WARNING",
}


def test_the_closest_declared_name_is_offered() -> None:
    """A missing letter finds its setting; a name of the wrong family finds the right one;
    a name like none is offered nothing."""
    assert closest("THREADGATE_ALLOWED_CHANNEL") == "THREADGATE_ALLOWED_CHANNELS"
    assert closest("SLACK_SIGNING_SECRT") == "SLACK_SIGNING_SECRET"
    assert closest("THREADGATE_BOT_TOKEN") == "SLACK_BOT_TOKEN"
    assert closest("THREADGATE_DATABASE_URL") == "DATABASE_URL"
    assert closest("THREADGATE_XYZZY_PLUGH") is None


def test_known_foreign_and_referenced_names_are_not_reported() -> None:
    """Declared names (in any case), slack-bolt's and the Slack CLI's own, other families,
    and a name a route reads as ${NAME} are not reported; a typo is, once."""
    routes = json.dumps([{"model": "openai:gpt", "apiKey": "${THREADGATE_OUR_OWN_KEY}"}])
    environ = {
        "THREADGATE_WORKERS": "4",
        "threadgate_max_rounds": "3",
        "SLACK_VERIFICATION_TOKEN": "legacy",
        "SLACK_CLI_XOXB": "xoxb-cli",
        "OPENAI_ORGANIZATION": "org-1",
        "THREADGATE_OUR_OWN_KEY": "sk-own",
        "THREADGATE_ALLOWED_CHANNEL": "C0123ABCD",
    }
    settings = load_settings(threadgate_routes=routes)
    [unknown] = unknown_variables(settings, environ, None)
    assert str(unknown) == (
        "THREADGATE_ALLOWED_CHANNEL (in the environment) is not a setting threadgate reads: "
        "did you mean THREADGATE_ALLOWED_CHANNELS?"
    )


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz0123456789"))
def test_only_unknown_names_of_the_two_families_are_ever_reported(name: str) -> None:
    """Whatever the name, it is reported only when it is THREADGATE_… or SLACK_… and
    neither a setting nor a name Slack's libraries read; any name offered is a setting."""
    reported = unknown_variables(load_settings(), {name: "x"}, None)
    upper = name.upper()
    expected = upper.startswith(("THREADGATE_", "SLACK_")) and upper not in {*PLACES, *FOREIGN}
    expected = expected and not upper.startswith("SLACK_CLI_")
    assert [u.name for u in reported] == ([upper] if expected else [])
    assert all(u.closest is None or u.closest in PLACES for u in reported)


async def test_serve_warns_of_a_misspelled_variable_with_its_closest_name(tmp_path: Path) -> None:
    """`serve` with THREADGATE_ALLOWED_CHANNEL set warns, naming THREADGATE_ALLOWED_CHANNELS,
    before it starts (here it then stops at the database, in its one sentence)."""
    env = {**SERVE, "THREADGATE_ALLOWED_CHANNEL": "C0123ABCD"}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    warning, sentence = stderr.splitlines()
    assert warning.endswith(
        "WARNING threadgate THREADGATE_ALLOWED_CHANNEL (in the environment) is not a setting "
        "threadgate reads: did you mean THREADGATE_ALLOWED_CHANNELS?"
    )
    assert status == 1 and sentence.startswith("threadgate: Cannot connect to the database")
