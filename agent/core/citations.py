"""What a final reply cites, as the agent records it: a message, a URL, or a passage of a
document.

The model cites by what it was shown (`[ref N]`, a URL in the window or a tool's output,
a page of a document sent beside a turn; agent/rounds/citations.py checks that); the
round turns a `ref` into the cited message's stored id, which means the same thing after
the window is gone, and a document into the message it came with, its name and the
pages cited. A passage keeps what each side said of it: the text the provider cited, as
the provider returned it (`cited_text`, never reworded: it is the evidence), and the quote
the model wrote, with whether it was found on the page it cites (`quote_found`). The
gateway renders citations under the reply (its "Sources" line) and knows how to link a
message id.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Citation:
    """One source of a reply: exactly one of `message_id` (a stored message of the
    conversation) and `url` (an http(s) address the model was shown). A passage of a
    document is a message's citation with the document's `document` name and where it
    is: from `page` (1-based) to before `end_page` (None: `page` alone, as stored before
    ranges were kept); the text the provider cited (`cited_text`, verbatim), or the quote
    the model wrote (`quote`) and whether it is on that page (`quote_found`; None: not
    known, as when the page's text was not read)."""

    message_id: str | None = None
    url: str | None = None
    document: str | None = None
    page: int | None = None
    quote: str | None = None
    end_page: int | None = None
    cited_text: str | None = None
    quote_found: bool | None = None

    def __post_init__(self) -> None:
        if (self.message_id is None) == (self.url is None):
            raise ValueError("a citation is a message id or a URL, exactly one of them")
        if self.page is not None and (self.message_id is None or self.page < 1):
            raise ValueError("a page is cited of a message's document, counting from 1")
        if self.end_page is not None and (self.page is None or self.end_page <= self.page):
            raise ValueError("a range of pages ends after the page it starts at")

    @property
    def last_page(self) -> int | None:
        """The last page cited (`page` when one page is)."""
        if self.page is None:
            return None
        return self.end_page - 1 if self.end_page is not None else self.page
