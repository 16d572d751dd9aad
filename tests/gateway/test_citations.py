"""A reply's citations, end to end: a Sources line under the reply, with links that show
where they go and cannot ping (issue 12, item 6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import Citation, UserMessage
from agent.rounds.citations import Citable
from gateway.delivery.sources import SourceLinks, passage_link
from gateway.slack.client import slack_client
from gateway.text.rendering import render_reply
from storage import Database, Outbox
from tests.fakes.openai_api import reply_with_tool
from tests.fakes.slack_events import DEFAULT_CHANNEL, app_mention_event, event_callback
from tests.fakes.slack_permalinks import WORKSPACE_URL
from tests.gateway.rig import STREAMING, Rig
from tests.gateway.test_rendering import FORBIDDEN, PING, block_text


async def test_a_cited_message_links_to_its_permalink(rig: Rig) -> None:
    """{"ref": 1} under the reply is the cited message's permalink from chat.getPermalink."""
    event = app_mention_event(text="<@UBOT> the plan is in the doc")
    rig.slack.seed_message(DEFAULT_CHANNEL, event["ts"], event["user"], event["text"])
    rig.model.script(reply_with_tool("final_reply", {"text": "Noted.", "citations": [{"ref": 1}]}))
    await rig.send(event_callback(event))
    [post] = await rig.slack.wait_for_posts(1)
    link = f"{WORKSPACE_URL}/archives/{DEFAULT_CHANNEL}/p{event['ts'].replace('.', '')}"
    assert post.text.startswith("Noted.") and "Sources:" in post.text
    assert f"(<{link}>)" in block_text_of(post.blocks)
    stored = await rig.db.pool.fetchval("SELECT citations FROM messages WHERE kind = 'reply'")
    assert '"message"' in stored


async def test_a_cited_reply_of_ours_links_to_the_post(rig: Rig) -> None:
    """Our own earlier reply is found through its outbox row (the post's ts)."""
    rig.model.script(
        reply_with_tool("final_reply", {"text": "First answer."}),
        reply_with_tool("final_reply", {"text": "As I said.", "citations": [{"ref": 2}]}),
    )
    first = app_mention_event(text="<@UBOT> one")
    await rig.send(event_callback(first))
    [answer] = await rig.slack.wait_for_posts(1)
    await rig.send(event_callback(app_mention_event(text="<@UBOT> two", thread_ts=first["ts"])))
    posts = await rig.slack.wait_for_posts(2)
    link = f"{WORKSPACE_URL}/archives/{DEFAULT_CHANNEL}/p{answer.ts.replace('.', '')}"
    assert f"(<{link}?thread_ts={first['ts']}&cid={DEFAULT_CHANNEL}>)" in block_text_of(
        posts[1].blocks
    )


async def test_without_a_permalink_the_archive_link_stands_in(rig: Rig) -> None:
    """When chat.getPermalink fails, the link is built from the channel and the ts."""
    event = app_mention_event(text="<@UBOT> hello")
    rig.slack.refuse("chat.getPermalink", "message_not_found")
    rig.model.script(reply_with_tool("final_reply", {"text": "Hi.", "citations": [{"ref": 1}]}))
    await rig.send(event_callback(event))
    [post] = await rig.slack.wait_for_posts(1)
    fallback = f"https://slack.com/archives/{DEFAULT_CHANNEL}/p{event['ts'].replace('.', '')}"
    assert f"(<{fallback}>)" in block_text_of(post.blocks)


async def test_an_invalid_citation_is_repaired_then_the_reply_posted(rig: Rig) -> None:
    """A URL the model was never shown goes back to it as a failed call; its next, valid
    reply is posted with the URL it was shown."""
    rig.model.script(
        reply_with_tool(
            "final_reply", {"text": "See x.", "citations": [{"url": "https://evil.example/"}]}
        ),
        reply_with_tool(
            "final_reply",
            {"text": "See the docs.", "citations": [{"url": "https://docs.example/guide"}]},
        ),
    )
    await rig.send(
        event_callback(app_mention_event(text="<@UBOT> read https://docs.example/guide please"))
    )
    [post] = await rig.slack.wait_for_posts(1)
    feedback = rig.model.requests[1].body["messages"][-1]
    assert feedback["role"] == "tool" and "did not appear" in feedback["content"]
    assert "https://docs.example/guide" in feedback["content"]
    assert "[docs.example](<https://docs.example/guide>)" in block_text_of(post.blocks)
    assert "evil.example" not in post.text


