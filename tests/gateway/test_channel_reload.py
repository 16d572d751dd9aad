"""One channel policy per reload (gateway/process/service.py `Gateway.reload`): SIGHUP reads
THREADGATE_CHANNEL_CONFIG once and hands that one reading to the ingress thread's
gatekeeper and to the workers alike; a reload that fails keeps the policy in force on
both and alerts the operator channel once, not only the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.openai_api import RecordedRequest
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import Rig
from tests.logged import errors_logged
from tests.pg import wait_for_task

SUPPORT = "C0SUPPORT01"


def write(path: Path, support: dict[str, Any]) -> None:
    path.write_text(json.dumps({"channels": {SUPPORT: support}}))


def system_of(seen: RecordedRequest) -> str:
    return str(seen.body["messages"][0]["content"])


async def ask_shared(rig: Rig, text: str) -> str:
    """A mention in SUPPORT, shared with another organization; its task id once settled."""
    event = app_mention_event(text=f"<@UBOT> {text}", channel=SUPPORT)
    assert (await rig.send(event_callback(event, ext_shared=True)))[0] == 200
    task = f"T1:{SUPPORT}:{event['ts']}"
    await wait_for_task(rig.db, task, "done")
    return task


def alerts(rig: Rig) -> list[str]:
    return [p.text for p in rig.slack.posts if p.channel == "COPS"]


async def test_a_reload_is_one_reading_for_both_loops_and_a_bad_one_alerts_once(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """After SIGHUP the ingress admits what the new file allows (Slack Connect) and the
    workers ask with its instructions, both loops holding the very same reading; a
    malformed file then keeps that policy on both and posts one operator alert, however
    often it is reloaded."""
    path = tmp_path / "channels.json"
    write(path, {"instructions": "Desk A.", "externalChannels": "refuse"})
    async with Rig(fresh_dsn, overrides={"THREADGATE_CHANNEL_CONFIG": str(path)}) as rig:
        ingress, workers = rig.gateway.channel_policies[::-1]
        assert ingress.config is workers.config and ingress is not workers
        write(path, {"instructions": "Desk B.", "externalChannels": "allow"})
        rig.gateway.reload()
        await ask_shared(rig, "hello from outside")
        assert "Desk B." in system_of(rig.model.requests[-1])
        assert ingress.config is workers.config
        in_force = workers.config
        path.write_text(json.dumps({"channels": {SUPPORT: {"instructions": 7}}}))
        with errors_logged() as errors:
            rig.gateway.reload()
            await rig.slack.wait_until(lambda: bool(alerts(rig)), what="the reload alert")
            rig.gateway.reload()
        assert any("was not reloaded" in r.getMessage() for r in errors)
        await ask_shared(rig, "still allowed?")
        assert "Desk B." in system_of(rig.model.requests[-1])
        assert ingress.config is in_force and workers.config is in_force
        sample = rig.gateway.metrics.registry.get_sample_value
        name = "threadgate_channel_config_reloads_total"
        assert sample(name, {"outcome": "failed"}) == 2
        assert sample(name, {"outcome": "reloaded"}) == 1
        (alert,) = alerts(rig)
        assert "THREADGATE_CHANNEL_CONFIG was not reloaded" in alert
        assert f"channels.{SUPPORT}.instructions" in alert
