"""When a schedule runs: every N seconds, on a cron expression in a time zone, or once.

A schedule's runs are its *periods*, each named by the moment it starts. `Recurrence`
answers the two questions the scheduler asks: the first period after a moment (`after`),
and the latest period that has started by now (`latest`), so a scheduler that was away
for many periods runs one of them, not each in turn.

Cron expressions are read by `cronsim` (the five fields of Debian's cron, names like
`MON-FRI` included, DST handled as cron does) and time zones by `zoneinfo`: both the job
of well-kept code, not ours. Every way a user can write one wrongly ends in
`InvalidSchedule`, one sentence that says how to write it right, for a person at the
command line and for the model alike.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from agent.core.errors import InvalidSchedule

RecurrenceKind: TypeAlias = Literal["every", "cron", "at"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_EVERY = re.compile(r"(?:\d{1,9}[smhdw])+|\d{1,9}")
_PART = re.compile(r"(\d+)([smhdw])")
_LONGEST = 366 * 86400  # a period longer than a year is a typo, not a schedule


@dataclass(frozen=True, slots=True)
class Recurrence:
    """How often a schedule runs (module docstring). `anchor` is when `every` counts from."""

    kind: RecurrenceKind
    every_seconds: int | None = None
    cron: str | None = None
    time_zone: str = "UTC"
    at: datetime | None = None

    def after(self, moment: datetime, *, anchor: datetime) -> datetime | None:
        """The first period that starts strictly after `moment`; None when none does."""
        if self.kind == "every":
            assert self.every_seconds is not None
            step = self.every_seconds
            n = math.floor((moment - anchor).total_seconds() / step) + 1
            return anchor + timedelta(seconds=max(n, 1) * step)
        if self.kind == "cron":
            assert self.cron is not None
            found = next(CronSim(self.cron, moment.astimezone(self.zone)), None)
            return _utc(found) if found is not None else None
        assert self.at is not None
        return self.at if self.at > moment else None

    def latest(self, due: datetime, now: datetime, *, anchor: datetime) -> datetime:
        """The latest period that started by `now`, given that the period `due` had."""
        if self.kind == "every":
            assert self.every_seconds is not None
            n = math.floor((now - anchor).total_seconds() / self.every_seconds)
            return max(due, anchor + timedelta(seconds=n * self.every_seconds))
        if self.kind == "cron":
            assert self.cron is not None
            before = now.astimezone(self.zone) + timedelta(microseconds=1)
            found = next(CronSim(self.cron, before, reverse=True), None)
            return max(due, _utc(found)) if found is not None else due
        return due

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def describe(self) -> str:
        """For people: `every 30m`, `cron 0 9 * * MON-FRI (Europe/Berlin)`, `once at …`."""
        if self.kind == "every":
            assert self.every_seconds is not None
            return f"every {format_seconds(self.every_seconds)}"
        if self.kind == "cron":
            return f"cron {self.cron} ({self.time_zone})"
        assert self.at is not None
        return f"once at {self.at.astimezone(self.zone).isoformat(timespec='minutes')}"


def recur_every(text: str, *, minimum_seconds: int = 1) -> Recurrence:
    """`30m`, `2h`, `1d`, `1h30m`, `90s` or a bare number of seconds, at least `minimum_seconds`."""
    cleaned = text.strip().lower()
    if not _EVERY.fullmatch(cleaned):
        raise InvalidSchedule(
            f"{text.strip()[:40]!r} is not a period: write it like 30m, 2h, 1d or 1h30m."
        )
    parts = _PART.findall(cleaned)
    seconds = sum(int(n) * _UNITS[unit] for n, unit in parts) if parts else int(cleaned)
    if seconds < minimum_seconds:
        raise InvalidSchedule(
            f"every {format_seconds(seconds)} is too often: the shortest period here is "
            f"{format_seconds(minimum_seconds)}."
        )
    if seconds > _LONGEST:
        raise InvalidSchedule(
            f"every {format_seconds(seconds)} is longer than a year: use a cron expression "
            "or a one-time schedule instead."
        )
    return Recurrence("every", every_seconds=seconds)


def recur_cron(expression: str, time_zone: str = "UTC", *, minimum_seconds: int = 60) -> Recurrence:
    """A five-field cron expression (`0 9 * * MON-FRI`) in an IANA time zone."""
    zone = _zone(time_zone)
    cleaned = " ".join(expression.split())
    try:
        CronSim(cleaned, datetime.now(zone))
    except (CronSimError, ValueError) as exc:
        raise InvalidSchedule(
            f"{expression.strip()[:80]!r} is not a cron expression ({_reason(exc)}): write "
            'five fields, minute hour day month weekday, like "0 9 * * MON-FRI".'
        ) from None
    gap = _shortest_gap(cleaned, zone)
    if gap < minimum_seconds:
        raise InvalidSchedule(
            f"{cleaned!r} runs {format_seconds(gap)} apart, too often: the shortest period "
            f"here is {format_seconds(minimum_seconds)}."
        )
    return Recurrence("cron", cron=cleaned, time_zone=zone.key)


def recur_once(at: str | datetime, time_zone: str = "UTC") -> Recurrence:
    """Once, at an ISO 8601 time (`2026-03-01T09:00`); one without an offset is in `time_zone`."""
    zone = _zone(time_zone)
    if isinstance(at, datetime):
        moment = at
    else:
        try:
            moment = datetime.fromisoformat(at.strip())
        except ValueError:
            raise InvalidSchedule(
                f"{at.strip()[:40]!r} is not a time: write it in ISO 8601, like 2026-03-01T09:00."
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    if moment <= datetime.now(UTC):
        raise InvalidSchedule(
            f"{moment.isoformat(timespec='minutes')} is in the past: give a time still to come."
        )
    return Recurrence("at", time_zone=zone.key, at=_utc(moment).replace(microsecond=0))


def format_seconds(seconds: int) -> str:
    """`90` as `1m30s`, `3600` as `1h`: a period the way people write it."""
    parts: list[str] = []
    left = seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(p for p in parts if not p.startswith("0") or len(parts) == 1)


def _shortest_gap(expression: str, zone: ZoneInfo, runs: int = 64) -> int:
    """The fewest seconds between two of the expression's next `runs` runs."""
    moments = CronSim(expression, datetime.now(zone))
    times = [t for _, t in zip(range(runs), moments, strict=False)]
    if len(times) < 2:
        raise InvalidSchedule(
            f"{expression!r} never runs (or runs once): give a cron expression that repeats, "
            "or a one-time schedule."
        )
    return int(min((b - a).total_seconds() for a, b in itertools.pairwise(times)))


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(
            f"{name.strip()[:60]!r} is not a time zone: use an IANA name like Europe/Berlin, "
            "America/New_York or UTC."
        ) from None


def _reason(exc: Exception) -> str:
    text = str(exc).strip().rstrip(".")
    return text[:1].lower() + text[1:] if text else type(exc).__name__


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)
