"""The task runner: workers that lease work, run rounds, and deliver each message once.

A worker takes a subtask if one is runnable (subtasks unblock waiting tasks), else a task.

A task runs one round per lease. Every step is idempotent across crashes, because what a
round decided is stored before anything is published:
- a final reply is stored under `task:{id}:reply`, then published, then the task is done;
- a delegation is stored with its acknowledgment (`task:{id}:ack:{n}`) and its subtasks,
  then the acknowledgment is published and the task waits for its subtasks;
- a re-run that finds either one stored goes on from there instead of asking the model;
- a round paused for a person's approval (agent/core/approval.py) is stored with its
  requests, they are posted, and the task waits without a worker until people decided
  (or the time ran out); its next run continues that round.

How a task ends otherwise:
- every model slot transiently down (`ModelsUnavailable`): queued again for later, tried
  at most `max_deferrals` times within `max_deferral_seconds` of the message's arrival
  (see "Every model down" below); then the user is told the models are unavailable and
  the thread is free for its next message;
- a credential or quota refused: the operator is alerted, the user told, the task failed;
- past its wall-clock limit (`task_timeout_seconds` from the message's arrival): the round
  is cut, the user told, the task failed;
- past its allowance of model requests (`ModelBudgetExceeded`, counted by the responder's
  meter): the round is cut, the user told the message used up its allowance, the task
  failed — the thread moves on;
- any other agent failure: the user is told, the task failed;
- a schedule's run that has nothing to say (`no_reply`): nothing is posted, the task done;
- an unexpected error (Slack down, a bug): retried with backoff, failed after a bound.
A subtask ends done, failed or timed out, and its task's next round is told which.

Every model down: the person hears early, and the thread is freed in time. The tries
left are spread over what is left of the window, each wait planned twice as long as the
one before (with the defaults about 10, 20, 40 and 75 s), so early tries catch a short
outage and later ones a longer one; planned again after each try, from the time left, so
the last starts at nine tenths of the window however long the tries took, leaving the
rest for it to run. A server's `Retry-After` is honoured instead, and one reaching past the window ends
the task at once. A deferral whose next try comes `still_trying_seconds` or more after
the message posts the `still_trying` notice (`task:{id}:interim`) first, through the
outbox like every post, so however often it is asked for — at every later deferral, by a
retry after a crash, by another replica — it is posted once; the answer or the
`unavailable` notice follows it. Every try asks each model slot up to the ladder's
attempts per slot, so a message costs at most `max_deferrals` × slots × attempts model
requests — twice that with a store that marks waiting tasks (`RunnerPorts.waits`):
there a task waiting for the models is tried at once when a new message arrives in its
thread or any model answers again (agent/models/outage.py), and up to `max_deferrals`
such early tries do not use up its planned ones. The notices are one per thread per
outage: a task whose thread was told that the models are unavailable (by an earlier
task's give-up) since its message arrived posts neither notice; it still tries, and
answers if a model comes back in time.

A lease can be lost while its worker runs: the process looked dead to the others (its
signal connection to the database dropped) and another worker, maybe one of our own, took
the task over. Two workers must never both carry a round to Slack. So the heartbeat that
finds its lease lost cancels its worker's run wherever it is, and a beat comes at once
when the queue says leases are in doubt; what slips through is fenced in storage (the
publish, finish, fail and retry of a lost lease change nothing), and a run that fails
without its lease stops quietly instead of retrying or telling the user. The reply is
stored under the lease too (`History.append`): a later attempt may cover messages of the
thread this one never saw (storage/thread_queue.py), and would deliver a stored reply as
their answer. An operator's cancel (storage/queue.py) ends the lease the same way; it is
counted as `cancelled`.

Someone's Stop (Slack's Stop button, storage/stops.py) ends the lease the same way, and at
once: the store's signal makes every heartbeat beat. Its subtasks are ended with it, and
their workers stop through the same path. The stopped task is queued again, marked
(`Task.stopped`): the worker that claims it, on any replica, asks no model, posts the note
that the work was stopped (`task:{id}:stopped`, once) and finishes it; it is counted as
`stopped`. A new message of the asker in a thread whose queue mode is `interrupt`
(storage/thread_queue.py) ends the lease the same way, but queues the task again to answer
everything pending: the attempt it ended is counted as `interrupted`.

Traced (agent/core/tracing.py): each lease resumes its message's trace (`Task.traceparent`)
in a `run` span, each round its `round` span inside it, each subtask a `subtask` span,
so the work of one message on every replica is one trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from agent.core.approval import (
    Paused,
    PausedRound,
)
from agent.core.delegation import (
    Delegation,
    RoundInput,
    RoundRecord,
    RoundState,
    Subtask,
    SubtaskRequest,
    subtask_id,
)
from agent.core.errors import (
    AgentError,
    CredentialRejected,
    ModelBudgetExceeded,
    ModelsUnavailable,
    QuotaExhausted,
    RoundFailed,
    TaskTimedOut,
)
from agent.core.log_context import bind_log_fields
from agent.core.ports import (
    AnswerOrigin,
    Step,
    StoredMessage,
    Task,
)
from agent.core.schedules import Silence
from agent.durable.approval_gate import ApprovalGate
from agent.durable.compaction import Compaction
from agent.durable.leases import leased
from agent.durable.notices import FailureKind
from agent.durable.pacing import backoff, deferral
from agent.durable.round_window import read_window, window_and_prompt
from agent.durable.runner_setup import (
    DEFAULT_RUNNER,
    QueueWaits,
    Responder,
    RunnerPorts,
    RunnerSettings,
    Unobserved,
)
from agent.durable.subtask_runs import STEP_STATES, SubtaskRuns
from agent.rounds.control import Decision, Reply
from agent.rounds.tools import Clock, utc_now

log = logging.getLogger(__name__)


class TaskRunner:
    """Workers that lease tasks and subtasks and carry each to its end (the module
    docstring), through its `RunnerPorts`, asking `respond` for every round."""

    def __init__(
        self,
        ports: RunnerPorts,
        respond: Responder,
        *,
        settings: RunnerSettings = DEFAULT_RUNNER,
        compaction: Compaction | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._ports = ports
        self._queue = ports.queue
        self._delegations = ports.delegations
        self._history = ports.history
        self._publisher = ports.publisher
        self._alerts = ports.alerts
        self._waits = ports.waits or QueueWaits(ports.queue)
        self._observer = ports.observer or Unobserved()
        self._tracer = ports.tracer
        self._respond = respond
        self._settings = settings
        self._compaction = compaction
        self._clock = clock
        self._approvals = ApprovalGate(
            ports.approvals, ports.desk, settings.approval_timeout_seconds
        )
        self._subtasks = SubtaskRuns(ports, respond, settings)
        self._workers: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        for n in range(self._settings.workers):
            worker = asyncio.create_task(self._work(), name=f"threadgate-worker-{n}")
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    async def stop(self) -> None:
        """Cancel the workers; work cut short keeps its lease row and resumes elsewhere."""
        for worker in list(self._workers):
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            dropped = self._queue.dropped_wakeups()
            try:
                again = await self._run_next()
            except Exception:  # the database may be restarting: wait, then try again
                log.exception("claiming work failed")
                again = False
            # After a task, wait for a wake-up rather than look again at once: every message
            # admitted meanwhile woke a worker, and so did what the task's end made runnable
            # (`TaskQueue.finish`); a wake-up no worker was free for is kept for the next to
            # wait, up to a bound. Past the bound (`dropped_wakeups` grew), or after a
            # subtask, look at once. The look after every task was, below saturation, a
            # claim that found nothing: one of each answer's 14 statements (BENCHMARKS.md).
            if not again and self._queue.dropped_wakeups() == dropped:
                await self._queue.wait_for_work(self._settings.heartbeat_seconds * 6)

    async def _run_next(self) -> bool:
        """Claim work and run it; whether to look again at once (after a subtask)."""
        claimed = await self._delegations.claim_next(self._queue)
        if claimed is None:
            return False
        if isinstance(claimed, Task):
            await self.run_task(claimed)
            return False
        await self.run_subtask(*claimed)
        return True

    # Tasks

    async def run_task(self, task: Task) -> None:
        """Run one round of a leased task and settle it, whatever happens."""
        with (
            bind_log_fields(task=task.id, **task.address),
            self._tracer.resume(task.traceparent),
            self._tracer.span("run", {"threadgate.attempt": task.attempts}),
        ):
            await self._run_task(task)

    async def _run_task(self, task: Task) -> None:
        settled = False
        async with leased(
            lambda: self._queue.heartbeat(task),
            task.id,
            in_doubt=self._queue.leases_in_doubt,
            every=self._settings.heartbeat_seconds,
        ):
            try:
                await (self._end_stopped(task) if task.stopped else self._run_round(task))
            except Exception:
                if await self._holds_lease(task):
                    raise
                await self._lost_lease(task)
            settled = True
        if not settled:  # a heartbeat found the lease lost and cut the round short
            await self._lost_lease(task)

    async def _run_round(self, task: Task) -> None:
        try:
            async with self._publisher.working(task):
                await self._advance(task)
        except ModelsUnavailable as exc:
            await self._defer(task, exc)
        except TaskTimedOut as exc:
            self._observer.task_settled("time_limit")
            await self._give_up(task, exc, "time_limit")
        except ModelBudgetExceeded as exc:
            self._observer.task_settled("request_cap")
            await self._give_up(task, exc, "limit")
        except (CredentialRejected, QuotaExhausted) as exc:
            self._observer.task_settled("credential")
            alerted = await self._alerts.credential_failure(task, exc)
            await self._give_up(task, exc, "credential", alerted=alerted)
        except AgentError as exc:
            self._observer.task_settled("failed")
            await self._give_up(task, exc, "error")
        except Exception as exc:
            # A publish refused to a superseded attempt lands here too: not a failure of
            # the task, which goes on under its current lease.
            if not await self._holds_lease(task):
                return await self._lost_lease(task)
            self._observer.task_settled("error")
            log.exception("task %s failed unexpectedly (attempt %d)", task.id, task.attempts)
            await self._retry_or_give_up(task, exc)

    async def _end_stopped(self, task: Task) -> None:
        """Someone stopped the task (module docstring): no model is asked, the note goes
        out once, the task ends (storage cancels a stopped task's finish)."""
        try:
            await self._publisher.publish(task, task.stopped_id, self._settings.stopped_note)
        except Exception as exc:
            if not await self._holds_lease(task):
                return await self._lost_lease(task)
            log.warning("task %s: the stopped note failed (%s); later", task.id, exc)
            return await self._retry_or_give_up(task, exc)
        self._observer.task_settled("stopped")
        await self._queue.finish(task)

    async def _holds_lease(self, task: Task) -> bool:
        try:
            return await self._queue.heartbeat(task)
        except Exception:  # cannot tell (the database is away): every write is fenced anyway
            return True

    async def _lost_lease(self, task: Task) -> None:
        """Count how the lease ended: an operator's cancel (`threadgate tasks cancel`), a
        Stop and an interrupt (the asker wrote again) end it like a take-over does, and are
        told apart only here."""
        try:
            cancelled = await self._queue.cancelled(task)
            interrupted = not cancelled and await self._queue.interrupted(task)
        except Exception:  # the database is away: it was lost, whatever the reason
            cancelled = interrupted = False
        if cancelled:
            self._observer.task_settled("cancelled")
            log.warning("task %s: cancelled by an operator or a Stop; stopped", task.id)
            return
        if interrupted:  # logged as an outcome (gateway/telemetry/outcomes.py)
            self._observer.task_settled("interrupted")
            return
        self._observer.task_settled("lease_lost")
        log.warning("task %s: attempt %d lost its lease; stopped", task.id, task.attempts)

    async def _advance(self, task: Task) -> None:
        """Carry the task one step on from what is stored: post a stored reply, wait for
        pending subtasks or people, or run the next round and act on its decision."""
        if (reply := await self._stored_reply(task)) is not None:
            return await self._deliver_reply(task, reply)
        state = await self._round_state(task)
        number = len(state.finished)
        if state.pending is not None:
            return await self._wait_for(task, number, state.pending)
        latest = await self._approvals.latest(task)
        resume = latest if latest is not None and latest.round == number else None
        if resume is not None and resume.undecided:
            return await self._approvals.wait_for_people(task, resume)
        await self._approvals.show_decisions(task, resume)
        round_input = await self._round_input(task, state, resume)
        waited = latest.waited_seconds if latest is not None else 0.0
        decision = await self._decide(round_input, waited)
        if isinstance(decision, Paused):
            return await self._approvals.pause(task, number, latest, decision)
        await self._act(task, number, decision)

    async def _stored_reply(self, task: Task) -> StoredMessage | None:
        """The claim says whether a reply is stored (a crash before its post, or a limit
        notice stored at admission); a task claimed without saying is looked up."""
        may_be_stored = task.stored_reply is not False
        return await self._history.get(task.reply_id) if may_be_stored else None

    async def _round_state(self, task: Task) -> RoundState:
        """The task's rounds so far, each finished one's acknowledgment posted again."""
        # Only a lease ever stores a delegation: a task's first attempt has none to find.
        state = await self._delegations.load(task) if task.attempts > 1 else RoundState()
        # A crash between storing a delegation and posting its ack can leave the ack unsent
        # while the subtasks went on; the outbox makes these re-posts free when it was sent.
        for record in state.finished:
            await self._publisher.publish(
                task,
                task.ack_id(record.number),
                record.acknowledgment,
                steps=_settled_steps(task, record),
            )
        return state

    async def _round_input(
        self, task: Task, state: RoundState, resume: PausedRound | None
    ) -> RoundInput:
        """What the next round is asked with: the window (compacted before a task's first
        round when the budget cut it) and the session's pinned prompt."""
        number = len(state.finished)
        window, prompt = await window_and_prompt(
            self._history, task, self._settings, self._respond.pin_prompt
        )
        # Before the first round only: a task compacts its thread at most once, and a
        # window the budget left nothing out of has nothing to compact.
        first = number == 0 and resume is None
        compaction = self._compaction if first and not window.complete else None
        if compaction is not None and await compaction(task, window):
            window = await read_window(self._history, task, self._settings)
            prompt = None  # compaction re-pins the session's prompt: the round reads it anew
        final = number >= self._settings.max_rounds - 1
        return RoundInput(
            task, list(window), state.finished, number, final, prompt, resume, window.pins
        )

    async def _decide(self, round_input: RoundInput, waited: float) -> Decision:
        """Run the round in its span, within the task's time limit."""
        number = round_input.number
        with self._tracer.span(f"round {number}", {"threadgate.round": number}) as span:
            decision = await self._within_time_limit(round_input.task, round_input, waited=waited)
            span.set({"threadgate.decision": type(decision).__name__.lower()})
        self._observer.round_decided(type(decision).__name__.lower())
        return decision

    async def _act(self, task: Task, number: int, decision: Reply | Delegation | Silence) -> None:
        """End the task on a reply or silence; store a delegation and wait for it."""
        if isinstance(decision, Silence):
            return await self._end_silently(task, decision)
        if isinstance(decision, Reply):
            answer = await self._store_reply(task, decision)
            return await self._deliver_reply(task, answer, steered=len(decision.steered))
        if number >= self._settings.max_rounds - 1:
            raise RoundFailed(
                "the model delegated in the final round, where delegate is not offered"
            )
        stored = await self._delegations.record(
            task, number, decision, timeout_seconds=self._settings.subtask_timeout_seconds
        )
        same = stored.acknowledgment == decision.acknowledgment
        await self._stamp(task.ack_id(number), same, decision.origin)
        await self._wait_for(task, number, stored)

    async def _store_reply(self, task: Task, decision: Reply) -> StoredMessage:
        draft = StoredMessage(
            task.reply_id,
            task.session_id,
            "assistant",
            "reply",
            decision.text,
            citations=decision.citations,
        )
        # Stored with where it came from, in the same statement (`History.append`), and
        # only under the task's lease: an attempt that lost it may have been written
        # without messages the current one covers, which would take it as their answer.
        return await self._history.append(
            draft,
            # After the newest turn it answers: one its round took as it ran, or its task's.
            answers=decision.steered[-1] if decision.steered else task.newest_turn_id,
            origin=decision.origin,
            lease=task,
        )

    async def _stamp(self, message_id: str, ours: bool, origin: AnswerOrigin | None) -> None:
        """Record which prompt and route wrote the stored answer — when it is this round's
        (a re-run after a crash may find another attempt's answer stored first)."""
        if self._ports.memory is not None and origin is not None and ours:
            await self._ports.memory.stamp(message_id, origin)

    async def _within_time_limit(
        self, task: Task, round_input: RoundInput, *, waited: float = 0.0
    ) -> Decision:
        """Run the round in what is left of the task's time, counted from its arrival (so
        rounds after long subtasks get less) without the `waited` seconds people took to
        decide on its tool calls; a round cut short stores nothing."""
        limit = self._settings.task_timeout_seconds
        remaining = limit - self._age(task) + waited
        if remaining <= 0:
            raise TaskTimedOut(f"the task ran past its {limit:g} s limit before this round")
        try:
            async with asyncio.timeout(remaining) as scope:
                return await self._respond(round_input)
        except TimeoutError as exc:
            if not scope.expired():
                raise
            raise TaskTimedOut(f"the task ran past its {limit:g} s limit") from exc

    def _age(self, task: Task) -> float:
        """Seconds since the task's message arrived (0 when the store did not say)."""
        return (self._clock() - task.created_at).total_seconds() if task.created_at else 0.0

    async def _defer(self, task: Task, error: ModelsUnavailable) -> None:
        """Queue the task again for when a model may be back, within the bounds, telling
        the person once the wait gets long; past the bounds, tell them and free the thread."""
        age, standing = self._age(task), await self._waits.standing(task)
        planned = task.attempts - min(standing.early_tries, self._settings.max_deferrals)
        delay = deferral(self._settings, planned, age, error.retry_after)
        if delay is None:
            self._observer.task_settled("unavailable")
            return await self._give_up(task, error, "unavailable", told=standing.thread_told)
        if age + delay >= self._settings.still_trying_seconds and not standing.thread_told:
            await self._still_trying(task)
        self._observer.task_settled("deferred")
        await self._waits.defer(task, delay, str(error))

    async def _still_trying(self, task: Task) -> None:
        """Post the `still_trying` notice (once, whoever asks: its outbox row). Not being
        able to post it now does not stop the deferral: the next one posts it."""
        try:
            await self._publisher.publish(
                task, task.interim_id, self._settings.notices.still_trying
            )
        except Exception as exc:  # Slack away, or a lease lost: retry_later below is fenced
            log.warning("task %s: the still-trying notice was not posted: %s", task.id, exc)

    async def _deliver_reply(self, task: Task, reply: StoredMessage, *, steered: int = 0) -> None:
        # The record that the reply landed goes with the task's end, in one step (a crash
        # between the two leaves the reply to be found again, never posted twice).
        delivered = await self._publisher.publish(
            task, reply.id, reply.text, citations=reply.citations, finishing=True
        )
        self._observer.task_settled("answered")
        self._observer.reply_answered(1 + len(task.covers) + steered)
        self._schedule_run_settled(task, "posted")
        await self._queue.finish(task, delivered)

    async def _end_silently(self, task: Task, silence: Silence) -> None:
        """A schedule's run with nothing to say: nothing is posted, the task is done."""
        log.info("task %s ended without a post: %s", task.id, silence.reason or "no reason given")
        self._observer.task_settled("silent")
        self._schedule_run_settled(task, "silent")
        await self._queue.finish(task)

    def _schedule_run_settled(self, task: Task, outcome: str) -> None:
        if task.schedule_id is not None:
            self._observer.schedule_run_settled(outcome)

    async def _wait_for(self, task: Task, number: int, delegation: Delegation) -> None:
        steps = [
            Step(subtask_id(task.id, number, index), request.title, "pending")
            for index, request in enumerate(delegation.subtasks)
        ]
        await self._publisher.publish(
            task, task.ack_id(number), delegation.acknowledgment, steps=steps
        )
        await self._delegations.await_subtasks(task)

    async def _give_up(
        self,
        task: Task,
        error: Exception,
        kind: FailureKind,
        *,
        alerted: bool = False,
        told: bool = False,
    ) -> None:
        """Tell the thread why (unless it was `told` already, in this outage) and fail."""
        with bind_log_fields(outcome="given_up", reason=kind):  # one line per outcome
            log.warning("task %s failed (%s): %s", task.id, kind, error)
        self._schedule_run_settled(task, "failed")
        notice = self._settings.notices.text(kind, alerted=alerted)
        try:
            if told:
                log.info("task %s: its thread was told already that the models are down", task.id)
            else:
                await self._publisher.publish(task, task.failure_id, notice)
            if kind == "unavailable" and not told:
                await self._waits.told(task)
        finally:
            await self._queue.fail(task, f"{type(error).__name__}: {error}")

    async def _retry_or_give_up(self, task: Task, error: Exception) -> None:
        with contextlib.suppress(Exception):
            if task.attempts < self._settings.max_attempts:
                await self._queue.retry_later(
                    task, backoff(self._settings, task.attempts), type(error).__name__
                )
            else:
                await self._give_up(task, error, "error")

    # Subtasks

    async def run_subtask(self, subtask: Subtask, task: Task) -> None:
        """Run a leased subtask within its time limit and record how it ended."""
        await self._subtasks.run(subtask, task)


def _settled_steps(task: Task, record: RoundRecord) -> list[Step]:
    """A finished round's subtasks as steps, each in the state it ended in, titled as
    when they were announced (from the delegate call the record keeps)."""
    return [
        Step(
            subtask_id(task.id, record.number, outcome.index),
            _announced_title(record.raw_arguments, outcome.index) or outcome.type,
            STEP_STATES[outcome.state],
        )
        for outcome in record.outcomes
    ]


def _announced_title(raw_arguments: str, index: int) -> str | None:
    try:
        call = json.loads(raw_arguments)["subtasks"][index]
        return SubtaskRequest(str(call["type"]), dict(call.get("params") or {})).title
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
