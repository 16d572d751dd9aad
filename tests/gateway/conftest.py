"""What the gateway tests share: `rig`, a whole gateway on loopback for one test; and a
bare fake Slack (`slack`) and echoing fake model (`model`) for tests that start their own
gateway processes (a module's fixture of the same name replaces them).

A test (or its module, through `pytestmark`) says how its gateway is set up with a `rig`
mark; the closest mark wins whole, so a test's own mark replaces its module's:

    pytestmark = pytest.mark.rig(overrides={"THREADGATE_STREAMING": "true"}, modes=BOTH)

- `overrides`: settings on top of the rig's (`tests.gateway.rig.gateway_env`);
- `modes`: how the gateway takes its events, `("http",)` by default; with two, the test
  runs once in each (ids `http` and `socket`). A Socket Mode gateway is connected before
  the test starts;
- `oauth=True`: many workspaces, installed through Slack's OAuth flow; `workspaces`, the
  channel of each (team id to channel id) on the fake Slack;
- `users`: people the fake Slack knows (user id to display name).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, Rig, echo


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rig(overrides, modes, oauth, workspaces, users): how `rig` is set up"
    )


def rig_mark(node: pytest.Item) -> dict[str, Any]:
    mark = node.get_closest_marker("rig")
    return dict(mark.kwargs) if mark else {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test whose mark names two modes runs once in each."""
    modes = rig_mark(metafunc.definition).get("modes", ())
    if "rig" in metafunc.fixturenames and len(modes) > 1:
        metafunc.parametrize("rig", modes, indirect=True)


@pytest.fixture
async def rig(fresh_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """The gateway its `rig` mark describes, on a database of this test's own."""
    options = rig_mark(request.node)
    modes = options.pop("modes", ("http",))
    socket_mode = getattr(request, "param", modes[0]) == "socket"
    async with Rig(fresh_dsn, socket_mode=socket_mode, **options) as running:
        if socket_mode:
            await running.sockets.wait_for_connections(1)
        yield running


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A fake Slack that knows the rig's bot token."""
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        yield fake


@pytest.fixture
async def model() -> AsyncIterator[OpenAIServer]:
    """A fake OpenAI-compatible model that quotes the last user message (`echo`)."""
    async with OpenAIServer() as server:
        server.default = echo
        yield server
