"""Plugins: work tools, subtask types and providers from installed distributions.

A distribution adds a tool by declaring an entry point in the group `threadgate.tools`
(a subtask type: `threadgate.subtask_types`; a provider a route can name:
`threadgate.providers`, agent/models/providers/kinds.py) naming either a `WorkTool`
(`SubtaskType`, `ProviderKind`) instance or a zero-argument factory returning one, a
class included::

    [project.entry-points."threadgate.tools"]
    weather = "acme_weather:WeatherTool"

A broken plugin — it does not import, its factory raises, it returns the wrong kind of
object, its name is taken — is skipped with a warning naming it: one bad package must not
keep the bot from starting. A provider may not take a built-in provider's name (a plugin
could otherwise receive the keys meant for OpenAI or Anthropic). The entry-point lookup is
a parameter so tests can hand in `EntryPoint` objects without installing anything.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any, TypeVar

from agent.models.providers.kinds import BUILTIN_KINDS, ProviderKind
from agent.rounds.subagent import builtin_subtask_types
from agent.rounds.subtask_types import SubtaskRegistry, SubtaskType
from agent.rounds.tools import ToolRegistry, WorkTool, builtin_tools

log = logging.getLogger(__name__)

TOOLS_GROUP = "threadgate.tools"
SUBTASK_TYPES_GROUP = "threadgate.subtask_types"
PROVIDERS_GROUP = "threadgate.providers"

EntryPointLookup = Callable[..., Iterable[metadata.EntryPoint]]
P = TypeVar("P")


def installed_entry_points(*, group: str) -> Iterable[metadata.EntryPoint]:
    """`metadata.entry_points(group=group)`, read once per process and group: a read scans
    every installed distribution's metadata (about 17 ms a group on a small machine, at
    every gateway start), and what is installed does not change under a running process."""
    return _installed(group)


@functools.cache
def _installed(group: str) -> tuple[metadata.EntryPoint, ...]:
    return tuple(metadata.entry_points(group=group))


def load_tools(entry_points: EntryPointLookup = installed_entry_points) -> list[WorkTool[Any]]:
    """The work tools installed plugins provide; broken ones are skipped with a warning."""
    return _load(TOOLS_GROUP, WorkTool, entry_points)  # type: ignore[type-abstract]


def load_subtask_types(
    entry_points: EntryPointLookup = installed_entry_points,
) -> list[SubtaskType[Any]]:
    """The subtask types installed plugins provide; broken ones are skipped with a warning."""
    return _load(SUBTASK_TYPES_GROUP, SubtaskType, entry_points)  # type: ignore[type-abstract]


def load_providers(
    entry_points: EntryPointLookup = installed_entry_points,
) -> dict[str, ProviderKind]:
    """The built-in providers and every plugin's that loads, by name."""
    kinds = dict(BUILTIN_KINDS)
    for kind in _load(PROVIDERS_GROUP, ProviderKind, entry_points):  # type: ignore[type-abstract]
        name = getattr(kind, "name", None)
        if not isinstance(name, str) or not name or ":" in name or name in kinds:
            log.warning(
                "skipping plugin provider %r in %s: its name is taken or invalid",
                name,
                PROVIDERS_GROUP,
            )
            continue
        kinds[name] = kind
    return kinds


@functools.cache
def installed_providers() -> Mapping[str, ProviderKind]:
    """`load_providers` of this installation, looked up once per process."""
    return load_providers()


def default_registries(
    entry_points: EntryPointLookup = installed_entry_points,
) -> tuple[ToolRegistry, SubtaskRegistry]:
    """The built-in tools and subtask types, plus every plugin that loads."""
    tools, subtasks = builtin_tools(), builtin_subtask_types()
    for tool in load_tools(entry_points):
        _register(tools.register, tool, TOOLS_GROUP)
    for kind in load_subtask_types(entry_points):
        _register(subtasks.register, kind, SUBTASK_TYPES_GROUP)
    return tools, subtasks


def _load(group: str, kind: type[P], entry_points: EntryPointLookup) -> list[P]:
    loaded: list[P] = []
    for entry_point in entry_points(group=group):
        try:
            loaded.append(_instantiate(entry_point, kind))
        except Exception as exc:
            log.warning(
                "skipping plugin %r (%s = %s in %s): %s: %s",
                entry_point.name,
                entry_point.name,
                entry_point.value,
                group,
                type(exc).__name__,
                exc,
            )
    return loaded


def _instantiate(entry_point: metadata.EntryPoint, kind: type[P]) -> P:
    """The entry point's object, calling it first when it is a factory."""
    target = entry_point.load()
    plugin = target if isinstance(target, kind) else target() if callable(target) else target
    if not isinstance(plugin, kind):
        raise TypeError(f"it gave {type(plugin).__name__}, not a {kind.__name__}")
    return plugin


def _register(register: Callable[[P], None], plugin: P, group: str) -> None:
    try:
        register(plugin)
    except ValueError as exc:
        log.warning("skipping plugin %r in %s: %s", getattr(plugin, "name", plugin), group, exc)
