"""Images people showed the bot, as the agent carries them to a model.

A picture in a conversation is part of a person's turn, like their words: the gateway
downloads and checks it, storage keeps it with the turn, and the prompt builder hands
the newest few to the provider, whose wire writer encodes them in its own format. This
type is all the agent knows of one: no URL, no Slack id, only what a model can read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How many images one model request carries at most: the newest of the window. An image
# costs a model ~1,600 input tokens at the size we scale to, so eight keep a round's
# price bounded however many pictures a thread collected.
MAX_IMAGES_PER_REQUEST = 8


@dataclass(frozen=True, slots=True)
class Image:
    """One image, already in a form every provider takes (png, jpeg, gif or webp)."""

    media_type: str  # "image/png", "image/jpeg", "image/gif" or "image/webp"
    data: bytes
    name: str = ""
    # Which stored picture it is (`message id#ordinal`, storage/history.py), so a picture a
    # provider refused can be marked and never sent again; "" for one not stored (a tool's).
    key: str = field(default="", compare=False)

    def __repr__(self) -> str:  # the bytes would flood a log line or a test failure
        return f"Image({self.media_type!r}, {len(self.data)} bytes, {self.name!r})"
