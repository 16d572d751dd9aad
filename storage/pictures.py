"""Stored pictures' budgets: what a thread, and a workspace in a day, may keep.

Pictures are the bulk of the database (a message's text is kilobytes, a screenshot up to
3.75 MB), so two budgets bound them, in bytes, checked in admission's transaction:

- per thread (`THREADGATE_THREAD_PICTURE_BYTES`, default 50 MB): one conversation cannot
  make the bot store more, however long it runs;
- per workspace per UTC day (`THREADGATE_WORKSPACE_DAILY_PICTURE_BYTES`, default 500 MB):
  with retention set, the pictures a workspace can keep are at most the days kept times
  this, whoever sends them and in how many threads. Per workspace rather than per user:
  a per-user budget bounds nothing as people join, and one person's pace is bounded
  already (`THREADGATE_USER_MESSAGES_PER_HOUR`, files per message).

Bytes, not a count: storage is what a picture costs here (what a request carries is
bounded apart, `agent.MAX_IMAGES_PER_REQUEST`), and a count would treat a thumbnail like
a full-page screenshot. Both budgets count what was stored, and deleting a message gives
nothing back: posting and deleting cannot cycle round them, and the counters are written
in one place only.

Past a budget a picture is not stored, and its message says so: a note is appended to
its text (`<runtime>…</runtime>`, after the turn tag; the names in it are escaped so that
no name can close it), which the model reads with the turn, and kept beside it
(`messages.pictures_note`) so an edit of the message keeps it. The turn's own pictures
are weighed first, then the back-filled messages', newest first; each picture is kept
when it fits both budgets, so a small one may still fit after a large one did not.

The counters are the session's row (`sessions.picture_bytes`) and the workspace's day
(`picture_days`), both locked for the rest of the admission's transaction, so replicas
admitting pictures of one thread or workspace at once take turns and never both slip past.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from agent import Image
from storage.migrations import Connection

log = logging.getLogger(__name__)

# Defaults (gateway/process/config.py reads the settings); 0 means no budget.
DEFAULT_THREAD_PICTURE_BYTES = 50_000_000
DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES = 500_000_000

_TODAY = "(now() AT TIME ZONE 'UTC')::date"

# $1 the session (its row exists: admission wrote it first), $2 the workspace or NULL.
# Both rows are locked until the admission commits. The session's with FOR NO KEY UPDATE:
# the admission's inserts hold a KEY SHARE lock on it (their foreign keys), which FOR
# UPDATE would wait for, in two admissions of one thread at once, each for the other's.
_STORED = f"""
WITH day AS (
    INSERT INTO picture_days (workspace, day) SELECT $2::text, {_TODAY} WHERE $2::text IS NOT NULL
    ON CONFLICT (workspace, day) DO UPDATE SET bytes = picture_days.bytes
    RETURNING bytes
)
SELECT (SELECT picture_bytes FROM sessions WHERE id = $1 FOR NO KEY UPDATE) AS thread,
       coalesce((SELECT bytes FROM day), 0) AS day
"""

# $3 the bytes this admission stored.
_COUNT = f"""
WITH thread AS (UPDATE sessions SET picture_bytes = picture_bytes + $3 WHERE id = $1)
UPDATE picture_days SET bytes = bytes + $3 WHERE workspace = $2 AND day = {_TODAY}
"""


@dataclass(frozen=True, slots=True)
class PictureBudgets:
    """Bytes of pictures one thread, and one workspace in a UTC day, may store; 0: no budget."""

    thread_bytes: int = DEFAULT_THREAD_PICTURE_BYTES
    workspace_daily_bytes: int = DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES


NO_BUDGETS = PictureBudgets(0, 0)


@dataclass(frozen=True, slots=True)
class Kept:
    """A message's pictures within the budgets, and what its text says of the others."""

    images: tuple[Image, ...]
    note: str | None = None  # appended to the message's text; None when all were kept
    left_out: int = 0


class PictureRoom:
    """What is left of the budgets in one admission: pictures are weighed one at a time."""

    def __init__(self, budgets: PictureBudgets, *, thread_used: int, day_used: int) -> None:
        self._budgets = budgets
        self._thread_left = budgets.thread_bytes - thread_used
        self._day_left = budgets.workspace_daily_bytes - day_used

    def keep(self, images: Sequence[Image]) -> Kept:
        """Each picture that fits what is left (and takes its room); the others named."""
        kept: list[Image] = []
        refused: list[tuple[Image, str]] = []
        for image in images:
            reason = self._refusal(len(image.data))
            if reason is None:
                kept.append(image)
                self._thread_left -= len(image.data)
                self._day_left -= len(image.data)
            else:
                refused.append((image, reason))
        return Kept(tuple(kept), not_kept_note(refused), len(refused))

    def _refusal(self, size: int) -> str | None:
        if self._budgets.thread_bytes and size > self._thread_left:
            return (
                f"this thread has stored its limit of {self._budgets.thread_bytes:,} bytes "
                "of pictures"
            )
        if self._budgets.workspace_daily_bytes and size > self._day_left:
            return (
                f"this workspace has stored today's limit of "
                f"{self._budgets.workspace_daily_bytes:,} bytes of pictures "
                "(pictures sent after midnight UTC are kept)"
            )
        return None


def not_kept_note(refused: Sequence[tuple[Image, str]]) -> str | None:
    """The note appended to a message's text for pictures not kept, with the reasons."""
    if not refused:
        return None
    which = "a picture" if len(refused) == 1 else f"{len(refused)} pictures"
    its = "it" if len(refused) == 1 else "them"
    each = "; ".join(
        f"{_quoted(image.name)} ({len(image.data):,} bytes): {reason}" for image, reason in refused
    )
    return (
        f"\n<runtime>Not kept, so you cannot see {its}: {which} of this message, {each}.</runtime>"
    )


def _quoted(name: str) -> str:
    """The name as a JSON string in ASCII, angle brackets escaped: it cannot end the note."""
    return json.dumps(name, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")


async def keep_pictures(
    conn: Connection,
    budgets: PictureBudgets,
    *,
    session_id: str,
    workspace: str | None,
    messages: Sequence[Sequence[Image]],
) -> list[Kept]:
    """Weigh the messages' pictures, in the order given, against what the thread and the
    workspace's day have stored; lock both counters until the transaction ends (no
    round trip when there is no picture)."""
    if not any(messages):
        return [Kept(tuple(images)) for images in messages]
    row = await conn.fetchrow(_STORED, session_id, workspace)
    assert row is not None
    room = PictureRoom(budgets, thread_used=row["thread"] or 0, day_used=row["day"])
    kept = [room.keep(images) for images in messages]
    if left_out := sum(k.left_out for k in kept):
        log.info("%d pictures not kept: over a picture budget", left_out)
    return kept


async def count_pictures(
    conn: Connection, *, session_id: str, workspace: str | None, stored_bytes: int
) -> None:
    """Add what the admission stored to the thread's and the workspace's day's counters."""
    if stored_bytes:
        await conn.execute(_COUNT, session_id, workspace, stored_bytes)
