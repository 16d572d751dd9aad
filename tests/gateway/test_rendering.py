"""Model Markdown becomes Slack messages that render well, fit, and can never ping."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.text.links import reveal_link_hosts
from gateway.text.markup import escape_entities
from gateway.text.rendering import (
    BLOCK_LIMIT,
    EMPTY_REPLY,
    FALLBACK_LIMIT,
    MIN_LIMIT,
    SlackMessage,
    neutralize_mentions,
    render_reply,
    split_markdown,
)

ZWJ = "\u200d"
FORBIDDEN = ("<!", "<@", "<#")
# What Slack can turn into a ping or a mention: a complete `<!…>`, `<@…>` or `<#…>`
# sequence (its target has no space), a `<!here`-style command, or a bare `@here` word —
# and the entity spellings of `<` and `@`, in case Slack decodes them first.
PING = re.compile(
    r"(?:<|&(?:lt|LT);|&#0*60;|&#[xX]0*3[cC];)"
    r"(?:[!@#][^\s<>|&]+[|>&]|!(?:here|channel|everyone|group|subteam|date)\b)"
    r"|(?<![\w@])(?:@|&#0*64;|&#[xX]0*40;)(?:here|channel|everyone|group)\b",
    re.IGNORECASE,
)
FENCE = re.compile(r" *(`{3,}(?=[^`]*$)|~{3,}).*")

CODE = "```python\nfor item in items:\n    if a < b and c > d:\n        print(a & b)\n```"
TABLE = "| name | value |\n| --- | --- |\n| a < b | x & y |\n| `List<int>` | 2 |"


# --- helpers ---------------------------------------------------------------------------


def non_whitespace(text: str) -> str:
    """The text's characters other than whitespace and zero-width joiners."""
    return "".join(text.replace(ZWJ, "").split())


def is_subsequence(needle: str, haystack: str) -> bool:
    """Whether `needle` appears in `haystack` in order, possibly with gaps."""
    remaining = iter(haystack)
    return all(char in remaining for char in needle)


def leaves_fence_open(part: str) -> bool:
    """Whether a fenced code block is still open at the end of `part` (lines ≤ 100 chars)."""
    opening: str | None = None
    for line in part.split("\n"):
        stripped = line.strip(" ")
        if opening is None:
            match = FENCE.fullmatch(line) if len(line) <= 100 else None
            opening = match.group(1) if match else None
        elif len(opening) <= len(stripped) <= len(line) <= 100 and set(stripped) == {opening[0]}:
            opening = None
    return opening is not None


def block_text(message: SlackMessage) -> str:
    """The text of the message's single markdown block."""
    (block,) = message.blocks
    assert block["type"] == "markdown"
    text = block["text"]
    assert isinstance(text, str)
    return text


# --- strategies --------------------------------------------------------------------------

snippets = st.sampled_from(
    [
        "",
        "```",
        "```python",
        "~~~",
        "````",
        "| a | b |",
        "|---|---|",
        "<!channel>",
        "<!here> now",
        "<@U123> hi",
        "<#C1|general>",
        "<!subteam^S1|@team>",
        "&lt;!everyone&gt;",
        "&#60;!here>",
        "a < b && c > d",
        "<https://example.com>",
        "[label](https://example.com)",
        "- item",
        "    indented",
    ]
)
repeated = st.tuples(st.one_of(snippets, st.text(max_size=20)), st.integers(1, 80))
lines = st.one_of(
    snippets,
    st.text(max_size=80),
    st.text(alphabet="ab <!@#>&`~\n", max_size=600),
    repeated.map(lambda line: line[0] * line[1]),
)
markdownish = st.tuples(st.lists(lines, max_size=60), st.integers(1, 8)).map(
    lambda doc: "\n".join(doc[0] * doc[1])
)
limits = st.integers(min_value=MIN_LIMIT, max_value=1_500)

