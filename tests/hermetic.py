"""What the shell may not bring into the suite: the variables the conftest removes at start.

A developer running `make test` may have a real `SLACK_APP_TOKEN`, `OPENAI_API_KEY` or
`THREADGATE_ALERT_WEBHOOK_URL` exported for `make run`. In-process test gateways read the
environment like production does, so those would turn them into Socket Mode gateways with
a real fallback model and a real webhook. The conftest deletes every such variable from
the test process before any test runs; gateway child processes get a stripped environment
of their own (`tests.gateway.process.child_env`).
"""

from __future__ import annotations

from collections.abc import MutableMapping

from gateway.config.settings import VARIABLES

# The families threadgate's settings (and any it may grow) are named in.
PREFIXES = ("SLACK_", "THREADGATE_", "OPENAI_", "ANTHROPIC_")

# Every variable `Settings` reads, including the unprefixed ones (PORT, DATABASE_URL).
SETTINGS = frozenset(VARIABLES)

# Proxies would route the suite's loopback HTTP through another machine (httpx honours
# them), where the loopback guard would refuse it: tests never want one.
PROXIES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"})

# Read by the suite itself, and kept: DATABASE_URL runs it against another Postgres
# (tests/pg.py; rigs pass it to their gateways explicitly), THREADGATE_CHAOS_SCALE picks
# the chaos suite's scale (tests/chaos/harness.py; `make chaos` sets it).
KEPT = frozenset({"DATABASE_URL", "THREADGATE_CHAOS_SCALE"})


def removed(name: str) -> bool:
    """Whether the conftest removes `name`: settings are read case-insensitively, so the
    test is too."""
    upper = name.upper()
    if upper in KEPT:
        return False
    return upper.startswith(PREFIXES) or upper in SETTINGS or upper in PROXIES


def scrub(environ: MutableMapping[str, str]) -> list[str]:
    """Delete the variables `removed` names from `environ`; return their names, sorted."""
    names = sorted(name for name in environ if removed(name))
    for name in names:
        del environ[name]
    return names
