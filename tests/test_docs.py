"""The documents in the repository say true things about it.

docs/ARCHITECTURE.md names, for each invariant, the tests that prove it, and the modules
to read first; a rename that leaves the map pointing at nothing fails here. Every variable
`Settings` reads is documented exactly once, with its field's default: in one of the
README's settings tables (what each mode requires, what production should set) or in
docs/SETTINGS.md, under the heading of its group. Every metric family the gateway declares
has a row in docs/METRICS.md with its type and labels. Links stay inside the repository and
land on a file and heading that exist (a clone has nothing beside it).
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

import gateway.telemetry.metric_families as metric_families
from gateway.config.settings import GROUPS, PLACES, VARIABLES
from gateway.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
SETTINGS = ROOT / "docs" / "SETTINGS.md"
METRICS = ROOT / "docs" / "METRICS.md"
_PATH = re.compile(r"`((?:agent|gateway|storage|tests|bench)/[\w/]+\.py)(?:::(\w+))?`")
_TEST = re.compile(r"`::(\w+)`")
# A value as a settings table writes one: `code`, a number (1,800 or 1.5), or a truth
# value; and the three ways a row states a default: "default V", "V (default", "V by default".
_VALUE = r"`[^`]*`|\d+(?:,\d{3})*(?:\.\d+)?|true|false"
_DEFAULT = re.compile(rf"\bdefault ({_VALUE})|({_VALUE}) \(default\b|({_VALUE}) by default")
# Each settings group's heading in docs/SETTINGS.md (the groups of gateway/config/settings.py).
SECTIONS = {
    "slack": "Slack's API and connection",
    "assistant": "Slack's agent view",
    "access": "Who and where the bot answers",
    "database": "Database",
    "models": "Models",
    "tasks": "Tasks",
    "tools": "Tools",
    "memory": "Memory",
    "limits": "Limits and budgets",
    "files": "Files",
    "delivery": "Delivery",
    "schedules": "Schedules",
    "alerts": "Alerts",
    "telemetry": "Telemetry",
    "process": "The process",
}
# Each metric group's heading in docs/METRICS.md (the classes of metric_families.py).
CONCERNS = {
    "EventFamilies": "Slack events",
    "MessageFamilies": "Messages",
    "ModelFamilies": "Models",
    "SlackFamilies": "Slack calls, streams and clicks",
    "SurfaceFamilies": "The slash command and the App Home",
    "TaskFamilies": "Tasks and schedules",
    "QueueFamilies": "The queue",
    "DatabaseFamilies": "The database",
    "ConnectionFamilies": "Connections and build",
}
# Named in the documents though no setting: the suite's own scale for the chaos tests.
NOT_SETTINGS = {"THREADGATE_CHAOS_SCALE"}
# A variable of ours as the documents name one, in backticks.
_OURS = re.compile(r"`((?:THREADGATE|SLACK|OPENAI|ANTHROPIC)_[A-Z0-9_]*[A-Z0-9])`")


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


def test_the_readme_links_the_guides() -> None:
    """The README links the architecture, the deploy guide and the two references."""
    text = README.read_text()
    for guide in ("docs/ARCHITECTURE.md", "docs/DEPLOY.md", "docs/SETTINGS.md", "docs/METRICS.md"):
        assert f"]({guide}" in text, guide


def test_the_quick_start_is_two_commands() -> None:
    """The README's quick start runs `make run` and `make test`, and nothing else."""
    quick_start = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]


def test_make_run_serves_from_the_repository_root() -> None:
    """`make run` runs `threadgate serve` where the Makefile is, so it reads the `.env`
    there (the command reads the `.env` of its working directory)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert [line.strip() for line in recipe] == ["$(BIN)/threadgate serve"]


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


def test_no_tracked_file_carries_a_merge_conflict_marker() -> None:
    """A merge left resolved: no tracked text file has a line that opens, splits or closes
    a conflict (CHANGELOG.md once carried one through three merges)."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.toml", "*.yaml", "*.sql", "Makefile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    marker = re.compile(r"^(?:<{7} |>{7} |={7}$)", re.MULTILINE)
    assert [name for name in tracked if marker.search((ROOT / name).read_text())] == []