words = st.text(alphabet="abcdefgh <>!@#&", min_size=1, max_size=12).map(str.strip).filter(bool)
paragraphs = st.lists(words, min_size=1, max_size=30).map(" ".join)
tables = st.lists(st.tuples(words, words), min_size=1, max_size=8).map(
    lambda rows: "\n".join(["| a | b |", "| --- | --- |", *(f"| {x} | {y} |" for x, y in rows)])
)
codes = st.tuples(
    st.sampled_from(["", "python", "sql"]),
    st.lists(st.text(alphabet="xyz <>!@#&();=", max_size=60), max_size=20),
).map(lambda code: "\n".join([f"```{code[0]}", *code[1], "```"]))
documents = st.tuples(
    st.lists(st.one_of(paragraphs, tables, codes), min_size=1, max_size=25), st.integers(1, 4)
).map(lambda doc: doc[0] * doc[1])


# --- escaping and neutralizing ---------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a & b", "a &amp; b"),
        ("<!channel>", "&lt;!channel&gt;"),
        ("&lt;", "&amp;lt;"),
        ("x > 1", "x &gt; 1"),
        ("plain", "plain"),
    ],
)
def test_escape_mrkdwn_escapes_the_three_control_characters(raw: str, escaped: str) -> None:
    """`&`, `<` and `>` become Slack's entities; nothing else changes."""
    assert escape_entities(raw) == escaped


@pytest.mark.parametrize(
    ("raw", "neutral"),
    [
        ("<!channel>", f"<{ZWJ}!channel>"),
        ("<!here> <!everyone>", f"<{ZWJ}!here> <{ZWJ}!everyone>"),
        ("<!subteam^S1|@team>", f"<{ZWJ}!subteam^S1|@team>"),
        ("<@U123>", f"<{ZWJ}@U123>"),
        ("<#C123|general>", f"<{ZWJ}#C123|general>"),
        ("&lt;!here&gt;", f"&lt;{ZWJ}!here&gt;"),
        ("&#60;!here>", f"&#60;{ZWJ}!here>"),
        ("&LT;!here&GT;", f"&LT;{ZWJ}!here&GT;"),
        ("&#x3C;@U1>", f"&#x3C;{ZWJ}@U1>"),
        ("a < b", "a < b"),
        ("List<int> & Map<K, V>", "List<int> & Map<K, V>"),
        ("<https://example.com>", "<https://example.com>"),
        (f"<{ZWJ}!here>", f"<{ZWJ}!here>"),
        ("<!DOCTYPE html> in prose", f"<{ZWJ}!DOCTYPE html> in prose"),
        ("@here look", f"@{ZWJ}here look"),
        (
            "ping @channel, @Everyone and @group!",
            f"ping @{ZWJ}channel, @{ZWJ}Everyone and @{ZWJ}group!",
        ),
        ("&#64;here", f"&#64;{ZWJ}here"),
        ("<@here>", f"<{ZWJ}@{ZWJ}here>"),
        ("mail ops@here.example or @heretic", "mail ops@here.example or @heretic"),
        (f"@{ZWJ}here", f"@{ZWJ}here"),
    ],
)
def test_neutralize_mentions_breaks_only_mention_sequences(raw: str, neutral: str) -> None:
    """A joiner goes between `<` and `!`/`@`/`#`, and after the `@` of a bare broadcast;
    other brackets, entities and addresses stay as written."""
    assert neutralize_mentions(raw) == neutral


CODE_KEPT = [
    "`<!DOCTYPE html>`",
    "```html\n<!DOCTYPE html>\n<!-- comment -->\n<p>a &lt; b</p>\n```",
    "``<!-- a `tick` -->``",
    "`List<@NonNull String>` and `Map<@A K, V>`",
    "```powershell\n<# .SYNOPSIS\n  Does it. #>\n```",
    "~~~\n<#if user??>hi</#if>\n~~~",
    "```\nunclosed <!-- comment",
]


