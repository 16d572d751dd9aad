"""The documents in the repository say true things about it.

docs/ARCHITECTURE.md names, for each invariant, the tests that prove it, and the modules
to read first; a rename that leaves the map pointing at nothing fails here. README.md's
configuration table lists every variable `Settings` reads with its field's default (the
fields live in the settings' groups). Nothing in the repository may point outside it (a
clone has nothing beside it).
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from gateway.config.settings import VARIABLES

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
_PATH = re.compile(r"`((?:agent|gateway|storage|tests|bench)/[\w/]+\.py)(?:::(\w+))?`")
_TEST = re.compile(r"`::(\w+)`")
# A value as the README's configuration table writes one: `code`, a number (1,800 or 1.5),
# or a truth value; and the three ways a row states a default: "default V", "V (default",
# "V by default".
_VALUE = r"`[^`]*`|\d+(?:,\d{3})*(?:\.\d+)?|true|false"
_DEFAULT = re.compile(rf"\bdefault ({_VALUE})|({_VALUE}) \(default\b|({_VALUE}) by default")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_module_and_test_the_architecture_names_exists() -> None:
    """Each `path.py` and `path.py::test` in docs/ARCHITECTURE.md is there."""
    missing = []
    for line in ARCHITECTURE.read_text().splitlines():
        last: Path | None = None
        for match in re.finditer(rf"{_PATH.pattern}|{_TEST.pattern}", line):
            if match.group(1):
                last = ROOT / match.group(1)
                name = match.group(2)
                if not last.is_file():
                    missing.append(match.group(1))
                    continue
            else:  # `::name` continues the last file named on the line
                name = match.group(3)
            if name and (last is None or name not in _test_names(last)):
                missing.append(f"{last}::{name}")
    assert missing == []


def test_the_readme_links_the_architecture() -> None:
    assert "docs/ARCHITECTURE.md" in (ROOT / "README.md").read_text()


def test_nothing_in_the_repository_points_outside_it() -> None:
    """No tracked file cites a path beside the checkout (`../…`) as documentation."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    outside = [
        name
        for name in tracked
        if name != "tests/test_docs.py"
        and re.search(r"\.\./shared|DESIGN\.md", (ROOT / name).read_text())
    ]
    assert outside == []


def configuration_rows() -> dict[str, list[str]]:
    """README.md's configuration table: each row's variables, mapped to the defaults the
    row states, in the order it states them."""
    text = (ROOT / "README.md").read_text()
    lines = text.split("## Configuration", 1)[1].split("| variable | meaning |", 1)[1]
    rows: dict[str, list[str]] = {}
    for line in lines.splitlines()[2:]:  # after the header's rule
        if not line.startswith("| `"):
            break  # the table ends
        cell, meaning = line.split(" | ", 1)
        rows[cell] = ["".join(m.groups("")).strip("`") for m in _DEFAULT.finditer(meaning)]
    return rows


def _variables(cell: str) -> list[str]:
    return re.findall(r"`([A-Z][A-Z0-9_]*)`", cell)


def _has_default(name: str) -> bool:
    """Whether a setting has a value when unset (None and empty mean it is off or absent)."""
    default = VARIABLES[name].default
    return default is not None and default != ""


def _same(stated: str, default: object) -> bool:
    if isinstance(default, bool):
        return stated == str(default).lower()
    if isinstance(default, int | float):
        return float(stated.replace(",", "")) == default
    if isinstance(default, Path):
        return Path(stated) == default
    return stated == default


def test_every_setting_is_in_the_readme_and_nothing_else() -> None:
    """Each variable Settings reads has a row in README.md's configuration table, and each
    variable the table names is a setting."""
    listed = [v for cell in configuration_rows() for v in _variables(cell)]
    settings = list(VARIABLES)
    assert sorted(set(settings) - set(listed)) == []
    assert sorted(set(listed) - set(settings)) == []


@pytest.mark.parametrize("cell", list(configuration_rows()), ids=lambda cell: _variables(cell)[0])
def test_the_readme_states_each_default_settings_has(cell: str) -> None:
    """A row states one default per variable that has one, in the variables' order, each
    equal to the settings field's default; a variable unset by default states none."""
    defaults = [(name, VARIABLES[name].default) for name in _variables(cell) if _has_default(name)]
    stated = configuration_rows()[cell]
    assert len(stated) == len(defaults), f"{cell} states {stated}, expected {defaults}"
    wrong = [(n, s, d) for (n, d), s in zip(defaults, stated, strict=True) if not _same(s, d)]
    assert wrong == []
