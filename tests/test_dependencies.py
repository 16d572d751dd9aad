"""Dependency floors that are there for security stay there.

aiohttp serves the events port to the internet; releases before 3.14.5 are not to be
installed with threadgate (issue 10). A floor lowered by a careless edit, or an older one
added beside it (an extra, a second listing), fails here.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
SECURITY_FLOORS = {"aiohttp": Version("3.14.5")}


def requirements() -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    listed = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        listed += extra
    return [Requirement(line) for line in listed]


def test_security_floors_hold_everywhere_a_package_is_required() -> None:
    """Every listing of aiohttp refuses the release before the floor and allows the floor,
    and the installed release is at least the floor."""
    for name, floor in SECURITY_FLOORS.items():
        listed = [r for r in requirements() if r.name.lower() == name]
        assert listed, f"{name} is not a dependency any more"
        below = Version(f"{floor.major}.{floor.minor}.{floor.micro - 1}")
        for requirement in listed:
            assert not requirement.specifier.contains(below), str(requirement)
            assert not requirement.specifier.contains("3.9.0"), str(requirement)
            assert requirement.specifier.contains(floor), str(requirement)
        assert Version(version(name)) >= floor
