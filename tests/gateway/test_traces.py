"""One message, one trace, across real gateway processes; and what it cost, summed.

An ingress process admits the mention and a worker process answers it — a tool call, a
delegation to a sub-agent, then the reply — both exporting over OTLP/HTTP to a loopback
collector (tests/fakes/otlp_collector.py). The trace must hold every part, linked to its
parent, across the two processes: the admission (ingress) is the root, each lease of the
task (worker) continues it from the task row. `threadgate usage` then sums what the
model fake reported for every request it answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

from agent.rounds.subagent import SUBAGENT_PROMPT
from storage import Database
from tests.fakes.openai_api import (
    Completion,
    FakeToolCall,
    OpenAIServer,
    RecordedRequest,
    Reply,
    reply_with_tool,
)
from tests.fakes.otlp_collector import OTLPCollector, ReceivedSpan
from tests.fakes.prompt_cache import OpenAICache
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli_output
from tests.gateway.rig import BOT_TOKEN, SECRET, gateway_env
from tests.pg import create_database, wait_for_task

# USD per million tokens for the fake's model, so that its answers have a cost to sum.
PRICES = {"openai:gpt-test": {"input": 2, "cached_input": 0.5, "output": 8}}
ACK = "Looking it up…"


def scripted(seen: RecordedRequest) -> Reply:
    """The main conversation asks the time, then delegates, then answers; the sub-agent
    answers at once. Every answer's usage is what the fake's cache counted."""
    messages = seen.body["messages"]
    if messages[0]["content"] == SUBAGENT_PROMPT:
        return reply_with_tool("final_reply", {"text": "the finding"})
    last = messages[-1]
    if last["role"] == "user":
        return Completion(tool_calls=[FakeToolCall("current_time", {}, "call_time")])
    if last.get("tool_call_id") == "call_time":
        subtasks = [{"type": "agent", "params": {"instructions": "find it"}}]
        return Completion(
            tool_calls=[
                FakeToolCall("delegate", {"acknowledgment": ACK, "subtasks": subtasks}, "call_d")
            ]
        )
    return reply_with_tool("final_reply", {"text": "here is the answer"})


def traced_env(env: Mapping[str, str], collector: OTLPCollector) -> dict[str, str]:
    """Tracing on (a short export delay: the test waits for the spans, not a clock)."""
    return {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "THREADGATE_PRICES": json.dumps(PRICES),
    }


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def trace_complete(spans: list[ReceivedSpan]) -> bool:
    names = {s.name for s in spans}
    return {"admission", "round 0", "round 1", "subtask agent", "outbox reply"} <= names


async def test_one_message_is_one_trace_across_processes_and_usage_sums_what_was_reported(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Admission (ingress) → run → round → chat / execute_tool / slack / outbox, and the
    subtask, all one trace with parent links and the task id on every span; `threadgate
    usage` and `tasks show` read the same numbers and trace id."""
    dsn = await create_database(postgres_dsn, "traces")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        OTLPCollector() as collector,
        aiohttp.ClientSession() as http,
        Database(dsn, min_size=1, max_size=1) as db,
    ):
        model.cache = OpenAICache()
        model.default = scripted
        env = traced_env(gateway_env(slack, model, dsn), collector)
        ingress = GatewayProcess({**env, "THREADGATE_ROLE": "ingress"}, tmp_path)
        worker = GatewayProcess({**env, "THREADGATE_ROLE": "worker"}, tmp_path)
        await ingress.start()
        await worker.start()
        try:
            event = app_mention_event(text="<@UBOT> what is going on?")
            status, _ = await deliver(http, ingress.events_url, event_callback(event), SECRET)
            assert status == 200
            task = f"T1:{event['channel']}:{event['ts']}"
            await wait_for_task(db, task, "done", deadline=60)
            spans = await collector.wait_for(trace_complete)
        finally:
            assert [await ingress.stop(), await worker.stop()] == [0, 0]
        spans = collector.spans  # with what the processes flushed as they stopped
        usage_out = await run_cli_output(["usage", "--by", "model", "--json"], env, tmp_path)
        show_out = await run_cli_output(["tasks", "show", task], env, tmp_path)

    check_trace(spans, task)
    check_usage(usage_out, model.reported)
    [admission] = by_name(spans, "admission")
    assert show_out[0] == 0 and f"trace:          {admission.trace_id}" in show_out[1]


