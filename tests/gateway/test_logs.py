"""Log lines carry the work's fields, in text and JSON, and never a secret — not even
the libraries' own lines, in a real gateway run."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import assume, given
from hypothesis import strategies as st

from agent import bind_log_fields
from gateway.config.settings import load_settings
from gateway.telemetry.logs import (
    MIN_SECRET,
    REDACTED,
    FieldsFilter,
    JSONFormatter,
    Redactor,
    TextFormatter,
    log_handler,
)
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import echo, gateway_env
from tests.pg import create_database


def record(message: str) -> logging.LogRecord:
    entry = logging.LogRecord("threadgate.test", logging.WARNING, __file__, 1, message, (), None)
    FieldsFilter().filter(entry)
    return entry


def test_bound_fields_appear_on_text_lines_until_the_block_ends() -> None:
    """Inside `bind_log_fields` every line says which task and thread it belongs to."""
    with bind_log_fields(task="T1:C1:1.0", channel="C1", thread_ts=None):
        inside = TextFormatter("%(message)s").format(record("working"))
    outside = TextFormatter("%(message)s").format(record("idle"))
    assert inside == "working task=T1:C1:1.0 channel=C1" and outside == "idle"


def test_json_lines_are_objects_with_the_fields() -> None:
    """THREADGATE_LOG_FORMAT=json gives one JSON object per line with the fields as keys."""
    with bind_log_fields(task="T1:C1:2.0", team="T1"), bind_log_fields(subtask="T1:C1:2.0:0:1"):
        line = JSONFormatter().format(record("sub"))
    entry = json.loads(line)
    assert (entry["message"], entry["task"], entry["team"], entry["subtask"]) == (
        "sub",
        "T1:C1:2.0",
        "T1",
        "T1:C1:2.0:0:1",
    )


def test_json_lines_are_timed_in_rfc_3339_utc_to_the_millisecond() -> None:
    """A JSON line's time is RFC 3339 in UTC (`Z`), to the millisecond."""
    entry = record("timed")
    entry.created = 1796514549.123456  # 2026-12-05T23:49:09.123456 UTC
    assert json.loads(JSONFormatter().format(entry))["time"] == "2026-12-05T23:49:09.123Z"


# --- secrets ---------------------------------------------------------------------------------

WEBHOOK = "https://hooks.slack.com/services/T0ABC/B0DEF/aZ9webhookTokenValue"
SETTINGS_SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-1111-2222-botTokenValue",
    "SLACK_SIGNING_SECRET": "signingSecretValue42",
    "OPENAI_API_KEY": "sk-proj-apiKeyValue1234",
    "OPENAI_BASE_URL": "https://proxyuser:proxyPasswordValue@llm.example/v1",
    "DATABASE_URL": "postgresql://app:dbPasswordValue@db.example/threadgate",
    "THREADGATE_GATEWAY_TOKEN": "Bearer gatewayTokenValue",
    "THREADGATE_ALERT_WEBHOOK_URL": WEBHOOK,
}
LEAKS = [
    "botTokenValue",
    "signingSecretValue42",
    "apiKeyValue1234",
    "proxyPasswordValue",
    "dbPasswordValue",
    "gatewayTokenValue",
    "aZ9webhookTokenValue",
    "/services/T0ABC/B0DEF",
]


def emit(handler: logging.Handler, message: str, *args: object, error: bool = False) -> None:
    logger = logging.getLogger("threadgate.test.secrets")
    logger.propagate, logger.handlers = False, [handler]
    logger.setLevel(logging.DEBUG)
    if not error:
        logger.info(message, *args)
        return
    try:
        raise RuntimeError(message % args)
    except RuntimeError:
        logger.exception("it failed")


@pytest.mark.parametrize("style", ["text", "json"])
def test_no_secret_of_the_settings_reaches_a_log_line(style: str) -> None:
    """Values of secret settings, URL passwords and the webhook path are redacted from
    messages and tracebacks, in both formats — whoever wrote the line."""
    settings = load_settings(**{k.lower(): v for k, v in SETTINGS_SECRETS.items()})
    stream = io.StringIO()
    handler = log_handler(style, secrets=settings.secret_values(), stream=stream)
    emit(handler, "HTTP Request: POST %s/chat/completions", SETTINGS_SECRETS["OPENAI_BASE_URL"])
    emit(handler, "500, message='Internal Server Error', url=%r", WEBHOOK, error=True)
    emit(
        handler,
        "connect %s with %s",
        SETTINGS_SECRETS["DATABASE_URL"],
        "xoxb-1111-2222-botTokenValue",
    )
    emit(handler, "headers %s", {k: v for k, v in SETTINGS_SECRETS.items() if "URL" not in k})
    output = stream.getvalue()
    assert [leak for leak in LEAKS if leak in output] == []
    assert output.count(REDACTED) >= 8 and "llm.example/v1/chat/completions" in output


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("GET https://user:pa55word@host.example/x", "https://[redacted]@host.example/x"),
        ("token xoxb-12-34-abc and xapp-1-A0-xyz", "token [redacted] and [redacted]"),
        ("wss://wss.slack.test/link/?ticket=abc123&app_id=A1", "?ticket=[redacted]&app_id=A1"),
        ("https://discord.com/api/webhooks/123/tok", "https://discord.com/api/webhooks/[redacted]"),
        ("https://x.test/cb?api_key=k1&page=2", "?api_key=[redacted]&page=2"),
        (
            "data: {'query': 'launch', 'action_token': '12345.98765.abcd2358fdea'}",
            "{'query': 'launch', 'action_token': '[redacted]'}",
        ),
        ('{"action_token": "12345.98765.abcd", "limit": 10}', '"action_token": "[redacted]"'),
        (
            "plain text, a@b.example and https://docs.example/a?b=1",
            "plain text, a@b.example and https://docs.example/a?b=1",
        ),
    ],
)
def test_secret_shapes_are_redacted_without_configuration(line: str, kept: str) -> None:
    """Credentials in URLs, Slack tokens, webhook paths and secret-named query parameters
    are redacted even when no setting names them; other text is left as it was."""
    assert kept in Redactor()(line)


