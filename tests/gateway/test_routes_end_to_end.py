"""Routes and settings through a real gateway (issue 35, item 3): the fallback chain as a
list of routes, each with its own base URL and key, the index of the route that answered
stored with the answer, sampling settings on every request, and the end user's id sent
hashed when enabled."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.fakes.anthropic_api import AnthropicServer
from tests.fakes.anthropic_api import error_reply as anthropic_error
from tests.fakes.openai_api import (
    OpenAIServer,
    RecordedRequest,
    Reply,
    error_reply,
    reply_with_tool,
)
from tests.fakes.slack_events import DEFAULT_TEAM, DEFAULT_USER, app_mention_event, event_callback
from tests.gateway.rig import Rig


async def stored_origin(rig: Rig) -> tuple[object, ...]:
    row = await rig.db.pool.fetchrow(
        "SELECT route_index, route_provider, route_model, route_slot FROM messages "
        "WHERE kind = 'reply'"
    )
    assert row is not None
    return tuple(row)


async def test_the_chain_falls_through_routes_each_with_its_own_url_and_key(
    fresh_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: two slots sharing one key per vendor. Now three routes: an OpenAI one whose
    model is gone (404), an Anthropic one that refuses the request (400), and an OpenAI one
    at another URL with another key that answers. Each is called at its own URL with its
    own key (none for the keyless one), the reply says which answered by its index, and the
    sampling settings (the deployment's, under the route's own) are on its request."""
    monkeypatch.setenv("ROUTE_A_KEY", "sk-route-a")
    monkeypatch.setenv("ROUTE_C_KEY", "sk-route-c")
    async with OpenAIServer() as server, AnthropicServer() as claude:

        def answer(seen: RecordedRequest) -> Reply:
            if seen.path.startswith("/a/"):
                return error_reply(404, "The model `gone` does not exist", code="model_not_found")
            return reply_with_tool("final_reply", {"text": "from the third route"})

        server.default = answer
        claude.default = lambda seen: anthropic_error(400, message="max_tokens: 9 > 8")
        routes = [
            {
                "model": "openai:gone",
                "baseUrl": f"{server.origin}/a/v1",
                "apiKey": "${ROUTE_A_KEY}",
            },
            {"model": "anthropic:claude-test", "baseUrl": claude.url},
            {
                "model": "openai:gpt-test",
                "baseUrl": f"{server.origin}/c/v1",
                "apiKey": "${ROUTE_C_KEY}",
                "temperature": 0.2,
            },
        ]
        overrides = {
            "THREADGATE_MODEL": "",
            "THREADGATE_ROUTES": json.dumps(routes),
            "THREADGATE_TEMPERATURE": "0.9",
            "THREADGATE_TOP_P": "0.5",
            "THREADGATE_STOP_SEQUENCES": '["\\n\\nUser:"]',
        }
        async with Rig(fresh_dsn, overrides=overrides) as rig:
            await rig.send(event_callback(app_mention_event(text="<@UBOT> which one?")))
            [post] = await rig.slack.wait_for_posts(1)
            origin = await stored_origin(rig)
    assert post.text == "from the third route"
    assert origin == (2, "openai", "gpt-test", "fallback")
    first, third = server.requests
    assert (first.path, first.headers["authorization"]) == (
        "/a/v1/chat/completions",
        "Bearer sk-route-a",
    )
    assert (third.path, third.headers["authorization"]) == (
        "/c/v1/chat/completions",
        "Bearer sk-route-c",
    )
    [second] = claude.requests
    assert "x-api-key" not in second.headers and second.body["temperature"] == 0.9
    body = third.body
    assert (body["temperature"], body["top_p"], body["stop"]) == (0.2, 0.5, ["\n\nUser:"])


@pytest.mark.rig(overrides={"THREADGATE_SEND_USER_ID": "true"})
async def test_the_end_user_is_sent_hashed_when_enabled(rig: Rig) -> None:
    """THREADGATE_SEND_USER_ID=true: every request names the person by a hash of their
    workspace and user id (`user` on Chat Completions), never the Slack id itself; the
    shorthand's one route answers as index 0."""
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hello")))
    await rig.slack.wait_for_posts(1)
    digest = hashlib.sha256(f"threadgate-end-user:{DEFAULT_TEAM}:{DEFAULT_USER}".encode())
    sent = {r.body["user"] for r in rig.model.requests}
    assert sent == {f"tg-{digest.hexdigest()[:32]}"}
    assert all(DEFAULT_USER not in user for user in sent)
    assert (await stored_origin(rig))[0] == 0


async def test_without_the_setting_no_end_user_is_sent(rig: Rig) -> None:
    """The default: the provider is not told who asked."""
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hello")))
    await rig.slack.wait_for_posts(1)
    assert all("user" not in r.body for r in rig.model.requests)


async def test_a_routes_provider_options_reach_its_requests(fresh_dsn: str) -> None:
    """Each route's `providerOptions` are in the body of every request to it (OpenAI's
    reasoning effort, OpenRouter's thinking budget, Anthropic's top_k), beside what the
    gateway sets itself, and only in its own: the other route's requests carry none."""
    async with OpenAIServer() as server, AnthropicServer() as claude:
        claude.default = lambda seen: anthropic_error(400, message="max_tokens: 9 > 8")
        server.default = lambda seen: reply_with_tool("final_reply", {"text": "thought"})
        budget = {"max_tokens": 2048}
        routes = [
            {
                "model": "anthropic:claude-test",
                "baseUrl": claude.url,
                "providerOptions": {"top_k": 20},
            },
            {
                "model": "openai:gpt-test",
                "baseUrl": server.url,
                "providerOptions": {"reasoning_effort": "low", "reasoning": budget},
            },
        ]
        overrides = {"THREADGATE_MODEL": "", "THREADGATE_ROUTES": json.dumps(routes)}
        async with Rig(fresh_dsn, overrides=overrides) as rig:
            await rig.send(event_callback(app_mention_event(text="<@UBOT> think")))
            [post] = await rig.slack.wait_for_posts(1)
    assert post.text == "thought"
    assert claude.requests and all(r.body["top_k"] == 20 for r in claude.requests)
    assert all("reasoning" not in r.body for r in claude.requests)
    [asked] = server.requests
    assert (asked.body["reasoning_effort"], asked.body["reasoning"]) == ("low", budget)
    assert asked.body["model"] == "gpt-test" and asked.body["tools"]
    assert "top_k" not in asked.body
