"""A link in a reply always shows the host it really opens."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
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
    ("![https://good.example](https://evil.example/cat.png)", None),
    ("`[https://good.example](https://evil.example)`", None),
    ("```\n[https://good.example](https://evil.example)\n<https://evil.example|x>\n```", None),
    ("\\[https://good.example](https://evil.example)", None),
    ("<https://plain.example>", None),
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
# What a reader sees: link destinations removed, mrkdwn links reduced to their label.
_DESTINATIONS = re.compile(r"\]\((?:<[^<>\n]*>|[^\s()<>`]*)\)")
_MRKDWN = re.compile(r"<[^!@#|<>\s][^|<>\s]*\|([^<>]*)>")


def visible(text: str) -> str:
    return _MRKDWN.sub(r"\1", _DESTINATIONS.sub("]", text))


def address_hosts(label: str) -> list[str]:
    """The hosts an address-like label shows (what must not be left pointing elsewhere)."""
    return re.findall(r"(?:https://|www\.)([a-z0-9.-]+)", label.replace("*", ""))


@given(labels, hosts, paths, surroundings, surroundings)
def test_a_markdown_link_shows_its_real_host(
    label: str, host: str, path: str, before: str, after: str
) -> None:
    """Whatever the label says, the real host is visible, and an address label for another
    host is gone."""
    target = f"https://{host}/{path}"
    revealed = reveal_link_hosts(f"{before}[{label}]({target}){after}")
    assert host in visible(revealed)
    misleading = any(shown != host for shown in address_hosts(label))
    if misleading and " " not in label.strip():
        assert f"[{label}](" not in revealed


@given(labels.filter(lambda label: "|" not in label), hosts, paths, surroundings, surroundings)
def test_a_mrkdwn_link_shows_its_real_host(
    label: str, host: str, path: str, before: str, after: str
) -> None:
    """The same for Slack's `<target|label>` form."""
    target = f"https://{host}/{path}"
    revealed = reveal_link_hosts(f"{before}<{target}|{label}>{after}")
    assert host in visible(revealed)


@given(st.text(), st.text(alphabet="[]()<>|`\\!:/ab.x \n", max_size=60))
def test_any_text_is_revealed_without_raising(text: str, markupish: str) -> None:
    """Arbitrary text and bracket soup pass through; text without links is unchanged."""
    reveal_link_hosts(text + markupish)
    if not set(text) & set("[]<>"):
        assert reveal_link_hosts(text) == text