@given(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="[]"), min_size=MIN_SECRET),
    st.text(),
    st.text(),
)
def test_a_known_secret_never_survives_redaction(secret: str, before: str, after: str) -> None:
    """Wherever a configured secret appears, and however often, it is gone after redaction."""
    assume(secret not in REDACTED)
    redacted = Redactor([secret])(f"{before}{secret}{after}{secret}")
    assert secret not in redacted or secret in before + after


async def test_a_gateway_run_logs_no_secret(postgres_dsn: str, tmp_path: Path) -> None:
    """A real `threadgate serve` at DEBUG, answering through a model URL with credentials
    in it (after a workspace search with the mention's action token), then alarmed by a
    revoked token at a webhook that fails: its whole stderr holds none of the secrets,
    though httpx's request lines, slack_sdk's search request and the alarm's failure are
    there."""
    dsn = await create_database(postgres_dsn, "secrets")
    hits = asyncio.Event()

    async def failing_webhook(request: web.Request) -> web.Response:
        hits.set()
        return web.Response(status=500, text="no")

    app = web.Application()
    app.router.add_post("/services/{team}/{bot}/{token}", failing_webhook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hook_port = runner.addresses[0][1]
    bot_token, signing = "xoxb-9-9-liveBotTokenSecret", "liveSigningSecret0042"
    secrets = {
        "SLACK_BOT_TOKEN": bot_token,
        "SLACK_SIGNING_SECRET": signing,
        "OPENAI_API_KEY": "sk-liveModelKeySecret",
        "THREADGATE_GATEWAY_TOKEN": "liveGatewayTokenSecret",
        "THREADGATE_ALERT_WEBHOOK_URL": (
            f"http://127.0.0.1:{hook_port}/services/T0LIVE/B0LIVE/liveWebhookTokenSecret"
        ),
    }
    try:
        async with (
            FakeSlack(bot_token=bot_token) as slack,
            OpenAIServer() as model,
            aiohttp.ClientSession() as http,
        ):
            model.default = searching
            base = model.url.replace("http://", "http://modeluser:liveBasePasswordSecret@")
            env = {
                **gateway_env(slack, model, dsn),
                **secrets,
                "OPENAI_BASE_URL": base,
                "THREADGATE_LOG_LEVEL": "DEBUG",
                "THREADGATE_WORKSPACE_SEARCH": "true",
            }
            gateway = GatewayProcess(env, tmp_path)
            await gateway.start()
            try:
                mention = app_mention_event(text="<@UBOT> hello")
                first = event_callback(mention)
                assert (await deliver(http, gateway.events_url, first, signing))[0] == 200
                await slack.wait_for_posts(1)
                slack.revoke_token()
                second = event_callback(app_mention_event(text="<@UBOT> still there?"))
                await deliver(http, gateway.events_url, second, signing)
                await asyncio.wait_for(hits.wait(), 30)
                await gateway.wait_for_log(rb"THREADGATE_ALERT_WEBHOOK_URL answered|token-alarm")
            finally:
                await gateway.stop()
    finally:
        await runner.cleanup()
    log = gateway.log.decode(errors="replace")
    leaks = ["liveBasePasswordSecret", "/services/T0LIVE/B0LIVE", *secrets.values()]
    leaks.append(mention["action_token"])
    assert [leak for leak in leaks if leak in log] == []
    assert "HTTP Request: POST http://[redacted]@127.0.0.1" in log
    assert "'action_token': '[redacted]'" in log  # slack_sdk's debug line of the search


def searching(seen: RecordedRequest) -> Reply:
    """Searches the workspace first, then answers as `echo` does."""
    if any(m.get("role") == "tool" for m in seen.body["messages"]):
        return echo(seen)
    return reply_with_tool("search_workspace", {"query": "hello"})
