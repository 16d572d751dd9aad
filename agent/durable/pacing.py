"""How long a task or subtask waits before its next try: backoff after a failure, a
server's `Retry-After`, and the tries spread over the window while every model is down
(agent/durable/runner.py, "Every model down").

Arithmetic on the runner's settings and nothing else, so it reads, and can be checked,
apart from the leases and posts around it.
"""

from __future__ import annotations

import math

from agent.durable.runner_setup import RunnerSettings

_FOREVER = 365 * 24 * 3600.0  # longer than any deferral bound, and a valid interval
# While every model is down, the last try starts by this share of the deferral window.
_LAST_TRY = 0.9


def backoff(settings: RunnerSettings, attempts: int) -> float:
    """Twice the wait of the attempt before, from the base, up to the maximum."""
    s = settings
    return float(min(s.retry_max_seconds, s.retry_base_seconds * 2 ** (attempts - 1)))


def retry_delay(settings: RunnerSettings, attempts: int, retry_after: float | None) -> float:
    """The server's `Retry-After` when it is a sane number of seconds, else backoff.
    Not clamped here: a delay past the deferral bound ends the task instead. Infinite,
    NaN or absurd values (`1e303` overflows Postgres's interval) count as "not soon"."""
    if retry_after is None or not honoured(retry_after):
        return backoff(settings, attempts)
    return min(retry_after, _FOREVER)


def deferral(
    settings: RunnerSettings, attempts: int, age: float, retry_after: float | None
) -> float | None:
    """Seconds until the next try while every model is down, or None: no try is left
    within the bounds (the runner's module docstring, "Every model down")."""
    s = settings
    tries_left = s.max_deferrals - attempts
    if tries_left <= 0:
        return None
    if honoured(retry_after):
        delay = retry_delay(s, attempts, retry_after)
    else:
        delay = (s.max_deferral_seconds * _LAST_TRY - age) / (2**tries_left - 1)
    return delay if delay >= 0 and age + delay <= s.max_deferral_seconds else None


def honoured(retry_after: float | None) -> bool:
    """Whether a server's `Retry-After` is a number of seconds to wait (not negative, NaN)."""
    return retry_after is not None and retry_after >= 0 and not math.isnan(retry_after)
