"""Ingress and workers scaled apart (`serve --role`, THREADGATE_ROLE): they meet only in
Postgres, so an ingress queues, any worker answers, and every mention is answered once.

The end-to-end test runs real `threadgate serve` processes (one ingress, two workers) on
one database; the Socket Mode one runs in-process gateways through the rig. Settings and
doctor checks per role need no gateway at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import ConfigError
from gateway.operator.cli import with_role
from gateway.operator.doctor import check_models, check_settings, config_problems
from storage import Database
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli
from tests.gateway.rig import BOT_TOKEN, SECRET, Rig, echo, gateway_env, rig_settings
from tests.pg import create_database, wait_for_task

MODEL_SETTINGS = ("THREADGATE_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def ingress_env(env: Mapping[str, str]) -> dict[str, str]:
    """An ingress: no model settings at all (it calls no model)."""
    return {k: v for k, v in env.items() if k not in MODEL_SETTINGS} | {
        "THREADGATE_ROLE": "ingress"
    }


def worker_env(env: Mapping[str, str], role: str = "worker") -> dict[str, str]:
    """A worker: no signing secret (it takes no events)."""
    return {k: v for k, v in env.items() if k != "SLACK_SIGNING_SECRET"} | {"THREADGATE_ROLE": role}


def task_id(event: Mapping[str, Any]) -> str:
    return f"T1:{event['channel']}:{event['ts']}"


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as response:
        return response.status, await response.text()


async def test_one_ingress_and_two_workers_answer_each_mention_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The ingress alone acks and queues (nothing posted, no model called); two workers
    started later answer that task and the next ones, each exactly once, and a worker has
    no events route."""
    dsn = await create_database(postgres_dsn, "roles_split")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
        Database(dsn, min_size=1, max_size=1) as db,
    ):
        model.default = echo
        env = gateway_env(slack, model, dsn)
        ingress = GatewayProcess(ingress_env(env), tmp_path)
        # The second worker's environment says ingress: `--role worker` must win, or it
        # would stop at start-up for want of SLACK_SIGNING_SECRET.
        workers = [
            GatewayProcess(worker_env(env), tmp_path),
            GatewayProcess(worker_env(env, role="ingress"), tmp_path, ["--role", "worker"]),
        ]
        await ingress.start()
        try:
            first = app_mention_event(text="<@UBOT> queued before any worker")
            status, _ = await deliver(http, ingress.events_url, event_callback(first), SECRET)
            assert status == 200
            await wait_for_task(db, task_id(first), "queued")
            assert slack.posts == [] and model.requests == []

            for worker in workers:
                await worker.start()
            for worker in workers:
                base = f"http://127.0.0.1:{worker.port}"
                assert await get(http, f"{base}/readyz") == (200, "ready")
                later = event_callback(app_mention_event(text="<@UBOT> to a worker"))
                assert (await deliver(http, f"{base}/slack/events", later, SECRET))[0] == 404

            await wait_for_task(db, task_id(first), "done", deadline=60)
            more = [app_mention_event(text=f"<@UBOT> number {n}") for n in range(4)]
            for event in more:
                status, _ = await deliver(http, ingress.events_url, event_callback(event), SECRET)
                assert status == 200
            for event in more:
                await wait_for_task(db, task_id(event), "done", deadline=60)
        finally:
            codes = [await p.stop() for p in (ingress, *workers)]
        assert codes == [0, 0, 0]
        answered = sorted(p.thread_ts or "" for p in slack.posts if p.channel == first["channel"])
        assert answered == sorted(e["ts"] for e in [first, *more])  # each once, none twice
        assert any("queued before any worker" in p.text for p in slack.posts)
        assert b"role: ingress" in ingress.log and b"role: worker" in workers[1].log


