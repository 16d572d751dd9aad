"""TEMPORARY stand-in (replaced by the stream-model branch): decodes one top-level string
field of a JSON object that arrives in fragments."""

from __future__ import annotations

import json
import re

_KEY = re.compile(r'^\s*\{\s*"text"\s*:\s*"')


class StringFieldDecoder:
    def __init__(self, field: str) -> None:
        self._field = field
        self._raw = ""
        self._shown = 0
        self.complete = False
        self.failed = False

    def feed(self, fragment: str) -> str:
        if self.complete or self.failed:
            return ""
        self._raw += fragment
        m = _KEY.match(self._raw)
        if not m:
            return ""
        body = self._raw[m.end() :]
        out = []
        i = 0
        while i < len(body):
            c = body[i]
            if c == '"':
                self.complete = True
                break
            if c == "\\":
                if i + 1 >= len(body):
                    break
                e = body[i + 1]
                if e == "u":
                    if i + 6 > len(body):
                        break
                    out.append(chr(int(body[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                out.append(json.loads(f'"\\{e}"'))
                i += 2
                continue
            out.append(c)
            i += 1
        text = "".join(out)
        new = text[self._shown :]
        self._shown = len(text)
        return new
