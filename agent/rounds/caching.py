"""Prompt caching: which conversation a model request belongs to, and how much of it stays.

Providers bill the part of a prompt they read from their cache at a tenth of the price or
less, and our requests repeat a lot: every step of a round re-sends the system prompt, the
tools and the whole window, and every message of a thread re-sends the ones before it.
They repeat byte for byte, because the prompt is built so (agent/rounds/prompt.py: nothing
that varies — a time, a limit — comes before the window, and the window is the stored
text, numbered from its first message). A request's `CacheHint` tells the wire formats
what they need to let the provider see it: a key that names the conversation (the same
for its rounds and messages) and how many leading messages stay.

The key is a hash: the session id names a Slack workspace, channel and thread, which the
provider has no business reading.
"""

from __future__ import annotations

import hashlib

from agent.models.contract import CacheHint


def cache_key(conversation: str) -> str:
    """The provider's key for the conversation named `conversation` (a session id, or a
    session's sub-agent of one type)."""
    return hashlib.sha256(f"threadgate:{conversation}".encode()).hexdigest()[:32]


def conversation_cache(key: str | None, stable: int) -> CacheHint | None:
    """The hint for a request of conversation `key` whose first `stable` messages stay;
    None without a key (caching is off)."""
    return CacheHint(key, stable) if key is not None else None
