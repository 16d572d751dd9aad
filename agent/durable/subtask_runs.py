"""A leased subtask, run within its time limit: how it ended recorded (done, failed or
timed out, in words its task's next round reads) and shown under its acknowledgment.

Apart from the runner because a subtask's run shares nothing with a task's but the
lease and the retry timing: no reply, no notice, no rounds. While every model is down a
subtask is tried again later, bounded by its own deadline (an overdue one times out).
"""

from __future__ import annotations

import asyncio
import logging

from agent.core.delegation import Subtask, SubtaskState
from agent.core.errors import AgentError, CredentialRejected, ModelsUnavailable, QuotaExhausted
from agent.core.log_context import bind_log_fields
from agent.core.ports import Step, StepState, Task
from agent.durable.leases import leased
from agent.durable.pacing import retry_delay
from agent.durable.runner_setup import Responder, RunnerPorts, RunnerSettings, Unobserved

log = logging.getLogger(__name__)

TIMED_OUT = "The subtask did not finish within its time limit."
INTERNAL_ERROR = "The subtask failed with an internal error."
REFUSED = "The subtask could not reach the model: a credential was refused."
STEP_STATES: dict[SubtaskState, StepState] = {
    "done": "complete",
    "failed": "error",
    "timed_out": "error",
}


class SubtaskRuns:
    """Runs leased subtasks for a task runner, through its ports and settings."""

    def __init__(self, ports: RunnerPorts, respond: Responder, settings: RunnerSettings) -> None:
        self._ports = ports
        self._observer = ports.observer or Unobserved()
        self._respond = respond
        self._settings = settings

    async def run(self, subtask: Subtask, task: Task) -> None:
        """Run a leased subtask within its time limit and record how it ended."""
        attributes = {"threadgate.subtask.type": subtask.request.type}
        tracer = self._ports.tracer
        with (
            bind_log_fields(task=task.id, subtask=subtask.id, **task.address),
            tracer.resume(task.traceparent),
            tracer.span(f"subtask {subtask.request.type}", attributes),
        ):
            await self._run(subtask, task)

    async def _run(self, subtask: Subtask, task: Task) -> None:
        delegations = self._ports.delegations
        async with leased(
            lambda: delegations.heartbeat_subtask(subtask),
            subtask.id,
            in_doubt=self._ports.queue.leases_in_doubt,
            every=self._settings.heartbeat_seconds,
        ):
            await self._show(task, subtask, "in_progress")
            try:
                state, text = await self._outcome(subtask, task)
            except ModelsUnavailable as exc:
                # Bounded by the subtask's own deadline: an overdue subtask times out.
                delay = retry_delay(self._settings, subtask.attempts, exc.retry_after)
                await self._show(task, subtask, "pending")
                return await delegations.retry_subtask_later(
                    subtask, min(delay, self._settings.retry_max_seconds)
                )
            await delegations.settle_subtask(subtask, state, text)
            self._observer.subtask_settled(state)
            await self._show(task, subtask, STEP_STATES[state])

    async def _show(self, task: Task, subtask: Subtask, state: StepState) -> None:
        """Show the subtask's state under its acknowledgment (display only)."""
        if (live := self._ports.live) is not None:
            step = Step(subtask.id, subtask.request.title, state)
            await live.step(task, task.ack_id(subtask.round), step)

    async def _outcome(self, subtask: Subtask, task: Task) -> tuple[SubtaskState, str]:
        try:
            async with asyncio.timeout(subtask.timeout_seconds):
                return "done", await self._respond.run_subtask(subtask, task)
        except TimeoutError:
            return "timed_out", TIMED_OUT
        except (CredentialRejected, QuotaExhausted) as exc:
            await self._ports.alerts.credential_failure(task, exc)
            return "failed", REFUSED
        except ModelsUnavailable:
            raise
        except AgentError as exc:  # written for the model (SubtaskFailed and friends)
            return "failed", str(exc)
        except Exception:
            log.exception("subtask %s failed unexpectedly", subtask.id)
            return "failed", INTERNAL_ERROR
