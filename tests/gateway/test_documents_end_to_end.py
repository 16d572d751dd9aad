"""PDFs and pictures as each model takes them, through a real gateway (issue 35, item 2):
PDFs as document blocks to a provider that reads them (a scan included), their passages
cited by page in the Sources line, and a picture the provider refused remembered and never
sent again."""

from __future__ import annotations

import io
import json

from PIL import Image as PILImage

from tests.fakes.anthropic_api import AnthropicServer, Message, error_reply, page_citation
from tests.fakes.attachments import parts
from tests.fakes.openai_api import FakeToolCall, RecordedRequest, Reply
from tests.fakes.slack_events import DEFAULT_DM, event_callback, file_share_event, message_event
from tests.fakes.slack_permalinks import WORKSPACE_URL
from tests.gateway.rig import Rig
from tests.gateway.test_citations import block_text_of
from tests.gateway.test_files_end_to_end import png, text_pdf, user_texts
from tests.gateway.test_providers_end_to_end import anthropic_echo, anthropic_env


def scanned_pdf() -> bytes:
    """A one-page PDF that is only a picture: no text layer."""
    out = io.BytesIO()
    PILImage.new("RGB", (60, 40), (10, 120, 200)).save(out, "PDF")
    return out.getvalue()


async def test_pdfs_are_documents_a_scan_is_read_and_passages_are_cited_by_page(
    fresh_dsn: str,
) -> None:
    """Before: a scan was "not read: no text layer" and a PDF reached every model as its
    text only. Now, with a route that reads documents (Anthropic), both PDFs go as document
    blocks with their bytes — the text PDF's text layer left out of the turn, so it is read
    once — the scan's turn says it is attached, and the Sources line shows
    the passages cited — one the provider cited in its text (`page_location`), one the
    model cited in `final_reply` — as the document's name and page, linked to the message,
    with the cited text."""
    scan, report = scanned_pdf(), text_pdf("Revenue grew 12 percent")
    reply = Message(
        text="From the report:",
        citations=[page_citation("Revenue grew 12 percent", title="document 2", page=1)],
        tool_calls=[
            FakeToolCall(
                "final_reply",
                {
                    "text": "Revenue grew 12 percent; the scan shows a blue chart.",
                    "citations": [{"document": 1, "page": 1, "quote": "a blue chart"}],
                },
                "toolu_1",
            )
        ],
    )
    async with AnthropicServer() as claude:
        claude.script(reply)
        async with Rig(fresh_dsn, overrides=anthropic_env(claude)) as rig:
            files = [
                rig.slack.files.add_file("scan.pdf", scan, mimetype="application/pdf"),
                rig.slack.files.add_file("q3.pdf", report, mimetype="application/pdf"),
            ]
            event = file_share_event(text="what do these say?", files=files)
            rig.slack.seed_message(DEFAULT_DM, event["ts"], event["user"], event["text"])
            await rig.send(event_callback(event))
            [post] = await rig.slack.wait_for_posts(1)
            stored = await rig.db.pool.fetchval(
                "SELECT citations FROM messages WHERE kind = 'reply'"
            )
            stored_turn = await rig.db.pool.fetchval(
                "SELECT text FROM messages WHERE kind = 'turn'"
            )
    [request] = claude.requests
    assert request.documents() == [("document 1", scan), ("document 2", report)]
    turn = user_texts(request)[-1]
    assert '[document "scan.pdf"' in turn and "no text layer" not in turn
    # Read once: as the document, not also as its text layer in the turn (issue 47 item 10)
    assert "Revenue grew 12 percent" not in turn and '[file "q3.pdf"' in turn
    assert "Revenue grew 12 percent" in stored_turn  # kept for a model that reads no PDFs
    link = f"{WORKSPACE_URL}/archives/{DEFAULT_DM}/p{event['ts'].replace('.', '')}"
    sources = block_text_of(post.blocks)
    host = "(threadgate-test.slack.com)"  # a label that is not the host gets it after the link
    assert f"[scan.pdf, page 1](<{link}>) {host} “a blue chart”" in sources
    assert f"[q3.pdf, page 1](<{link}>) {host} “Revenue grew 12 percent”" in sources
    assert {"document": "scan.pdf", "page": 1, "quote": "a blue chart"}.items() <= (
        json.loads(stored)[0].items()
    )


async def test_a_route_that_reads_no_documents_stores_no_pdf(rig: Rig) -> None:
    """The rig's route (an OpenAI-compatible server elsewhere) reads no document parts:
    the PDF's text goes in the turn as before, and its bytes are not kept."""
    file = rig.slack.files.add_file(
        "q3.pdf", text_pdf("Revenue grew 12 percent"), mimetype="application/pdf"
    )
    await rig.send(event_callback(file_share_event(files=[file])))
    await rig.slack.wait_for_posts(1)
    assert rig.model.requests[-1].documents() == []
    assert await rig.count("message_attachments") == 0


def refuse_the_picture(seen: RecordedRequest) -> Reply:
    """Anthropic's 400 for a picture over its size limit, naming where the picture is."""
    [picture] = [p for p in parts(seen.body) if p.media_type.startswith("image/")]
    where = f"messages.{picture.message}.content.{picture.index}"
    return error_reply(400, message=f"{where}.image.source.base64: image exceeds 5 MB maximum")


async def test_a_picture_the_provider_refused_is_never_sent_again(fresh_dsn: str) -> None:
    """Before: the refused picture went with every later request of the thread, and each
    of them failed. Now the first request's 400 names it: the round is answered without
    it, it is marked in Postgres, and the next message's request carries no picture, its
    turn saying the picture was not shown and why — one 400 in all."""
    async with AnthropicServer() as claude:
        claude.script(refuse_the_picture)
        claude.default = anthropic_echo
        async with Rig(fresh_dsn, overrides=anthropic_env(claude)) as rig:
            file = rig.slack.files.add_file("huge.png", png(), mimetype="image/png")
            await rig.send(event_callback(file_share_event(text="look", files=[file])))
            await rig.slack.wait_for_posts(1)
            later = message_event(text="and now?", channel=DEFAULT_DM, channel_type="im")
            await rig.send(event_callback(later))
            await rig.slack.wait_for_posts(2)
            refused_by = await rig.db.pool.fetchval(
                "SELECT refused_by FROM message_attachments WHERE refused_at IS NOT NULL"
            )
    refused, retried, next_message = claude.requests
    assert len(refused.images()) == 1 and retried.images() == next_message.images() == []
    assert refused_by == "anthropic:claude-test"
    for request in (retried, next_message):
        told = user_texts(request)[0]
        assert (
            'the picture "huge.png"' in told and "the provider refused it: it is too large" in told
        )
