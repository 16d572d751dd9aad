"""The documents in the repository say true things about it.

docs/ARCHITECTURE.md names, for each invariant, the tests that prove it, and the modules
to read first; a rename that leaves the map pointing at nothing fails here. Nothing in
the repository may point outside it (a clone has nothing beside it).
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
_PATH = re.compile(r"`((?:agent|gateway|storage|tests|bench)/[\w/]+\.py)(?:::(\w+))?`")
_TEST = re.compile(r"`::(\w+)`")


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
