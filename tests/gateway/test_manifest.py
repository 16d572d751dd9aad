"""`threadgate manifest`: the Slack app the code needs — its scopes and events — and no more.

What the app must subscribe to depends on the settings (THREADGATE_CONTINUE_THREADS needs
the channel message events), so each check runs for every combination of them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

import gateway
from gateway.inbound.gatekeeper import Policy
from gateway.inbound.pins import pin_change
from gateway.slack.events import inbound_turn, messages_opened, session_stopped
from gateway.slack.manifest import (
    DESCRIPTION,
    PLACEHOLDER_URL,
    app_manifest,
    events_url,
    parse_prompts,
    render_manifest,
)
from gateway.slack.scopes import SCOPE_REASONS, UNINSTALL_EVENTS, bot_events, bot_scopes
from gateway.slack.shortcut import ASK_SHORTCUT
from tests.fakes.slack_events import (
    agent_session_stopped_event,
    app_home_opened_event,
    app_mention_event,
    bot_message_event,
    dm_message_event,
    event_callback,
    file_share_event,
    message_changed_event,
    message_event,
    new_ts,
    slack_file,
    thread_broadcast_event,
)
from tests.fakes.slack_pins import pin_event, pinned_message
from tests.gateway.process import run_cli_output

# Which bot scopes each Web API method needs (conversations.* in whichever kind of
# conversation it reads). A method the gateway starts calling must be added here, and the
# test then says whether the declared scopes cover it.
METHOD_SCOPES: dict[str, set[str]] = {
    "auth_test": set(),
    "auth_revoke": set(),  # a refused install's token (gateway/slack/oauth.py)
    "users_info": {"users:read"},
    "chat_postMessage": {"chat:write"},
    "chat_update": {"chat:write"},
    "chat_postEphemeral": {"chat:write"},
    "chat_delete": {"chat:write"},
    "chat_startStream": {"chat:write"},
    "chat_appendStream": {"chat:write"},
    "chat_stopStream": {"chat:write"},
    "conversations_replies": {"channels:history", "groups:history", "im:history"},
    "conversations_history": {"channels:history", "groups:history", "im:history"},
    "assistant_threads_setStatus": {"assistant:write"},
    # "The chat:write scope is required to manage thread-based sessions" (docs.slack.dev).
    "agents_sessions_setStatus": {"chat:write"},
    "assistant_threads_setSuggestedPrompts": {"assistant:write"},
    "apps_connections_open": set(),  # the app-level token's connections:write, not a bot scope
    "chat_getPermalink": set(),  # "No scope required" (docs.slack.dev, chat.getPermalink)
    "files_info": {"files:read"},  # a file an event gives only by id (gateway/slack/file_info.py)
    # Whether a channel is shared with another organization (gateway/slack/sharing.py).
    "conversations_info": {"channels:read", "groups:read", "im:read", "mpim:read"},
    # A person's DM opened for a schedule that posts there (issue 34).
    "conversations_open": {"im:write"},
    # Whether a schedule's owner is still in its channel (issue 44; docs.slack.dev,
    # conversations.members: channels:read, groups:read, im:read, mpim:read).
    "conversations_members": {"channels:read", "groups:read", "im:read", "mpim:read"},
    # The message shortcut's modal (gateway/inbound/shortcuts.py): "No scope required"
    # (docs.slack.dev, views.open); the shortcut itself needs `commands` (SHORTCUT_SCOPE).
    "views_open": set(),
    # A person's App Home view (issue 45; docs.slack.dev, views.publish: no scope).
    "views_publish": set(),
}
# A shortcut in the manifest's `features.shortcuts` is offered only with this bot scope.
SHORTCUT_SCOPE = "commands"
# Real-time Search, called by its name (its arguments in the request's body, the action
# token among them: gateway/slack/search.py) and only with THREADGATE_WORKSPACE_SEARCH: a
# scope per channel type it searches (search:read.public, .private, .mpim, .im on
# docs.slack.dev's scope pages).
SEARCH_METHOD = "assistant.search.context"
SEARCH_SCOPES = {"search:read.public", "search:read.private", "search:read.mpim", "search:read.im"}
# The scope Slack requires for each Events API subscription.
EVENT_SCOPES = {
    "app_mention": {"app_mentions:read"},
    "message.im": {"im:history"},
    "message.channels": {"channels:history"},
    "message.groups": {"groups:history"},
    "message.mpim": {"mpim:history"},
    "pin_added": {"pins:read"},
    "pin_removed": {"pins:read"},
    # Neither lists a scope on its reference page: a bot user is enough.
    "agent_session_stopped": set(),
    "app_home_opened": set(),
}
# Reading metadata back (include_all_metadata) needs its own scope.
METADATA_SCOPE = "metadata.message:read"

# Every setting that changes what the app must subscribe to: THREADGATE_CONTINUE_THREADS.
SETTINGS = [True, False]

# Every feature: a message the gateway claims to answer, as the payload Slack sends for it,
# with the subscription that brings it. A reply in a thread is in one the bot takes part in.
_THREAD = new_ts()
FEATURES: dict[str, tuple[str, dict[str, Any]]] = {
    "a mention": ("app_mention", app_mention_event(text="<@UBOT> hi")),
    "a mention in a thread": (
        "app_mention",
        app_mention_event(text="<@UBOT> hi", thread_ts=_THREAD),
    ),
    "a mention with a file": (
        "app_mention",
        app_mention_event(text="<@UBOT> look", thread_ts=_THREAD) | {"files": [slack_file()]},
    ),
    "a DM": ("message.im", dm_message_event(text="hi")),
    "a DM with only a file": ("message.im", file_share_event()),
    "a DM with a file and words": ("message.im", file_share_event(text="see this")),
    "a reply in a DM thread": ("message.im", dm_message_event(text="hi", thread_ts=_THREAD)),
    "a broadcast reply in a DM thread": (
        "message.im",
        thread_broadcast_event(
            text="hi", thread_ts=_THREAD, channel="D0A1B2C3D4E", channel_type="im"
        ),
    ),
    "a reply in a channel thread": (
        "message.channels",
        message_event(text="and?", channel_type="channel", thread_ts=_THREAD),
    ),
    "a broadcast reply in a channel thread": (
        "message.channels",
        thread_broadcast_event(text="all: done", thread_ts=_THREAD),
    ),
    "a file in a channel thread": (
        "message.channels",
        file_share_event(channel="C0A1B2C3D4E", channel_type="channel", thread_ts=_THREAD),
    ),
    "a reply in a private channel thread": (
        "message.groups",
        message_event(text="and?", channel="G0A1B2C3D4E", channel_type="group", thread_ts=_THREAD),
    ),
    "a broadcast reply in a private channel thread": (
        "message.groups",
        thread_broadcast_event(
            text="all: done", thread_ts=_THREAD, channel="G0A1B2C3D4E", channel_type="group"
        ),
    ),
    "a reply in a group DM thread": (
        "message.mpim",
        message_event(text="and?", channel="G0A1B2C3D4F", channel_type="mpim", thread_ts=_THREAD),
    ),
    "a file in a group DM thread": (
        "message.mpim",
        file_share_event(channel="G0A1B2C3D4F", channel_type="mpim", thread_ts=_THREAD),
    ),
    "a pin in a thread": (
        "pin_added",
        pin_event(pinned_message(text="remember", ts=new_ts(), thread_ts=_THREAD)),
    ),
    "an unpin in a thread": (
        "pin_removed",
        pin_event(pinned_message(text="remember", ts=new_ts(), thread_ts=_THREAD), added=False),
    ),
    "Stop pressed on a thread's agent session": (
        "agent_session_stopped",
        agent_session_stopped_event(thread_ts=_THREAD),
    ),
    "the DM with the app opened": ("app_home_opened", app_home_opened_event()),
}
# What those subscriptions also bring, and the gateway never answers, whatever the settings.
NEVER_ANSWERED: dict[str, dict[str, Any]] = {
    "channel chatter": message_event(text="lunch?", channel_type="channel"),
    "a bot's post": bot_message_event(text="beep", thread_ts=_THREAD),
    "an edit": message_changed_event(ts=_THREAD, new_text="b", old_text="a"),
    "a join": message_event(text="joined", thread_ts=_THREAD) | {"subtype": "channel_join"},
    "the Home tab opened": app_home_opened_event(tab="home"),
}


def answered(payload: dict[str, Any], *, continue_threads: bool) -> bool:
    """Whether the gateway answers this event, in a thread the bot takes part in (a pin
    event is answered by keeping the pin, gateway/inbound/pins.py)."""
    if pin_change(event_callback(payload)) is not None:
        return True
    if session_stopped(event_callback(payload)) or messages_opened(event_callback(payload)):
        return True  # a Stop stops the thread's work; the DM opened is offered prompts
    turn = inbound_turn(event_callback(payload))
    policy = Policy(continue_threads=continue_threads, backfill_messages=50)
    return turn is not None and policy.allows(turn) and policy.addressed(turn, known=True)


def gateway_sources() -> str:
    folder = Path(gateway.__file__).parent
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted(folder.rglob("*.py")))


def web_api_methods(source: str) -> set[str]:
    called = set(re.findall(r"client\.([A-Za-z_]+)\(", source))
    return {name for name in called if hasattr(AsyncWebClient, name) and name != "api_call"}


def test_every_web_api_method_the_gateway_calls_has_its_scopes_known() -> None:
    """Each Slack method called in gateway/ is in the scope table, so none goes unchecked."""
    called = web_api_methods(gateway_sources())
    assert {"chat_postMessage", "users_info"} <= called  # the scan does find calls
    assert called <= set(METHOD_SCOPES)


@pytest.mark.parametrize("continue_threads", SETTINGS)
def test_required_scopes_are_exactly_what_the_code_needs(continue_threads: bool) -> None:
    """The declared scopes cover every call of the code and every subscribed event, and
    nothing more, for each setting."""
    source = gateway_sources()
    needed = set().union(*(METHOD_SCOPES[m] for m in web_api_methods(source)))
    events = bot_events(continue_threads=continue_threads)
    needed |= set().union(*(EVENT_SCOPES[e] for e in events))
    if "include_all_metadata" in source:
        needed.add(METADATA_SCOPE)
    if "url_private" in source:  # file downloads (gateway/inbound/files.py) are not Web API calls
        needed.add("files:read")
    if app_manifest(socket_mode=True, continue_threads=continue_threads)["features"]["shortcuts"]:
        needed.add(SHORTCUT_SCOPE)
    if "app.command(" in source:  # a slash command is no Web API call (gateway/inbound/slash.py)
        needed.add("commands")
    assert needed == set(bot_scopes(continue_threads=continue_threads))
    assert f'"{SEARCH_METHOD}"' in source
    searching = bot_scopes(continue_threads=continue_threads, workspace_search=True)
    assert set(searching) == needed | SEARCH_SCOPES
    assert set(SCOPE_REASONS) == set(bot_scopes(continue_threads=True, workspace_search=True))
    assert all(reason.strip() for reason in SCOPE_REASONS.values())


@pytest.mark.parametrize("continue_threads", SETTINGS)
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_subscribed_events_are_exactly_those_the_gatekeeper_answers(
    feature: str, continue_threads: bool
) -> None:
    """Each feature's event is subscribed if and only if the gateway answers it with these
    settings: nothing it answers goes undelivered, nothing is delivered for nothing."""
    subscription, payload = FEATURES[feature]
    subscribed = subscription in bot_events(continue_threads=continue_threads)
    assert answered(payload, continue_threads=continue_threads) == subscribed


@pytest.mark.parametrize("continue_threads", SETTINGS)
def test_every_subscription_brings_a_feature(continue_threads: bool) -> None:
    """Each subscribed event answers at least one feature; the ones never answered stay so."""
    events = bot_events(continue_threads=continue_threads)
    answering = {
        subscription
        for subscription, payload in FEATURES.values()
        if answered(payload, continue_threads=continue_threads)
    }
    assert set(events) == answering and set(events) <= set(EVENT_SCOPES)
    for name, payload in NEVER_ANSWERED.items():
        assert not answered(payload, continue_threads=continue_threads), name


@pytest.mark.parametrize("socket_mode", [False, True])
def test_rendered_yaml_parses_to_the_manifest(socket_mode: bool) -> None:
    """The hand-written YAML parses back to exactly the manifest data."""
    text = render_manifest(socket_mode=socket_mode, continue_threads=True)
    assert yaml.safe_load(text) == app_manifest(socket_mode=socket_mode, continue_threads=True)


@pytest.mark.parametrize("continue_threads", SETTINGS)
def test_manifest_declares_scopes_events_and_mode(continue_threads: bool) -> None:
    """Both modes ask for the scopes and events the settings need; only HTTP mode has a
    request URL."""
    socket = app_manifest(socket_mode=True, continue_threads=continue_threads)
    http = app_manifest(socket_mode=False, continue_threads=continue_threads)
    scopes = list(bot_scopes(continue_threads=continue_threads))
    events = list(bot_events(continue_threads=continue_threads) + UNINSTALL_EVENTS)
    for manifest in (socket, http):
        assert manifest["oauth_config"]["scopes"]["bot"] == scopes
        assert manifest["settings"]["event_subscriptions"]["bot_events"] == events
        # Approval and feedback buttons: clicks come where events do.
        assert manifest["settings"]["interactivity"]["is_enabled"] is True
        assert "agent_view" in manifest["features"]
        assert "assistant_view" not in manifest["features"]
        assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
        # "Ask threadgate about this message": a message shortcut, with its scope.
        assert manifest["features"]["shortcuts"] == [
            {
                "name": "Ask threadgate",
                "type": "message",
                "callback_id": ASK_SHORTCUT,
                "description": "Ask threadgate about this message",
            }
        ]
        assert SHORTCUT_SCOPE in manifest["oauth_config"]["scopes"]["bot"]
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["interactivity"]
    assert (
        http["settings"]["interactivity"]["request_url"]
        == (http["settings"]["event_subscriptions"]["request_url"])
    )
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
        ([], render_manifest(socket_mode=False, continue_threads=True)),
        (["--socket"], render_manifest(socket_mode=True, continue_threads=True)),
        (
            ["--http", "https://bot.example.org"],
            render_manifest(
                socket_mode=False,
                request_url="https://bot.example.org/slack/events",
                continue_threads=True,
            ),
        ),
    ]
    for flags, expected in cases:
        status, out, err = await run_cli_output(["manifest", *flags], {}, tmp_path)
        assert (status, out, err) == (0, expected, "")


async def test_manifest_command_follows_continue_threads(tmp_path: Path) -> None:
    """THREADGATE_CONTINUE_THREADS=false prints an app without the channel message events;
    the default subscribes them, with mpim:history."""
    env = {"THREADGATE_CONTINUE_THREADS": "false"}
    status, out, _ = await run_cli_output(["manifest", "--socket"], env, tmp_path)
    assert status == 0 and out == render_manifest(socket_mode=True, continue_threads=False)
    quiet, default = yaml.safe_load(out), app_manifest(socket_mode=True, continue_threads=True)
    assert "message.channels" not in quiet["settings"]["event_subscriptions"]["bot_events"]
    assert "message.channels" in default["settings"]["event_subscriptions"]["bot_events"]
    assert "mpim:history" in default["oauth_config"]["scopes"]["bot"]
    assert "mpim:history" not in quiet["oauth_config"]["scopes"]["bot"]


async def test_manifest_command_asks_for_the_search_scopes_only_with_workspace_search(
    tmp_path: Path,
) -> None:
    """THREADGATE_WORKSPACE_SEARCH=true prints an app that asks for Real-time Search's
    scopes; the default (off) asks for none of them."""
    env = {"THREADGATE_WORKSPACE_SEARCH": "true"}
    status, out, _ = await run_cli_output(["manifest", "--socket"], env, tmp_path)
    assert status == 0
    searching = yaml.safe_load(out)["oauth_config"]["scopes"]["bot"]
    assert set(searching) >= SEARCH_SCOPES
    default = app_manifest(socket_mode=True, continue_threads=True)["oauth_config"]["scopes"]
    assert not SEARCH_SCOPES & set(default["bot"])
    assert [s for s in searching if s not in SEARCH_SCOPES] == default["bot"]


async def test_manifest_command_refuses_a_plain_http_url(tmp_path: Path) -> None:
    """`--http http://…` is a usage error naming https, without a traceback."""
    status, out, err = await run_cli_output(["manifest", "--http", "http://x.org"], {}, tmp_path)
    assert status == 2 and out == "" and "https://" in err and "Traceback" not in err


def test_many_workspaces_add_the_redirect_url_and_org_installs_every_app_the_uninstall() -> None:
    """With OAuth the manifest lists the redirect URL and allows org-wide installs; without
    it, neither. Both subscribe to app_uninstalled and tokens_revoked (an uninstall erases
    the workspace's content with one workspace too)."""
    url = "https://threadgate.example.com/slack/oauth_redirect"
    many = app_manifest(socket_mode=False, oauth=True, redirect_url=url, continue_threads=True)
    assert many["oauth_config"]["redirect_urls"] == [url]
    events = many["settings"]["event_subscriptions"]["bot_events"]
    assert {"app_uninstalled", "tokens_revoked"} <= set(events)
    assert many["settings"]["org_deploy_enabled"] is True
    one = app_manifest(socket_mode=False, continue_threads=True)
    assert "redirect_urls" not in one["oauth_config"]
    assert {"app_uninstalled", "tokens_revoked"} <= set(
        one["settings"]["event_subscriptions"]["bot_events"]
    )
    assert one["settings"]["org_deploy_enabled"] is False
    rendered = yaml.safe_load(
        render_manifest(socket_mode=True, oauth=True, redirect_url=url, continue_threads=True)
    )
    assert rendered["oauth_config"]["redirect_urls"] == [url]


def test_the_agent_view_carries_the_description_and_the_suggested_prompts() -> None:
    """New apps get `agent_view` with its description and the prompts of the setting (in
    YAML that parses back to them); off, the retiring `assistant_view`."""
    prompts = parse_prompts('["What can you do?", {"title": "Summarize", "message": "Sum up"}]')
    text = render_manifest(
        socket_mode=True, continue_threads=True, description="Helps the team.", prompts=prompts
    )
    assert yaml.safe_load(text)["features"]["agent_view"] == {
        "agent_description": "Helps the team.",
        "suggested_prompts": [
            {"title": "What can you do?", "message": "What can you do?"},
            {"title": "Summarize", "message": "Sum up"},
        ],
    }
    old = app_manifest(socket_mode=True, continue_threads=True, agent_view=False)
    assert old["features"]["assistant_view"] == {"assistant_description": DESCRIPTION}
    assert "agent_view" not in old["features"]


@pytest.mark.parametrize(
    "text",
    ["[1]", "{}", '["a", "b", "c", "d", "e"]', '[""]', '[{"title": "t"}]', "not json"],
)
def test_malformed_suggested_prompts_are_refused(text: str) -> None:
    """More than four prompts, an empty one, a wrong shape or no JSON: a ValueError (the
    setting's ConfigError), never a manifest Slack would refuse."""
    with pytest.raises(ValueError):
        parse_prompts(text)
