"""One tiny model call for `threadgate doctor`: is the model reachable with these secrets?

The answer is a `ProbeResult` with the latency, or the classified failure in one line
(which already names the secret to check when a credential was refused) and the error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.core.errors import ModelError
from agent.models.contract import Model, ModelRequest, UserMessage

PROBE = ModelRequest((UserMessage("Reply with the single word: ok"),), max_output_tokens=16)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """`ok` with `latency_ms`, or not ok with `detail` saying what failed."""

    model: str
    ok: bool
    latency_ms: float | None
    detail: str
    error: ModelError | None = None  # what failed, for a caller that says it its own way

    def __str__(self) -> str:
        if self.ok:
            return f"{self.model}: ok in {self.latency_ms:.0f} ms"
        return f"{self.model}: {self.detail}"


async def probe_model(
    model: Model, *, clock: Callable[[], float] = time.perf_counter
) -> ProbeResult:
    """Send one tiny request to `model` and report latency or the failure."""
    started = clock()
    try:
        await model.request(PROBE)
    except ModelError as exc:
        return ProbeResult(model.name, False, None, " ".join(str(exc).split()), exc)
    return ProbeResult(model.name, True, (clock() - started) * 1000, "ok")
