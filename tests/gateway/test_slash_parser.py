"""What a person types after the slash command becomes one subcommand, whatever they type
(issue 45): the words in any case and spacing, `schedules delete ID`, and everything else
an `Unknown` that quotes at most a short piece of it. Property-tested: the text is theirs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.slack.commands import (
    WORDS,
    Subcommand,
    Unknown,
    check_command_name,
    parse_subcommand,
)

spaces = st.text(alphabet=" \t\n\u00a0\u2003", max_size=4)


@given(st.text(max_size=300))
def test_any_text_parses_to_one_subcommand_and_never_raises(text: str) -> None:
    """Whatever is typed is a subcommand or an Unknown quoting at most 40 characters."""
    parsed = parse_subcommand(text)
    if isinstance(parsed, Unknown):
        assert len(parsed.text) <= 40
        assert parsed.text == parsed.text.strip()
    else:
        assert parsed.word in WORDS


@given(st.sampled_from(WORDS), spaces, spaces, st.booleans())
def test_each_word_is_read_in_any_case_and_spacing(
    word: str, before: str, after: str, upper: bool
) -> None:
    """`  STATUS ` is `status`."""
    typed = before + (word.upper() if upper else word) + after
    expected = Subcommand(word) if typed.strip() else Subcommand("help")  # type: ignore[arg-type]
    assert parse_subcommand(typed) == expected


@given(st.integers(min_value=0, max_value=10**18 - 1), spaces, st.booleans())
def test_schedules_delete_names_the_schedule(number: int, gap: str, hashed: bool) -> None:
    """`schedules delete 12` (or `#12`) names schedule 12."""
    typed = f"schedules{gap} delete {'#' if hashed else ''}{number}"
    assert parse_subcommand(typed) == Subcommand("schedules", str(number))


@given(st.text(min_size=1, max_size=30).filter(lambda t: not (t.isascii() and t.isdigit())))
def test_a_delete_without_a_number_is_unknown(tail: str) -> None:
    """`schedules delete soon` (or `²`, a digit that is no ASCII number) deletes nothing."""
    parsed = parse_subcommand(f"schedules delete {tail}")
    if isinstance(parsed, Subcommand):
        assert parsed.schedule_id is not None and parsed.schedule_id.isascii()
        assert parsed.schedule_id.isdigit()
    else:
        assert isinstance(parsed, Unknown)


def test_empty_text_is_help_and_a_known_word_with_more_is_unknown() -> None:
    """Nothing typed asks for the help; `stop everything` is not `stop`."""
    assert parse_subcommand("") == Subcommand("help")
    assert parse_subcommand("stop everything") == Unknown("stop everything")


@given(st.text(max_size=40))
def test_a_command_name_is_a_slash_and_a_short_lower_case_word(name: str) -> None:
    """THREADGATE_SLASH_COMMAND takes what Slack takes, and says what to write otherwise."""
    try:
        accepted = check_command_name(name) == name
    except ValueError as exc:
        assert "such as /threadgate" in str(exc)
        accepted = False
    assert accepted == (
        name.startswith("/")
        and 2 <= len(name) <= 32
        and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_.-" for c in name[1:])
        and name[1] not in "_.-"
    )
