"""A reply rendered while it streams: nothing shown can ping anyone or hide a link's host,
and however the text is cut up, what is shown is the whole text's rendering."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from gateway.text.live_render import LiveRenderer, render_settled

JOINER = "\u200d"
PING = re.compile(r"<[!@#]|(?<![\w@])@(?:here|channel|everyone|group)\b", re.IGNORECASE)
# Text made of the pieces that matter: mentions, entities, links, brackets, code, newlines.
PIECES = st.sampled_from(
    [
        "<!here>",
        "<!channel>",
        "<@U123>",
        "<#C1|ops>",
        "&lt;!here&gt;",
        "@here",
        "@channel",
        "[google.com](https://evil.example)",
        "[docs](https://docs.example/a)",
        "[google.com]\n(https://evil.example)",
        "[google.com] (https://evil.example)",
        "![google.com](https://evil.example/i.png)",
        "[google.com][r]",
        "[r]: https://evil.example",
        "[r]",
        "<https://evil.example|the google.com page>",
        "<https://gооgle.com>",
        "https://gооgle.com/x",
        "https://good.example@evil.example",
        "www.",
        "http",
        "[",
        "]",
        "(",
        ")",
        "`",
        "```\n",
        "\n",
        "\n\n",
        " ",
        "word",
        "a@b.com",
        "Q&A",
        "<",
        "&",
        "@",
    ]
)
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=30).map("".join)


def streamed(text: str, cuts: list[int]) -> tuple[list[str], str]:
    renderer = LiveRenderer()
    shown, start = [], 0
    for cut in sorted({c % (len(text) + 1) for c in cuts} | {len(text)}):
        shown.append(renderer.feed(text[start:cut]))
        start = cut
    return shown, renderer.flush()


@given(TEXTS, st.lists(st.integers(0, 400), max_size=20))
@example("0@here```\n", [1])  # no broadcast in the whole text, but one in the append
@example("<![google.com](https://evil.example/i.png)[r]: https://evil.example", [])  # `<` `!`
@example("&lt;![google.com](https://evil.example/i.png) x", [])
def test_nothing_shown_can_ping(text: str, cuts: list[int]) -> None:
    shown, rest = streamed(text, cuts)
    for piece in [*shown, "".join(shown) + rest]:
        assert not PING.search(piece), piece


@given(TEXTS, st.lists(st.integers(0, 400), max_size=20))
# A link after a fence line, or inside a code span, is code: its host is not revealed,
# whether the fence or span opened in an earlier piece or is closed by a held-back one.
@example("```\n[google.com](https://evil.example)", [])
@example("```\n[google.com](https://evil.example)", [4])
@example("`a\n[x](https://y.com)\nb`", [3])
@example("`[google.com](https://evil.example)```\n<!here>`", [])
@example("0@here```\n", [1])
# After a closed fence a link is prose again; a URL is judged whole, wherever it is cut.
@example("```\n```\n[google.com](https://evil.example)", [])
@example("https://good.example@evil.example<!here>", [])
@example("[google.com](https://evil.example)[https://gооgle.com/x[google.com]\n(x)", [])
@example("\\[google.com](https://evil.example)", [1])
# A closing run of backticks at the end of a piece may still grow into one closing nothing.
@example("`<https://evil.example|the google.com page>```\n", [44])
@example("https://good.example@evil.example.```\n<0````\n", [43])
def test_what_is_shown_is_the_whole_texts_rendering(text: str, cuts: list[int]) -> None:
    """Up to invisible joiners (the prose rule is applied to pieces, not the whole)."""
    shown, rest = streamed(text, cuts)
    assert ("".join(shown) + rest).replace(JOINER, "") == render_settled(text).replace(JOINER, "")


def test_a_link_label_is_shown_only_with_its_host() -> None:
    renderer = LiveRenderer()
    shown = "".join(renderer.feed(c) for c in "see [google.com](https://evil.example) now\n")
    assert "google.com](https://evil.example) (evil.example)" in shown
    assert renderer.feed("[unfinished") == ""


def test_a_link_whose_url_is_on_the_next_line_is_shown_only_with_its_host() -> None:
    """`[label]` at the end of a line waits for the next line: it may open its `(url)`."""
    renderer = LiveRenderer()
    assert renderer.feed("see [google.com]\n") == "see "
    assert renderer.feed("(https://evil.example) now") == ""
    shown = renderer.feed("\n")
    assert shown == "[google.com]\n(https://evil.example) (evil.example) now\n"


def test_a_reference_definition_streamed_defines_nothing() -> None:
    """While a reply streams, `[text][ref]` reads as written: a definition at its end,
    which would make it a link nobody checked, is shown escaped."""
    renderer = LiveRenderer()
    shown = renderer.feed("[google.com][r] is it.\n\n[r]: https://evil.example\n")
    assert shown == "[google.com][r] is it.\n\n\\[r]: https://evil.example\n"


def test_a_bare_url_is_shown_whole_with_its_ascii_host() -> None:
    """A bare URL is held back until it ends, so its host is judged on all of it."""
    renderer = LiveRenderer()
    shown = [renderer.feed(c) for c in "go https://gооgle.com/x now"]
    assert "https://gооgle.com/x (xn--ggle-55da.com) " in shown


def test_plain_words_show_at_once() -> None:
    renderer = LiveRenderer()
    assert renderer.feed("Hello") == "Hello" and renderer.feed(" there, ") == " there, "
