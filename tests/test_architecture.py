"""The layout holds: which package and which layer may import which, and no import cycles.

The rules, read from the source with `ast` (imports under `TYPE_CHECKING` and inside
functions count: a cycle that only type checkers see is still two modules owning one idea):

- `agent/` imports no Slack, no SQL driver, and neither `gateway` nor `storage`.
- Inside `agent/` the layers point down: `durable` → `rounds` → `models` → `core`. A module
  may import its own layer and the ones below; no submodule imports the package root.
- `storage/` imports no Slack and no `gateway`; it uses `agent` only through the names the
  package declares public (`from agent import …`).
- `gateway/` uses `agent` and `storage` only through their public surfaces.
- Inside `gateway/` every module sits in one of ten layers, and imports only its own layer
  and those `GATEWAY_LAYERS` lists for it:

      text        pure text: Slack markup in, Markdown out, links, provenance
      telemetry   metrics and logs: what the process says about itself
      slack       the Slack boundary (clients, errors, workspaces, OAuth, payloads): text, telemetry
      inbound     a Slack event becomes an admitted task: slack, text, telemetry
      delivery    the agent's messages reach Slack exactly once: slack, text, telemetry
      config      the settings, in groups, and the files they name: slack, text, telemetry
      models      the model routes and their transport: config, slack, text, telemetry
      schedules   each period of a person's schedule, one task: delivery, slack, text, telemetry
      process     the composition root by role and the HTTP server: all of the above but operator
      operator    the commands an operator runs (CLI, console, doctor, reports): all of the above

  `inbound` and `delivery` never import each other; `text` imports no Slack SDK, no
  network library and no storage.
- No import cycle among the modules of the three packages.
- No class in `gateway/` is over `MAX_CLASS_LINES` lines and no function over
  `MAX_FUNCTION_LINES`: a module is one noun, a function one step. Lines of a declarative
  table (a literal assigned or returned) do not count.

The checker is tested on a small tree of its own too, so a rule that silently stopped
matching would fail here rather than pass forever.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "gateway", "storage")
AGENT_LAYERS = ("agent.core", "agent.models", "agent.rounds", "agent.durable")
SLACK = ("slack_sdk", "slack_bolt")
SQL = ("asyncpg", "psycopg", "psycopg2", "sqlalchemy")
NETWORK = ("aiohttp", "httpx", "storage")
# The gateway's HTTP library: agent/ speaks HTTP through httpx, its transport injected.
GATEWAY_HTTP = ("aiohttp", "httpx_aiohttp")
# Each gateway layer and the layers it may import besides itself.
GATEWAY_LAYERS: dict[str, tuple[str, ...]] = {
    "gateway.text": (),
    "gateway.telemetry": (),
    "gateway.slack": ("gateway.text", "gateway.telemetry"),
    "gateway.inbound": ("gateway.slack", "gateway.text", "gateway.telemetry"),
    "gateway.delivery": ("gateway.slack", "gateway.text", "gateway.telemetry"),
    "gateway.config": ("gateway.slack", "gateway.text", "gateway.telemetry"),
    "gateway.models": ("gateway.config", "gateway.slack", "gateway.text", "gateway.telemetry"),
    "gateway.schedules": ("gateway.delivery", "gateway.slack", "gateway.text", "gateway.telemetry"),
    "gateway.process": (
        "gateway.config",
        "gateway.models",
        "gateway.schedules",
        "gateway.delivery",
        "gateway.inbound",
        "gateway.slack",
        "gateway.text",
        "gateway.telemetry",
    ),
    "gateway.operator": (
        "gateway.process",
        "gateway.config",
        "gateway.models",
        "gateway.schedules",
        "gateway.delivery",
        "gateway.inbound",
        "gateway.slack",
        "gateway.text",
        "gateway.telemetry",
    ),
}


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports, as written (absolute)
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path, packages: tuple[str, ...]) -> Iterator[Import]:
    """Every import statement in the packages, relative ones made absolute."""
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(root, path)
            base = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        yield Import(name, alias.name, node.lineno)
                elif isinstance(node, ast.ImportFrom):
                    yield Import(name, _absolute(node, base), node.lineno)


def _absolute(node: ast.ImportFrom, base: str) -> str:
    if not node.level:
        return node.module or ""
    parts = base.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def _within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def _layer(module: str) -> int | None:
    for rank, layer in enumerate(AGENT_LAYERS):
        if _within(module, (layer,)):
            return rank
    return None


def gateway_layer(module: str) -> str | None:
    return next((layer for layer in GATEWAY_LAYERS if _within(module, (layer,))), None)


def _gateway_violation(source: str, target: str) -> str | None:
    mine = gateway_layer(source)
    if mine == "gateway.text" and _within(target, (*SLACK, *NETWORK)):
        return "gateway.text is pure: no Slack SDK, no network, no storage"
    if not _within(target, ("gateway",)) or mine is None:
        return None
    theirs = gateway_layer(target)
    if theirs is None:
        return "gateway's layers import each other's modules, never the package root"
    if theirs != mine and theirs not in GATEWAY_LAYERS[mine]:
        return f"{mine} may not import {theirs}"
    return None


def violation(imp: Import) -> str | None:
    """Why this import breaks a rule, or None."""
    source, target = imp.module, imp.target
    if _within(source, ("agent",)):
        if _within(target, (*SLACK, *SQL, "gateway", "storage")):
            return "agent/ imports no Slack, no SQL, no gateway or storage"
        if _within(target, GATEWAY_HTTP):
            return (
                "agent/ speaks HTTP through httpx: aiohttp is the gateway's, its transport injected"
            )
        if source != "agent" and target == "agent":
            return "a submodule of agent must not import the package root"
        mine, theirs = _layer(source), _layer(target)
        if mine is not None and theirs is not None and theirs > mine:
            return f"{AGENT_LAYERS[mine]} may not import the layer above it, {AGENT_LAYERS[theirs]}"
    if _within(source, ("storage",)):
        if _within(target, (*SLACK, "gateway")):
            return "storage/ imports no Slack and no gateway"
        if _within(target, ("agent",)) and target != "agent":
            return "storage/ uses agent only through `from agent import …`"
    if _within(source, ("gateway",)):
        if _within(target, ("agent",)) and target != "agent":
            return "gateway/ uses agent only through `from agent import …`"
        if _within(target, ("storage",)) and target != "storage":
            return "gateway/ uses storage only through `from storage import …`"
        return _gateway_violation(source, target)
    return None


def violations(root: Path, packages: tuple[str, ...]) -> list[str]:
    return [
        f"{imp.module}:{imp.line} imports {imp.target}: {why}"
        for imp in imports_of(root, packages)
        if (why := violation(imp)) is not None
    ]


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module → the modules of the packages it imports (a name imported from a package
    counts as the submodule when one of that name exists)."""
    known = {module_name(root, p) for package in packages for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in known}
    for imp in imports_of(root, packages):
        for target in _resolved(imp, root, known):
            if target != imp.module and not imp.module.startswith(target + "."):
                graph[imp.module].add(target)
    return graph


