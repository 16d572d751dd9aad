"""The DM with the app opened: Slack's agent experience offers its suggested prompts there.

In the agent messaging experience (the manifest's `agent_view`) the conversation with the
app is its classic Messages tab, and `app_home_opened` with `tab: "messages"` says someone
opened it (it replaces the assistant experience's `assistant_thread_started`). The prompts
of `THREADGATE_SUGGESTED_PROMPTS` are set for that DM with
`assistant.threads.setSuggestedPrompts` — without a `thread_ts`, which Slack's reference
says makes the call silently fail for an agent app. Display only, before the ack and within
the look-up budget: a failure or a slow Slack is logged, never an error for the event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal, TypeAlias

from gateway.slack.errors import SlackError
from gateway.slack.events import MessagesOpened
from gateway.slack.manifest import SuggestedPrompt
from gateway.slack.workspaces import SlackClients

log = logging.getLogger(__name__)

HomeOutcome: TypeAlias = Literal["prompts_offered", "ignored"]


class AppHome:
    """Offers the suggested prompts in the DM someone opened (module docstring)."""

    def __init__(
        self,
        clients: SlackClients,
        prompts: Sequence[SuggestedPrompt],
        *,
        budget_seconds: float,
    ) -> None:
        self._clients = clients
        self._prompts = [p.as_slack() for p in prompts]
        self._budget = budget_seconds

    async def opened(self, home: MessagesOpened) -> HomeOutcome:
        if not self._prompts:
            return "ignored"
        try:
            async with asyncio.timeout(self._budget):
                client = await self._clients.for_team(home.team, home.enterprise)
                await client.assistant_threads_setSuggestedPrompts(
                    channel_id=home.channel, prompts=self._prompts
                )
        except (SlackError, TimeoutError) as exc:
            log.info("suggested prompts for %s not set: %s", home.channel, exc or "too slow")
            return "ignored"
        return "prompts_offered"