@pytest.mark.parametrize("code", CODE_KEPT)
def test_code_that_cannot_ping_comes_out_byte_identical(code: str) -> None:
    """HTML doctypes and comments, Java type annotations, PowerShell and FreeMarker comments
    in code spans and fenced blocks get no joiner: they cannot become mentions."""
    assert neutralize_mentions(code) == code
    (message,) = render_reply(f"Here:\n\n{code}")
    assert code in block_text(message) or code + "\n```" in block_text(message)


@pytest.mark.parametrize(
    ("raw", "neutral"),
    [
        ("`<!here>`", f"`<{ZWJ}!here>`"),
        ("`<!channel|channel>`", f"`<{ZWJ}!channel|channel>`"),
        ("```\n<@U123> and <#C1|ops>\n```", f"```\n<{ZWJ}@U123> and <{ZWJ}#C1|ops>\n```"),
        ("`<!subteam^S1>`", f"`<{ZWJ}!subteam^S1>`"),
        (
            "`<!date^1392734382^{date} at {time}|x>`",
            f"`<{ZWJ}!date^1392734382^{{date}} at {{time}}|x>`",
        ),
        ("`&lt;!here&gt;`", f"`&lt;{ZWJ}!here&gt;`"),
        ("`@here`", f"`@{ZWJ}here`"),
    ],
)
def test_slack_sequences_in_code_are_still_neutralized(raw: str, neutral: str) -> None:
    """What Slack could resolve into a ping gets the joiner in code too: no pings first."""
    assert neutralize_mentions(raw) == neutral


# --- render_reply ----------------------------------------------------------------------


def test_short_reply_is_one_message_with_one_markdown_block() -> None:
    """A short reply is one message: the Markdown in a block, escaped text as fallback."""
    (message,) = render_reply("**Done** — see <https://x.io> & the table.")
    assert block_text(message) == "**Done** — see <https://x.io> & the table."
    assert message.text == "**Done** — see &lt;https://x.io&gt; &amp; the table."


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n"])
def test_empty_reply_yields_a_placeholder(text: str) -> None:
    """Empty or whitespace-only text still produces one message, with a placeholder."""
    (message,) = render_reply(text)
    assert block_text(message) == EMPTY_REPLY
    assert message.text == EMPTY_REPLY


@pytest.mark.parametrize(
    "text", ["<!channel> deploy", "ping <!here>", "hey <@U123>", "<#C1|ops>", "<!subteam^S1>"]
)
def test_reply_cannot_ping(text: str) -> None:
    """Mention sequences written by the model reach Slack inert, in block and fallback."""
    (message,) = render_reply(text)
    for rendered in (block_text(message), message.text):
        assert not any(sequence in rendered for sequence in FORBIDDEN)


def test_allow_mentions_keeps_mention_sequences() -> None:
    """With mentions allowed, `<!here>` stays intact in block and fallback; `&` is escaped."""
    (message,) = render_reply("<!here> a & b < c", allow_mentions=True)
    assert block_text(message) == "<!here> a & b < c"
    assert message.text == "<!here> a &amp; b &lt; c"


def test_code_and_tables_are_not_html_escaped_in_the_block() -> None:
    """Code blocks and tables keep their `<`, `>` and `&` as written."""
    (message,) = render_reply(f"{CODE}\n\n{TABLE}")
    assert block_text(message) == f"{CODE}\n\n{TABLE}"


def test_long_fallback_is_truncated_with_an_ellipsis() -> None:
    """The fallback text stops at FALLBACK_LIMIT characters and says it was cut."""
    (message,) = render_reply("&" * 5_000)
    assert len(message.text) <= FALLBACK_LIMIT
    assert message.text.endswith("&amp;…")


def test_long_reply_splits_on_paragraphs() -> None:
    """A reply longer than the limit becomes several messages, cut between paragraphs."""
    paragraphs = [f"Paragraph {n}. " + "word " * 100 for n in range(60)]
    messages = render_reply("\n\n".join(paragraphs))
    assert len(messages) > 1
    texts = [block_text(message) for message in messages]
    assert all(len(text) <= BLOCK_LIMIT for text in texts)
    assert [chunk for text in texts for chunk in text.split("\n\n")] == paragraphs


