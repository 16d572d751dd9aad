"""The round loop of the walking skeleton runs on either wire format, and falls back."""

from __future__ import annotations

from tests.fakes.anthropic_api import AnthropicServer
from tests.fakes.anthropic_api import reply_with_tool as anthropic_reply
from tests.fakes.openai_api import RecordedRequest, Reply, error_reply
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import Rig


def anthropic_echo(seen: RecordedRequest) -> Reply:
    """Answers with final_reply quoting the last user message's text."""
    last = seen.body["messages"][-1]["content"]
    text = last if isinstance(last, str) else " ".join(b.get("text", "") for b in last)
    return anthropic_reply("final_reply", {"text": f"claude says: {text[-20:]}"})


def anthropic_env(claude: AnthropicServer) -> dict[str, str]:
    """The settings that point the rig's gateway at the Anthropic fake."""
    return {
        "THREADGATE_MODEL": "anthropic:claude-test",
        "ANTHROPIC_BASE_URL": claude.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }


async def test_a_mention_is_answered_through_anthropic_messages(fresh_dsn: str) -> None:
    """THREADGATE_MODEL=anthropic:… answers through the Messages API, system prompt on top."""
    async with AnthropicServer() as claude:
        claude.default = anthropic_echo
        overrides = {
            "THREADGATE_MODEL": "anthropic:claude-test",
            "ANTHROPIC_BASE_URL": claude.url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        }
        async with Rig(fresh_dsn, overrides=overrides) as rig:
            await rig.send(event_callback(app_mention_event(text="<@UBOT> hello claude")))
            post = (await rig.slack.wait_for_posts(1))[0]
    request = claude.requests[0]
    assert post.text.startswith("claude says:") and "hello claude" in post.text
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert "<turn" in str(request.body["system"])  # the system prompt travels apart
    assert all(m["role"] != "system" for m in request.body["messages"])
    assert request.body["tool_choice"]["type"] == "any"
    assert rig.model.requests == []


async def test_a_non_transient_failure_falls_back_to_the_second_slot(fresh_dsn: str) -> None:
    """OpenAI answering 400 hands the round to the Anthropic fallback slot."""
    async with AnthropicServer() as claude:
        claude.default = anthropic_echo
        overrides = {
            "THREADGATE_FALLBACK_MODEL": "anthropic:claude-test",
            "ANTHROPIC_BASE_URL": claude.url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        }
        async with Rig(fresh_dsn, overrides=overrides) as rig:
            rig.model.default = lambda seen: error_reply(
                400, "bad request", "invalid_request_error"
            )
            await rig.send(event_callback(app_mention_event(text="<@UBOT> fall back")))
            post = (await rig.slack.wait_for_posts(1))[0]
            assert len(rig.model.requests) == 1
    assert post.text.startswith("claude says:") and len(claude.requests) == 1