@pytest.mark.rig(overrides=STREAMING)
async def test_a_streamed_reply_gets_its_sources_with_the_stop(rig: Rig) -> None:
    """The reply streams as written; the Sources line arrives with chat.stopStream."""
    rig.model.script(
        reply_with_tool(
            "final_reply",
            {"text": "Streamed answer.", "citations": [{"url": "https://docs.example/a"}]},
        )
    )
    await rig.send(event_callback(app_mention_event(text="<@UBOT> see https://docs.example/a")))
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.text.startswith("Streamed answer.")
    assert done.text.endswith("**Sources:** [docs.example](<https://docs.example/a>)")
    assert rig.slack.posts == [] and rig.slack.calls_to("chat.update") == []


def block_text_of(blocks: object) -> str:
    assert isinstance(blocks, list)
    return "".join(str(b.get("text", "")) for b in blocks)


# What a hostile page or message could put around a URL the model then cites.
hostile = st.text(alphabet="ab.:/?#&=@!<>|()[]*_~ \n`\\", max_size=40)


@given(st.lists(hostile, min_size=1, max_size=4), st.text(max_size=60))
async def test_no_sources_line_can_ping(shown: list[str], reply: str) -> None:
    """Whatever URLs the model was shown and cites, the Sources line under its reply holds
    nothing Slack could turn into a ping or a mention."""
    seen = Citable()
    seen.note([UserMessage(f"https://{piece} https://@here.{piece}") for piece in shown])
    citations = [Citation(url=url) for url in sorted(seen.urls)]
    links = SourceLinks(
        Outbox(Database("postgresql://unused"), call_seconds=1, settle_seconds=1),
        call_seconds=1,
    )
    line = await links.line(citations, slack_client(None, "http://127.0.0.1:9/", timeout=15))
    for message in render_reply(f"{reply}\n\n{line}" if line else reply):
        assert PING.search(block_text(message)) is None
        assert PING.search(message.text) is None
        assert not any(sequence in message.text for sequence in FORBIDDEN)


async def test_a_url_only_the_bot_wrote_is_no_source(rig: Rig) -> None:
    """The bot's first answer mentions a URL; citing it in the thread's next answer is
    refused (it appeared in nothing anyone else wrote), and the repaired reply is posted."""
    rig.model.script(
        reply_with_tool("final_reply", {"text": "It is at https://made.up/claim."}),
        reply_with_tool(
            "final_reply", {"text": "As I said.", "citations": [{"url": "https://made.up/claim"}]}
        ),
        reply_with_tool("final_reply", {"text": "As I said, without a source."}),
    )
    first = app_mention_event(text="<@UBOT> where is it?")
    await rig.send(event_callback(first))
    await rig.slack.wait_for_posts(1)
    await rig.send(event_callback(app_mention_event(text="<@UBOT> sure?", thread_ts=first["ts"])))
    posts = await rig.slack.wait_for_posts(2)
    feedback = rig.model.requests[2].body["messages"][-1]
    assert feedback["role"] == "tool" and "did not appear" in feedback["content"]
    assert posts[1].text.startswith("As I said, without a source.")
    assert "Sources:" not in posts[1].text


@given(
    st.text(alphabet="ab.:/<>|()[]*_~\n`\\“”@!", max_size=80),
    st.text(alphabet="ab.:/<>|()[]*_~\n`\\“”@!", max_size=80),
    st.sampled_from([True, False, None]),
    st.integers(min_value=1, max_value=3),
)
def test_a_cited_passage_is_one_link_whatever_its_text(
    cited_text: str, quote: str, found: bool | None, pages: int
) -> None:
    """Whatever text the provider cited and the model quoted, a passage renders as one
    link to its message, labelled with the document and its pages, with nothing Slack
    could turn into a ping; the note of a quote not found follows the quote only."""
    citation = Citation(
        message_id="task:T1:C1:1.0:user",
        document="q3.pdf",
        page=2,
        end_page=2 + pages,
        cited_text=cited_text or None,
        quote=quote or None,
        quote_found=found,
    )
    link = passage_link(citation, "https://acme.slack.com/archives/C1/p1000")
    label = "page 2" if pages == 1 else f"pages 2–{1 + pages}"
    assert link.startswith(f"[q3.pdf, {label}](<https://acme.slack.com/archives/C1/p1000>)")
    assert link.count("](<") == 1
    assert link.endswith(" (not found on page 2)") == (
        not cited_text and found is False and bool(passage_link(citation, "u").count("“"))
    )
    for message in render_reply(f"Answer.\n\n**Sources:** {link}"):
        assert PING.search(block_text(message)) is None
        assert not any(sequence in message.text for sequence in FORBIDDEN)
