"""A task card's title and details are the model's words: like a post, they can ping no
one and no link in them hides the host it opens."""

from __future__ import annotations

import re

from hypothesis import assume, example, given
from hypothesis import strategies as st

from agent import Step
from gateway.delivery.streams import task_update

PING = re.compile(r"<[!@#]|(?<![\w@])@(?:here|channel|everyone|group)\b", re.IGNORECASE)
PIECES = st.sampled_from(
    [
        "<!here>",
        "<!channel>",
        "<!everyone>",
        "<!subteam^S1>",
        "<@U123>",
        "<#C1|ops>",
        "&lt;!here&gt;",
        "&#60;!channel>",
        "@here",
        "@channel",
        "`<!here>`",
        "[google.com](https://evil.example)",
        "<https://evil.example|google.com>",
        "agent: ",
        " ",
        "<",
        "!",
        "@",
        "`",
    ]
)
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=20).map("".join)
HOSTS = st.from_regex(r"[a-z]{1,8}\.(?:example|test)", fullmatch=True)


def shown(title: str, detail: str = "") -> list[str]:
    card = task_update(Step("T1:C1:1.0:0:0", title, "pending", detail))
    return [card["title"], card.get("details", "")]


@given(TEXTS, TEXTS)
@example("<!channel> look it up", "`<@U123>` and @here")
def test_no_card_can_ping(title: str, detail: str) -> None:
    """Whatever the title and details say, no mention or broadcast forms in them."""
    for text in shown(title, detail):
        assert not PING.search(text), text


@given(TEXTS.filter(lambda t: "`" not in t and "[" not in t and "]" not in t), HOSTS, HOSTS)
def test_a_link_in_a_card_shows_the_host_it_opens(words: str, label: str, real: str) -> None:
    """A link whose label names another host shows the host it really opens."""
    assume(label != real)
    [title, _] = shown(f"agent: {words} [{label}](https://{real}/page)")
    assert f"({real})" in title or f"<https://{real}/page>" in title


def test_a_plain_title_is_shown_as_written() -> None:
    """A title with nothing to neutralize reaches Slack unchanged."""
    assert shown("agent: look it up with echo") == ["agent: look it up with echo", ""]
