"""Decoding one string field of a JSON object while the object is still arriving.

The model writes a tool call's arguments a few characters at a time. To show the reply
(the `text` of a `final_reply` call) as it is written, the caller feeds each fragment to a
`StringFieldDecoder`, which returns the newly known characters of that one field's value.

Hand-written, because no library we found does this job in linear time: ijson and
json-stream yield a string only once it is complete, and the partial-JSON parsers (jiter's
partial mode, partial-json-parser) re-parse the whole prefix on every fragment — quadratic
for a long reply in small fragments. This is a pushdown scanner for the JSON grammar (RFC
8259, plus the `NaN`/`Infinity` literals Python's `json` reads and writes) that keeps its
state between fragments and looks at each character once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeAlias

_WHITESPACE = re.compile(r"[ \t\n\r]*")
# A run of string characters that need no decoding: not a quote, backslash or control char.
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_OPENERS = {"}": "{", "]": "["}
_LITERALS = {"t": "true", "f": "false", "n": "null", "N": "NaN", "I": "Infinity"}


def _skip_whitespace(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)
    return match.end() if match else index


def _plain_end(text: str, index: int) -> int:
    match = _PLAIN.match(text, index)
    return match.end() if match else index


# A state reads from `text` at `index` and returns where it stopped; it either consumed
# something, moved to another state, or reached the end of the fragment.
_State: TypeAlias = Callable[[str, int], int]


class StringFieldDecoder:
    """Decodes the value of one top-level string field of a JSON object that arrives in
    fragments, as far as it is known.

    Every escape is decoded as `json.loads` decodes it, including a surrogate pair written
    as two `\\u` escapes (held until both halves are known; a lone half is passed on, as
    `json.loads` does). Whitespace may come wherever JSON allows it.

    Duplicate keys: the FIRST top-level occurrence of the field is what streams, while
    `json.loads` keeps the last one. The decoder is for showing the value early; callers
    must reconcile what they showed with the full parse of the finished arguments.

    Once the value is complete, the rest of the input is not examined (`failed` does not
    turn true for a syntax error after it). A field that is absent leaves the decoder
    neither complete nor failed.
    """

    def __init__(self, field: str) -> None:
        self.field = field
        self._state: _State = self._document
        self._stack: list[str] = []  # the open containers' brackets, "{" or "["
        self._pieces: list[str] = []  # the value's characters decoded in this `feed`
        self._complete = False
        self._failed = False
        self._seen = False  # the field's value has started (later duplicates are ignored)
        self._target = False  # the value after the current colon is the field's
        # The current string: where its decoded characters go (None: nowhere) and the
        # state after its closing quote.
        self._sink: list[str] | None = None
        self._key_chars: list[str] = []
        self._after_string: _State = self._after_value
        self._escape: str | None = None  # "" right after a backslash, "uXX…" in a \u escape
        self._high: str | None = None  # a high surrogate waiting for its low half
        self._token: list[str] = []  # the number read so far
        self._literal = ""
        self._literal_at = 0

    @property
    def complete(self) -> bool:
        """The field's closing quote has been seen."""
        return self._complete

    @property
    def failed(self) -> bool:
        """The input is not a JSON object, the field's value is not a string, or the JSON
        is invalid (as far as it was read)."""
        return self._failed

    def feed(self, fragment: str) -> str:
        """Consume one fragment; return the newly decoded characters of the field's value
        ("" when none). Never returns characters that a later fragment could change."""
        index, end = 0, len(fragment)
        while index < end and not (self._complete or self._failed):
            index = self._state(fragment, index)
        piece = "".join(self._pieces)
        self._pieces.clear()
        return piece

    # Structure.

    def _fail(self) -> int:
        self._failed = True
        return 0

    def _expect(self, text: str, index: int, char: str, then: Callable[[int], int]) -> int:
        """Whitespace, then `char` (which `then` consumes at its index), or fail."""
        index = _skip_whitespace(text, index)
        if index == len(text):
            return index
        if text[index] != char:
            return self._fail()
        return then(index)

    def _document(self, text: str, index: int) -> int:
        return self._expect(text, index, "{", lambda at: self._open("{", at))

    def _open(self, bracket: str, index: int) -> int:
        self._stack.append(bracket)
        self._state = self._key_or_end if bracket == "{" else self._value_or_end
        return index + 1

    def _close(self, closer: str, index: int) -> int:
        if not self._stack or self._stack.pop() != _OPENERS[closer]:
            return self._fail()
        self._state = self._after_value if self._stack else self._trailing
        return index + 1

    def _key_or_end(self, text: str, index: int) -> int:
        return self._empty_or(text, index, "}", self._key)

    def _value_or_end(self, text: str, index: int) -> int:
        return self._empty_or(text, index, "]", self._value)

    def _empty_or(self, text: str, index: int, closer: str, then: _State) -> int:
        """Right after `{` or `[`: the closing bracket, or else the first key or value."""
        index = _skip_whitespace(text, index)
        if index < len(text) and text[index] == closer:
            return self._close(closer, index)
        self._state = then
        return index

    def _key(self, text: str, index: int) -> int:
        return self._expect(text, index, '"', self._open_key)

    def _open_key(self, index: int) -> int:
        self._key_chars.clear()
        self._sink = self._key_chars if len(self._stack) == 1 else None
        return self._open_string(self._colon, index)

    def _colon(self, text: str, index: int) -> int:
        return self._expect(text, index, ":", self._after_colon)

    def _after_colon(self, index: int) -> int:
        top_level = len(self._stack) == 1
        self._target = top_level and not self._seen and "".join(self._key_chars) == self.field
        self._state = self._value
        return index + 1

    def _value(self, text: str, index: int) -> int:
        index = _skip_whitespace(text, index)
        if index == len(text):
            return index
        char = text[index]
        if self._target:
            return self._target_value(char, index)
        if char == '"':
            self._sink = None
            return self._open_string(self._after_value, index)
        if char in "{[":
            return self._open(char, index)
        return self._scalar(char, index)

    def _target_value(self, char: str, index: int) -> int:
        self._target = False
        if char != '"':
            return self._fail()  # the field is there but is not a string
        self._seen = True
        self._sink = self._pieces
        return self._open_string(self._after_value, index)

    def _scalar(self, char: str, index: int) -> int:
        if char == "-" or (char.isdigit() and char.isascii()):
            self._token = []
            self._state = self._number
            return index
        if char in _LITERALS:
            return self._start_literal(_LITERALS[char], index)
        return self._fail()

    def _after_value(self, text: str, index: int) -> int:
        index = _skip_whitespace(text, index)
        if index == len(text):
            return index
        char = text[index]
        if char == ",":
            self._state = self._key if self._stack[-1] == "{" else self._value
            return index + 1
        if char in _OPENERS:
            return self._close(char, index)
        return self._fail()

    def _trailing(self, text: str, index: int) -> int:
        index = _skip_whitespace(text, index)
        return index if index == len(text) else self._fail()

    # Scalars other than strings: validated, never decoded.

    def _number(self, text: str, index: int) -> int:
        end = len(text)
        while index < end and text[index] in _NUMBER_CHARS:
            self._token.append(text[index])
            index += 1
        if index == end:
            return index
        token = "".join(self._token)
        if token == "-" and text[index] == "I":  # -Infinity
            return self._start_literal("Infinity", index)
        if not _NUMBER.fullmatch(token):
            return self._fail()
        self._state = self._after_value
        return index

    def _start_literal(self, word: str, index: int) -> int:
        self._literal, self._literal_at = word, 0
        self._state = self._literal_char
        return index

    def _literal_char(self, text: str, index: int) -> int:
        if text[index] != self._literal[self._literal_at]:
            return self._fail()
        self._literal_at += 1
        if self._literal_at == len(self._literal):
            self._state = self._after_value
        return index + 1

    # Strings.

    def _open_string(self, after: _State, index: int) -> int:
        self._after_string = after
        self._state = self._string
        return index + 1

    def _string(self, text: str, index: int) -> int:
        if self._escape is not None:
            return self._escaped(text[index], index)
        end = _plain_end(text, index)
        if end > index:
            self._emit(text[index:end])
        if end == len(text):
            return end
        if text[end] == "\\":
            self._escape = ""
            return end + 1
        if text[end] != '"':
            return self._fail()  # a raw control character
        return self._close_string(end)

    def _close_string(self, index: int) -> int:
        self._flush_high()
        if self._sink is self._pieces:
            self._complete = True
        self._state = self._after_string
        return index + 1

    def _escaped(self, char: str, index: int) -> int:
        escape = self._escape or ""
        if escape == "" and char in _ESCAPES:
            self._escape = None
            self._emit(_ESCAPES[char])
        elif (escape == "" and char == "u") or (escape and char in _HEX):
            self._escape = escape + char
            if len(self._escape) == 5:
                self._escape = None
                self._code_point(chr(int(escape[1:] + char, 16)))
        else:
            return self._fail()
        return index + 1

    def _code_point(self, char: str) -> None:
        """A `\\uXXXX` escape, joined with a pending high surrogate when it is the low half."""
        high, self._high = self._high, None
        if high is not None and "\udc00" <= char <= "\udfff":
            self._emit(chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(char) - 0xDC00)))
            return
        if high is not None:
            self._emit(high)
        if "\ud800" <= char <= "\udbff":
            self._high = char
        else:
            self._emit(char)

    def _flush_high(self) -> None:
        high, self._high = self._high, None
        if high is not None and self._sink is not None:
            self._sink.append(high)

    def _emit(self, text: str) -> None:
        self._flush_high()
        if self._sink is not None:
            self._sink.append(text)
