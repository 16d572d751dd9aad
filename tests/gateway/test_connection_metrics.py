"""/metrics says which build runs and whether its Socket Mode connection is up: 1 while
it is, 0 once the fake Socket Mode server cut it, 1 again after the new link's hello. (The
MCP servers' gauge: tests/gateway/test_mcp_gateway.py.)"""

from __future__ import annotations

import importlib.metadata
import platform

import pytest

from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import Rig

pytestmark = pytest.mark.rig(modes=("socket",))


async def scrape(rig: Rig) -> str:
    async with rig.http.get(rig.metrics_url) as response:
        assert response.status == 200
        return await response.text()


def connected(app: str, value: float) -> str:
    return f'threadgate_socket_mode_connected{{app="{app}"}} {value}'


async def test_the_socket_mode_gauge_follows_the_connection_down_and_up(rig: Rig) -> None:
    """1 while connected (labelled with the app id Slack's hello gave); 0 once the link
    dropped and while the new one has not said hello; 1 again after it did."""
    app = rig.sockets.app_id
    assert connected(app, 1.0) in await scrape(rig)
    rig.sockets.greet = False
    [old] = rig.sockets.open_links
    rig.sockets.drop(old)
    # slack_sdk's reconnect waits out its own ping interval first (as the readiness test).
    await rig.sockets.wait_until(
        lambda: any(k.number > old.number for k in rig.sockets.open_links),
        60,
        what="a reconnect",
    )
    assert connected(app, 0.0) in await scrape(rig)
    await rig.sockets.hello(rig.sockets.open_links[-1])
    # Frames of one socket are read in order: once a later envelope is acked, so was the hello.
    envelope = event_callback(app_mention_event(text="<@UBOT> back"))
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    assert connected(app, 1.0) in await scrape(rig)


async def test_build_info_names_the_version_and_python(rig: Rig) -> None:
    """`threadgate_build_info` is 1, labelled with the installed version and Python's."""
    version = importlib.metadata.version("threadgate")
    line = f'threadgate_build_info{{python="{platform.python_version()}",version="{version}"}} 1.0'
    assert line in await scrape(rig)
