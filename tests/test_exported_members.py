"""Each package that others import declares its public surface once (like httpx's test of
the same name): `gateway/` imports `agent` and `storage` only through these names."""

from __future__ import annotations

import types

import pytest

import agent
import storage


def _isort_order(name: str) -> tuple[int, str]:
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


SURFACES = [pytest.param(agent, id="agent"), pytest.param(storage, id="storage")]


@pytest.mark.parametrize("package", SURFACES)
def test_all_is_sorted(package: types.ModuleType) -> None:
    """`__all__` is sorted, so additions are easy to review: constants, then classes, then
    functions, each alphabetically (the order ruff's RUF022 keeps)."""
    assert package.__all__ == sorted(package.__all__, key=_isort_order)


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
