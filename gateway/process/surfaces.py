"""The app's surfaces besides messages, built for an ingress: the slash command and the
App Home (issue 45). Each is a feature of its own (gateway/inbound/slash.py,
gateway/inbound/home_tab.py); this module only hands them what they need from `Resources`.
"""

from __future__ import annotations

import functools

from gateway.inbound.home_tab import HomeTab
from gateway.inbound.slash import SlashCommands, SlashSettings
from gateway.process.channel_policies import limits
from gateway.process.resources import Resources
from gateway.slack.responses import post_response


def slash_commands(r: Resources) -> SlashCommands:
    """The slash command, gated as messages are (allowlists, limits, Slack Connect)."""
    s = r.settings
    settings = SlashSettings(
        command=s.assistant.slash_command,
        budget_seconds=s.process.lookup_budget_seconds,
        rules=r.policies.rules_of,
        allowed_users=s.access.allowed_users,
        allowed_channels=s.access.allowed_channels,
        limits=limits(s),
        approvers=s.tools.approvers,
    )
    return SlashCommands(
        settings,
        r.db,
        r.clients,
        metrics=r.metrics,
        supervisor=r.supervisor,
        post_late=functools.partial(post_response, api_url=s.slack.api_url),
    )


def home_tab(r: Resources) -> HomeTab:
    """The App Home, kept current every THREADGATE_HOME_REFRESH_SECONDS."""
    return HomeTab(
        r.db,
        r.clients,
        command=r.settings.assistant.slash_command,
        metrics=r.metrics,
        supervisor=r.supervisor,
        refresh_seconds=r.settings.assistant.home_refresh_seconds,
    )
