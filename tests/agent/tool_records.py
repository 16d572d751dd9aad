"""What the MCP client tests watch: every tool call record a toolbox reports."""

from __future__ import annotations

from agent import Task, ToolCallRecord, ToolProgress


class Recorder:
    """A `ToolObserver` that keeps every record it is told."""

    def __init__(self) -> None:
        self.records: list[ToolCallRecord] = []

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        self.records.append(record)

    @property
    def progress(self) -> list[ToolProgress]:
        return [r.progress for r in self.records if r.progress is not None]
