"""Slack's error codes are classified once (gateway/slack/codes.py), and every caller reacts
to the meaning the table gives them."""

from __future__ import annotations

import ast
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import ConfigError, Supervisor
from gateway.inbound.socket_mode import probe_socket_mode
from gateway.slack import codes
from gateway.slack.client import slack_client
from gateway.slack.codes import CODES, Meaning, describe, meaning_of
from gateway.slack.errors import SlackRefused
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
TABLE = GATEWAY / "slack" / "codes.py"
# The modules that react to a refusal's meaning: none of them looks at the code itself.
CALLERS = ("slack/client.py", "slack/errors.py", "inbound/socket_mode.py", "schedules/preflight.py")
TOKEN_CODES = sorted(
    code for code, entry in CODES.items() if entry.meaning is Meaning.TOKEN_REFUSED
)


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _listed(tree: ast.AST) -> Iterator[str]:
    """Every string written in a set, list, tuple or dict display, or compared with `==`,
    `!=`, `in` or `not in`: where a module would keep codes of its own."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            parts: list[ast.AST | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            parts = [*node.keys, *node.values]
        elif isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        else:
            continue
        yield from (s for s in map(_string, parts) if s is not None)


def _compares_error(tree: ast.AST) -> bool:
    """Whether some comparison reads an `.error` attribute (Slack's code of a refusal)."""
    return any(
        isinstance(part, ast.Attribute) and part.attr == "error"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for part in (node.left, *node.comparators)
    )


def test_each_code_is_written_once_with_one_meaning_and_words() -> None:
    """The table's literal names each code once; each has one meaning and an operator's
    words, and each meaning has codes."""
    table = next(
        node.value
        for node in ast.walk(ast.parse(TABLE.read_text()))
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "CODES"
    )
    literal = next(node for node in ast.walk(table) if isinstance(node, ast.Dict))
    written = [_string(key) for key in literal.keys]
    assert len(written) == len(set(written)) == len(CODES)
    assert all(entry.says.strip() for entry in CODES.values())
    assert {entry.meaning for entry in CODES.values()} == set(Meaning)


def test_no_other_gateway_module_lists_a_code() -> None:
    """Outside the table, no module of gateway/ keeps one of its codes in a collection or
    compares something with it."""
    found = {
        (str(path.relative_to(GATEWAY)), code)
        for path in GATEWAY.rglob("*.py")
        if path != TABLE
        for code in _listed(ast.parse(path.read_text()))
        if code in CODES
    }
    assert found == set()


@pytest.mark.parametrize("caller", CALLERS)
def test_the_callers_branch_on_the_meaning_not_the_code(caller: str) -> None:
    """The client, the outcome mapping, Socket Mode and the scheduler's checks never compare Slack's
    error code: they compare its meaning."""
    assert not _compares_error(ast.parse((GATEWAY / caller).read_text()))
    assert "gateway.slack.codes" in (GATEWAY / caller).read_text()


def test_a_code_reads_as_its_meaning_and_its_words() -> None:
    """A known code has its meaning and its words beside it; an unknown one has neither."""
    assert meaning_of("is_archived") is Meaning.CONVERSATION_GONE
    assert describe("is_archived") == "the channel is archived (is_archived)"
    assert meaning_of("cant_update_message") is None
    assert describe("cant_update_message") == "cant_update_message"
    assert codes.CODES["ratelimited"].meaning is Meaning.RATE_LIMITED


@pytest.mark.parametrize("code", [*TOKEN_CODES, "channel_not_found"])
async def test_the_client_alarms_on_exactly_the_refused_token_codes(code: str) -> None:
    """A call refused with a code the table calls a refused token raises the token alarm,
    with that code; any other refusal does not."""
    heard: list[tuple[str, str]] = []

    def alarm(method: str, error: str) -> Coroutine[Any, Any, None]:
        heard.append((method, error))
        return _nothing()

    supervisor = Supervisor()
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack:
        client = slack_client(
            BOT_TOKEN, slack.url, timeout=15, on_token_refused=alarm, supervisor=supervisor
        )
        slack.refuse("auth.test", code)
        with pytest.raises(SlackRefused) as refused:
            await client.auth_test()
    await supervisor.aclose()
    assert refused.value.meaning is meaning_of(code)
    assert heard == ([("auth.test", code)] if code in TOKEN_CODES else [])


@pytest.mark.parametrize("code", [*TOKEN_CODES, "forbidden_team"])
async def test_socket_mode_names_the_app_token_for_exactly_the_refused_token_codes(
    code: str,
) -> None:
    """apps.connections.open refused with a refused-token code is a ConfigError naming
    SLACK_APP_TOKEN; any other refusal stays a refusal."""
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack:
        slack.refuse("apps.connections.open", code)
        expected: type[Exception] = ConfigError if code in TOKEN_CODES else SlackRefused
        with pytest.raises(expected, match=code):
            await probe_socket_mode(app_token=APP_TOKEN, api_url=slack.url)


async def _nothing() -> None:
    return None