# --- split_markdown ----------------------------------------------------------------------


def test_code_block_is_moved_whole_rather_than_split() -> None:
    """A code block that fits in a part starts a new part instead of being cut."""
    text = "intro " * 40 + "\n\n" + CODE
    assert len(text) > 300
    assert split_markdown(text, limit=300) == ["intro " * 40, CODE]


def test_long_code_block_is_closed_and_reopened() -> None:
    """A code block longer than the limit is closed at a part's end and reopened after."""
    code = "```sql\n" + "\n".join(f"SELECT {n};" for n in range(200)) + "\n```"
    parts = split_markdown(code, limit=300)
    assert len(parts) > 1
    for part in parts:
        assert part.startswith("```sql\n") and part.endswith("\n```")
        assert not leaves_fence_open(part)


def test_unclosed_code_block_is_closed() -> None:
    """A code block the model forgot to close is closed in the part that holds it."""
    (part,) = split_markdown("look:\n\n~~~\ncode")
    assert part == "look:\n\n~~~\ncode\n~~~"


def test_overlong_line_is_cut() -> None:
    """A single line longer than the limit is cut into pieces that each fit."""
    parts = split_markdown("x" * 1_000, limit=300)
    assert parts == ["x" * 300, "x" * 300, "x" * 300, "x" * 100]


def test_cut_never_leaves_a_fence_line() -> None:
    """Cutting a long line never makes its tail a line that would open a code fence."""
    parts = split_markdown("a" * MIN_LIMIT + "```", limit=MIN_LIMIT)
    assert parts == ["a" * (MIN_LIMIT - 1), "a```"]


def test_cut_of_a_fence_like_code_line_terminates() -> None:
    """A long run of tildes inside a code block is cut even if every tail looks like a fence."""
    text = "```" + "p" * 87 + "\n" + "~" * 400 + "\n```"
    parts = split_markdown(text, limit=MIN_LIMIT)
    assert all(len(part) <= MIN_LIMIT and not leaves_fence_open(part) for part in parts)
    assert non_whitespace("".join(parts)).count("~") == 400


def test_limit_below_minimum_is_refused() -> None:
    """A limit too small to hold a fenced part is a usage error."""
    with pytest.raises(ValueError, match="at least"):
        split_markdown("text", limit=10)


# --- properties --------------------------------------------------------------------------


@given(st.text())
def test_any_text_renders_without_raising(text: str) -> None:
    """Arbitrary text renders to at least one message that fits Slack's limits."""
    messages = render_reply(text)
    assert messages
    assert all(len(block_text(m)) <= BLOCK_LIMIT for m in messages)


@given(markdownish, limits)
# A `<#` inside a code span whose target runs on past the closing backtick to a `&`.
@example(text="<#`&\n<#`&", limit=MIN_LIMIT)
# Harmless in the code span, but escaping the fallback makes the `<` after `@0` an `&lt;`.
@example(text="<@0<`\n<@0<`", limit=MIN_LIMIT)
def test_no_part_can_ping(text: str, limit: int) -> None:
    """No block or fallback holds a sequence or word Slack could turn into a ping, whatever
    the model wrote; the fallback holds no `<!`, `<@` or `<#` at all."""
    for message in render_reply(text, limit=limit):
        assert PING.search(block_text(message)) is None
        assert PING.search(message.text) is None
        assert not any(sequence in message.text for sequence in FORBIDDEN)


@given(markdownish.filter(lambda t: "`" not in t and "~" not in t), limits)
def test_no_part_outside_code_can_start_a_mention(text: str, limit: int) -> None:
    """Outside code no `<!`, `<@` or `<#` survives at all, known Slack form or not."""
    for message in render_reply(text, limit=limit):
        assert not any(sequence in block_text(message) for sequence in FORBIDDEN)


