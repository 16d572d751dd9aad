"""Document citations as they are kept (issue 47, item 3): the provider's keep their range
of pages and the cited text exactly as returned; a quote the model writes says whether it
is on the page it cites; and final_reply asks for document citations only in a request
that carries a document."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import Document, Model, ProviderSettings, RouteConfig, open_route
from agent.models.contract import ModelRequest, PageCitation, ToolCall, UserMessage
from agent.rounds.citations import Citable, quote_on_page
from agent.rounds.control import FinalReply
from tests.fakes.anthropic_api import AnthropicServer, Message
from tests.fakes.openai_api import Completion, OpenAIServer

REPORT = Document(
    b"%PDF-1.7 a report",
    "q3.pdf",
    pages=3,
    key="task:T1:C1:1.0:user#1",
    label="document 1",
    page_texts=("Revenue grew 12 percent in Q3.", "Costs fell\n3 percent.", ""),
)
TURN = UserMessage("<turn>what does the report say?</turn>", documents=(REPORT,))


def citable() -> Citable:
    shown = Citable()
    shown.note([TURN])
    return shown


def test_a_provider_citation_keeps_its_pages_and_its_text_verbatim() -> None:
    """Before: only the first page was kept, and the cited text was re-spaced and cut at
    300 characters. Now the range is kept (pages 1 to 2, the end exclusive as Anthropic
    gives it) and the text is the provider's, byte for byte."""
    cited = "Revenue grew 12 percent in Q3.\n\n  Costs fell\n3 percent." + " and more" * 50
    [citation] = citable().cited_passages([PageCitation(0, cited, 1, 3, "document 1")])
    assert (citation.page, citation.end_page, citation.last_page) == (1, 3, 2)
    assert citation.cited_text == cited
    assert citation.message_id == "task:T1:C1:1.0:user" and citation.document == "q3.pdf"


def test_a_model_quote_says_whether_it_is_on_the_page_it_cites() -> None:
    """A quote found on its page (in another case, spacing and line breaks aside) is
    found; the right words cited from the wrong page are not; a page without a text layer
    (a scan's) leaves it unknown. Each keeps its page as a range of one."""
    arguments = {
        "text": "Revenue grew; costs fell.",
        "citations": [
            {"document": 1, "page": 2, "quote": "costs fell 3 PERCENT"},
            {"document": 1, "page": 1, "quote": "Costs fell 3 percent"},
            {"document": 1, "page": 3, "quote": "a chart"},
        ],
    }
    call = ToolCall.from_raw("call_1", "final_reply", json.dumps(arguments))
    reply = FinalReply(citable()).parse(call)
    assert [(c.page, c.end_page, c.quote_found) for c in reply.citations] == [
        (2, 3, True),
        (1, 2, False),
        (3, 4, None),
    ]


def citation_forms(tools: list[dict[str, Any]]) -> set[str]:
    """The properties of final_reply's citation items, in either vendor's tool list."""
    [reply] = [t for t in tools if (t.get("function") or t)["name"] == "final_reply"]
    schema = reply.get("input_schema") or reply["function"]["parameters"]
    return set(schema["properties"]["citations"]["items"]["properties"])


@pytest.fixture
async def opened() -> AsyncIterator[list[Model]]:
    models: list[Model] = []
    yield models
    for model in models:
        await model.aclose()


async def test_document_citations_are_asked_for_only_where_a_document_is_attached(
    opened: list[Model],
) -> None:
    """Before: final_reply offered `{"document": N, "page": P, "quote": …}` in every
    request, and a model with no document in view could cite one. Now a request that
    carries a document (to a model that reads them) offers that form; one without a
    document, or to a model that reads none, offers messages and URLs only."""
    plain = UserMessage("<turn>hello</turn>")
    async with AnthropicServer() as claude, OpenAIServer() as server:
        claude.default = lambda seen: Message(text="ok")
        server.default = lambda seen: Completion(text="ok")
        for url, vendor in ((claude.url, "anthropic"), (server.url, "openai")):
            model = open_route(
                RouteConfig(vendor, "reader", url), index=0, settings=ProviderSettings(stream=False)
            )
            opened.append(model)
            for turn in (TURN, plain):
                tools = (FinalReply().spec,)
                await model.request(ModelRequest((turn,), tools=tools, max_output_tokens=50))
    with_document, without = (citation_forms(r.body["tools"]) for r in claude.requests)
    assert with_document == {"ref", "url", "document", "page", "quote"}
    assert without == {"ref", "url"}
    # The OpenAI-compatible route reads no documents: neither of its requests offers them.
    assert [citation_forms(r.body["tools"]) for r in server.requests] == [{"ref", "url"}] * 2
    assert "document" not in claude.requests[1].body["tools"][0]["description"]


@given(st.text(min_size=1, max_size=200), st.data())
def test_any_passage_of_the_page_is_found_however_it_is_spaced_or_cased(
    page: str, data: st.DataObject
) -> None:
    """Whatever a page holds, a quote taken from it — any run of its words, re-spaced and
    in another case — is found on that page; a page without text says nothing."""
    words = page.split()
    document = Document(b"%PDF-", "x.pdf", pages=1, page_texts=(page,))
    if not words:
        assert quote_on_page(document, 1, "anything") is None
        return
    start = data.draw(st.integers(0, len(words) - 1))
    end = data.draw(st.integers(start + 1, len(words)))
    quote = "\n  ".join(words[start:end]).upper()
    expected = _folds_cleanly(" ".join(words[start:end]))
    assert quote_on_page(document, 1, quote) is True or not expected
    assert quote_on_page(document, 2, quote) is None


def _folds_cleanly(text: str) -> bool:
    """Whether upper-casing then case-folding `text` gives what case-folding it gives (not
    so for a few letters, such as the dotless i, whose upper case folds to another)."""

    def fold(t: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", t).casefold().split())

    return fold(text.upper()) == fold(text)