def check_trace(spans: list[ReceivedSpan], task: str) -> None:
    """The spans of `task` are one trace, each linked to the parent it should have."""
    ours = [s for s in spans if s.attributes.get("threadgate.task.id") == task]
    assert {s.trace_id for s in ours} == {ours[0].trace_id}
    assert {s.span_id for s in spans if s.trace_id == ours[0].trace_id} == {
        s.span_id for s in ours
    }  # every span of the trace is labelled with the task
    ids = {s.span_id: s for s in ours}
    [admission] = by_name(ours, "admission")
    assert admission.parent_id == "" and admission.attributes["threadgate.admission"] == "admitted"
    runs = by_name(ours, "run")
    assert len(runs) == 2 and all(r.parent_id == admission.span_id for r in runs)
    rounds = {r.name: r for r in ours if r.name.startswith("round ")}
    assert set(rounds) == {"round 0", "round 1"}
    assert all(ids[r.parent_id].name == "run" for r in rounds.values())
    assert rounds["round 0"].attributes["threadgate.decision"] == "delegation"
    assert rounds["round 1"].attributes["threadgate.decision"] == "reply"
    [subtask] = by_name(ours, "subtask agent")
    assert subtask.parent_id == admission.span_id
    assert subtask.attributes["threadgate.subtask.id"].startswith(task)
    chats = by_name(ours, "chat gpt-test")
    parents = sorted(ids[c.parent_id].name for c in chats)
    assert parents == ["round 0", "round 0", "round 1", "subtask agent"]
    for chat in chats:
        check_chat(chat.attributes)
    [tool] = by_name(ours, "execute_tool current_time")
    assert tool.parent_id == rounds["round 0"].span_id
    assert tool.attributes["gen_ai.tool.name"] == "current_time"
    outboxes = [s for s in ours if s.name.startswith("outbox ")]
    assert {ids[o.parent_id].name for o in outboxes} == {"run"}
    posts = by_name(ours, "slack chat.postMessage")
    assert posts and {ids[p.parent_id].name for p in posts} == {"outbox plan", "outbox reply"}
    assert {s.service for s in ours} == {"threadgate"}


def check_chat(attributes: Mapping[str, Any]) -> None:
    """A model request's span, as the GenAI conventions name its attributes."""
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "gpt-test"
    assert attributes["gen_ai.response.model"] == "gpt-test"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.usage.cache_read.input_tokens" in attributes
    assert attributes["threadgate.cost_usd"] > 0


def check_usage(out: tuple[int, str, str], reported: list[dict[str, Any]]) -> None:
    """`threadgate usage` sums exactly what the fake reported, and prices it."""
    status, stdout, stderr = out
    assert status == 0, stderr
    [row] = json.loads(stdout)["rows"]
    prompt = sum(r["prompt_tokens"] for r in reported)
    cached = sum(r["prompt_tokens_details"]["cached_tokens"] for r in reported)
    output = sum(r["completion_tokens"] for r in reported)
    assert cached > 0  # a round's second request read the first one's prefix
    assert (row["model"], row["requests"], row["unpriced_requests"]) == (
        "openai:gpt-test",
        len(reported),
        0,
    )
    assert (row["input_tokens"], row["cached_tokens"], row["output_tokens"]) == (
        prompt,
        cached,
        output,
    )
    expected = (Decimal(prompt - cached) * 2 + Decimal(cached) / 2 + Decimal(output) * 8) / 10**6
    assert abs(Decimal(str(row["cost_usd"])) - expected) < Decimal("1e-9")
