"""Answers that would be wrong: cut output, unstorable text, and a window that opens with
a reply (issue 9, items 7 to 9; item 10, notices that claim no alert that was not sent, is
the no-channel case of tests/chaos/test_model_faults.py).

Each scenario runs real gateway processes against real Postgres and the loopback fakes,
and ends with the same check as every chaos scenario: each message answered exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from storage.database import Database
from tests.chaos.harness import (
    Processes,
    SentEvent,
    assert_exactly_once_in_order,
    conversations,
    converse,
    deliver_until_acked,
    marker_of,
    replies_in,
    scaled,
    wait_until_settled,
)
from tests.fakes.anthropic_api import AnthropicServer
from tests.fakes.anthropic_api import reply_with_tool as anthropic_reply
from tests.fakes.openai_api import (
    Completion,
    FakeToolCall,
    OpenAIServer,
    RecordedRequest,
    Reply,
    reply_with_tool,
)
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, gateway_env, last_user_text
from tests.pg import create_database

OUTPUT_LIMIT = 300


def final_reply_call(text: str) -> FakeToolCall:
    return FakeToolCall("final_reply", {"text": text}, "call_1")


async def test_an_answer_cut_at_the_output_limit_is_never_posted(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The model's first answer to each message is cut at THREADGATE_MAX_OUTPUT_TOKENS
    (`finish_reason: length`, though its JSON parses); the gateway asks again and posts only
    the complete, shorter answer, once. The limit reaches the provider as `max_tokens`."""
    dsn = await create_database(postgres_dsn, "chaos_cut_output")
    cut_once: set[str] = set()

    def cut_then_short(seen: RecordedRequest) -> Reply:
        marker = marker_of(seen) or "?"
        if marker not in cut_once:
            cut_once.add(marker)
            return Completion(
                tool_calls=[final_reply_call(f"CUT {marker} the first half of a long ans")],
                finish_reason="length",
            )
        return reply_with_tool("final_reply", {"text": f"re: short {marker}"})

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = cut_then_short
        env = gateway_env(slack, model, dsn) | {"THREADGATE_MAX_OUTPUT_TOKENS": str(OUTPUT_LIMIT)}
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)
            threads = conversations(scaled(4, 2), prefix="C0CUT")
            sent = await converse(http, slack, web, dsn, threads, scaled(3, 2))
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    assert not [p.text for p in slack.posts if "CUT" in p.text], slack.describe()
    assert {r.body["max_tokens"] for r in model.requests} == {OUTPUT_LIMIT}
    repaired = [r for r in model.requests if "cut off at the output limit" in str(r.body)]
    assert len(repaired) == len(sent)


async def test_model_text_postgres_cannot_hold_is_cleaned_not_retried(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A final_reply with NUL and a lone surrogate is stored and posted once (with U+FFFD in
    their place) after one model call, instead of failing the round again and again."""
    dsn = await create_database(postgres_dsn, "chaos_unstorable")

    def unstorable(seen: RecordedRequest) -> Reply:
        # Raw JSON escapes, as a model writes them: they decode to NUL and a lone surrogate.
        raw = f'{{"text": "re: {marker_of(seen)} nul\\u0000 half\\ud800 end"}}'
        return Completion(tool_calls=[FakeToolCall("final_reply", raw, "call_1")])

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = unstorable
        processes = Processes(tmp_path)
        try:
            web = await processes.start(gateway_env(slack, model, dsn))
            threads = conversations(scaled(3, 2), prefix="C0NUL")
            sent = await converse(http, slack, web, dsn, threads, scaled(2, 1))
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    assert len(model.requests) == len(sent), "an unstorable reply made the round run again"
    for s in sent:
        [reply] = [p for p in replies_in(slack, s.channel, s.thread_ts) if s.marker in p.text]
        assert reply.text.endswith("nul\ufffd half\ufffd end")


def anthropic_short(seen: RecordedRequest) -> Any:
    """Answers shortly, so that a long question ages out of the window before its reply."""
    return anthropic_reply("final_reply", {"text": f"re: ok {marker_of(seen)}"})


def _anthropic_env(env: Mapping[str, str], claude: AnthropicServer) -> dict[str, str]:
    return {
        **env,
        "THREADGATE_MODEL": "anthropic:claude-test",
        "ANTHROPIC_BASE_URL": claude.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "THREADGATE_HISTORY_CHARS": "1000",
    }


async def test_a_window_never_opens_with_a_reply_on_anthropic(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A long question, a short answer, then a short question: the 1,000-character budget
    keeps the answer but not its question. Anthropic (like the fake) refuses a conversation
    whose first message is the assistant's; every message is still answered."""
    dsn = await create_database(postgres_dsn, "chaos_assistant_first")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as unused,
        AnthropicServer() as claude,
        aiohttp.ClientSession() as http,
    ):
        claude.default = anthropic_short
        processes = Processes(tmp_path)
        try:
            web = await processes.start(_anthropic_env(gateway_env(slack, unused, dsn), claude))

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent)

            threads = conversations(scaled(3, 2), prefix="C0WINDOW")
            sent: list[SentEvent] = []
            for words in ("x" * 1500 + " ", "short? "):
                for thread in threads:
                    message = thread.next_message(words)
                    await send(message)
                    sent.append(message)
                    await slack.wait_until(
                        lambda m=message: bool(replies_in(slack, m.channel, m.thread_ts)), 60
                    )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    assert all(r.body["messages"][0]["role"] == "user" for r in claude.requests)
    second_round = [r for r in claude.requests if "short?" in last_user_text(r.body)]
    assert second_round and all(len(r.body["messages"]) == 1 for r in second_round)
