"""What a final reply cites, as the agent records it: a message or a URL.

The model cites by what it was shown (`[ref N]`, a URL in the window or a tool's output;
agent/rounds/citations.py checks that); the round turns a `ref` into the cited message's
stored id, which means the same thing after the window is gone. The gateway renders
citations under the reply (its "Sources" line) and knows how to link a message id.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Citation:
    """One source of a reply: exactly one of `message_id` (a stored message of the
    conversation) and `url` (an http(s) address the model was shown)."""

    message_id: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.message_id is None) == (self.url is None):
            raise ValueError("a citation is a message id or a URL, exactly one of them")
