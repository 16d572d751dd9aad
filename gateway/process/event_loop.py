"""Which event loop a `threadgate` command runs on: uvloop where it is installed.

Why: under load one gateway process keeps most of a core busy, and every await in a
task's path to its first words waits behind everything else the loop has to do. uvloop
(libuv, by asyncpg's authors; aiohttp and asyncpg are built to run on it) does the
loop's own work — sockets, timers, callbacks, a large share of the gateway's CPU — in C,
which lowers both the CPU per event and the time to the first words (BENCHMARKS.md).

`THREADGATE_EVENT_LOOP`: `auto` (the default) is uvloop when it is installed and asyncio's
own loop otherwise (uvloop is not built for Windows, so it is not installed there);
`uvloop` insists on it; `asyncio` runs the standard loop, for a platform or a debugger
that needs it.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Literal

from agent import ConfigError

EventLoop = Literal["auto", "uvloop", "asyncio"]

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: EventLoop) -> LoopFactory | None:
    """How to make the loop `choice` names; None for asyncio's own (`asyncio.Runner`'s
    default)."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "THREADGATE_EVENT_LOOP is uvloop, but uvloop is not installed here"
                " (it is not built for every platform); set it to auto or asyncio."
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: what an operator reads in the start-up log."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
