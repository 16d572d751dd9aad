"""Text every part of the system can hold, whoever wrote it.

Postgres `text` and `jsonb` refuse NUL, and a lone surrogate cannot be encoded as UTF-8 at
all, so a message containing either fails wherever it goes next: a person's turn at
admission, a model's reply at the append, a subtask's params at the insert. A model can
produce both (JSON's `\\u0000` and `\\ud800` escapes decode to them). Both are replaced with
U+FFFD, the character that says "something unreadable was here", at the two doors text
comes in by: the gatekeeper for people, the control tools for the model.
"""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def storable_json(value: Any) -> Any:
    """A decoded JSON value with every string in it (keys included) made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable_json(item) for item in value]
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v) for k, v in value.items()}
    return value
