"""What operators read — `threadgate tasks` (table, page, `--json`) and the log — shows
control characters and bidi controls as escapes, never raw: a model's reply or an error
Slack sent cannot repaint a terminal or reorder a line (issue 37, item 8)."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from agent import INVISIBLE_CHARACTERS
from gateway.operator.task_commands import as_json, render_table
from gateway.telemetry.logs import log_handler, printable, printable_json
from storage import TaskSummary
from tests.fakes.openai_api import OpenAIServer, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli_output
from tests.gateway.rig import BOT_TOKEN, SECRET, Rig, echo, gateway_env
from tests.pg import create_database, wait_for_task

# What a terminal acts on: C0 but newline, DEL, C1, line separators, bidi, tag, zero-width.
ACTED_ON = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029"
    + re.escape("".join(sorted(INVISIBLE_CHARACTERS)))
    + "]"
)
HOSTILE = "ok\x1b[2J\x1b]0;pwned\x07 \u202egnp.exe\u202c \x9b31m\r\nFAKE LINE \U000e0041"
# Text rich in what matters: controls, bidi, tag and zero-width characters, newlines.
texts = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(["\x1b", "\x9b", "\u202e", "\u2066", "\u200f", "\U000e0041", "\n"]),
    )
)


@given(texts)
def test_printable_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    """Whatever the text, `printable` leaves none of those characters, newlines included
    unless asked to keep them; printable text is left as it was."""
    assert not ACTED_ON.search(printable(text)) and "\n" not in printable(text)
    assert not ACTED_ON.search(printable(text, newlines=True))
    if not ACTED_ON.search(text) and "\n" not in text:
        assert printable(text) == text


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


@given(texts)
def test_printable_escapes_exactly_those_characters(text: str) -> None:
    """`printable` changes nothing but the characters a terminal acts on (newline among
    them unless kept), each shown as its code point; the fast paths agree with this."""
    with_newline = re.compile(ACTED_ON.pattern[:-1] + "\n]")
    assert printable(text) == with_newline.sub(_escaped, text)
    assert printable(text, newlines=True) == ACTED_ON.sub(_escaped, text)


@given(st.dictionaries(texts, st.one_of(texts, st.lists(texts, max_size=3)), max_size=4))
def test_printable_json_is_the_same_value_without_raw_controls(value: dict[str, object]) -> None:
    """JSON made printable decodes to exactly the same value, and holds none raw."""
    for indent in (None, 2):
        encoded = printable_json(json.dumps(value, ensure_ascii=False, indent=indent))
        assert json.loads(encoded) == value and not ACTED_ON.search(encoded)


@given(texts, texts)
def test_the_table_and_json_of_tasks_escape_what_people_wrote(task_id: str, error: str) -> None:
    """A task id and error with escapes and bidi controls: the table shows none raw, and
    `--json` gives them back exactly."""
    now = datetime.now(UTC)
    task = TaskSummary(
        task_id, "failed", "T1", "C1", "1.0", None, 1, 0, now - timedelta(1), now, error
    )
    table, encoded = render_table([task], now=now), as_json([task])
    assert not ACTED_ON.search(table) and len(table.splitlines()) == 2
    assert not ACTED_ON.search(encoded)
    [back] = json.loads(encoded)
    assert (back["id"], back["last_error"]) == (task_id, error)


def test_log_lines_escape_the_message_and_keep_one_line() -> None:
    """A record quoting hostile text is one text line with escapes, and one JSON line whose
    message is the text as it was."""
    for style in ("text", "json"):
        stream = io.StringIO()
        logger = logging.getLogger(f"tests.printable.{style}")
        logger.addHandler(log_handler(style, stream=stream))
        logger.propagate = False
        try:
            logger.warning("refused: %s", HOSTILE)
        finally:
            logger.handlers.clear()
        [line] = stream.getvalue().splitlines()
        assert not ACTED_ON.search(line)
        if style == "json":
            assert json.loads(line)["message"] == f"refused: {HOSTILE}"
        else:
            assert "\\x1b[2J" in line and "\\u202egnp.exe" in line and "\\x0d\\x0aFAKE" in line


async def test_tasks_show_escapes_a_reply_the_model_wrote(rig: Rig, tmp_path: Path) -> None:
    """The model's reply carries terminal escapes and bidi controls: `tasks show` prints
    them escaped, `tasks show --json` as JSON escapes of the very same text."""
    rig.model.script(reply_with_tool("final_reply", {"text": HOSTILE}))
    event = app_mention_event(text="<@UBOT> hi")
    await rig.send(event_callback(event))
    task_id = f"T1:{event['channel']}:{event['ts']}"
    await wait_for_task(rig.db, task_id, "done")
    env = {"DATABASE_URL": rig.database_url}
    status, page, _ = await run_cli_output(["tasks", "show", task_id], env, tmp_path)
    assert status == 0 and "\\x1b[2J" in page and "\\u202egnp.exe" in page
    assert not ACTED_ON.search(page)
    status, encoded, _ = await run_cli_output(["tasks", "show", task_id, "--json"], env, tmp_path)
    assert status == 0 and not ACTED_ON.search(encoded)
    replies = [m for m in json.loads(encoded)["messages"] if m["kind"] == "reply"]
    assert [m["text"] for m in replies] == [HOSTILE]


async def test_a_gateway_logs_what_slack_sent_escaped(postgres_dsn: str, tmp_path: Path) -> None:
    """A real `threadgate serve`: Slack refuses users.info with an error full of escapes;
    the log line quoting it holds them escaped, on one line, in both formats."""
    dsn = await create_database(postgres_dsn, "printable_logs")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        for style in ("text", "json"):
            # Every look-up of the round refused alike: under load a second one may run
            # before the first answer is remembered (a fake without the user would answer
            # it user_not_found, a line without the escapes to check).
            slack.refuse("users.info", HOSTILE, times=100)
            env = {**gateway_env(slack, model, dsn), "THREADGATE_LOG_FORMAT": style}
            gateway = GatewayProcess(env, tmp_path)
            await gateway.start()
            try:
                event = event_callback(app_mention_event(text=f"<@UBOT> {style}"))
                assert (await deliver(http, gateway.events_url, event, SECRET))[0] == 200
                await slack.wait_for_posts(1 if style == "text" else 2)
            finally:
                await gateway.stop()
                slack.clear_faults("users.info")
            log = gateway.log.decode()
            # One refusal is logged per look-up, and each line must hold up on its own.
            lines = [x for x in log.splitlines() if "users.info refused" in x]
            assert lines, log
            assert not ACTED_ON.search(log.replace("\n", ""))
            for line in lines:
                if style == "json":
                    assert json.loads(line)["message"].endswith(HOSTILE)
                else:
                    assert "FAKE LINE" in line and "\\u202egnp.exe" in line
