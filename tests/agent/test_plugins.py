"""Plugins: tools and subtask types from entry points; a broken plugin never stops start-up."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib import metadata
from importlib.metadata import EntryPoint
from typing import Any

import pytest
from pydantic import BaseModel

from agent.rounds.plugins import (
    SUBTASK_TYPES_GROUP,
    TOOLS_GROUP,
    default_registries,
    installed_entry_points,
    load_subtask_types,
    load_tools,
)
from agent.rounds.subtask_types import SubtaskContext, SubtaskType
from agent.rounds.tools import ToolContext, WorkTool

HERE = __name__


class Weather(WorkTool[BaseModel]):
    name = "weather"
    description = "Today's weather."
    input_model = BaseModel

    async def execute(self, context: ToolContext, input: BaseModel) -> str:
        return "sunny"


class Summarise(SubtaskType[BaseModel]):
    name = "summarise"
    description = "Summarise the cited messages."
    params = BaseModel

    async def run(
        self, context: SubtaskContext, params: BaseModel, references: tuple[str, ...]
    ) -> str:
        return "short"


class TakenName(Weather):
    name = "current_time"


WEATHER = Weather()


def make_weather() -> Weather:
    return Weather()


def explode() -> Weather:
    raise RuntimeError("no API key")


def not_a_tool() -> str:
    return "surprise"


def entry(name: str, target: str, group: str = TOOLS_GROUP) -> EntryPoint:
    return EntryPoint(name, f"{HERE}:{target}", group)


def lookup(*points: EntryPoint) -> Any:
    def entry_points(*, group: str) -> Iterable[EntryPoint]:
        return [p for p in points if p.group == group]

    return entry_points


@pytest.mark.parametrize("target", ["WEATHER", "make_weather", "Weather"])
def test_a_tool_is_an_object_or_a_factory(target: str) -> None:
    """An entry point may name an instance, a factory function or the class itself."""
    [tool] = load_tools(lookup(entry("weather", target)))
    assert isinstance(tool, Weather)


def test_subtask_types_load_from_their_group() -> None:
    """Subtask types come from threadgate.subtask_types, not the tools group."""
    points = lookup(
        entry("summarise", "Summarise", SUBTASK_TYPES_GROUP), entry("weather", "Weather")
    )
    assert [k.name for k in load_subtask_types(points)] == ["summarise"]


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("explode", "RuntimeError: no API key"),
        ("not_a_tool", "TypeError: it gave str, not a WorkTool"),
        ("Summarise", "not a WorkTool"),
        ("missing_name", "AttributeError"),
    ],
)
def test_a_broken_plugin_is_skipped_with_a_warning(
    target: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A plugin that fails to load is skipped, named in a warning; the others load."""
    points = lookup(entry("bad", target), entry("weather", "make_weather"))
    with caplog.at_level(logging.WARNING, logger="agent.rounds.plugins"):
        tools = load_tools(points)
    assert [t.name for t in tools] == ["weather"]
    [record] = caplog.records
    assert "'bad'" in record.getMessage() and reason in record.getMessage()


def test_a_plugin_whose_module_does_not_import_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """An entry point naming a module that is not installed is skipped."""
    point = EntryPoint("ghost", "no_such_module_here:Tool", TOOLS_GROUP)
    with caplog.at_level(logging.WARNING, logger="agent.rounds.plugins"):
        assert load_tools(lookup(point)) == []
    assert "ModuleNotFoundError" in caplog.text and "'ghost'" in caplog.text


def test_default_registries_hold_builtins_and_plugins() -> None:
    """The defaults are the built-ins plus every plugin that loads."""
    points = lookup(
        entry("weather", "Weather"), entry("summarise", "Summarise", SUBTASK_TYPES_GROUP)
    )
    tools, subtasks = default_registries(points)
    assert [t.name for t in tools] == ["current_time", "read_thread", "weather"]
    assert subtasks.names == ("agent", "summarise")


def test_a_plugin_with_a_taken_name_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """A plugin reusing a built-in's name is skipped with a warning, the built-in kept."""
    with caplog.at_level(logging.WARNING, logger="agent.rounds.plugins"):
        tools, _ = default_registries(lookup(entry("clock", "TakenName")))
    assert [type(t).__name__ for t in tools] == ["CurrentTime", "ReadThread"]
    assert "'current_time'" in caplog.text and "already registered" in caplog.text


def test_the_real_entry_points_load_without_error() -> None:
    """With the installed distributions, loading never raises."""
    tools, subtasks = default_registries()
    assert "current_time" in [t.name for t in tools] and "agent" in subtasks.names


def test_the_installed_entry_points_are_read_once_per_group() -> None:
    """The default lookup answers what importlib.metadata answers, from one read a group."""
    first = installed_entry_points(group=TOOLS_GROUP)
    assert list(first) == list(metadata.entry_points(group=TOOLS_GROUP))
    assert installed_entry_points(group=TOOLS_GROUP) is first