@pytest.mark.rig(modes=("socket",), overrides={"THREADGATE_ROLE": "ingress"})
async def test_socket_mode_ingress_queues_and_an_http_less_worker_answers(
    rig: Rig,
) -> None:
    """A Socket Mode ingress acks and queues; a worker (app token set, but no events for
    it) opens no second connection and answers."""
    event = app_mention_event(text="<@UBOT> over the socket")
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    await wait_for_task(rig.db, task_id(event), "queued")
    assert rig.slack.posts == [] and rig.model.requests == []

    worker = await rig.start_gateway(socket_mode=True, overrides={"THREADGATE_ROLE": "worker"})
    await wait_for_task(rig.db, task_id(event), "done")
    [post] = rig.slack.posts
    assert "over the socket" in post.text and post.thread_ts == event["ts"]
    assert len(rig.sockets.open_links) == 1  # the ingress's, not the worker's
    status, _ = await get(rig.http, f"http://127.0.0.1:{worker.port}/readyz")
    assert status == 200


async def test_a_bad_role_is_one_sentence_naming_the_variable(tmp_path: Path) -> None:
    status, err = await run_cli(["serve"], {"THREADGATE_ROLE": "bogus"}, tmp_path)
    assert status == 2
    assert err.startswith("threadgate: THREADGATE_ROLE is invalid") and err.count("\n") == 1
    assert "bogus" not in err  # the input is not repeated: it might have been a secret

    status, err = await run_cli(["serve", "--role", "bogus"], {}, tmp_path)
    assert status == 2 and "--role" in err and "invalid choice" in err


BASE = {
    "SLACK_BOT_TOKEN": BOT_TOKEN,
    "SLACK_SIGNING_SECRET": SECRET,
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test-key",
}


def without(*variables: str, **more: str) -> dict[str, str]:
    return {k: v for k, v in BASE.items() if k not in variables} | more


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        (without("THREADGATE_MODEL", THREADGATE_ROLE="ingress"), None),
        (without("SLACK_SIGNING_SECRET", THREADGATE_ROLE="worker"), None),
        (without("SLACK_SIGNING_SECRET", THREADGATE_ROLE="ingress"), "SLACK_SIGNING_SECRET"),
        (without("THREADGATE_MODEL", THREADGATE_ROLE="worker"), "THREADGATE_MODEL"),
        (without("THREADGATE_MODEL"), "THREADGATE_MODEL"),
        (without("SLACK_SIGNING_SECRET"), "SLACK_SIGNING_SECRET"),
        (without("SLACK_BOT_TOKEN", THREADGATE_ROLE="worker"), "SLACK_BOT_TOKEN"),
        (without("SLACK_BOT_TOKEN", THREADGATE_ROLE="ingress"), "SLACK_BOT_TOKEN"),
    ],
)
def test_serve_requires_what_its_role_uses(env: dict[str, str], missing: str | None) -> None:
    settings = rig_settings(env)
    problems = config_problems(settings)
    if missing is None:
        settings.require_serve()
        assert problems == []
    else:
        with pytest.raises(ConfigError, match=f"^{missing} is not set"):
            settings.require_serve()
        assert [str(p).split()[0] for p in problems] == [missing]


def test_the_role_flag_wins_over_the_variable() -> None:
    settings = rig_settings(without(THREADGATE_ROLE="ingress"))
    assert with_role(settings, "worker").process.role == "worker"
    assert with_role(settings, None).process.role == "ingress"
    assert rig_settings(BASE).process.role == "all"


async def test_doctor_names_the_role_and_skips_what_it_does_not_use() -> None:
    ingress = rig_settings(without("THREADGATE_MODEL", THREADGATE_ROLE="ingress"))
    [finding] = check_settings(ingress)
    assert finding.status == "ok" and "role ingress" in finding.detail
    [model] = await check_models(ingress, 1.0)
    assert model.status == "skip" and "ingress" in model.detail
    [worker] = check_settings(
        rig_settings(without("SLACK_SIGNING_SECRET", THREADGATE_ROLE="worker"))
    )
    assert worker.status == "ok" and "role worker" in worker.detail
