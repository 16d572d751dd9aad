"""A link in a reply always shows the host it really opens."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.text.links import reveal_link_hosts
from gateway.text.rendering import render_reply

CASES = [
    # A label that is an address for another host is dropped: the target shows itself.
    ("[https://good.example](https://evil.example)", "<https://evil.example>"),
    ("<https://evil.example|https://good.example>", "<https://evil.example>"),
    ("[**www.good.example**](https://evil.example/x)", "<https://evil.example/x>"),
    ("[mailto:boss@good.example](mailto:boss@evil.example)", "<mailto:boss@evil.example>"),
    ("[https://good.example](https:evil.example)", "<https:evil.example>"),
    ("[https://good.example](https:\\\\evil.example)", "<https:\\\\evil.example>"),
    # Words keep their label and get the real host.
    ("[the report](https://evil.example/r)", "[the report](https://evil.example/r) (evil.example)"),
    ("<https://evil.example/r|the report>", "<https://evil.example/r|the report> (evil.example)"),
    ("[good.example](https://evil.example)", "[good.example](https://evil.example) (evil.example)"),
    (
        "[README.md](https://git.example/README.md)",
        "[README.md](https://git.example/README.md) (git.example)",
    ),
    ("[see [1]](https://evil.example)", "[see [1]](https://evil.example) (evil.example)"),
    ("[`https://good.example`](https://evil.example)", "<https://evil.example>"),
    # Honest labels stay as written.
    ("[docs.python.org](https://docs.python.org/3/)", None),
    ("[https://www.python.org](https://python.org/)", None),
    ("[Python docs at docs.python.org](https://docs.python.org)", None),
    ("<https://x.test/?a=1|https://x.test>", None),
    (
        "[email me](mailto:ada@x.test) at [ada@x.test](mailto:ada@x.test)",
        "[email me](mailto:ada@x.test) (x.test) at [ada@x.test](mailto:ada@x.test)",
    ),
    # Disguised targets always show their ASCII host.
    (
        "[https://good.example](https://good.example@evil.example/)",
        "<https://good.example@evil.example/> (evil.example)",
    ),
    ("[gооgle.com](https://gооgle.com)", "[gооgle.com](https://gооgle.com) (xn--ggle-55da.com)"),
    ("[google.com](https://gооgle.com)", "[google.com](https://gооgle.com) (xn--ggle-55da.com)"),
    # Nothing to reveal, or not a link at all.
    ("[top](#section)", None),
    ("`[https://good.example](https://evil.example)`", None),
    ("```\n[https://good.example](https://evil.example)\n<https://evil.example|x>\n```", None),
    ("\\[https://good.example](https://evil.example)", None),
    ("<https://plain.example>", None),
    ("see https://plain.example/x.", None),
    # A line break or spaces before the destination, as older renderers accept.
    (
        "[the report]\n(https://evil.example/r)",
        "[the report]\n(https://evil.example/r) (evil.example)",
    ),
    ("[https://good.example] (https://evil.example)", "<https://evil.example>"),
    ("[a]\n\n(https://evil.example)", None),
    # References: the use shows the host its definition opens, wherever that stands, and
    # is written inline then (`[d] (evil.example)` could read as a link to "evil.example").
    (
        "[the docs][d] and [d]\n\n[D]: https://evil.example/x",
        "[the docs](<https://evil.example/x>) (evil.example) and [d](<https://evil.example/x>)"
        " (evil.example)\n\n[D]: https://evil.example/x",
    ),
    (
        "[Docs][]\n\n[docs]: <https://evil.example>",
        "[Docs](<https://evil.example>) (evil.example)\n\n[docs]: <https://evil.example>",
    ),
    (
        "[https://good.example]\n\n[https://good.example]: https://evil.example 'Good'",
        "<https://evil.example>\n\n[https://good.example]: https://evil.example 'Good'",
    ),
    ("[docs.example][d]\n[d]: https://docs.example/", None),
    ("[not defined][x] [y]", None),
    # Images: Slack shows one as a link whose text is its alt text.
    ("![https://good.example](https://evil.example/cat.png)", "<https://evil.example/cat.png>"),
    ("![a cat](https://evil.example/c.png)", "![a cat](https://evil.example/c.png) (evil.example)"),
    (
        "[![logo](https://img.example/l.png)](https://evil.example)",
        "[![logo](https://img.example/l.png) (img.example)](https://evil.example) (evil.example)",
    ),
    (
        "![a cat][c]\n\n[c]: https://evil.example/c.png",
        "![a cat](<https://evil.example/c.png>) (evil.example)\n\n[c]: https://evil.example/c.png",
    ),
    # Autolinks and bare URLs are their own text: only a disguised host is added.
    ("<https://gооgle.com/x>", "<https://gооgle.com/x> (xn--ggle-55da.com)"),
    ("go to https://gооgle.com/x.", "go to https://gооgle.com/x (xn--ggle-55da.com)."),
    ("(https://good.example@evil.example/)", "(https://good.example@evil.example/ (evil.example))"),
    ("https://evil.example/x|https://good.example", None),
    # A link holds no link: the inner one is the link.
    (
        "[a [b](https://b.example)](https://c.example)",
        "[a [b](https://b.example) (b.example)](https://c.example)",
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_links_show_the_host_they_open(text: str, expected: str | None) -> None:
    """Each link is kept, given its host, or shown as its bare target (module doc)."""
    assert reveal_link_hosts(text) == (text if expected is None else expected)


def test_replies_reveal_link_hosts_in_block_and_fallback() -> None:
    """render_reply applies it: the block and the fallback both name the real host."""
    (message,) = render_reply("Pay here: [https://bank.example](https://evil.example/pay)")
    assert message.blocks[0]["text"] == "Pay here: <https://evil.example/pay>"
    assert "bank.example" not in message.text and "evil.example" in message.text


# --- properties ----------------------------------------------------------------------------

HOSTS = ["evil.example", "good.example", "bank.test", "xn--ggle-55da.com", "sub.evil.example"]
hosts = st.sampled_from(HOSTS)
paths = st.text(alphabet="abc/-_.=?&%", max_size=12)
words = st.text(alphabet="abcdefgh XYZ.:/-*_~", min_size=1, max_size=12).filter(str.strip)
labels = st.one_of(
    words,
    st.builds(lambda h, p: f"https://{h}/{p}", hosts, paths),
    st.builds(lambda h: f"www.{h}", hosts),
    st.builds(lambda h: f"**{h}**", hosts),
    st.builds(lambda h, w: f"{w} {h}", hosts, words),
    st.builds(lambda h, w: f"`{h}` {w}", hosts, words),
    st.builds(lambda w, v: f"{w} [{v}]", words, words),
)
surroundings = st.text(alphabet="abc \n.,", max_size=20)
# What a reader sees: link destinations, references and definitions removed, mrkdwn links
# reduced to their label.
_DESTINATIONS = re.compile(r"\][ \t]*(?:\n[ \t]*)?\((?:<[^<>\n]*>|[^\s()<>`]*)\)")
_REFERENCES = re.compile(r"\]\[[^\[\]]*\]")
_DEFINITIONS = re.compile(r"^\[.*\]:.*$", re.MULTILINE)
_MRKDWN = re.compile(r"<[^!@#|<>\s][^|<>\s]*\|([^<>]*)>")


def visible(text: str) -> str:
    text = _DEFINITIONS.sub("", text)
    return _MRKDWN.sub(r"\1", _REFERENCES.sub("]", _DESTINATIONS.sub("]", text)))


def address_hosts(label: str) -> list[str]:
    """The hosts an address-like label shows (what must not be left pointing elsewhere)."""
    return re.findall(r"(?:https://|www\.)([a-z0-9.-]+)", label.replace("*", ""))


# Every Markdown form a reader may see open a link: `text` written, then what follows it.
FORMS = {
    "inline": ("[{label}]({target})", ""),
    "line break before the URL": ("[{label}]\n({target})", ""),
    "space before the URL": ("[{label}] ({target})", ""),
    "image": ("![{label}]({target})", ""),
    "full reference": ("[{label}][r1]", "\n\n[r1]: {target}"),
    "collapsed reference": ("[{label}][]", "\n\n[{label}]: {target}"),
    "shortcut reference": ("[{label}]", "\n\n[{label}]: <{target}>"),
    "image by reference": ("![{label}][r1]", "\n\n[R1]: {target} 'title'"),
}


@given(st.sampled_from(sorted(FORMS)), labels, hosts, paths, surroundings, surroundings)
def test_a_markdown_link_shows_its_real_host(
    form: str, label: str, host: str, path: str, before: str, after: str
) -> None:
    """In every form, whatever the label says, the real host is visible, and an address
    label for another host is gone."""
    target = f"https://{host}/{path}"
    # A label with brackets in it is no reference's label (CommonMark), so defines nothing.
    assume("[" not in label or "{label}]:" not in FORMS[form][1])
    written, defined = (part.format(label=label, target=target) for part in FORMS[form])
    revealed = reveal_link_hosts(f"{before}{written}{after}{defined}")
    assert host in visible(revealed)
    misleading = any(shown != host for shown in address_hosts(label))
    if misleading and " " not in label.strip():
        assert written not in _DEFINITIONS.sub("", revealed)


@given(hosts, paths, surroundings, surroundings, st.booleans())
def test_an_autolink_or_bare_url_in_another_script_shows_its_ascii_host(
    host: str, path: str, before: str, after: str, bracketed: bool
) -> None:
    """A URL that is its own text but whose host is a look-alike in another script (or
    has credentials before it) is followed by the host as DNS reads it."""
    disguised = host.replace("evil", "еvil").replace("good", "gооd")  # Cyrillic е, о
    if disguised != host:
        url, ascii_host = f"https://{disguised}/{path}", disguised.encode("idna").decode()
    else:
        url, ascii_host = f"https://a.test@{host}/{path}", host
    shown = f"<{url}>" if bracketed else url
    revealed = reveal_link_hosts(f"{before} {shown} {after}")
    assert f" ({ascii_host})" in revealed


@given(labels.filter(lambda label: "|" not in label), hosts, paths, surroundings, surroundings)
def test_a_mrkdwn_link_shows_its_real_host(
    label: str, host: str, path: str, before: str, after: str
) -> None:
    """The same for Slack's `<target|label>` form."""
    target = f"https://{host}/{path}"
    revealed = reveal_link_hosts(f"{before}<{target}|{label}>{after}")
    assert host in visible(revealed)


@given(st.text(), st.text(alphabet="[]()<>|`\\!:/ab.x \nhtps:w", max_size=60))
def test_any_text_is_revealed_without_raising(text: str, markupish: str) -> None:
    """Arbitrary text and bracket soup pass through; text without links is unchanged."""
    reveal_link_hosts(text + markupish)
    if not set(text) & set("[]<>") and "://" not in text and "www." not in text.lower():
        assert reveal_link_hosts(text) == text
