"""`search_workspace`: the agent's work tool over Slack's Real-time Search.

Offered while `THREADGATE_WORKSPACE_SEARCH` is on (a channel's policy withholds it like any
tool), also where it cannot search — a schedule's run has no person's permission — so that
what a conversation is offered, and with it its prompt epoch, does not change from one
message to the next; there a call is refused with a tool error that tells the model to say
in its reply that nothing was searched (gateway/slack/search.py has every refusal).

Where it looks follows who reads the answer. In a direct message with the bot: everything
the person may see (public and private channels, group DMs, DMs). Anywhere else only public
channels: a reply in a channel is read by everyone there, and the asker's private
conversations are not theirs to show. In a conversation shared with another organization
nothing is searched: the answer would show them this workspace's messages.

What it finds reaches the model as people's words: each message in its `<turn>` tag,
rendered (and its credentials redacted) as `read_thread` renders one, under a line with its
channel and its permalink, which the model may cite — the reply's Sources line links it
(agent/rounds/citations.py, gateway/delivery/sources.py). Nothing from Slack's answer is
outside a turn but what has the shape of an id, a channel name, a permalink or a cursor.
Nothing of it is kept (`keeps_output`): the stored tool call holds its size only, and a
round paused for approval a note in its place (agent/rounds/tools.py, pause.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent import ToolContext, Tracer, WorkTool
from gateway.slack.address import SlackAddress
from gateway.slack.search import Found, FoundMessage, SearchRefused, SearchRequest, WorkspaceSearch
from gateway.slack.threads import ThreadMessage, foreign, render_message
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics
from storage import Database, PostgresActionTokens

NAME = "search_workspace"
EVERYTHING = ("public_channel", "private_channel", "mpim", "im")
PUBLIC = ("public_channel",)
SHARED = "shared_conversation"


class SearchInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(
        min_length=1,
        max_length=500,
        description='What to look for, as words or a question ("launch date decision").',
    )
    limit: int = Field(default=10, ge=1, le=20, description="How many messages, at most 20.")
    cursor: str | None = Field(
        default=None,
        max_length=512,
        description="The cursor an earlier search_workspace gave, for its next results.",
    )


class SearchWorkspace(WorkTool[SearchInput]):
    """`search_workspace`: Slack messages outside this conversation, as the asker sees them."""

    name = NAME
    description = (
        "Search this Slack workspace's messages for what the person asking may see (Slack's "
        "search, as them). Outside a direct message with you only public channels are "
        "searched. Each message comes in its provenance tag with its link; cite a message by "
        'its link (citations: {"url": …}). Nothing found is kept after this answer.'
    )
    input_model = SearchInput
    shows_turns = True  # each message is a turn the gateway rendered
    keeps_output = False  # what Slack found is not stored (Slack's terms; invariant 13)

    def __init__(self, search: WorkspaceSearch) -> None:
        self._search = search

    async def execute(self, context: ToolContext, input: SearchInput) -> str:
        address = SlackAddress.parse(context.task.address)
        if address.shared:
            self._search.refused(SHARED)
            raise SearchRefused(
                SHARED,
                "search_workspace does not search from a conversation shared with another "
                "organization: the answer would show them this workspace's messages. Answer "
                "from what you have, and say in your reply that the workspace was not searched.",
            )
        types = EVERYTHING if address.is_dm else PUBLIC
        request = SearchRequest(input.query.strip(), types, input.limit, input.cursor)
        return render_found(await self._search.search(context.task, request), address)


def render_found(found: Found, address: SlackAddress) -> str:
    """What the model reads: each message under its channel and link, in its turn."""
    if not found.messages:
        return "No messages found. Try other words, or answer without a search."
    count = len(found.messages)
    lines = [f"Found {count} message{'' if count == 1 else 's'}, best match first:"]
    for number, message in enumerate(found.messages, start=1):
        lines += [_heading(number, message), _turn(message, address)]
    if found.next_cursor:
        lines.append(
            f'More results: call search_workspace again with cursor "{found.next_cursor}".'
        )
    return "\n".join(lines)


def _heading(number: int, message: FoundMessage) -> str:
    where = f"#{message.channel_name}" if message.channel_name else message.channel
    link = message.permalink or "no link"
    return f"[{number}] in {where}, link: {link}"


def _turn(message: FoundMessage, address: SlackAddress) -> str:
    external = message.team is not None and foreign(message.team, address.team, address.enterprise)
    as_read = ThreadMessage(message.user, message.text, message.ts, team=message.team)
    return render_message(as_read, message.channel, {message.user: message.name}, external=external)


def search_tool(
    clients: SlackClients, db: Database, *, call_seconds: float, metrics: Metrics, tracer: Tracer
) -> SearchWorkspace:
    """The tool for a workers' registry: each workspace's client, the tasks' tokens."""
    search = WorkspaceSearch(
        clients, PostgresActionTokens(db), call_seconds=call_seconds, metrics=metrics, tracer=tracer
    )
    return SearchWorkspace(search)
