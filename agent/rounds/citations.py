"""What a round's final reply may cite: the messages and URLs the model was shown.

`final_reply` takes an optional `citations` array: `{"ref": N}` for a numbered message of
the window (`agent.rounds.references`), `{"url": "https://…"}` for an address that
appeared in what the model read this round — people's turns in the window, earlier
rounds' subtask results, the outputs of the tools it called. The round loop notes all of
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agent.core.citations import Citation
from agent.core.errors import ControlCallError
from agent.models.contract import ModelMessage, ToolResultMessage, UserMessage
from agent.rounds.references import ReferenceCatalog

_URL = re.compile(r"https?://[^\s<>\"'`|\\^{}\[\]]+", re.IGNORECASE)
_TRAILING = ".,;:!?)*_~'\""
_LISTED = 10  # at most this many URLs are listed in an error
MAX_URL = 2_000  # longer "URLs" are not links anyone can follow


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
    urls: set[str] = field(default_factory=set)

    def note(self, messages: Iterable[ModelMessage]) -> None:
        """Remember the URLs in what the model is shown — people's words, tool and subtask
        results — and not those in its own (the window's replies of the bot)."""
        for message in messages:
            if isinstance(message, UserMessage):
                self.urls.update(_urls_in(message.text))
            elif isinstance(message, ToolResultMessage):
                self.urls.update(_urls_in(message.content))

    def resolve(
        self, refs: Sequence[int | None], urls: Sequence[str | None]
    ) -> tuple[Citation, ...]:
        """The citations, in order and each once, or a `ControlCallError` for the model."""
        cited: list[Citation] = []
        problems: list[str] = []
        for index, (ref, url) in enumerate(zip(refs, urls, strict=True)):
            where = f"citations[{index}]"
            if ref is not None:
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

    def what_may_be_cited(self) -> str:
        """What the model may cite, said for the model."""
        refs = (
            f"You may cite [ref N] messages; {self.catalog.valid_numbers()}"
            if self.catalog.messages
            else "No message can be cited by number"
        )
        if not self.urls:
            return f"{refs}; no URL appeared in what you read, so cite no URL."
        shown = sorted(self.urls)
        listed = ", ".join(shown[:_LISTED]) + (
            f" and {len(shown) - _LISTED} more" if len(shown) > _LISTED else ""
        )
        return f"{refs}; the URLs you may cite are {listed}."
