"""THREADGATE_THREAD_QUEUE and a channel's `threadQueue`: compiled into the modes the claim
reads and the policies the round and the gatekeeper read, and checked by `doctor`."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.config.channel_config import parse_channel_config
from gateway.config.settings import Settings
from gateway.operator.doctor import check_thread_queue
from gateway.process.channel_policies import ChannelPolicies
from storage import Limits, QueueModes
from tests.gateway.rig import BOT_TOKEN

CONFIG = {"default": {}, "channels": {"C0STEER01": {"threadQueue": "steer"}}}


def test_collect_is_the_default_and_a_channel_may_say_its_own() -> None:
    """Unset, the deployment collects; a channel's `threadQueue` wins there, for the claim,
    the round (`ChannelPolicy`) and the gatekeeper (`ChannelRules`)."""
    assert Settings(slack_bot_token=BOT_TOKEN).tasks.thread_queue == "collect"
    policies = ChannelPolicies(
        parse_channel_config(CONFIG), models=(), limits=Limits(), max_model_requests=0
    )
    assert policies.queue_modes() == QueueModes("collect", {"C0STEER01": "steer"})
    assert policies.rules_of("C0STEER01").thread_queue == "steer"
    assert policies.rules_of("C0OTHER01").thread_queue == "collect"
    interrupting = ChannelPolicies(
        parse_channel_config(CONFIG),
        models=(),
        limits=Limits(),
        max_model_requests=0,
        thread_queue="interrupt",
    )
    assert interrupting.queue_modes().of("C0OTHER01") == "interrupt"
    assert interrupting.queue_modes().of("C0STEER01") == "steer"


def test_doctor_warns_where_steer_can_take_nothing(tmp_path: Path) -> None:
    """A channel that steers with no work tools offered is a warning naming it; the modes
    are reported either way."""
    path = tmp_path / "channels.json"
    path.write_text(json.dumps(CONFIG))
    fine = check_thread_queue(
        Settings(slack_bot_token=BOT_TOKEN, threadgate_channel_config=str(path))
    )
    assert fine.status == "ok" and fine.detail == "default collect; C0STEER01 steer"
    idle = {"channels": {"C0STEER01": {"threadQueue": "steer", "tools": []}}}
    path.write_text(json.dumps(idle))
    warned = check_thread_queue(
        Settings(slack_bot_token=BOT_TOKEN, threadgate_channel_config=str(path))
    )
    assert warned.status == "warn" and "C0STEER01 steer(s) with no work tools" in warned.detail
