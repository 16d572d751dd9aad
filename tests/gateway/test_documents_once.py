"""A PDF with a text layer reaches a model once (issue 47, item 10): the turn is stored
with the PDF's text, for the models that read no documents; a request that carries the
PDF itself leaves that text out of the turn, keeping the line that names the file. Checked
on the turns the gateway renders, whatever the words, the file's name and its text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent import Document
from agent.models.capabilities import Capabilities, fit_request
from agent.models.contract import ModelRequest, UserMessage
from gateway.inbound.attachments import FileContent, files_text, images_of
from gateway.slack.events import SharedFile
from gateway.slack.threads import ThreadMessage, render_message, rendered_note_part
from gateway.text.provenance import parse_turn

READS_DOCUMENTS = Capabilities(documents=True)
TEXT_ONLY = Capabilities(documents=False)
PDF_BYTES = b"%PDF-1.7 pages"


def turn_with_pdf(words: str, name: str, pdf_text: str) -> tuple[str, Document]:
    """The turn as the gateway renders it, and the document it stores beside it."""
    shared = SharedFile(name, "PDF", len(PDF_BYTES), mimetype="application/pdf")
    content = FileContent(shared, text=pdf_text, document=Document(PDF_BYTES, name, 1))
    turn = render_message(
        ThreadMessage("U1", words, "1700000000.000100"), "C1", {}, note=files_text([content])
    )
    [document] = images_of([content], rendered_note_part)
    assert isinstance(document, Document)
    return turn, document


def sent(turn: str, document: Document, capabilities: Capabilities) -> UserMessage:
    request = ModelRequest((UserMessage(turn, documents=(document,)),))
    [message] = fit_request(request, capabilities).messages
    assert isinstance(message, UserMessage)
    return message


def test_the_document_reading_model_gets_the_pdf_and_not_its_text_again() -> None:
    """Before: a route that reads documents got the PDF as a document block and its whole
    text layer in the turn — every page twice. Now it gets the document and the turn's
    line naming the file; a route that reads none gets the text, as before."""
    turn, document = turn_with_pdf("what does it say?", "q3.pdf", "Revenue grew 12 percent")
    assert "Revenue grew 12 percent" in turn  # stored for every model
    once = sent(turn, document, READS_DOCUMENTS)
    assert once.documents == (document,)
    assert "Revenue grew 12 percent" not in once.text
    assert '[file "q3.pdf" (PDF, 14 bytes)]' in once.text
    assert parse_turn(once.text).body == 'what does it say?\n\n[file "q3.pdf" (PDF, 14 bytes)]'
    as_text = sent(turn, document, TEXT_ONLY)
    assert as_text.documents == () and as_text.text.startswith(turn)


@settings(max_examples=200, deadline=None)
@given(
    words=st.text(max_size=80),
    name=st.text(min_size=1, max_size=40),
    pdf_text=st.text(min_size=1, max_size=300).filter(lambda t: t.strip()),
)
def test_whatever_the_text_the_pdf_goes_once_and_the_turn_stays_whole(
    words: str, name: str, pdf_text: str
) -> None:
    """Whatever the sender, the file's name and its text hold (tags, look-alikes, pasted
    credentials, the file's own end marker): the document's block is found in the turn
    the gateway rendered, the document-reading request's turn is the rendered turn
    without it — still exactly one well-formed turn, its body the words and the file's
    name line — and the text-only request's turn is unchanged."""
    turn, document = turn_with_pdf(words, name, pdf_text)
    assert document.in_turn and document.in_turn in turn
    once = sent(turn, document, READS_DOCUMENTS).text
    header = document.in_turn.split("\n", 1)[0]
    where = turn.rfind(document.in_turn)
    assert once == turn[:where] + header + turn[where + len(document.in_turn) :]
    assert parse_turn(once).name == parse_turn(turn).name
    assert sent(turn, document, TEXT_ONLY).text.startswith(turn)
