"""Each package that others import declares its public surface once (like httpx's test of
the same name): `gateway/` imports `agent` and `storage` only through these names."""

from __future__ import annotations

import types

import pytest

import agent
import storage

SURFACES = [pytest.param(agent, id="agent"), pytest.param(storage, id="storage")]


@pytest.mark.parametrize("package", SURFACES)
def test_all_is_sorted(package: types.ModuleType) -> None:
    """`__all__` is sorted, so additions are easy to review."""
    assert package.__all__ == sorted(package.__all__)


@pytest.mark.parametrize("package", SURFACES)
def test_every_exported_name_resolves(package: types.ModuleType) -> None:
    """Each name in `__all__` is an attribute of the package."""
    assert [name for name in package.__all__ if not hasattr(package, name)] == []


@pytest.mark.parametrize("package", SURFACES)
def test_every_public_member_is_exported(package: types.ModuleType) -> None:
    """Nothing public is imported into the package without being listed."""
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(package.__all__)
