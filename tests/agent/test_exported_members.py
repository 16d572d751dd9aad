"""The agent package declares its public surface once (like httpx's test of the same name)."""

from __future__ import annotations

import types

import agent


def test_all_is_sorted() -> None:
    """`__all__` is sorted, so additions are easy to review."""
    assert agent.__all__ == sorted(agent.__all__)


def test_every_exported_name_resolves() -> None:
    """Each name in `__all__` is an attribute of the package."""
    assert [name for name in agent.__all__ if not hasattr(agent, name)] == []


def test_every_public_member_is_exported() -> None:
    """Nothing public is imported into the package without being listed."""
    public = {
        name
        for name, value in vars(agent).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(agent.__all__)