# -- links ----------------------------------------------------------------------------------


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def prose(path: Path) -> str:
    """A Markdown file without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped,
    spaces hyphens, and `-1`, `-2`… after a heading's repeats."""
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", prose(path), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        unique, repeat = slug, 0
        while unique in found:
            repeat += 1
            unique = f"{slug}-{repeat}"
        found.add(unique)
    return found


def links(path: Path) -> Iterator[str]:
    yield from re.findall(r"\]\(([^)\s]+)\)", prose(path))


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_link_lands_inside_the_repository(path: Path) -> None:
    """Each Markdown link is relative, names a file of the repository, and an anchor it
    names is a heading of that file."""
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        if re.match(r"\w+:", file):
            broken.append(f"{target}: link a file of the repository, not a web page")
            continue
        landed = (path.parent / file).resolve() if file else path
        if not landed.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(landed):
            broken.append(f"{target}: no such heading in {landed.relative_to(ROOT)}")
    assert broken == []


def test_the_anchors_are_githubs() -> None:
    """Headings become GitHub's anchors: lower case, punctuation dropped, spaces hyphens."""
    assert {"what-threadgate-stores-and-for-how-long", "slacks-agent-view"} <= (
        anchors(README) | anchors(SETTINGS)
    )


# -- settings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row of a settings table: where it is, its variables, the defaults it states."""

    file: str
    section: str
    cell: str
    variables: tuple[str, ...]
    defaults: tuple[str, ...]


def table_rows(path: Path) -> list[Row]:
    """The rows of every `| variable | meaning |` table in a Markdown file, each with the
    `## ` heading it sits under."""
    rows: list[Row] = []
    section, in_table = "", False
    for line in prose(path).splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("| variable | meaning |"):
            in_table = True
        elif in_table and line.startswith("| `"):
            cell, meaning = line.split(" | ", 1)
            names = tuple(re.findall(r"`([A-Z][A-Z0-9_]*)`", cell))
            stated = tuple("".join(m.groups("")).strip("`") for m in _DEFAULT.finditer(meaning))
            rows.append(Row(path.name, section, cell, names, stated))
        elif not line.startswith("| ---"):
            in_table = False
    return rows


def setting_rows() -> list[Row]:
    return table_rows(README) + table_rows(SETTINGS)


def where_to_document(variable: str) -> str:
    group = PLACES[variable].group
    model = GROUPS[group]
    source = Path(inspect.getsourcefile(model) or "").relative_to(ROOT)
    return (
        f"{variable}: add a row to docs/SETTINGS.md under '## {SECTIONS.get(group, '?')}' "
        f"(its group, {model.__name__} in {source}), or, when every deployment of a mode "
        f"must set it, to the README's 'Required settings' or 'For production' table"
    )


def test_every_setting_is_documented_exactly_once() -> None:
    """Each variable Settings reads has one row in the README's settings tables and
    docs/SETTINGS.md together."""
    rows: dict[str, list[str]] = {variable: [] for variable in VARIABLES}
    for row in setting_rows():
        for variable in row.variables:
            rows.setdefault(variable, []).append(f"{row.file} '{row.section}'")
    missing = [where_to_document(v) for v, found in rows.items() if not found and v in VARIABLES]
    twice = [f"{v} has rows in {found}: keep one" for v, found in rows.items() if len(found) > 1]
    assert missing == [] and twice == []


def test_no_table_names_a_variable_that_is_no_setting() -> None:
    """Every variable a settings table names is one Settings reads."""
    named = {(row.file, v) for row in setting_rows() for v in row.variables}
    assert sorted((file, v) for file, v in named if v not in VARIABLES) == []


def test_the_documents_name_only_real_settings() -> None:
    """A `THREADGATE_…`, `SLACK_…`, `OPENAI_…` or `ANTHROPIC_…` in backticks anywhere in the
    README or docs/ is a setting: a misspelt name in prose fails here."""
    named = {(path.name, name) for path in documents() for name in _OURS.findall(path.read_text())}
    unknown = [(file, name) for file, name in named if name not in {*VARIABLES, *NOT_SETTINGS}]
    assert sorted(unknown) == []


def test_every_settings_group_has_its_section() -> None:
    """docs/SETTINGS.md has one `## ` section per settings group, titled as SECTIONS says."""
    assert set(SECTIONS) == set(GROUPS), (
        "a settings group was added or renamed: give it a section in docs/SETTINGS.md and "
        "its title in SECTIONS (tests/test_docs.py)"
    )
    headings = re.findall(r"^## (.+)$", prose(SETTINGS), flags=re.MULTILINE)
    assert [h for h in headings if h in SECTIONS.values()] == list(SECTIONS.values())


