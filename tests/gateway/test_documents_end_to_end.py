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
from tests.fakes.crafted_files import pdf_of
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


def two_page_pdf(first: str, second: str) -> bytes:
    """A two-page PDF whose pages' text layers say `first` and `second` (ASCII, no
    parentheses)."""
    streams = [f"BT /F1 12 Tf 72 720 Td ({t}) Tj ET".encode() for t in (first, second)]
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
        *(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 7 0 R >> >> >>" % n
            for n in (5, 6)
        ),
        *(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(s), s) for s in streams),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return pdf_of(objects)


async def test_citations_keep_their_pages_the_providers_text_and_whether_a_quote_was_found(
    fresh_dsn: str,
) -> None:
    """Before: a provider citation kept its first page only and its text re-spaced, and a
    quote the model made up was shown like one it read. Now, through a real gateway: the
    provider's passage over pages 1 to 2 is stored with its range and its text verbatim
    and shown as "pages 1–2"; the model's quote found on page 2 is shown as is, and one
    that is not on page 1 is stored and shown as not found there."""
    report = two_page_pdf("Revenue grew 12 percent", "Costs fell 3 percent")
    cited = "Revenue grew 12 percent\n\nCosts fell 3 percent"
    reply = Message(
        text="Growth, and savings:",
        citations=[page_citation(cited, title="document 1", page=1, last_page=2)],
        tool_calls=[
            FakeToolCall(
                "final_reply",
                {
                    "text": "Revenue grew and costs fell.",
                    "citations": [
                        {"document": 1, "page": 2, "quote": "costs fell 3 percent"},
                        {"document": 1, "page": 1, "quote": "profits doubled"},
                    ],
                },
                "toolu_1",
            )
        ],
    )
    async with AnthropicServer() as claude:
        claude.script(reply)
        async with Rig(fresh_dsn, overrides=anthropic_env(claude)) as rig:
            file = rig.slack.files.add_file("report.pdf", report, mimetype="application/pdf")
            event = file_share_event(text="how was q3?", files=[file])
            rig.slack.seed_message(DEFAULT_DM, event["ts"], event["user"], event["text"])
            await rig.send(event_callback(event))
            [post] = await rig.slack.wait_for_posts(1)
            stored = await rig.db.pool.fetchval(
                "SELECT citations FROM messages WHERE kind = 'reply'"
            )
            page = await (await rig.http.get(rig.metrics_url)).text()
    for backed_by in ("provider", "found", "not_found"):
        assert f'threadgate_cited_passages_total{{quote="{backed_by}"}} 1.0' in page
    found, made_up, provider = json.loads(stored)  # the reply's own first, then the provider's
    assert provider["page"] == 1 and provider["end_page"] == 3
    assert provider["cited_text"] == cited
    assert (found["quote_found"], made_up["quote_found"]) == (True, False)
    sources = block_text_of(post.blocks)
    assert "[report.pdf, pages 1–2](<" in sources
    assert "“Revenue grew 12 percent Costs fell 3 percent”" in sources
    assert "[report.pdf, page 2](<" in sources and "“costs fell 3 percent”" in sources
    assert "“profits doubled” (not found on page 1)" in sources
