"""Every link a CommonMark parser finds in a rendered reply shows the host it opens.

`gateway.text.link_forms` finds links with its own reading of Markdown; a reader's client
uses another. So the oracle here is an independent parser, markdown-it-py in CommonMark
mode: whatever it reads as a link or an image in what we post (`split_markdown`, the
`markdown` block's text), that link's visible text names its host, or the text right after
it does (`(host)`, added by `gateway.text.links`). The model text is generated to hit the
forms CommonMark allows and readers forget: line breaks and titles inside the
parentheses, angle-bracketed destinations, definitions over two lines, images, and
bracket soup around them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from hypothesis import example, given
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from gateway.text.rendering import split_markdown

_COMMONMARK = MarkdownIt("commonmark")
# A host as a reader recognizes one in text: dotted labels ending in letters.
_HOSTLIKE = re.compile(r"(?<![a-z0-9.-])(?:www\.)?((?:[a-z0-9-]+\.)+[a-z]{2,})(?!-?[a-z0-9])")


@dataclass(frozen=True)
class SeenLink:
    """A link as the oracle reads it: where it opens, what it shows, what follows it."""

    href: str
    shown: str
    after: str


def oracle_links(markdown: str) -> list[SeenLink]:
    """Every link and image markdown-it finds in `markdown`."""
    found = []
    for block in _COMMONMARK.parse(markdown):
        children = block.children or []
        for n, token in enumerate(children):
            if token.type == "image":
                found.append(SeenLink(str(token.attrs["src"]), token.content, _after(children, n)))
            elif token.type == "link_open":
                close = _closing(children, n)
                shown = "".join(_text(t) for t in children[n + 1 : close])
                found.append(SeenLink(str(token.attrs["href"]), shown, _after(children, close)))
    return found


def _closing(children: list[Token], n: int) -> int:
    return next(i for i in range(n + 1, len(children)) if children[i].type == "link_close")


def _text(token: Token) -> str:
    return token.content if token.type in ("text", "code_inline", "image") else ""


def _after(children: list[Token], n: int) -> str:
    following = children[n + 1] if n + 1 < len(children) else None
    return following.content if following is not None and following.type == "text" else ""


def shows_its_host(link: SeenLink) -> bool:
    """Whether a reader sees the host `link` opens: named in its text, or right after it
    as ` (host)`."""
    host = urlsplit(link.href).hostname
    if not host:
        return True  # nowhere else to go: a relative path, an anchor
    host = host.removeprefix("www.")
    if link.after.startswith(f" ({host})"):
        return True
    named = {h.removeprefix("www.") for h in _HOSTLIKE.findall(link.shown.lower())}
    return host in named


# -- model text ---------------------------------------------------------------------------


def _balanced(url: str) -> bool:
    depth = 0
    for char in url:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


HOSTS = ["evil.example", "good.example", "bank.test", "sub.evil.example"]
hosts = st.sampled_from(HOSTS)
paths = st.text(alphabet="abc/-_.=?&%()", max_size=10)
targets = st.builds(lambda h, p: f"https://{h}/{p}", hosts, paths)
words = st.text(alphabet="abcdefgh XYZ.:/-*_~`!", min_size=1, max_size=12).filter(str.strip)
labels = st.one_of(
    words,
    hosts,
    targets,
    st.builds(lambda h: f"www.{h}", hosts),
    st.builds(lambda h: f"**{h}**", hosts),
    st.builds(lambda h, w: f"{w} {h}", hosts, words),
    st.builds(lambda w, v: f"{w} [{v}]", words, words),
    # An image in a label, its parentheses balanced: a label holding an open `(` that a
    # reference's rewriting to `](<url>)` closes is a known gap (the report of issue 44).
    st.builds(lambda h, t: f"![{h}]({t})", hosts, targets.filter(_balanced)),
)
# What CommonMark allows inside the parentheses: spaces or tabs, with one line break.
spaces = st.sampled_from(["", " ", "  ", "\t", "\n", " \n", "\n ", " \n\t"])
titles = st.one_of(
    st.just(""),
    st.builds(
        lambda gap, quote, words: f"{gap}{quote[0]}{words}{quote[1]}",
        st.sampled_from([" ", "\n", " \n "]),
        st.sampled_from(['""', "''", "()"]),
        st.text(alphabet="ab \n", max_size=6).filter(lambda t: "\n\n" not in t),
    ),
)
destinations = st.one_of(targets, targets.map(lambda t: f"<{t}>"))
inline_links = st.builds(
    lambda image, label, gap, lead, url, title, tail: (
        f"{image}[{label}]{gap}({lead}{url}{title}{tail})"
    ),
    st.sampled_from(["", "!"]),
    labels,
    st.sampled_from(["", "", " ", "\n"]),
    spaces,
    destinations,
    titles,
    spaces,
)
references = st.builds(
    lambda label, use, gap, url, title: f"[{label}]{use}\n\n[r1]:{gap}{url}{title}\n",
    labels,
    st.sampled_from(["[r1]", "[R1]", "[ r1 ]"]),
    spaces.filter(lambda s: s.count("\n") <= 1),
    destinations,
    titles,
)
soup = st.text(alphabet="[]()<>!\n \t\"'`\\:/.abhtps", max_size=16)
pieces = st.one_of(inline_links, references, soup, words, targets)
model_text = st.lists(pieces, min_size=1, max_size=6).map("".join)


@given(model_text)
@example("[good.example](\nhttps://evil.example)")
@example("[good.example](https://evil.example\n)")
@example("[https://good.example]( <https://evil.example/x>\n 'title'\n)")
@example('[good.example](https://evil.example\n"pay\nnow")')
@example("![good.example](\n<https://evil.example/p.png>)")
@example("[bank.test][r1]\n\n[r1]:\n  https://evil.example/x\n  'title'\n")
def test_every_link_commonmark_finds_in_a_reply_shows_its_host(text: str) -> None:
    """Whatever the model wrote, each link or image the oracle reads in each posted part
    shows its host."""
    for part in split_markdown(text):
        for link in oracle_links(part):
            assert shows_its_host(link), (part, link)
