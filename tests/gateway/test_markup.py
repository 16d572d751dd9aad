"""Slack markup becomes the plain text a person reads, storable and unforgeable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.text.markup import clean_text, mentioned_user_ids, slack_to_text

NAMES = {"U1": "Ada", "U2": "Grace"}

CONVERSIONS = [
    ("<@U1>", "@Ada"),
    ("<@U1|ada.l>", "@Ada"),
    ("<@U9|someone>", "@someone"),
    ("<@U9>", "@U9"),
    ("<#C1|general>", "#general"),
    ("<#C1>", "#C1"),
    ("<!here>", "@here"),
    ("<!channel>", "@channel"),
    ("<!everyone>", "@everyone"),
    ("<!here|here>", "@here"),
    ("<!subteam^S123|@team>", "@team"),
    ("<!subteam^S123>", "@S123"),
    ("<!date^1392734382^{date}|Feb 18, 2014>", "Feb 18, 2014"),
    ("<https://example.com|label>", "label (https://example.com)"),
    ("<https://example.com>", "https://example.com"),
    ("<https://example.com|example.com>", "example.com"),
    ("<mailto:a@b.c|a@b.c>", "a@b.c"),
    ("<mailto:a@b.c>", "a@b.c"),
    ("<https://x.io/?a=1&amp;b=2|a &amp; b>", "a & b (https://x.io/?a=1&b=2)"),
    ("1 &lt; 2 &amp;&amp; 3 &gt; 2", "1 < 2 && 3 > 2"),
    ("&lt;@U1&gt;", "<@U1>"),
    ("&lt;!channel&gt;", "<!channel>"),
    ("&amp;lt;", "&lt;"),
    ("a < b", "a < b"),
    ("hi <@U1> and <@U2>, see <#C1|ops>", "hi @Ada and @Grace, see #ops"),
    ("nul\x00here", "nul\ufffdhere"),
    ("lone \ud800 surrogate", "lone \ufffd surrogate"),
]

BOT_MENTIONS = [
    ("<@UBOT> hello", "hello"),
    ("<@UBOT|threadgate>   hello", "hello"),
    ("hey <@UBOT> what's up", "hey what's up"),
    ("<@UBOT>", ""),
    ("<@UBOT> ask <@U1>", "ask @Ada"),
]


@pytest.mark.parametrize(("raw", "expected"), CONVERSIONS)
def test_slack_sequences_become_plain_text(raw: str, expected: str) -> None:
    """Each Slack sequence renders as the text a reader sees on screen."""
    assert slack_to_text(raw, user_names=NAMES) == expected


@pytest.mark.parametrize(("raw", "expected"), BOT_MENTIONS)
def test_bot_mention_is_removed_with_following_whitespace(raw: str, expected: str) -> None:
    """The bot's own mention disappears, together with the whitespace after it."""
    assert slack_to_text(raw, user_names=NAMES, bot_user_id="UBOT") == expected


def test_mentioned_user_ids_in_order_without_repeats() -> None:
    """Mentioned ids come back in order of appearance, each once, labels ignored."""
    raw = "<@U2> <@U1|ada> <#C1> <@U2> &lt;@U3&gt; <!here>"
    assert mentioned_user_ids(raw) == ["U2", "U1"]


def test_clean_text_keeps_ordinary_text() -> None:
    """Cleaning leaves ordinary Unicode alone and replaces only NUL and lone surrogates."""
    assert clean_text("héllo 👋\x00\udfff") == "héllo 👋\ufffd\ufffd"


@given(st.text())
def test_any_text_converts_to_storable_text(raw: str) -> None:
    """Arbitrary text never raises and comes out without NUL, encodable as UTF-8."""
    text = slack_to_text(raw, user_names=NAMES, bot_user_id="UBOT")
    assert "\x00" not in text
    text.encode("utf-8")


@given(st.text())
def test_mentioned_user_ids_never_raises(raw: str) -> None:
    """Arbitrary text yields a list of distinct ids."""
    ids = mentioned_user_ids(raw)
    assert len(ids) == len(set(ids))


@given(st.text().filter(lambda t: not set(t) & set("<>&")))
def test_text_without_markup_characters_is_unchanged(raw: str) -> None:
    """Text with no `<`, `>` or `&` comes out as it went in, apart from cleaning."""
    assert slack_to_text(raw, user_names=NAMES) == clean_text(raw)


@given(st.text(), st.text(), st.sampled_from(["<@UBOT>", "<@UBOT|bot>"]))
def test_bot_mention_is_always_removed(before: str, after: str, mention: str) -> None:
    """Wherever the bot is mentioned, the output never names it."""
    text = slack_to_text(f"{before}{mention}{after}", bot_user_id="UBOT")
    assert "UBOT" not in text or "UBOT" in before + after


plain = st.text().filter(lambda t: not set(t) & set("<>&"))


@given(plain, plain)
def test_bot_mention_leaves_the_surrounding_text(before: str, after: str) -> None:
    """A bot mention anywhere leaves the text around it, less the whitespace after it."""
    text = slack_to_text(f"{before}<@UBOT> {after}", bot_user_id="UBOT")
    assert text == clean_text(before + after.lstrip())