def _resolved(imp: Import, root: Path, known: set[str]) -> Iterator[str]:
    target = imp.target
    while target and target not in known:
        target = target.rpartition(".")[0]
    if target:
        yield target


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 70
_LITERALS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def _table_lines(node: ast.AST) -> int:
    """Lines of the literal tables (assigned or returned) directly in `node`'s body."""
    lines = 0
    for statement in getattr(node, "body", []):
        value = getattr(statement, "value", None)
        if isinstance(statement, ast.Assign | ast.AnnAssign | ast.Return) and isinstance(
            value, _LITERALS
        ):
            lines += (statement.end_lineno or statement.lineno) - statement.lineno + 1
    return lines


def oversized(root: Path, package: str) -> list[str]:
    """Each class over MAX_CLASS_LINES and function over MAX_FUNCTION_LINES in `package`."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION_LINES
            else:
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1 - _table_lines(node)
            if size > limit:
                found.append(
                    f"{module_name(root, path)}.{node.name}: {size} lines (at most {limit})"
                )
    return found


# The project itself


def test_the_packages_import_only_what_the_layout_allows() -> None:
    """No import in agent/, storage/ or gateway/ breaks a rule of the layout."""
    assert violations(ROOT, PACKAGES) == []


def test_there_is_no_import_cycle() -> None:
    """No two modules import each other, even only for type checking."""
    assert cycles(import_graph(ROOT, PACKAGES)) == []


def test_no_gateway_class_or_function_outgrows_one_job() -> None:
    """No class in gateway/ over 300 lines, no function over 70 (tables aside)."""
    assert oversized(ROOT, "gateway") == []


def test_every_agent_module_sits_in_a_layer() -> None:
    """agent/ has no loose modules beside its layers: only the package's public surface."""
    loose = [
        module_name(ROOT, path)
        for path in (ROOT / "agent").rglob("*.py")
        if _layer(module_name(ROOT, path)) is None and module_name(ROOT, path) != "agent"
    ]
    assert loose == []


