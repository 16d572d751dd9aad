"""The one place a task's message ids are spelled.

Exactly-once delivery rests on these ids being deterministic: a task's turn, its
acknowledgments, its reply and its failure notice each have one id derived from the task
id, so a retried append finds the stored row and a retried post finds its outbox row.
Storage, the runner and the publisher all take the ids from here (through `Task`), never
by formatting the string themselves.

    task:{id}:user        the person's message that made the task
    task:{id}:ack:{n}     the acknowledgment of delegating round n
    task:{id}:reply       the final reply
    task:{id}:failure     the notice that the task could not be answered
    task:{id}:stopped     the note that someone stopped the task (Slack's Stop button)
    task:{id}:interim     the notice that every model is failing and the bot keeps trying
    task:{id}:approval:{p}:{i}  the i-th tool call of the task's p-th pause, asking a person
"""

from __future__ import annotations


def user_message_id(task_id: str) -> str:
    return f"task:{task_id}:user"


def reply_id(task_id: str) -> str:
    return f"task:{task_id}:reply"


def failure_id(task_id: str) -> str:
    return f"task:{task_id}:failure"


def stopped_id(task_id: str) -> str:
    return f"task:{task_id}:stopped"


def interim_id(task_id: str) -> str:
    return f"task:{task_id}:interim"


def ack_id(task_id: str, round_number: int) -> str:
    return f"{ack_prefix(task_id)}{round_number}"


def ack_prefix(task_id: str) -> str:
    """What every acknowledgment id of the task starts with."""
    return f"task:{task_id}:ack:"


def approval_id(task_id: str, pause: int, index: int) -> str:
    """The `index`-th approval request of the task's `pause`-th pause (and its post)."""
    return f"task:{task_id}:approval:{pause}:{index}"