code_words = st.text(alphabet="abcdfgxyz", min_size=1, max_size=8)
harmless_code = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "<!DOCTYPE html>",
                "a < b",
                "x > y && z",
                "#include <stdio.h>",
                "@decorator",
                "user@example.com",
                "&lt;",
                '<div class="x">',
            ]
        ),
        code_words.map(lambda w: f"<!-- {w} -->"),
        code_words.map(lambda w: f"List<@NonNull {w}>"),
        code_words.map(lambda w: f"<# {w} #>"),
        code_words,
    ),
    min_size=1,
    max_size=6,
).map(" ".join)


@given(st.lists(st.tuples(harmless_code, st.booleans()), min_size=1, max_size=6), paragraphs)
def test_code_that_cannot_ping_is_never_touched(codes: list[tuple[str, bool]], prose: str) -> None:
    """Code spans and fenced blocks without a Slack sequence reach Slack byte-identical."""
    pieces = [
        f"```\n{code}\n```" if fenced else f"{prose} `{code}` {prose}" for code, fenced in codes
    ]
    (message,) = render_reply("\n\n".join(pieces), limit=BLOCK_LIMIT)
    for code, fenced in codes:
        assert (f"```\n{code}\n```" if fenced else f"`{code}`") in block_text(message)


@given(
    st.lists(
        st.one_of(
            words, st.sampled_from(["@here", "@channel", "@everyone", "@HERE", "(@here)", "x@here"])
        ),
        min_size=1,
        max_size=40,
    ).map(" ".join),
    limits,
)
def test_no_bare_broadcast_survives(text: str, limit: int) -> None:
    """`@here`, `@channel`, `@everyone` never reach Slack as the bare word, in any part."""
    for message in render_reply(text, limit=limit):
        assert PING.search(block_text(message)) is None and PING.search(message.text) is None


@given(markdownish, limits)
def test_every_part_fits_the_limit(text: str, limit: int) -> None:
    """Every block is at most `limit` characters and every fallback at most FALLBACK_LIMIT."""
    for message in render_reply(text, limit=limit):
        assert len(block_text(message)) <= limit
        assert len(message.text) <= FALLBACK_LIMIT


@given(markdownish, limits)
def test_splitting_keeps_content_and_order(text: str, limit: int) -> None:
    """Joining the parts gives back every non-whitespace character, in order."""
    joined = non_whitespace("".join(split_markdown(text, limit)))
    assert is_subsequence(non_whitespace(text), joined)


@given(markdownish.filter(lambda t: "`" not in t and "~" not in t), limits)
def test_splitting_without_fences_adds_nothing(text: str, limit: int) -> None:
    """Without code fences, the parts hold exactly the non-whitespace characters of the
    text with its links revealed."""
    joined = non_whitespace("".join(split_markdown(text, limit)))
    assert joined == non_whitespace(reveal_link_hosts(text))


@given(markdownish, limits)
def test_no_part_leaves_a_code_fence_open(text: str, limit: int) -> None:
    """Every fenced code block opened in a part is closed in the same part."""
    for part in split_markdown(text, limit):
        assert not leaves_fence_open(part)


@given(documents, limits)
def test_blocks_that_fit_are_never_split(blocks: list[str], limit: int) -> None:
    """Paragraphs, tables and code blocks that fit in a part arrive whole in one part."""
    parts = split_markdown("\n\n".join(blocks), limit)
    for block in blocks:
        neutral = neutralize_mentions(block)
        if len(neutral) <= limit:
            assert any(neutral in part for part in parts)


@given(documents, limits)
def test_each_part_has_an_even_number_of_fence_lines(blocks: list[str], limit: int) -> None:
    """In well-formed Markdown, every part has as many closing ``` lines as opening ones."""
    for part in split_markdown("\n\n".join(blocks), limit):
        assert sum(line.startswith("```") for line in part.split("\n")) % 2 == 0


@given(documents, limits)
def test_parts_keep_the_original_order(blocks: list[str], limit: int) -> None:
    """Parts joined again give the document's text in its original order."""
    text = neutralize_mentions("\n\n".join(blocks))
    joined = "".join(split_markdown(text, limit))
    assert is_subsequence(non_whitespace(text), non_whitespace(joined))