def test_every_gateway_module_sits_in_a_layer() -> None:
    """gateway/ has no loose modules beside its layers, and every layer is a package."""
    loose = [
        module_name(ROOT, path)
        for path in (ROOT / "gateway").rglob("*.py")
        if gateway_layer(module_name(ROOT, path)) is None and module_name(ROOT, path) != "gateway"
    ]
    assert loose == []
    assert all(
        (ROOT / layer.replace(".", "/") / "__init__.py").exists() for layer in GATEWAY_LAYERS
    )


# The checker, on trees made for it


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "agent/__init__.py": "from agent.durable.run import go\n",
    "agent/core/__init__.py": "",
    "agent/core/errors.py": "",
    "agent/models/__init__.py": "",
    "agent/models/model.py": "from agent.core.errors import X\n",
    "agent/rounds/__init__.py": "",
    "agent/rounds/loop.py": "from agent.models.model import M\n",
    "agent/durable/__init__.py": "",
    "agent/durable/run.py": "from agent.rounds import loop\n",
    "storage/__init__.py": "from agent import Task\nimport asyncpg\n",
    "gateway/__init__.py": "",
    "gateway/text/__init__.py": "",
    "gateway/text/markup.py": "import re\n",
    "gateway/telemetry/metrics.py": "import prometheus_client\n",
    "gateway/slack/client.py": "import slack_sdk\nfrom gateway.telemetry.metrics import M\n",
    "gateway/inbound/gatekeeper.py": "from gateway.slack.client import C\nfrom storage import Database\n",
    "gateway/delivery/publisher.py": "from gateway.text.markup import m\nfrom agent import Task\n",
    "gateway/config/settings.py": "from gateway.slack.client import C\n",
    "gateway/schedules/scheduler.py": "from gateway.delivery.publisher import P\n",
    "gateway/process/service.py": (
        "from gateway.inbound.gatekeeper import G\nfrom gateway.delivery.publisher import P\n"
        "from gateway.config.settings import S\nfrom gateway.schedules.scheduler import R\n"
    ),
    "gateway/operator/cli.py": "from gateway.process.service import serve\n",
}


def test_the_checker_passes_a_tree_that_keeps_the_rules(tmp_path: Path) -> None:
    """A tree that follows every rule has no violation and no cycle."""
    root = _tree(tmp_path, CLEAN)
    assert violations(root, PACKAGES) == []
    assert cycles(import_graph(root, PACKAGES)) == []


