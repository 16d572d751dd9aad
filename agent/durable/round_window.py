"""The window a round is shown, and the session's pinned prompt read beside it.

A window is what the history's budget kept, less this task's own acknowledgments (shown
as its delegate calls instead), starting at a person's turn. Apart from the runner
because it is a reading of the history with rules of its own, done the same way before a
round and again after a compaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from agent.core.ports import History, PromptEpoch, Task, Window
from agent.durable.background import stop_task
from agent.durable.runner_setup import RunnerSettings


async def read_window(history: History, task: Task, settings: RunnerSettings) -> Window:
    """The task's window within the settings' budget, starting at a person's turn."""
    s = settings
    window = await history.window(task, max_chars=s.history_chars, max_messages=s.history_messages)
    # This task's own acknowledgments are shown as its delegate calls, not as history.
    kept = [m for m in window if not task.is_own_ack(m.id)]
    # The budget may have cut a conversation after one of our replies; a window must
    # start with a person's turn (Anthropic refuses anything else with a 400, and a
    # reply without its question is no context anyway). The task's turn is always kept.
    # A pinned answer stays (the transcript puts a note before it, agent.rounds.prompt).
    first_turn = next((i for i, m in enumerate(kept) if m.role == "user" or m.pinned), len(kept))
    shown = tuple(kept[first_turn:])
    # Complete only if nothing was dropped here either.
    return Window(shown, window.complete and len(shown) == len(window), window.pins)


async def window_and_prompt(
    history: History,
    task: Task,
    settings: RunnerSettings,
    pin_prompt: Callable[[Task], Coroutine[Any, Any, PromptEpoch]],
) -> tuple[Window, PromptEpoch | None]:
    """The window and the session's pinned prompt, read side by side: both are round
    trips to the database that the model request waits for, and under load each
    waits its turn for a connection, so one after the other cost two such waits."""
    pinning = asyncio.create_task(pin_prompt(task), name=f"pin-{task.id}")
    try:
        window = await read_window(history, task, settings)
    except BaseException:
        await stop_task(pinning)
        if not pinning.cancelled():
            pinning.exception()  # retrieved: the window's error is the one raised
        raise
    return window, await pinning
