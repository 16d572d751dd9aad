"""`threadgate doctor` compares this host's clock with the `Date` of Slack's answer: in
HTTP mode a clock five minutes off makes every signed request look stale (a 401 each)."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from gateway.config.settings import Settings
from gateway.operator.doctor import check_clock, check_slack
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN

NOW = 1_796_514_549.0


def dated(seconds_from_now: float) -> dict[str, str]:
    """Headers of an answer Slack dated `seconds_from_now` from this host's `NOW`."""
    return {"Date": formatdate(NOW + seconds_from_now, usegmt=True)}


@pytest.mark.parametrize(
    ("slack_is", "signed", "status", "words"),
    [
        (12, True, "ok", "agrees with Slack's"),
        (-120, True, "warn", "120 s ahead of Slack's"),
        (400, True, "FAIL", "400 s behind Slack's: Slack's signed requests"),
        (-400, False, "warn", "400 s ahead of Slack's"),
    ],
)
def test_the_clock_finding_says_how_far_and_which_way(
    slack_is: float, signed: bool, status: str, words: str
) -> None:
    """Within the tolerance it is ok; past it a warning; past five minutes in HTTP mode
    (signed requests) a failure naming NTP; in Socket Mode only a warning."""
    [finding] = check_clock(dated(slack_is), NOW, signed=signed)
    assert (finding.check, finding.status) == ("clock", status)
    assert words in finding.detail
    assert status == "ok" or "NTP" in finding.detail


def test_an_answer_without_a_readable_date_says_nothing() -> None:
    """No `Date`, or one that is not a date, is no finding (nothing to compare)."""
    assert check_clock({}, NOW, signed=True) == []
    assert check_clock({"Date": "yesterday"}, NOW, signed=True) == []


async def test_doctor_reads_the_date_of_slacks_own_answer() -> None:
    """Against Slack (the loopback one, on this host's clock) the check passes."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        settings = Settings(slack_bot_token=BOT_TOKEN, slack_api_url=slack.url)
        findings = await check_slack(settings, 5)
    [clock] = [f for f in findings if f.check == "clock"]
    assert clock.status == "ok" and "agrees with Slack's" in clock.detail
