"""A registry of named things: the shape the work tools and the subtask types share.

Both are offered to the model by name, so a name must be unique, and the order in which
they were registered is the order the model sees them in (stable prompts cache better).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


class Registry(Generic[N]):
    """Items by unique name, in registration order; `reserved` names are always taken."""

    reserved: frozenset[str] = frozenset()

    def __init__(self, items: Iterable[N] = ()) -> None:
        self._items: dict[str, N] = {}
        for item in items:
            self.register(item)

    def register(self, item: N) -> None:
        """Add `item`; a name already taken is a `ValueError`."""
        if item.name in self.reserved or item.name in self._items:
            raise ValueError(f"a {self.noun} named {item.name!r} is already registered")
        self._items[item.name] = item

    @property
    def noun(self) -> str:
        return "item"

    def get(self, name: str) -> N | None:
        return self._items.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def __iter__(self) -> Iterator[N]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)
