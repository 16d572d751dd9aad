"""`threadgate manifest`: the Slack app the code needs — its scopes and events — and no more."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

import gateway
from gateway.inbound import inbound_turn
from gateway.manifest import PLACEHOLDER_URL, app_manifest, events_url, render_manifest
from gateway.scopes import BOT_EVENTS, REQUIRED_BOT_SCOPES
from tests.fakes.slack_events import app_mention_event, event_callback, message_event
from tests.gateway.process import run_cli_output

# Which bot scopes each Web API method needs (conversations.* in whichever kind of
# conversation it reads). A method the gateway starts calling must be added here, and the
# test then says whether REQUIRED_BOT_SCOPES covers it.
METHOD_SCOPES: dict[str, set[str]] = {
    "auth_test": set(),
    "users_info": {"users:read"},
    "chat_postMessage": {"chat:write"},
    "chat_update": {"chat:write"},
    "conversations_replies": {"channels:history", "groups:history", "im:history"},
    "conversations_history": {"channels:history", "groups:history", "im:history"},
    "assistant_threads_setStatus": {"assistant:write"},
    "apps_connections_open": set(),  # the app-level token's connections:write, not a bot scope
}
EVENT_SCOPES = {"app_mention": {"app_mentions:read"}, "message.im": {"im:history"}}
# Reading metadata back (include_all_metadata) needs its own scope.
METADATA_SCOPE = "metadata.message:read"

# Every Events API subscription that could bring the bot a user's message, as a payload.
CANDIDATE_EVENTS: dict[str, dict[str, Any]] = {
    "app_mention": app_mention_event(text="<@UBOT> hi"),
    "message.im": message_event(text="hi", channel="D0A1B2C3D4E", channel_type="im"),
    "message.channels": message_event(text="hi", channel_type="channel"),
    "message.groups": message_event(text="hi", channel="G0A1B2C3D4E", channel_type="group"),
    "message.mpim": message_event(text="hi", channel="G0A1B2C3D4F", channel_type="mpim"),
}


def gateway_sources() -> str:
    folder = Path(gateway.__file__).parent
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.py")))


def web_api_methods(source: str) -> set[str]:
    called = set(re.findall(r"client\.([A-Za-z_]+)\(", source))
    return {name for name in called if hasattr(AsyncWebClient, name) and name != "api_call"}


def test_every_web_api_method_the_gateway_calls_has_its_scopes_known() -> None:
    """Each Slack method called in gateway/ is in the scope table, so none goes unchecked."""
    called = web_api_methods(gateway_sources())
    assert {"chat_postMessage", "users_info"} <= called  # the scan does find calls
    assert called <= set(METHOD_SCOPES)


def test_required_scopes_are_exactly_what_the_code_needs() -> None:
    """REQUIRED_BOT_SCOPES covers every call and event of the code, and nothing more."""
    source = gateway_sources()
    needed = set().union(*(METHOD_SCOPES[m] for m in web_api_methods(source)))
    needed |= set().union(*(EVENT_SCOPES[e] for e in BOT_EVENTS))
    if "include_all_metadata" in source:
        needed.add(METADATA_SCOPE)
    assert needed == set(REQUIRED_BOT_SCOPES)
    assert all(reason.strip() for reason in REQUIRED_BOT_SCOPES.values())


@pytest.mark.parametrize("subscription", sorted(CANDIDATE_EVENTS))
def test_subscribed_events_are_exactly_those_the_gatekeeper_answers(subscription: str) -> None:
    """An event is subscribed in the manifest if and only if inbound_turn turns it into work."""
    answered = inbound_turn(event_callback(CANDIDATE_EVENTS[subscription])) is not None
    assert answered == (subscription in BOT_EVENTS)


@pytest.mark.parametrize("socket_mode", [False, True])
def test_rendered_yaml_parses_to_the_manifest(socket_mode: bool) -> None:
    """The hand-written YAML parses back to exactly the manifest data."""
    text = render_manifest(socket_mode=socket_mode)
    assert yaml.safe_load(text) == app_manifest(socket_mode=socket_mode)


def test_manifest_declares_scopes_events_and_mode() -> None:
    """Both modes ask for the same scopes and events; only HTTP mode has a request URL."""
    socket, http = app_manifest(socket_mode=True), app_manifest(socket_mode=False)
    for manifest in (socket, http):
        assert manifest["oauth_config"]["scopes"]["bot"] == list(REQUIRED_BOT_SCOPES)
        assert manifest["settings"]["event_subscriptions"]["bot_events"] == list(BOT_EVENTS)
        assert manifest["settings"]["interactivity"] == {"is_enabled": False}
        assert "assistant_view" in manifest["features"]
        assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["event_subscriptions"]
    assert http["settings"]["socket_mode_enabled"] is False
    assert http["settings"]["event_subscriptions"]["request_url"] == PLACEHOLDER_URL


def test_events_url_adds_the_events_path_to_a_bare_host() -> None:
    """`--http https://host` means https://host/slack/events; a full URL is kept as given."""
    assert events_url("https://bot.example.org") == "https://bot.example.org/slack/events"
    assert events_url("https://bot.example.org/x/events") == "https://bot.example.org/x/events"
    with pytest.raises(ValueError, match="https"):
        events_url("http://bot.example.org")


async def test_manifest_command_prints_the_manifest_for_each_mode(tmp_path: Path) -> None:
    """`threadgate manifest`, `--socket` and `--http URL` print the matching YAML."""
    cases = [
        ([], render_manifest(socket_mode=False)),
        (["--socket"], render_manifest(socket_mode=True)),
        (
            ["--http", "https://bot.example.org"],
            render_manifest(socket_mode=False, request_url="https://bot.example.org/slack/events"),
        ),
    ]
    for flags, expected in cases:
        status, out, err = await run_cli_output(["manifest", *flags], {}, tmp_path)
        assert (status, out, err) == (0, expected, "")


async def test_manifest_command_refuses_a_plain_http_url(tmp_path: Path) -> None:
    """`--http http://…` is a usage error naming https, without a traceback."""
    status, out, err = await run_cli_output(["manifest", "--http", "http://x.org"], {}, tmp_path)
    assert status == 2 and out == "" and "https://" in err and "Traceback" not in err