def test_each_reference_row_sits_under_its_group() -> None:
    """A row of docs/SETTINGS.md is in the section of its variables' group."""
    misplaced = [
        f"{v} is under '{row.section}': move it to '{SECTIONS[PLACES[v].group]}'"
        for row in table_rows(SETTINGS)
        for v in row.variables
        if v in PLACES and row.section != SECTIONS[PLACES[v].group]
    ]
    assert misplaced == []


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


@pytest.mark.parametrize("row", setting_rows(), ids=lambda row: row.variables[0])
def test_each_row_states_the_default_settings_has(row: Row) -> None:
    """A row states one default per variable that has one, in the variables' order, each
    equal to the settings field's default; a variable unset by default states none."""
    defaults = [(n, VARIABLES[n].default) for n in row.variables if n in VARIABLES]
    defaults = [(n, d) for n, d in defaults if _has_default(n)]
    assert len(row.defaults) == len(defaults), (
        f"{row.cell} states {row.defaults}, expected {defaults}"
    )
    pairs = zip(defaults, row.defaults, strict=True)
    assert [(n, s, d) for (n, d), s in pairs if not _same(s, d)] == []


# -- metrics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """A metric family as /metrics exposes it: its name, type and label names."""

    name: str
    type: str
    labels: tuple[str, ...]


def families(registry: CollectorRegistry) -> list[Family]:
    """A registry's families, a counter named with its `_total`."""
    found = []
    for collector in list(registry._collector_to_names):
        assert isinstance(collector, MetricWrapperBase)
        suffix = "_total" if collector._type == "counter" else ""
        found.append(Family(collector._name + suffix, collector._type, collector._labelnames))
    return found


def declared() -> dict[Family, str]:
    """Every family a fresh `Metrics` exposes, with its group in metric_families.py ("" for
    one declared elsewhere)."""
    groups: dict[str, str] = {}
    for name, group in vars(metric_families).items():
        if inspect.isclass(group) and name.endswith("Families"):
            registry = CollectorRegistry()
            group(registry)
            groups.update({family.name: name for family in families(registry)})
    return {f: groups.get(f.name, "") for f in families(Metrics().registry)}


def metric_rows() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """docs/METRICS.md's rows: each metric with its section, type and labels."""
    rows: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    section = ""
    for line in prose(METRICS).splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        match = re.match(r"\| `(threadgate_\w+)` \| (\w+) \| ([^|]*) \|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            labels = tuple(re.findall(r"`(\w+)`", match.group(3)))
            rows[match.group(1)] = (section, match.group(2), labels)
    return rows


def test_every_metric_family_is_documented() -> None:
    """Each family the gateway exposes has a row in docs/METRICS.md, under its group's
    heading, with its type and label names."""
    rows, problems = metric_rows(), []
    for family, group in declared().items():
        heading = CONCERNS.get(group, "the heading of its concern")
        where = f"docs/METRICS.md under '## {heading}'"
        if family.name not in rows:
            problems.append(
                f"{family.name}: add `| `{family.name}` | {family.type} | "
                f"{', '.join(family.labels) or '—'} | meaning |` to {where}"
            )
            continue
        section, type_, labels = rows[family.name]
        if (type_, labels) != (family.type, family.labels):
            problems.append(f"{family.name} is a {family.type} by {family.labels} in the code")
        if group in CONCERNS and section != heading:
            problems.append(f"{family.name} is under '{section}': move it to {where}")
    assert problems == []


def test_metrics_documents_nothing_undeclared() -> None:
    """Every metric docs/METRICS.md lists is one the gateway exposes."""
    exposed = {family.name for family in declared()}
    assert sorted(set(metric_rows()) - exposed) == []


def test_every_metric_group_has_its_heading() -> None:
    """CONCERNS names every group of metric_families.py, and docs/METRICS.md has each."""
    groups = {group for group in declared().values() if group}
    assert groups == set(CONCERNS), "give the new group a section in docs/METRICS.md"
    headings = set(re.findall(r"^## (.+)$", prose(METRICS), flags=re.MULTILINE))
    assert set(CONCERNS.values()) <= headings
