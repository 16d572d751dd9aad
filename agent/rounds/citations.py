"""What a round's final reply may cite: the messages, URLs and documents the model was shown.

`final_reply` takes an optional `citations` array: `{"ref": N}` for a numbered message of
the window (`agent.rounds.references`), `{"url": "https://…"}` for an address that
appeared in what the model read this round — people's turns in the window, earlier
rounds' subtask results, the outputs of the tools it called — and `{"document": N,
"page": P, "quote": "…"}` for a passage of a PDF sent beside a turn (titled `document N`
by the prompt): the document must be one the request carried, the page one it has; the
quote is the model's, shown as it cited it, and checked against the text of that page
(`Document.page_texts`, as the gateway read it): the citation says whether it was found
there — a quote the model made up, or took from another page, is shown as not found, and a
page whose text was never read (a scan) leaves it unknown. The provider's own citations of
a document (Anthropic's `page_location`, in the text of an answer: `cited_passages`) are
mapped the same way, by the document's title, keeping their range of pages (start and
end) and the cited text exactly as the provider returned it. The round loop notes all of
that here as it goes (`note`), so a citation is checked against what the model actually
saw: a URL it made up, or remembered from training, is refused with a message for the
model that lists what it may cite, and the round repairs it like any other bad control
call. The bot's own earlier replies and acknowledgments are not a source: a URL it once
made up would otherwise become citable by being repeated (its message may still be cited
by `ref`, which says what it is).

URLs are found with a deliberately simple pattern (http or https, up to whitespace or a
character that cannot stand unescaped in a URL), with trailing sentence punctuation
dropped; a cited URL counts when it is one of those, compared the same way. Turn bodies
are HTML-escaped (`&amp;`), so each text is also read unescaped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agent.core.attachments import message_of
from agent.core.citations import Citation
from agent.core.documents import Document
from agent.core.errors import ControlCallError
from agent.models.contract import ModelMessage, PageCitation, ToolResultMessage, UserMessage
from agent.rounds.references import ReferenceCatalog

_URL = re.compile(r"https?://[^\s<>\"'`|\\^{}\[\]]+", re.IGNORECASE)
_TRAILING = ".,;:!?)*_~'\""
_LISTED = 10  # at most this many URLs are listed in an error
MAX_URL = 2_000  # longer "URLs" are not links anyone can follow
MAX_QUOTE = 300  # a cited passage is a sentence or two, not the page
_LABEL = re.compile(r"document (\d+)")


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage of a document, as `final_reply` cites it."""

    document: int
    page: int
    quote: str = ""


def _urls_in(text: str) -> Iterable[str]:
    for variant in {text, _unescape(text)}:
        for match in _URL.finditer(variant):
            url = _trimmed(match.group())
            if len(url) > len("https://") and len(url) <= MAX_URL:
                yield url


def _trimmed(url: str) -> str:
    url = url.rstrip(_TRAILING)
    # A closing parenthesis is part of the URL only when it closes one opened inside it.
    while url.endswith(")") and url.count(")") > url.count("("):
        url = url[:-1].rstrip(_TRAILING)
    return url


def _unescape(text: str) -> str:
    return (
        text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    )


