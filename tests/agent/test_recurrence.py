"""When schedules run: periods step forward, the latest started period is found without
stepping through every missed one, and whatever a person writes for a period, a cron
expression, a time zone or a time is accepted or refused in one sentence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import (
    InvalidSchedule,
    Recurrence,
    format_seconds,
    recur_cron,
    recur_every,
    recur_once,
)

moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
EXPRESSIONS = ["0 9 * * MON-FRI", "*/5 * * * *", "30 2 1 * *", "0 0 * * SUN", "15 14 1 1 *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]


@given(st.integers(1, 86400 * 7), moments, st.floats(0, 1e7))
def test_an_every_period_steps_by_its_length_from_its_anchor(
    seconds: int, anchor: datetime, offset: float
) -> None:
    """`after` is the first period strictly after the moment, a whole number of periods
    from the anchor; `latest` the last one at or before now."""
    r = Recurrence("every", every_seconds=seconds)
    moment = anchor + timedelta(seconds=offset)
    following = r.after(moment, anchor=anchor)
    assert following is not None and moment < following <= moment + timedelta(seconds=seconds)
    assert (following - anchor).total_seconds() % seconds == 0
    first = anchor + timedelta(seconds=seconds)
    latest = r.latest(first, max(moment, first), anchor=anchor)
    assert latest <= max(moment, first) < latest + timedelta(seconds=seconds)


@given(st.sampled_from(EXPRESSIONS), st.sampled_from(ZONES), moments, st.integers(0, 10**6))
def test_cron_periods_step_forward_and_the_latest_is_the_last_started(
    expression: str, zone: str, due: datetime, later: int
) -> None:
    """Each `after` is later than the moment and a run of the expression; `latest` is a
    run at or before now whose next run is after now."""
    r = recur_cron(expression, zone, minimum_seconds=60)
    first = r.after(due, anchor=due)
    assert first is not None and first > due
    now = first + timedelta(seconds=later)
    latest = r.latest(first, now, anchor=due)
    assert first <= latest <= now
    following = r.after(latest, anchor=due)
    assert following is not None and following > now


def test_a_weekday_cron_runs_at_nine_in_its_own_zone() -> None:
    """`0 9 * * MON-FRI` in Europe/Berlin runs at 09:00 Berlin time, Friday to Monday."""
    r = recur_cron("0 9 * * MON-FRI", "Europe/Berlin")
    friday = datetime(2026, 3, 6, 10, tzinfo=UTC)
    monday = r.after(friday, anchor=friday)
    assert monday == datetime(2026, 3, 9, 8, tzinfo=UTC)  # 09:00 CET


def test_a_one_time_schedule_has_one_period() -> None:
    """`at` is its only period: after it, none."""
    r = recur_once("2126-03-01T09:00", "Europe/Berlin")
    assert r.at == datetime(2126, 3, 1, 8, tzinfo=UTC)
    before = datetime(2026, 1, 1, tzinfo=UTC)
    assert r.after(before, anchor=before) == r.at
    assert r.after(r.at, anchor=before) is None


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: recur_every("often"), "is not a period"),
        (lambda: recur_every("10s", minimum_seconds=60), "too often"),
        (lambda: recur_every("400d"), "longer than a year"),
        (lambda: recur_cron("61 * * * *"), "bad minute"),
        (lambda: recur_cron("* * * *"), "not a cron expression"),
        (lambda: recur_cron("* * * * *", minimum_seconds=120), "too often"),
        (lambda: recur_cron("0 9 * * *", "Mars/Olympus"), "is not a time zone"),
        (lambda: recur_once("next tuesday"), "is not a time"),
        (lambda: recur_once("2001-01-01T09:00"), "is in the past"),
    ],
)
def test_a_schedule_written_wrongly_says_how_to_write_it(make: object, words: str) -> None:
    """Each mistake is one sentence naming what is wrong and how to write it."""
    assert callable(make)
    with pytest.raises(InvalidSchedule) as refused:
        make()
    message = str(refused.value)
    assert words in message and message.endswith(".") and "\n" not in message


@given(st.text(max_size=60), st.text(max_size=40))
def test_any_text_is_accepted_or_refused_in_one_sentence(text: str, zone: str) -> None:
    """Whatever a person (or the model) writes, parsing ends in a recurrence or an
    `InvalidSchedule`, never in another exception."""
    for parse in (
        lambda: recur_every(text),
        lambda: recur_cron(text, "UTC"),
        lambda: recur_cron("0 9 * * *", zone),
        lambda: recur_once(text, "UTC"),
    ):
        try:
            assert isinstance(parse(), Recurrence)
        except InvalidSchedule as exc:
            assert str(exc).endswith(".")


@given(st.integers(1, 10**7))
def test_a_period_is_written_the_way_people_write_it(seconds: int) -> None:
    """`format_seconds` reads back as the same period."""
    assert recur_every(format_seconds(seconds), minimum_seconds=1).every_seconds == seconds
