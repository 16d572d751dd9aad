"""Slack requests refused before bolt — a bad signature, a stale timestamp, no signing
headers — told to on-call with their likely cause, at most once a minute per cause.

With a wrong signing secret every event is a 401, and the log used to stay empty: the
operator saw a bot that ignores everyone. Slack retries every event, and a scanner can
send as many requests as it likes, so a line per request would flood the log; a line per
cause per minute, with how many requests it stands for, is enough to act on, and
`threadgate_events_total{outcome="unauthorized"}` counts every one. Nothing a request
carries is quoted (not its signature, not its body), and the secret never is.

The causes, as far as a request shows them:

- `clock_skew`: the signed timestamp is more than five minutes from this host's clock.
  Slack's clocks are right, so a stream of these says this host's is off, and by how much
  and which way; a replayed or long-queued request looks the same.
- `signature`: a fresh timestamp whose signature does not match the body. When no request
  has verified in the last `RECENT_SECONDS`, the signing secret is the likely cause
  (SLACK_SIGNING_SECRET is not this app's); when some have, with the same secret, the
  secret is right and something in front of this process changes some bodies (a proxy
  re-encoding, decompressing or rewriting them).
- `unsigned`: the signing headers are missing or malformed: not from Slack (a scanner, a
  probe on the wrong path), or a proxy strips them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal, TypeAlias

from agent import bind_log_fields

log = logging.getLogger(__name__)

Cause: TypeAlias = Literal["clock_skew", "signature", "unsigned"]

# At most one line per cause in this many seconds.
EVERY_SECONDS = 60.0
# A request verified this recently proves the secret right (a rotated secret stops them).
RECENT_SECONDS = 600.0
# Slack's bound on a request's age, and bolt's (gateway/process/http.py).
MAX_AGE = 300


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a request was refused: its cause, the answer it got (status and reason), and
    for `clock_skew` how far its timestamp is from this host's clock (+: ahead)."""

    cause: Cause
    status: int
    reason: str
    skew_seconds: float = 0.0


@dataclass(slots=True)
class _Window:
    logged_at: float | None = None
    count: int = 0  # refused since the last line


class RejectionLog:
    """Logs refused requests, one line per cause per `every_seconds` (module docstring)."""

    def __init__(
        self,
        *,
        every_seconds: float = EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every = every_seconds
        self._clock = clock
        self._windows: dict[Cause, _Window] = {}
        self._verified_at: float | None = None

    def verified(self) -> None:
        """A request's signature matched: the secret is right."""
        self._verified_at = self._clock()

    def rejected(self, rejection: Rejection, *, remote: str | None = None) -> None:
        """Count `rejection`; log it with the count when its cause's minute is over."""
        now = self._clock()
        window = self._windows.setdefault(rejection.cause, _Window())
        window.count += 1
        if window.logged_at is not None and now - window.logged_at < self._every:
            return
        since = "" if window.logged_at is None else f"; {window.count} since the last line like it"
        window.count, window.logged_at = 0, now
        with bind_log_fields(outcome="rejected", cause=rejection.cause, remote=remote):
            log.warning(
                "Slack request refused (%d, %s%s): %s",
                rejection.status,
                rejection.reason,
                since,
                self._likely_cause(rejection, now),
            )

    def _likely_cause(self, rejection: Rejection, now: float) -> str:
        if rejection.cause == "clock_skew":
            return clock_skew_cause(rejection.skew_seconds)
        if rejection.cause == "unsigned":
            return (
                "not signed as Slack signs its requests: not from Slack (a scanner, or a probe"
                " on the wrong path), or a proxy in front of this process strips the"
                " X-Slack-Signature and X-Slack-Request-Timestamp headers"
            )
        verified = self._verified_at
        if verified is not None and now - verified < RECENT_SECONDS:
            return (
                f"another request verified with this secret {now - verified:.0f} s ago, so"
                " SLACK_SIGNING_SECRET is right: likely a proxy in front of this process"
                " changes some request bodies (re-encoding, decompressing, rewriting JSON)"
            )
        return (
            "likely SLACK_SIGNING_SECRET is not this app's signing secret (the Slack app's"
            " Basic Information page, App Credentials, Signing Secret); else a proxy in front"
            " of this process changes the request body"
        )


def clock_skew_cause(skew: float) -> str:
    """The likely cause of a stale timestamp `skew` seconds from this host's clock."""
    way = "ahead of" if skew < 0 else "behind"
    return (
        f"X-Slack-Request-Timestamp is {abs(skew):.0f} s from this host's clock (at most"
        f" {MAX_AGE} s is accepted): likely this host's clock is {way} the real time (check"
        " its time synchronization, NTP); a replayed or long-delayed request looks the same"
    )


def clock_skew_from(date: str, now: float) -> float | None:
    """How far this host's clock (`now`) is behind the time an HTTP `Date` header says
    (negative: ahead), to the second it has; None when it is not a date. `threadgate
    doctor` reads it off Slack's answer, to find a clock that makes requests look stale."""
    try:
        said = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None
    return (said if said.tzinfo else said.replace(tzinfo=UTC)).timestamp() - now
