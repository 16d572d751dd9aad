"""A link in a reply never hides where it goes.

Model text is untrusted (it may repeat what a hostile message or web page told it to), and
a link's visible text is the oldest trick there is: `[https://good.example](https://evil.example)`
or mrkdwn's `<https://evil.example|https://good.example>` shows one host and opens another.
So before a reply is posted, every link in its prose (code is left alone) is checked
against the host it really opens:

- a label that names that host and no other (`[docs.python.org](https://docs.python.org/3/)`)
  stays as written;
- a label that *is* an address naming another host — a URL, `mailto:…`, `www.…` — is
  dropped: the link becomes its own target (`<https://evil.example>`), so the reader sees
  the real address and nothing else;
- any other label keeps its words and gets the real host after the link
  (`[the report](https://evil.example/r) (evil.example)`), readable and hiding nothing.
  A bare `README.md` or `good.example` label is treated as words here: `.md` is a real
  top-level domain, and "good.example (evil.example)" already shows the truth.

Hosts are compared and shown in their ASCII (punycode) form, lower-case and without a
leading `www.`. A target whose host is not ASCII (a Cyrillic look-alike of a Latin name)
or carries credentials before it (`https://good.example@evil.example/`) always gets its
ASCII host added, even after an honest-looking label or when the label is dropped.
Targets without a host (relative paths, anchors) are left alone: there is nowhere else for
them to go. Browsers' leniency is followed where it matters: `\\` reads as `/`, and
`https:evil.example` opens evil.example.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from gateway.text.markdown import code_spans, fenced_blocks

__all__ = ["reveal_link_hosts"]

# `](destination "optional title")`: the end of a Markdown inline link.
_DESTINATION = re.compile(
    r"\]\([ \t]*(?:<(?P<bracketed>[^<>\n]*)>|(?P<bare>[^\s()<>`]*(?:\([^\s()<>`]*\)[^\s()<>`]*)*))"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*\)"
)
# `<target|label>`: a Slack mrkdwn link (mentions and commands start with `@`, `#`, `!`).
_MRKDWN_LINK = re.compile(r"<(?P<target>[^!@#|<>\s][^|<>\s]*)\|(?P<label>[^<>]*)>")
_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://|mailto:|www\.", re.IGNORECASE)
_DOMAIN = re.compile(r"(?:[\w-]+\.)+[^\W\d_]{2,}\.?", re.UNICODE)
_TOKEN_SPLIT = re.compile(r"[\s()\[\]<>\"',;!?*~`|]+")
_WEB_SCHEMES = frozenset({"http", "https", "ftp", "ws", "wss"})
_SHOWABLE = re.compile(r"[^A-Za-z0-9._\-:\[\]]")


def reveal_link_hosts(text: str) -> str:
    """`text` with every link outside code showing the host it opens (see the module doc)."""
    pieces = []
    for start, end, fenced in fenced_blocks(text):
        prose = text[start:end]
        pieces.append(prose if fenced else _reveal_mrkdwn(_reveal_markdown(prose)))
    return "".join(pieces)


def _reveal_markdown(prose: str) -> str:
    """Markdown inline links `[label](target)`; code spans are opaque while looking."""
    masked = _masked(prose, code_spans(prose))
    openers = _bracket_pairs(masked)
    edits: list[tuple[int, int, str]] = []
    for match in _DESTINATION.finditer(masked):
        opener = openers.get(match.start())
        if opener is None or (edits and opener < edits[-1][1]):
            continue
        if opener > 0 and masked[opener - 1] == "!" and not _escaped(masked, opener - 1):
            continue  # an image: its text is a description, and it opens nothing
        group = "bracketed" if match["bracketed"] is not None else "bare"
        target = prose[match.start(group) : match.end(group)]
        label = prose[opener + 1 : match.start()]
        edits += _edits(label, target, opener, match.end())
    return _apply(prose, edits)


def _reveal_mrkdwn(prose: str) -> str:
    """mrkdwn links `<target|label>` outside code spans."""
    spans = code_spans(prose)
    edits: list[tuple[int, int, str]] = []
    for match in _MRKDWN_LINK.finditer(prose):
        if not any(start <= match.start() < end for start, end in spans):
            edits += _edits(match["label"], match["target"], match.start(), match.end())
    return _apply(prose, edits)


def _edits(label: str, target: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """How to rewrite the link spanning `start:end` so it shows where it goes (or nothing)."""
    parts = _parse(target)
    host = _host(parts) if parts is not None else None
    if parts is None or host is None:
        return []
    shown = _hosts_in(label)
    names_it = bool(shown) and all(_same(h, host) for h in shown)
    # Credentials before the host, or a host in another script, disguise even an honest
    # label (and a bare target): the ASCII host is then always added.
    disguised = parts.username is not None or not all(h.isascii() for h in [host, *shown])
    added = [(end, end, f" ({_showable(host)})")]
    if names_it:
        return added if disguised else []
    if _is_address(label):
        return [(start, end, f"<{target}>"), *(added if disguised else [])]
    return added


def _parse(target: str) -> SplitResult | None:
    """The target as a browser reads it, or None when it cannot be read."""
    url = target.strip().replace("\\", "/")
    try:
        parts = urlsplit(url)
        if not parts.netloc and parts.scheme.lower() in _WEB_SCHEMES:
            parts = urlsplit(f"{parts.scheme}://{parts.path.lstrip('/')}")  # https:evil.example
        elif not parts.scheme and not parts.netloc and _DOMAIN.match(url):
            parts = urlsplit(f"//{url}")  # www.evil.example/page: a browser would guess https
        parts.port  # noqa: B018 - raises ValueError on a malformed port, as parsing does
    except ValueError:
        return None
    return parts


def _host(parts: SplitResult) -> str | None:
    if parts.scheme.lower() == "mailto":
        return parts.path.rpartition("@")[2].partition("?")[0] or None
    return parts.hostname or None


def _hosts_in(label: str) -> list[str]:
    """The hosts a reader sees named in `label`: of URLs, e-mail addresses and domains."""
    hosts = []
    for token in _TOKEN_SPLIT.split(label.replace("\\", "/")):
        if "://" in token or token.lower().startswith("mailto:"):
            parts = _parse(token)
            host = _host(parts) if parts is not None else None
        else:
            candidate = re.split(r"[/:?#]", token.rpartition("@")[2])[0].rstrip(".")
            host = candidate if _DOMAIN.fullmatch(candidate) else None
        if host:
            hosts.append(host)
    return hosts


def _is_address(label: str) -> bool:
    """Whether the whole label reads as an address — a URL, `mailto:…`, `www.…` — rather
    than words (a bare `README.md` is words: it gets the host added, not dropped)."""
    plain = re.sub(r"[*_~`]", "", label).strip()
    return not re.search(r"\s", plain) and bool(_ADDRESS.match(plain))


def _same(shown: str, real: str) -> bool:
    return _canonical(shown) == _canonical(real)


def _canonical(host: str) -> str:
    return _ascii(host).rstrip(".").removeprefix("www.")


def _ascii(host: str) -> str:
    """The host as DNS sees it: lower-case, non-ASCII labels in punycode."""
    host = host.lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _showable(host: str) -> str:
    """The host as shown after a link: ASCII, and nothing that could read as markup."""
    return _SHOWABLE.sub("?", _ascii(host).rstrip("."))


def _bracket_pairs(text: str) -> dict[int, int]:
    """For each `]` that closes a `[` in the same paragraph, the index of that `[`."""
    pairs: dict[int, int] = {}
    openers: list[int] = []
    blank = True
    for index, char in enumerate(text):
        if char == "\n":
            if blank:
                openers.clear()  # a blank line ends the paragraph, and every open label
            blank = True
            continue
        if char not in " \t":
            blank = False
        if char == "[" and not _escaped(text, index):
            openers.append(index)
        elif char == "]" and openers and not _escaped(text, index):
            pairs[index] = openers.pop()
    return pairs


def _escaped(text: str, index: int) -> bool:
    before = index
    while before > 0 and text[before - 1] == "\\":
        before -= 1
    return (index - before) % 2 == 1


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each code span's characters replaced by `x`, positions unchanged."""
    pieces, position = [], 0
    for start, end in spans:
        pieces += [text[position:start], "x" * (end - start)]
        position = end
    return "".join([*pieces, text[position:]])


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each `(start, end, replacement)` applied; edits are in order, disjoint."""
    pieces, position = [], 0
    for start, end, replacement in edits:
        pieces += [text[position:start], replacement]
        position = end
    return "".join([*pieces, text[position:]])
