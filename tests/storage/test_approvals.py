"""Approval storage: idempotent pauses, the wait without a worker, decisions that wake the
task, time-outs, and the one run of an approved call."""

from __future__ import annotations

from agent import ApprovalRequest, PausedRound, Task, approval_id
from storage import (
    Admission,
    Database,
    PostgresApprovals,
    PostgresTaskQueue,
    admit,
    approvals_of,
    cancel_task,
    decide_approval,
    pending_approval,
)


async def running_task(db: Database, ts: str = "1.0") -> Task:
    address = {"channel": "C1", "thread_ts": ts, "team": "T1", "user": "UASKER"}
    await admit(db, Admission(None, f"T1:C1:{ts}", f"T1:C1:{ts}", address, "question"))
    task = await PostgresTaskQueue(db).claim()
    assert task is not None
    return task


def paused(task: Task, number: int = 0, calls: int = 1, state: str = '{"tail": []}') -> PausedRound:
    requests = tuple(
        ApprovalRequest(approval_id(task.id, number, i), f"call_{i}", "fs__delete", '{"p": 1}')
        for i in range(calls)
    )
    return PausedRound(number, 0, state, requests)


async def test_pausing_twice_keeps_the_first_pause(fresh_db: Database) -> None:
    """A re-run that re-inferred another step gets the stored pause back, undecided."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    first = await store.pause(task, paused(task, state="first"), timeout_seconds=60)
    second = await store.pause(task, paused(task, calls=2, state="second"), timeout_seconds=60)
    assert first == second and first.state == "first" and len(first.requests) == 1
    assert first.undecided == first.requests and first.decisions == {}


async def test_a_waiting_task_is_not_claimed_until_its_request_is_decided(
    fresh_db: Database,
) -> None:
    """No worker holds it: it waits in Postgres, even through the recovery look, and the
    decision queues it again."""
    store, queue, task = (
        PostgresApprovals(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    await store.await_decisions(task)
    assert await fresh_db.pool.fetchval("SELECT state FROM tasks") == "waiting"
    queue.recovery.again()  # the next claim looks for dead leases and lost wake-ups
    assert await queue.claim() is None
    request = stored.requests[0]
    assert await decide_approval(fresh_db, request.id, "approved", "UASKER") == "decided"
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id
    again = await store.paused(resumed)
    assert again is not None and again.undecided == ()
    decision = again.decisions[request.id]
    assert (decision.verdict, decision.by) == ("approved", "UASKER") and decision.at is not None


async def test_a_decision_before_the_task_waits_does_not_strand_it(fresh_db: Database) -> None:
    """A click between the post and the release: the release finds it decided, and queues."""
    store, queue, task = (
        PostgresApprovals(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    assert await decide_approval(fresh_db, stored.requests[0].id, "denied", "UASKER") == "decided"
    await store.await_decisions(task)
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id


async def test_every_request_of_a_pause_must_be_decided(fresh_db: Database) -> None:
    """Two calls waiting: the first decision leaves the task waiting, the second wakes it."""
    store, queue, task = (
        PostgresApprovals(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    stored = await store.pause(task, paused(task, calls=2), timeout_seconds=60)
    await store.await_decisions(task)
    await decide_approval(fresh_db, stored.requests[0].id, "approved", "UASKER")
    queue.recovery.again()
    assert await queue.claim() is None
    await decide_approval(fresh_db, stored.requests[1].id, "denied", "UASKER")
    assert await queue.claim() is not None


async def test_a_second_decision_changes_nothing(fresh_db: Database) -> None:
    """The first decision stands; a later click (or one for no request) records nothing."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    request = stored.requests[0]
    assert await decide_approval(fresh_db, request.id, "denied", "UASKER") == "decided"
    assert await decide_approval(fresh_db, request.id, "approved", "UOTHER") == "already"
    assert await decide_approval(fresh_db, "task:nope:approval:0:0", "approved", "U") == "unknown"
    found = await pending_approval(fresh_db, request.id)
    assert found is not None and found.decision is not None
    assert (found.decision.verdict, found.decision.by) == ("denied", "UASKER")
    assert found.task.address["user"] == "UASKER"


async def test_a_request_past_its_deadline_times_out_and_wakes_the_task(fresh_db: Database) -> None:
    """Nobody decided in time: any claim's recovery look finds the task, its run reads the
    request as timed out, and a click after that is refused."""
    store, queue, task = (
        PostgresApprovals(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    await store.await_decisions(task)
    queue.recovery.again()
    assert await queue.claim() is None  # not yet due
    await fresh_db.pool.execute("UPDATE tool_approvals SET deadline = now() - interval '1s'")
    queue.recovery.again()
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id
    again = await store.paused(resumed)
    assert again is not None
    assert again.decisions[stored.requests[0].id].verdict == "timed_out"
    assert again.decisions[stored.requests[0].id].by is None
    assert await decide_approval(fresh_db, stored.requests[0].id, "approved", "UASKER") == "already"


async def test_a_cancelled_task_takes_no_decision(fresh_db: Database) -> None:
    """Once an operator cancelled the waiting task, a click records nothing."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    await store.await_decisions(task)
    await cancel_task(fresh_db, task.id, actor="test")
    assert await decide_approval(fresh_db, stored.requests[0].id, "approved", "UASKER") == "ended"


async def test_an_approved_call_starts_once_and_its_result_is_kept(fresh_db: Database) -> None:
    """The first run starts it; later runs read its result; one that died mid-call is
    never started again."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    stored = await store.pause(task, paused(task, calls=2), timeout_seconds=60)
    done, died = stored.requests
    for request in stored.requests:
        await decide_approval(fresh_db, request.id, "approved", "UASKER")
    assert (await store.start_call(task, done.id)).state == "start"
    await store.finish_call(task, done.id, "deleted 3 files", is_error=False)
    again = await store.start_call(task, done.id)
    assert (again.state, again.output, again.is_error) == ("done", "deleted 3 files", False)
    assert (await store.start_call(task, died.id)).state == "start"
    assert (await store.start_call(task, died.id)).state == "interrupted"
    listed = await approvals_of(fresh_db, task.id)
    assert [(a.decision, a.decided_by, a.run_state) for a in listed] == [
        ("approved", "UASKER", "ok"),
        ("approved", "UASKER", "running"),
    ]


async def test_a_denied_call_never_starts(fresh_db: Database) -> None:
    """`start_call` of a denied request does not let it run."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    await decide_approval(fresh_db, stored.requests[0].id, "denied", "UASKER")
    assert (await store.start_call(task, stored.requests[0].id)).state != "start"


async def test_the_time_people_took_is_counted(fresh_db: Database) -> None:
    """A pause's wait, from asking to the last decision, is what the task's time limit
    leaves out."""
    store, task = PostgresApprovals(fresh_db), await running_task(fresh_db)
    stored = await store.pause(task, paused(task), timeout_seconds=60)
    await fresh_db.pool.execute(
        "UPDATE round_pauses SET created_at = now() - interval '100 seconds'"
    )
    await fresh_db.pool.execute("UPDATE tasks SET created_at = now() - interval '200 seconds'")
    await decide_approval(fresh_db, stored.requests[0].id, "approved", "UASKER")
    again = await store.paused(task)
    assert again is not None and 99 <= again.waited_seconds <= 130
