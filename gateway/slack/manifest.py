"""The Slack app manifest for threadgate, built from the scopes and events the code uses.

Creating a Slack app by clicking through its settings pages is where deployments drift
from the code: a scope forgotten, an event not subscribed. `threadgate manifest` prints
the whole app instead, for "Create New App → From an app manifest", and the files in
`manifests/` are this output committed (a test keeps them equal). What the app subscribes
to follows the settings (see `gateway.slack.scopes`), so the manifest is printed for them; the
committed copies are for the defaults.

The output is YAML, which Slack's manifest editor shows by default. It is written by a
tiny emitter rather than a YAML library: the document is a fixed shape of mappings, lists,
strings and booleans, and every string is double-quoted in JSON syntax (a subset of YAML's
double-quoted style), so nothing a value contains can change the structure.

Workspace search (`THREADGATE_WORKSPACE_SEARCH`) adds Real-time Search's scopes
(`search:read.*`, gateway/slack/scopes.py); the committed copies, for the defaults, have none.

Every manifest subscribes to `app_uninstalled` and `tokens_revoked`: an uninstall stops
that workspace's tasks and erases what was stored of it (gateway/slack/uninstall.py), with
one workspace as with many. For many workspaces (`oauth`: SLACK_CLIENT_ID is set) the
manifest adds what the install flow needs: the redirect URL
(`THREADGATE_OAUTH_REDIRECT_URL`) in `oauth_config.redirect_urls` and
`org_deploy_enabled` (Enterprise Grid org-wide installs). Public distribution itself is
switched on in the app's settings
("Manage Distribution"): the manifest schema has no field for it.

Every manifest declares the slash command (`THREADGATE_SLASH_COMMAND`, `/threadgate` by
default; its request URL the events URL in HTTP mode, none in Socket Mode, where it comes
over the WebSocket) and enables the App Home tab (`home_tab_enabled`, for
`app_home_opened` with `tab: "home"`): gateway/inbound/slash.py, gateway/inbound/home_tab.py.

New apps get Slack's agent messaging experience (`agent_view`, with `agent_description`
and the suggested prompts of `THREADGATE_SUGGESTED_PROMPTS`) rather than the
`assistant_view` Slack is retiring; `THREADGATE_AGENT_VIEW=false` keeps the latter for an
app still on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway.slack.commands import DEFAULT_SLASH_COMMAND
from gateway.slack.scopes import UNINSTALL_EVENTS, bot_events, bot_scopes
from gateway.slack.shortcut import manifest_shortcut

APP_NAME = "threadgate"
EVENTS_PATH = "/slack/events"
PLACEHOLDER_URL = f"https://threadgate.example.com{EVENTS_PATH}"
DESCRIPTION = "An LLM agent that answers in Slack threads."


# Slack shows at most four suggested prompts (assistant.threads.setSuggestedPrompts).
MAX_PROMPTS = 4


@dataclass(frozen=True, slots=True)
class SuggestedPrompt:
    """A prompt Slack offers in the DM with the app: its button's title, the message sent."""

    title: str
    message: str

    def as_slack(self) -> dict[str, str]:
        return {"title": self.title, "message": self.message}


def parse_prompts(text: str) -> tuple[SuggestedPrompt, ...]:
    """THREADGATE_SUGGESTED_PROMPTS: a JSON array of at most four prompts, each a string
    (its own title) or `{"title": …, "message": …}`; empty text is none. ValueError says
    what is wrong."""
    if not text.strip():
        return ()
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise ValueError("expected a JSON array of prompts") from exc
    if not isinstance(entries, list) or len(entries) > MAX_PROMPTS:
        raise ValueError(f"expected a JSON array of at most {MAX_PROMPTS} prompts")
    return tuple(map(_prompt, entries))


def _prompt(entry: Any) -> SuggestedPrompt:
    if isinstance(entry, str) and entry.strip():
        return SuggestedPrompt(entry.strip(), entry.strip())
    if isinstance(entry, dict) and set(entry) == {"title", "message"}:
        title, message = entry["title"], entry["message"]
        if isinstance(title, str) and isinstance(message, str) and title.strip() and message:
            return SuggestedPrompt(title.strip(), message)
    raise ValueError('each prompt must be a text or {"title": …, "message": …}, not empty')


