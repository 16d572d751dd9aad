"""The channel config file: strict, one sentence per mistake, each channel's entry over the
default's, compiled into the agent's and the gatekeeper's halves, and swapped whole."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent import AttemptLadder, Attempts, ConfigError, FunctionModel, Model, Task
from gateway.config.channel_config import load_channel_config, parse_channel_config
from gateway.process.channel_policies import EXTERNAL_NOTE, ChannelPolicies, Ladders
from storage import Limits

DEPLOYMENT = ("openai:gpt-test", "anthropic:claude-test")
SUPPORT = "C0123ABCD"
FILE = {
    "default": {"instructions": "Be kind.", "tools": ["*"], "externalChannels": "refuse"},
    "channels": {
        SUPPORT: {
            "instructions": "You are the support desk.",
            "model": "openai:gpt-4.1",
            "tools": ["orders__*"],
            "limits": {"userMessagesPerHour": 5, "modelRequestsPerMessage": 9},
        },
        "C0PARTNER1": {"externalChannels": "allow", "fallbackModel": None},
    },
}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"channels": {SUPPORT: {"tols": ["*"]}}}, f"channels.{SUPPORT}.tols"),
        ({"default": {"externalChannels": "sometimes"}}, "default.externalChannels"),
        ({"channels": {"general": {}}}, "channels.general"),
        ({"channels": {SUPPORT: {"limits": {"userMessagesPerHour": -1}}}}, "userMessagesPerHour"),
        ({"channels": {SUPPORT: {"model": "gpt-4.1"}}}, f"channels.{SUPPORT}.model"),
        ({"channels": {SUPPORT: {"tools": "orders__*"}}}, f"channels.{SUPPORT}.tools"),
        ({"defaults": {}}, "field defaults"),
    ],
)
def test_a_mistake_is_one_sentence_naming_the_file_and_the_field(raw: Any, field: str) -> None:
    """Unknown keys, bad values, a key that is no channel id, a model that is no
    provider:model: a ConfigError naming the variable, the file and the field."""
    with pytest.raises(ConfigError) as caught:
        parse_channel_config(raw, source="/etc/threadgate/channels.json")
    message = str(caught.value)
    assert message.startswith("THREADGATE_CHANNEL_CONFIG (/etc/threadgate/channels.json)")
    assert field in message and message.endswith(".") and "\n" not in message
    assert re.search(r"[.;:]\s+[A-Z]", message.split(")", 1)[1]) is None  # one sentence


def test_a_file_that_is_not_json_or_cannot_be_read_says_so(tmp_path: Path) -> None:
    """Not JSON: the line; not there: the reason and what to do."""
    path = tmp_path / "channels.json"
    path.write_text('{"default": {,}}')
    with pytest.raises(ConfigError, match=r"is not valid JSON \(line 1\)"):
        load_channel_config(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_channel_config(tmp_path / "missing.json")


def test_a_channels_entry_overrides_the_default_key_by_key() -> None:
    """What the channel does not say, the default says; what neither says, the deployment."""
    config = parse_channel_config(FILE)
    support = config.effective(SUPPORT, DEPLOYMENT)
    assert support.instructions == "You are the support desk."
    assert support.tools == ("orders__*",) and support.external == "refuse"
    assert support.models == ("openai:gpt-4.1", "anthropic:claude-test")
    partner = config.effective("C0PARTNER1", DEPLOYMENT)
    assert (partner.instructions, partner.external) == ("Be kind.", "allow")
    assert partner.models == ("openai:gpt-test",)  # "fallbackModel": null: none there
    other = config.effective("C0OTHER001", DEPLOYMENT)
    assert other.models is None and other.tools == ("*",)


class Opened:
    """Ladders whose models are FunctionModels, counting what was opened."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, ...]] = []

    def __call__(self, specs: tuple[str, ...]) -> tuple[Attempts, list[Model]]:
        self.opened.append(specs)
        models: list[Model] = [FunctionModel(lambda r: None, name=s) for s in specs]  # type: ignore[arg-type, return-value]
        return AttemptLadder(models), models


def policies(path: Path, opened: Opened | None = None) -> ChannelPolicies:
    return ChannelPolicies(
        load_channel_config(path),
        models=DEPLOYMENT,
        limits=Limits(user_messages_per_hour=60, thread_messages_per_hour=40),
        max_model_requests=60,
        ladders=Ladders(opened or Opened()),
    )


def task(channel: str) -> Task:
    return Task("t", "s", {"team": "T1", "channel": channel, "thread_ts": "1.0"})


def test_the_policy_is_compiled_for_the_agent_and_the_gatekeeper(tmp_path: Path) -> None:
    """Tools, instructions, ladder and request cap for the agent; Slack Connect and
    limits (the deployment's where the channel sets none) for the gatekeeper."""
    path = tmp_path / "channels.json"
    path.write_text(json.dumps(FILE))
    opened = Opened()
    compiled = policies(path, opened)
    support = compiled.policy_of(task(SUPPORT))
    assert support.tools == ("orders__*",) and support.max_model_requests == 9
    assert support.instructions == "You are the support desk."
    assert support.attempts is not None and opened.opened[0] == (
        "openai:gpt-4.1",
        "anthropic:claude-test",
    )
    rules = compiled.rules_of(SUPPORT)
    assert rules.external == "refuse" and rules.limits is not None
    assert (rules.limits.user_messages_per_hour, rules.limits.thread_messages_per_hour) == (5, 40)
    partner = compiled.policy_of(task("C0PARTNER1"))
    assert partner.instructions.endswith(EXTERNAL_NOTE)
    assert compiled.rules_of("C0PARTNER1").external == "allow"
    elsewhere = compiled.policy_of(task("C0ELSEWHERE"))
    assert elsewhere.attempts is None and elsewhere.instructions == "Be kind."


def test_channels_naming_the_same_models_share_one_ladder(tmp_path: Path) -> None:
    """A ladder per distinct list of specs, opened once however many channels (or
    reloads) name it."""
    path = tmp_path / "channels.json"
    same = {"model": "openai:gpt-4.1"}
    path.write_text(json.dumps({"channels": {"C0ONE00001": same, "C0TWO00002": same}}))
    opened = Opened()
    compiled = policies(path, opened)
    compiled.put(load_channel_config(path))
    one = compiled.policy_of(task("C0ONE00001")).attempts
    assert one is compiled.policy_of(task("C0TWO00002")).attempts and one is not None
    assert opened.opened == [("openai:gpt-4.1", "anthropic:claude-test")]


def test_a_put_swaps_the_policy_whole(tmp_path: Path) -> None:
    """A config `put` is in force at once, for the agent and the gatekeeper alike, and is
    the one `config` says is in force."""
    path = tmp_path / "channels.json"
    path.write_text(json.dumps(FILE))
    compiled = policies(path)
    path.write_text(json.dumps({"channels": {SUPPORT: {"tools": ["current_time"]}}}))
    config = load_channel_config(path)
    compiled.put(config)
    assert compiled.policy_of(task(SUPPORT)).tools == ("current_time",)
    assert compiled.rules_of(SUPPORT).external == "refuse" and compiled.config is config


def test_a_bad_file_at_start_is_the_error_of_start_up(tmp_path: Path) -> None:
    """Compiling at start raises the file's ConfigError (serve prints it and stops)."""
    path = tmp_path / "channels.json"
    path.write_text(json.dumps({"channels": {SUPPORT: {"model": "nope"}}}))
    with pytest.raises(ConfigError, match=f"field channels.{SUPPORT}.model"):
        policies(path)
