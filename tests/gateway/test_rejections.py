"""Refused Slack requests are logged once a minute per cause, with how many and the likely
cause; the clock is the test's, so the minute passes when the test says so."""

from __future__ import annotations

import logging

import pytest

from gateway.telemetry.rejections import (
    EVERY_SECONDS,
    RECENT_SECONDS,
    Rejection,
    RejectionLog,
    clock_skew_cause,
)

BAD_SIGNATURE = Rejection("signature", 401, "invalid signature")
STALE = Rejection("clock_skew", 401, "stale timestamp", skew_seconds=-600)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gateway.telemetry.rejections"]


def test_a_minute_of_bad_signatures_is_one_line_and_the_next_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first refusal is logged at once; those within the minute are not, and the first
    after it says how many it stands for."""
    clock = Clock()
    log = RejectionLog(clock=clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            log.rejected(BAD_SIGNATURE)
            clock.now += EVERY_SECONDS / 10
        clock.now += EVERY_SECONDS
        log.rejected(BAD_SIGNATURE)
    first, second = lines(caplog)
    assert "since the last line" not in first
    assert "; 5 since the last line like it" in second


def test_with_no_request_verified_a_bad_signature_names_the_signing_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before any request verified, the likely cause is SLACK_SIGNING_SECRET."""
    with caplog.at_level(logging.WARNING):
        RejectionLog(clock=Clock()).rejected(BAD_SIGNATURE)
    [line] = lines(caplog)
    assert "401, invalid signature" in line
    assert "SLACK_SIGNING_SECRET is not this app's signing secret" in line


def test_after_a_verified_request_a_bad_signature_names_a_proxy_changing_bodies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request that verified lately proves the secret; a bad signature then points at
    whatever changes bodies on the way; long after, at the secret again (rotated)."""
    clock = Clock()
    log = RejectionLog(clock=clock)
    with caplog.at_level(logging.WARNING):
        log.verified()
        clock.now += 5
        log.rejected(BAD_SIGNATURE)
        clock.now += RECENT_SECONDS
        log.rejected(BAD_SIGNATURE)
    proxy, secret = lines(caplog)
    assert "verified with this secret 5 s ago" in proxy and "proxy" in proxy
    assert "SLACK_SIGNING_SECRET is not this app's signing secret" in secret


def test_each_cause_has_its_own_minute(caplog: pytest.LogCaptureFixture) -> None:
    """A stale request right after a bad signature's line is logged too, naming the clock."""
    log = RejectionLog(clock=Clock())
    with caplog.at_level(logging.WARNING):
        log.rejected(BAD_SIGNATURE)
        log.rejected(STALE)
        log.rejected(STALE)
    signature, stale = lines(caplog)
    assert "invalid signature" in signature
    assert "stale timestamp" in stale and "600 s from this host's clock" in stale


@pytest.mark.parametrize(("skew", "way"), [(-600, "ahead of"), (900, "behind")])
def test_a_stale_timestamp_says_which_way_the_clock_is_off(skew: float, way: str) -> None:
    """A request older than allowed means this host's clock runs ahead; one from the
    future, that it runs behind."""
    assert f"this host's clock is {way} the real time" in clock_skew_cause(skew)
