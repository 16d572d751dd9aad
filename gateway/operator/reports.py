"""What `threadgate doctor` prints: one line per finding, a summary, and a word while it waits.

The report is for a person fixing a deployment: each line says what was checked, how it
went and, when it failed, what to change, in sentences (never an exception's class name).
It goes to stdout whole, at the end; while slow checks are still running, a line on stderr
says which ones (`watched`), so a hung endpoint shows as a wait with a name, not as a
silent terminal.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from errno import ECONNREFUSED
from typing import Literal, TypeAlias, TypeVar

Status: TypeAlias = Literal["ok", "warn", "FAIL", "skip"]
T = TypeVar("T")

# How long the checks run before the first word about them, and between words.
WAIT_WORD_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the report: what was checked, and how it went."""

    check: str
    status: Status
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def __str__(self) -> str:
        return f"{self.status:<4} {self.check}: {self.detail}"


def report(findings: list[Finding]) -> str:
    """The printed report: one line per finding, then a summary line."""
    problems = sum(finding.failed for finding in findings)
    summary = f"{problems} problem(s) found." if problems else "All checks passed."
    return "\n".join([*map(str, findings), summary])


async def watched(
    checks: Mapping[str, Awaitable[T]],
    say: Callable[[str], None] | None,
    *,
    every: float = WAIT_WORD_SECONDS,
) -> list[T]:
    """Run `checks` at once and return their results in order; every `every` seconds while
    some are still running, `say` which ones (each check bounds its own time)."""
    tasks = {name: asyncio.ensure_future(check) for name, check in checks.items()}
    started = time.monotonic()
    pending = set(tasks.values())
    try:
        while pending:
            _, pending = await asyncio.wait(pending, timeout=every)
            if pending and say is not None:
                names = [name for name, task in tasks.items() if task in pending]
                waited = time.monotonic() - started
                say(f"still waiting for {_listed(names)} ({waited:.0f} s)…")
    finally:
        for task in pending:
            task.cancel()
    return [task.result() for task in tasks.values()]


def network_words(exc: BaseException | None) -> str | None:
    """What the network said, in words, found along `exc`'s causes (an aiohttp or httpx
    error raised from an OSError); None when none of them says."""
    chain: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__
    for found in chain:
        if (words := _words(found)) is not None:
            return words
    said = [found.strerror for found in chain if isinstance(found, OSError) and found.strerror]
    return _lowered(said[-1]) if said else None


def _words(exc: BaseException) -> str | None:
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == ECONNREFUSED:
        return "connection refused: nothing listens there"
    if isinstance(exc, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ConnectionResetError):
        return "the connection was reset"
    return None


def _lowered(text: str) -> str:
    return text[:1].lower() + text[1:]


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
