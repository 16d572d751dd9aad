"""A worker in OAuth mode needs no SLACK_CLIENT_SECRET: only the ingress runs the install
flow; a worker reads the stored tokens (issue 37, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from gateway.config.settings import load_settings
from gateway.operator.doctor import config_problems
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import CLIENT_ID, CLIENT_SECRET, Rig, gateway_env, oauth_env
from tests.pg import wait_for_task

WORKER = {
    "SLACK_CLIENT_ID": CLIENT_ID,
    "THREADGATE_ROLE": "worker",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
}


def settings(env: dict[str, str]) -> None:
    loaded = load_settings(env_file=None, **{k.lower(): v for k, v in env.items()})
    loaded.require_serve()
    assert not config_problems(loaded)


def test_a_worker_serves_with_the_client_id_alone() -> None:
    """Role worker, SLACK_CLIENT_ID and no secret: `serve`'s and doctor's checks pass."""
    settings(WORKER)


@pytest.mark.parametrize("role", ["ingress", "all"])
def test_what_takes_events_still_needs_the_secret(role: str) -> None:
    """An ingress (or `all`) runs the install flow: without the secret, one sentence."""
    env = {**WORKER, "THREADGATE_ROLE": role, "SLACK_SIGNING_SECRET": "s3cr3t-value"}
    with pytest.raises(ConfigError, match=r"^SLACK_CLIENT_SECRET is not set"):
        settings(env)


def test_a_secret_given_to_a_worker_is_still_checked() -> None:
    """A malformed secret is named even where it is not needed: it was pasted wrong."""
    with pytest.raises(ConfigError, match=r"^SLACK_CLIENT_SECRET does not look like one"):
        settings({**WORKER, "SLACK_CLIENT_SECRET": "not-a-secret-shape"})


async def test_a_worker_without_the_secret_answers_an_installed_workspace(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """An ingress (in-process, with the secret) installs a workspace and queues its
    mention; a `threadgate serve --role worker` process without SLACK_CLIENT_SECRET (or a
    signing secret) answers it with that workspace's token."""
    ingress = {"THREADGATE_ROLE": "ingress"}
    async with Rig(fresh_dsn, oauth=True, workspaces={"T2": "C2"}, overrides=ingress) as rig:
        token = await rig.install("T2", "Team T2")
        env = oauth_env(gateway_env(rig.slack, rig.model, rig.database_url))
        drop = {"SLACK_CLIENT_SECRET", "SLACK_SIGNING_SECRET"}
        worker = GatewayProcess(
            {k: v for k, v in env.items() if k not in drop} | {"THREADGATE_ROLE": "worker"},
            tmp_path,
        )
        await worker.start()
        try:
            event = app_mention_event(text="<@UBOT> hello", channel="C2", team="T2")
            status, body = await rig.send(event_callback(event, team_id="T2"))
            assert status == 200, body
            await wait_for_task(rig.db, f"T2:C2:{event['ts']}", "done")
        finally:
            await worker.stop()
        [post] = rig.slack.posts
        assert post.channel == "C2"
        assert [c.token for c in rig.slack.calls_to("chat.postMessage")] == [token]
        assert CLIENT_SECRET not in worker.log.decode(errors="replace")
