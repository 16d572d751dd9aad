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

For many workspaces (`oauth`: SLACK_CLIENT_ID is set) the manifest adds what the install
flow needs: the redirect URL (`THREADGATE_OAUTH_REDIRECT_URL`) in
`oauth_config.redirect_urls`, the `app_uninstalled` and `tokens_revoked` events (an
uninstall stops that workspace's tasks), and `org_deploy_enabled` (Enterprise Grid
org-wide installs). Public distribution itself is switched on in the app's settings
("Manage Distribution"): the manifest schema has no field for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from gateway.slack.scopes import UNINSTALL_EVENTS, bot_events, bot_scopes

APP_NAME = "threadgate"
EVENTS_PATH = "/slack/events"
PLACEHOLDER_URL = f"https://threadgate.example.com{EVENTS_PATH}"
DESCRIPTION = "An LLM agent that answers in Slack threads."


def app_manifest(
    *,
    socket_mode: bool,
    request_url: str = PLACEHOLDER_URL,
    continue_threads: bool,
    oauth: bool = False,
    redirect_url: str | None = None,
) -> dict[str, Any]:
    """The manifest as data: Socket Mode, or HTTP events delivered to `request_url`; the
    events and scopes are those the settings need (`THREADGATE_CONTINUE_THREADS`); with
    `oauth` (or a `redirect_url`), what installing in many workspaces needs."""
    oauth = oauth or redirect_url is not None
    subscribed = bot_events(continue_threads=continue_threads)
    events: dict[str, Any] = {
        "bot_events": list(subscribed + UNINSTALL_EVENTS if oauth else subscribed)
    }
    scopes: dict[str, Any] = {
        "scopes": {"bot": list(bot_scopes(continue_threads=continue_threads))}
    }
    if not socket_mode:
        events = {"request_url": request_url, **events}
    return {
        "_metadata": {"major_version": 2, "minor_version": 1},
        "display_information": {"name": APP_NAME, "description": DESCRIPTION},
        "features": {
            "app_home": {
                "home_tab_enabled": False,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": APP_NAME, "always_online": True},
            "assistant_view": {"assistant_description": DESCRIPTION},
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
) -> str:
    """The manifest as YAML text, exactly what `threadgate manifest` prints."""
    manifest = app_manifest(
        socket_mode=socket_mode,
        request_url=request_url,
        continue_threads=continue_threads,
        oauth=oauth,
        redirect_url=redirect_url,
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
    return [f"{' ' * indent}- {_yaml_scalar(item)}" for item in items]


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"no YAML form for {type(value).__name__}")
