"""A link in a reply never hides where it goes.

Model text is untrusted (it may repeat what a hostile message or web page told it to), and
a link's visible text is the oldest trick there is: `[https://good.example](https://evil.example)`
or mrkdwn's `<https://evil.example|https://good.example>` shows one host and opens another.
So before a reply is posted, every link in its prose (code is left alone) is checked
against the host it really opens — in every form a reader may see one open: inline,
with a line break before its `(url)`, by reference, an image, Slack's `<url|text>`, an
autolink or a bare URL (`gateway.text.link_forms` finds them):

- a label that names that host and no other (`[docs.python.org](https://docs.python.org/3/)`)
  stays as written;
- a label that *is* an address naming another host — a URL, `mailto:…`, `www.…` — is
  dropped: the link becomes its own target (`<https://evil.example>`), so the reader sees
  the real address and nothing else;
- any other label keeps its words and gets the real host after the link
  (`[the report](https://evil.example/r) (evil.example)`), readable and hiding nothing;
  a reference link is written inline then (`[the report][r]` would read as
  `[r] (evil.example)`, a link to "evil.example", to a lenient renderer).
  A bare `README.md` or `good.example` label is treated as words here: `.md` is a real
  top-level domain, and "good.example (evil.example)" already shows the truth.

Hosts are compared and shown in their ASCII (punycode) form, lower-case and without a
leading `www.`. A target whose host is not ASCII (a Cyrillic look-alike of a Latin name)
or carries credentials before it (`https://good.example@evil.example/`) always gets its
ASCII host added, even after an honest-looking label or when the label is dropped.
An autolink or a bare URL is its own label: it only ever gets that ASCII host added.
Targets without a host (relative paths, anchors) are left alone: there is nowhere else for
them to go. Browsers' leniency is followed where it matters: `\\` reads as `/`, and
`https:evil.example` opens evil.example.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from gateway.text.link_forms import Link, disarm_doubtful_definitions, find_links

__all__ = ["reveal_link_hosts"]

_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://|mailto:|www\.", re.IGNORECASE)
_DOMAIN = re.compile(r"(?:[\w-]+\.)+[^\W\d_]{2,}\.?", re.UNICODE)
_TOKEN_SPLIT = re.compile(r"[\s()\[\]<>\"',;!?*~`|]+")
_WEB_SCHEMES = frozenset({"http", "https", "ftp", "ws", "wss"})
_SHOWABLE = re.compile(r"[^A-Za-z0-9._\-:\[\]]")


def reveal_link_hosts(text: str) -> str:
    """`text` with every link outside code showing the host it opens (see the module doc)."""
    text = disarm_doubtful_definitions(text)
    edits = [edit for link in find_links(text) for edit in _edits(link)]
    return _apply(text, _outermost(edits))


def _edits(link: Link) -> list[tuple[int, int, str]]:
    """How to rewrite `link` so it shows where it goes (or nothing)."""
    label, target, start, end = link.label, link.target, link.start, link.end
    parts = _parse(target)
    host = _host(parts) if parts is not None else None
    if parts is None or host is None:
        return []
    shown = _hosts_in(_shown(label))
    names_it = bool(shown) and all(_same(h, host) for h in shown)
    # Credentials before the host, or a host in another script, disguise even an honest
    # label (and a bare target): the ASCII host is then always added.
    disguised = parts.username is not None or not all(h.isascii() for h in [host, *shown])
    added = [(end, end, f" ({_showable(host)})")]
    if names_it or link.kind in ("autolink", "bare"):
        shown_host = added if disguised else []
    elif _is_address(label):
        return [(start, end, f"<{target}>"), *(added if disguised else [])]
    else:
        shown_host = added
    if shown_host and link.by_reference:
        # `[text][ref] (host)` could read as `[ref] (host)`, a link to "host": written
        # inline, its text (and what is in it) left where it is.
        return [(link.label_at[1], end, f"](<{target}>)"), *shown_host]
    return shown_host


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


def _shown(label: str) -> str:
    """`label` as a reader sees it: the links and images in it reduced to their own text
    (`![good.example](…)a` reads `good.examplea`, one host, not two words)."""
    inner = [link for link in find_links(label) if link.kind in ("link", "image", "slack")]
    edits: list[tuple[int, int, str]] = []
    for link in inner:  # in order of where they start: the outermost first
        if not edits or link.start >= edits[-1][1]:
            edits.append((link.start, link.end, _shown(link.label)))
    return _apply(label, edits)


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


def _outermost(edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The edits in order, without those inside a span that is replaced (an image in the
    text of a link that becomes its own target goes with it). What is inserted where a
    replaced span starts or ends stays: it goes before or after it."""
    ordered = sorted(edits, key=lambda edit: (edit[0], edit[1]))
    replaced = [(start, end) for start, end, _ in ordered if start < end]
    return [edit for edit in ordered if not any(s < edit[0] < e for s, e in replaced)]


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each `(start, end, replacement)` applied; edits are in order, disjoint."""
    pieces, position = [], 0
    for start, end, replacement in edits:
        pieces += [text[position:start], replacement]
        position = end
    return "".join([*pieces, text[position:]])
