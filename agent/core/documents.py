"""Documents people showed the bot (PDFs), as the agent carries them to a model.

A PDF attached to a message reaches a model once: a provider that reads documents natively
(Anthropic's `document` blocks, OpenAI's `file` parts) gets the PDF itself beside the turn,
as it gets pictures — its pages as they look, so a scan with no text layer is read too,
and passages can be cited by page — and every other model its text layer, inside the
person's turn (the gateway reads it, gateway/inbound/attachments.py). The turn is stored
with that text; the document knows which block of the turn it is (`in_turn`), and a
request that carries the document leaves the block out (agent/models/capabilities.py),
keeping only its first line, which names the file. This type is that PDF: no URL, no
Slack id, only what a model reads, and the text of each page the gateway read
(`page_texts`), against which a quote the model cites is checked
(agent/rounds/citations.py).

What one request carries is bounded, as pictures are: the newest documents of the window,
at most `MAX_DOCUMENTS_PER_REQUEST` of them, `MAX_DOCUMENT_PAGES_PER_REQUEST` pages and
`MAX_DOCUMENT_BYTES_PER_REQUEST` bytes together. A page costs a model about as much as a
picture plus its text, so the page bound is the price bound; the byte bound keeps a
request within the vendors' request size (Anthropic's is 32 MB, base64 included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PDF = "application/pdf"
MAX_DOCUMENTS_PER_REQUEST = 3
MAX_DOCUMENT_PAGES_PER_REQUEST = 100
MAX_DOCUMENT_BYTES_PER_REQUEST = 16_000_000


@dataclass(frozen=True, slots=True)
class Document:
    """One PDF, as stored with the turn it came with; `pages` as the decoder counted them
    (0: not known)."""

    data: bytes
    name: str = ""
    pages: int = 0
    media_type: str = PDF
    # Which stored attachment it is (`message id#ordinal`), as for `Image.key`.
    key: str = field(default="", compare=False)
    # How the request titles it (`document 2`), set by the prompt in window order: the
    # model cites it by that number, and the vendor's citations name it by that title.
    label: str = field(default="", compare=False)
    # The block of its turn's text that carries its text layer, exactly as the turn has it
    # ("": none); and the text of each page read, in order ("" for a page without text).
    in_turn: str = field(default="", compare=False)
    page_texts: tuple[str, ...] = field(default=(), compare=False)

    def without_text(self, text: str) -> str:
        """`text` (its turn's) with the block of this document's text layer left out but
        for the block's first line, which names the file; `text` as it is when the block
        is not there (an edit that lost it)."""
        if not self.in_turn:
            return text
        where = text.rfind(self.in_turn)  # the files follow the words: the last one is it
        if where < 0:
            return text
        header = self.in_turn.split("\n", 1)[0]
        return text[:where] + header + text[where + len(self.in_turn) :]

    def __repr__(self) -> str:  # the bytes would flood a log line or a test failure
        return f"Document({self.name!r}, {len(self.data)} bytes, {self.pages} pages)"