@dataclass
class Citable:
    """The window's numbered messages and every URL noted so far this round."""

    catalog: ReferenceCatalog = field(default_factory=ReferenceCatalog)
    documents: dict[int, Document] = field(default_factory=dict)  # by their number
    # The texts noted and not yet read for URLs: they are read when a reply cites a URL
    # (`urls`), not in every round (a window's texts, a back-filled thread's among them, are
    # kilobytes, and most replies cite none).
    _unread: list[str] = field(default_factory=list, init=False, repr=False)
    _urls: set[str] = field(default_factory=set, init=False, repr=False)

    @property
    def urls(self) -> set[str]:
        """Every URL in the texts noted so far."""
        while self._unread:
            self._urls.update(_urls_in(self._unread.pop()))
        return self._urls

    def note(self, messages: Iterable[ModelMessage]) -> None:
        """Remember the URLs in what the model is shown — people's words, tool and subtask
        results — and not those in its own (the window's replies of the bot); and the
        documents sent beside turns, by their number."""
        for message in messages:
            if isinstance(message, UserMessage):
                self._unread.append(message.text)
                for document in message.documents:
                    if (found := _LABEL.fullmatch(document.label)) is not None:
                        self.documents[int(found[1])] = document
            elif isinstance(message, ToolResultMessage):
                self._unread.append(message.content)

    def resolve(
        self,
        refs: Sequence[int | None],
        urls: Sequence[str | None],
        passages: Sequence[Passage | None] | None = None,
    ) -> tuple[Citation, ...]:
        """The citations, in order and each once, or a `ControlCallError` for the model."""
        cited: list[Citation] = []
        problems: list[str] = []
        cited_passages = passages if passages is not None else [None] * len(refs)
        for index, (ref, url, passage) in enumerate(zip(refs, urls, cited_passages, strict=True)):
            where = f"citations[{index}]"
            if passage is not None:
                found = self._passage(passage)
                if isinstance(found, str):
                    problems.append(f"{where}: {found}")
                else:
                    cited.append(found)
            elif ref is not None:
                if 1 <= ref <= len(self.catalog.messages):
                    cited.append(Citation(message_id=self.catalog.messages[ref - 1].id))
                else:
                    problems.append(f"{where}: [ref {ref}] is not a message you were shown")
            elif url is not None:
                if _trimmed(url.strip()) in self.urls:
                    cited.append(Citation(url=_trimmed(url.strip())))
                else:
                    problems.append(f"{where}: {url[:200]!r} did not appear in anything you read")
        if problems:
            raise ControlCallError(
                f"final_reply was not sent: {'; '.join(problems)}. {self.what_may_be_cited()} "
                "Call final_reply again with only those citations, or without `citations`."
            )
        return tuple(dict.fromkeys(cited))

    def _passage(self, passage: Passage) -> Citation | str:
        """The citation of `passage`, or what is wrong with it (for the model)."""
        document = self.documents.get(passage.document)
        if document is None:
            return f"there is no document {passage.document} among those you were shown"
        if passage.page < 1 or (document.pages and passage.page > document.pages):
            return (
                f"document {passage.document} has no page {passage.page} ({document.pages} pages)"
            )
        citation = _model_citation(document, passage.page, passage.quote)
        return citation if citation is not None else f"document {passage.document} cannot be cited"

    def cited_passages(self, citations: Sequence[PageCitation]) -> tuple[Citation, ...]:
        """The provider's document citations (`ModelResponse.citations`) as ours, each by
        the document's title (the prompt's `document N`); one naming no document shown is
        left out."""
        by_title = {d.label: d for d in self.documents.values()}
        found = []
        for cited in citations:
            document = by_title.get(cited.document_title or "")
            message_id = message_of(document.key) if document is not None else None
            if document is None or message_id is None or cited.start_page < 1:
                continue
            end = cited.end_page if cited.end_page > cited.start_page else None
            found.append(
                Citation(
                    message_id=message_id,
                    document=document.name,
                    page=cited.start_page,
                    end_page=end,
                    cited_text=cited.cited_text or None,
                )
            )
        return tuple(dict.fromkeys(found))

    def what_may_be_cited(self) -> str:
        """What the model may cite, said for the model."""
        refs = (
            f"You may cite [ref N] messages; {self.catalog.valid_numbers()}"
            if self.catalog.messages
            else "No message can be cited by number"
        )
        if self.documents:
            listed_docs = ", ".join(
                f"document {n} ({d.pages} pages)" for n, d in sorted(self.documents.items())
            )
            refs = f"{refs}; you may cite pages of {listed_docs}"
        if not self.urls:
            return f"{refs}; no URL appeared in what you read, so cite no URL."
        shown = sorted(self.urls)
        listed = ", ".join(shown[:_LISTED]) + (
            f" and {len(shown) - _LISTED} more" if len(shown) > _LISTED else ""
        )
        return f"{refs}; the URLs you may cite are {listed}."


def _model_citation(document: Document, page: int, quote: str) -> Citation | None:
    """A passage the model cited of `document` as a citation of the message it came with
    (None when it came with none: a document that is not a person's): the page, and its
    quote with whether that page's text holds it."""
    message_id = message_of(document.key)
    if message_id is None:
        return None
    text = " ".join(quote.split())
    shown = text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 1].rstrip() + "…"
    return Citation(
        message_id=message_id,
        document=document.name,
        page=page,
        end_page=page + 1,
        quote=shown or None,
        quote_found=quote_on_page(document, page, text) if text else None,
    )


def quote_on_page(document: Document, page: int, quote: str) -> bool | None:
    """Whether `quote` is on `page` of `document`, compared as readers would (Unicode
    compatibility forms, case, runs of white space); None when that page's text is not
    known."""
    if not 1 <= page <= len(document.page_texts):
        return None
    text = _comparable(document.page_texts[page - 1])
    if not text:
        return None  # a page without a text layer: a scan's page, read only as it looks
    return _comparable(quote) in text


def _comparable(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
