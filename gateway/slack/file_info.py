"""Files Slack gives only by id: their description, read with `files.info`.

In some channels (Slack Connect's among them) a message event's `files` holds, for each
file, a partial object — `{"id": "F…", "mode": "file_access", "file_access":
"check_file_info"}` — with no name, type or URL. Slack's answer is to ask `files.info`
(scope `files:read`, the one the downloads need) for the whole file object, which is then
read like any other (`gateway.slack.events.shared_files`' rules: the same leniency, the
same sanitizing). The look-up shares the pre-ack deadline of the message's other
look-ups; a file Slack does not describe (refused, failed, or not in time) stays a file
without a name, and the reader says why it was not read.
"""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.errors import SlackError
from gateway.slack.events import SharedFile, shared_files


class FileInfo:
    """`files.info` with one workspace's client."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def describe(self, shared: SharedFile, deadline: float) -> SharedFile | None:
        """The file as `files.info` describes it (`shared` itself if Slack described it
        already); None if Slack did not, by `deadline` (event-loop time)."""
        if shared.info_id is None:
            return shared
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client.files_info(file=shared.info_id)
        except (SlackError, TimeoutError):
            return None
        described = shared_files([response.get("file")])
        if not described or (described[0].name is None and described[0].url is None):
            return None  # no file object, or a partial one again
        return described[0]