def test_the_checker_finds_each_forbidden_import(tmp_path: Path) -> None:
    """Each kind of forbidden import is reported with the rule it breaks."""
    root = _tree(
        tmp_path,
        {
            **CLEAN,
            "agent/core/errors.py": "from agent.rounds.loop import run\n",
            "agent/models/model.py": "import slack_sdk\nimport asyncpg\nimport aiohttp\n",
            "agent/rounds/loop.py": "from agent import Task\n",
            "storage/__init__.py": "from agent.core.errors import X\nfrom gateway import y\n",
            "gateway/__init__.py": "from storage.queue import Q\nfrom agent.rounds import loop\n",
            "gateway/text/markup.py": "import aiohttp\nfrom slack_sdk import WebClient\n",
            "gateway/slack/client.py": "from gateway.inbound.gatekeeper import G\n",
            "gateway/inbound/gatekeeper.py": "from gateway.delivery.publisher import P\n",
            "gateway/delivery/publisher.py": "from gateway import process\n",
            "gateway/config/settings.py": "from gateway.process.service import S\n",
            "gateway/schedules/scheduler.py": "from gateway.inbound.gatekeeper import G\n",
            "gateway/process/service.py": "from gateway.operator.cli import main\n",
        },
    )
    found = violations(root, PACKAGES)
    assert found == [
        "agent.core.errors:1 imports agent.rounds.loop: agent.core may not import the layer above it, agent.rounds",
        "agent.models.model:1 imports slack_sdk: agent/ imports no Slack, no SQL, no gateway or storage",
        "agent.models.model:2 imports asyncpg: agent/ imports no Slack, no SQL, no gateway or storage",
        "agent.models.model:3 imports aiohttp: agent/ speaks HTTP through httpx: aiohttp is the gateway's, its transport injected",
        "agent.rounds.loop:1 imports agent: a submodule of agent must not import the package root",
        "gateway:1 imports storage.queue: gateway/ uses storage only through `from storage import …`",
        "gateway:2 imports agent.rounds: gateway/ uses agent only through `from agent import …`",
        "gateway.config.settings:1 imports gateway.process.service: gateway.config may not import gateway.process",
        "gateway.delivery.publisher:1 imports gateway: gateway's layers import each other's modules, never the package root",
        "gateway.inbound.gatekeeper:1 imports gateway.delivery.publisher: gateway.inbound may not import gateway.delivery",
        "gateway.process.service:1 imports gateway.operator.cli: gateway.process may not import gateway.operator",
        "gateway.schedules.scheduler:1 imports gateway.inbound.gatekeeper: gateway.schedules may not import gateway.inbound",
        "gateway.slack.client:1 imports gateway.inbound.gatekeeper: gateway.slack may not import gateway.inbound",
        "gateway.text.markup:1 imports aiohttp: gateway.text is pure: no Slack SDK, no network, no storage",
        "gateway.text.markup:2 imports slack_sdk: gateway.text is pure: no Slack SDK, no network, no storage",
        "storage:1 imports agent.core.errors: storage/ uses agent only through `from agent import …`",
        "storage:2 imports gateway: storage/ imports no Slack and no gateway",
    ]


def test_the_checker_finds_a_cycle_hidden_under_type_checking(tmp_path: Path) -> None:
    """A cycle closed only by a TYPE_CHECKING import is still a cycle."""
    root = _tree(
        tmp_path,
        {
            **CLEAN,
            "agent/rounds/control.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from agent.rounds.subtasks import R\n"
            ),
            "agent/rounds/subtasks.py": "from agent.rounds.loop import run\n",
            "agent/rounds/loop.py": "from agent.rounds.control import C\n",
        },
    )
    assert cycles(import_graph(root, PACKAGES)) == [
        ["agent.rounds.control", "agent.rounds.loop", "agent.rounds.subtasks"]
    ]


def test_the_size_check_finds_a_long_function_and_spares_a_table(tmp_path: Path) -> None:
    """A 71-line function is reported; a function returning a long literal table is not."""
    body = "".join(f"    x{n} = {n}\n" for n in range(70))
    table = "".join(f"        {n},\n" for n in range(100))
    root = _tree(
        tmp_path,
        {
            "gateway/process/long.py": f"def long():\n{body}",
            "gateway/process/table.py": f"def table():\n    return (\n{table}    )\n",
        },
    )
    assert oversized(root, "gateway") == ["gateway.process.long.long: 71 lines (at most 70)"]


def test_the_size_check_finds_a_long_class(tmp_path: Path) -> None:
    """A class over 300 lines is reported by name."""
    methods = "".join(f"    def m{n}(self):\n        return {n}\n\n" for n in range(101))
    root = _tree(tmp_path, {"gateway/process/big.py": f"class Big:\n{methods}"})
    assert oversized(root, "gateway") == ["gateway.process.big.Big: 303 lines (at most 300)"]