def app_manifest(
    *,
    socket_mode: bool,
    request_url: str = PLACEHOLDER_URL,
    continue_threads: bool,
    oauth: bool = False,
    redirect_url: str | None = None,
    agent_view: bool = True,
    description: str = DESCRIPTION,
    prompts: Sequence[SuggestedPrompt] = (),
    workspace_search: bool = False,
    slash_command: str = DEFAULT_SLASH_COMMAND,
) -> dict[str, Any]:
    """The manifest as data: Socket Mode, or HTTP events delivered to `request_url`; the
    events and scopes are those the settings need (`THREADGATE_CONTINUE_THREADS`); with
    `oauth` (or a `redirect_url`), what installing in many workspaces needs; Slack's agent
    experience (`agent_view`, with its description and suggested prompts) unless
    `agent_view` is off (the retiring `assistant_view`); the search scopes with
    `workspace_search`; the slash command `slash_command`."""
    oauth = oauth or redirect_url is not None
    subscribed = bot_events(continue_threads=continue_threads)
    events: dict[str, Any] = {"bot_events": list(subscribed + UNINSTALL_EVENTS)}
    scopes: dict[str, Any] = {
        "scopes": {
            "bot": list(
                bot_scopes(continue_threads=continue_threads, workspace_search=workspace_search)
            )
        }
    }
    if not socket_mode:
        events = {"request_url": request_url, **events}
    return {
        "_metadata": {"major_version": 2, "minor_version": 1},
        "display_information": {"name": APP_NAME, "description": DESCRIPTION},
        "features": {
            "app_home": {
                "home_tab_enabled": True,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": APP_NAME, "always_online": True},
            # "Ask threadgate about this message" (gateway/slack/shortcut.py).
            "shortcuts": [manifest_shortcut()],
            "slash_commands": [_slash_command(slash_command, socket_mode, request_url)],
            **_experience(agent_view, description, prompts),
        },
        "oauth_config": {"redirect_urls": [redirect_url], **scopes} if redirect_url else scopes,
        "settings": {
            "event_subscriptions": events,
            # Clicks on approval and feedback buttons come where events do (over the
            # WebSocket in Socket Mode): gateway/inbound/interactions.py.
            "interactivity": {
                "is_enabled": True,
                **({} if socket_mode else {"request_url": request_url}),
            },
            "org_deploy_enabled": oauth,
            "socket_mode_enabled": socket_mode,
            "token_rotation_enabled": False,
        },
    }


def _slash_command(name: str, socket_mode: bool, request_url: str) -> dict[str, Any]:
    """The slash command's entry: in HTTP mode Slack posts it to the events URL."""
    entry: dict[str, Any] = {
        "command": name,
        "description": "What threadgate is doing for you: status, stop, new, usage, schedules",
        "usage_hint": "[help | status | stop | new | usage | schedules [delete ID]]",
        "should_escape": False,
    }
    return entry if socket_mode else {**entry, "url": request_url}


def _experience(
    agent_view: bool, description: str, prompts: Sequence[SuggestedPrompt]
) -> dict[str, Any]:
    """The manifest's `agent_view`, or (off) the retiring `assistant_view`."""
    if not agent_view:
        return {"assistant_view": {"assistant_description": description}}
    view: dict[str, Any] = {"agent_description": description}
    if prompts:
        view["suggested_prompts"] = [p.as_slack() for p in prompts]
    return {"agent_view": view}


def events_url(url: str) -> str:
    """The request URL for `--http URL`: an https URL, `/slack/events` added to a bare host."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.netloc:
        raise ValueError(f"Slack delivers events only to an https:// URL, not {url!r}")
    if parts.path in ("", "/"):
        return parts._replace(path=EVENTS_PATH).geturl()
    return url


def render_manifest(
    *,
    socket_mode: bool,
    request_url: str = PLACEHOLDER_URL,
    continue_threads: bool,
    oauth: bool = False,
    redirect_url: str | None = None,
    agent_view: bool = True,
    description: str = DESCRIPTION,
    prompts: Sequence[SuggestedPrompt] = (),
    workspace_search: bool = False,
    slash_command: str = DEFAULT_SLASH_COMMAND,
) -> str:
    """The manifest as YAML text, exactly what `threadgate manifest` prints."""
    manifest = app_manifest(
        socket_mode=socket_mode,
        request_url=request_url,
        continue_threads=continue_threads,
        oauth=oauth,
        redirect_url=redirect_url,
        agent_view=agent_view,
        description=description,
        prompts=prompts,
        workspace_search=workspace_search,
        slash_command=slash_command,
    )
    return "\n".join(_yaml_mapping(manifest, 0)) + "\n"


def _yaml_mapping(mapping: Mapping[str, Any], indent: int) -> list[str]:
    lines = []
    pad = " " * indent
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            lines += [f"{pad}{key}:", *_yaml_mapping(value, indent + 2)]
        elif isinstance(value, Sequence) and not isinstance(value, str):
            lines += [f"{pad}{key}:", *_yaml_list(value, indent + 2)]
        else:
            lines.append(f"{pad}{key}: {_yaml_scalar(value)}")
    return lines


def _yaml_list(items: Sequence[Any], indent: int) -> list[str]:
    lines: list[str] = []
    for item in items:
        if isinstance(item, Mapping):  # a list of mappings: `- key: value`, then the rest
            first, *rest = _yaml_mapping(item, indent + 2)
            lines += [f"{' ' * indent}- {first.lstrip()}", *rest]
        else:
            lines.append(f"{' ' * indent}- {_yaml_scalar(item)}")
    return lines


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"no YAML form for {type(value).__name__}")
