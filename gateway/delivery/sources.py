"""The Sources line under a reply: what the model cited, as links that show where they go.

A reply's citations (agent/core/citations.py) are messages of the conversation, by their
stored id, and URLs the model was shown. Under the reply they become one Markdown line,

    **Sources:** [message 1](<https://acme.slack.com/archives/C1/p1700000000000100>) · [example.com](<https://example.com/a>)

A passage of a document a person attached links to the message it came with, labelled
with the document's name and its pages, the cited text after it in quotes:
`[report.pdf, pages 3–4](<permalink>) “the cited sentence”` — the text the provider
cited, or else the quote the model wrote, marked when it was not found on the page it
cites: `“a sentence” (not found on page 3)` (the name and the quote are the sender's and
the model's text: the renderer treats them as words, never as a link).

A cited message links to its permalink (`chat.getPermalink`); when Slack does not give one
(a refusal, a timeout, a message it cannot find) the link is built the way Slack's own
permalinks are, `https://slack.com/archives/{channel}/p{ts without the dot}`, which Slack
redirects to the workspace. The message's Slack ts comes from its id for a person's turn
(`task:{team}:{channel}:{ts}:user`, back-filled `slack:{team}:{channel}:{ts}`) and from
the outbox for one of our posts (its row keeps the ts). A citation we cannot place is left
out rather than shown as a broken link.

The line is appended to the reply's Markdown *before* it is rendered (gateway/text/rendering.py),
so it goes through the same honest-link and no-ping rules as the model's own text: a URL's
label is its host, and the renderer keeps a label only when it names the host the link
opens. Destinations are written in angle brackets, so a `)` in a URL cannot end the link
early; the model's URLs cannot contain `<`, `>` or whitespace (agent/rounds/citations.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from slack_sdk.web.async_client import AsyncWebClient

from agent import Citation
from gateway.slack.errors import SlackError, slack_deadline
from storage import Outbox, StorageError

log = logging.getLogger(__name__)

_PERSON = re.compile(
    r"(?:task:[^:]+:(?P<c1>[^:]+):(?P<t1>\d+\.\d+):user|slack:[^:]+:(?P<c2>[^:]+):(?P<t2>\d+\.\d+))"
)
_OURS = re.compile(r"task:[^:]+:(?P<channel>[^:]+):\d+\.\d+:(?:reply|ack:\d+)")
_UNSAFE = re.compile(r"[<>\s]")
# Markdown that could end a link's label or start markup in a name or a quote.
_MARKUP = re.compile(r"[\[\]()<>`*_~|\\]")
SEPARATOR = " · "


def passage_link(citation: Citation, url: str) -> str:
    """`[name, pages P–Q](<url>) “quote”`, the name and quote made plain words: no bracket,
    backtick or line break of theirs can end the label or open markup."""
    name = _plain(citation.document or "document", 80)
    first, last = citation.page, citation.last_page
    pages = f"page {first}" if last == first else f"pages {first}–{last}"
    link = f"[{name}, {pages}](<{url}>)"
    quoted = citation.cited_text or citation.quote
    if not quoted or not _plain(quoted, 200):
        return link
    shown = f"{link} “{_plain(quoted, 200)}”"
    if citation.cited_text is None and citation.quote_found is False:
        shown += f" (not found on page {first})"
    return shown


def _plain(text: str, limit: int) -> str:
    words = " ".join(_MARKUP.sub(" ", text).split())
    return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"


def fallback_permalink(channel: str, ts: str) -> str:
    """The archive link Slack's permalinks have, from the channel and ts alone."""
    return f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"


def backing(citation: Citation) -> str:
    """What backs a cited passage's text, as `threadgate_cited_passages_total` counts it."""
    if citation.cited_text:
        return "provider"
    if not citation.quote:
        return "none"
    return {True: "found", False: "not_found", None: "unknown"}[citation.quote_found]


class SourceLinks:
    """Turns citations into the Sources line (module docstring); each passage shown is
    told to `on_passage` (what backs its text: `backing`)."""

    def __init__(
        self,
        outbox: Outbox,
        *,
        call_seconds: float,
        on_passage: Callable[[str], None] = lambda backed_by: None,
    ) -> None:
        self._outbox = outbox
        self._call_seconds = call_seconds
        self._on_passage = on_passage

    async def line(self, citations: Sequence[Citation], client: AsyncWebClient) -> str:
        """The Sources line in Markdown, or "" when nothing cited can be shown; permalinks
        are asked with `client`, the task's workspace's."""
        links: list[str] = []
        messages = 0
        for citation in citations:
            if citation.url is not None and not _UNSAFE.search(citation.url):
                host = urlsplit(citation.url).hostname or citation.url
                links.append(f"[{host}](<{citation.url}>)")
            elif citation.message_id is not None and citation.page is not None:
                url = await self._message_link(citation.message_id, client)
                if url is not None:
                    links.append(passage_link(citation, url))
                    self._on_passage(backing(citation))
            elif citation.message_id is not None:
                url = await self._message_link(citation.message_id, client)
                if url is not None:
                    messages += 1
                    links.append(f"[message {messages}](<{url}>)")
        return f"**Sources:** {SEPARATOR.join(links)}" if links else ""

    async def _message_link(self, message_id: str, client: AsyncWebClient) -> str | None:
        where = await self._locate(message_id)
        if where is None:
            log.info("cited message %s has no Slack message to link to", message_id)
            return None
        channel, ts = where
        try:
            async with slack_deadline("chat.getPermalink", self._call_seconds):
                response = await client.chat_getPermalink(channel=channel, message_ts=ts)
            permalink = response.get("permalink")
        except SlackError as exc:
            log.info(
                "chat.getPermalink failed for %s/%s (%s); using the archive link", channel, ts, exc
            )
            permalink = None
        if (
            isinstance(permalink, str)
            and permalink.startswith("https://")
            and not _UNSAFE.search(permalink)
        ):
            return permalink
        return fallback_permalink(channel, ts)

    async def _locate(self, message_id: str) -> tuple[str, str] | None:
        """The channel and ts of the Slack message a stored message is."""
        if person := _PERSON.fullmatch(message_id):
            return person["c1"] or person["c2"], person["t1"] or person["t2"]
        if ours := _OURS.fullmatch(message_id):
            try:
                shown = await self._outbox.shown_at(message_id)
            except StorageError:
                return None
            if shown is not None and shown[1]:
                return ours["channel"], shown[1]
        return None
