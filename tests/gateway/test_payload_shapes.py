"""What we let through to bolt, bolt can read: payloads in Slack's shapes (tests/gateway/slack_payloads)
with one field removed or replaced by any JSON value either are refused as malformed
(`MalformedEvent`, a 400) or pass through every reader bolt applies before a listener runs
without raising (a raise there is a 500 with a traceback)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slack_bolt.request import internals, payload_utils

from gateway.inbound.interactions import check_interaction
from gateway.slack.events import MalformedEvent, check_shape

CORPUS = Path(__file__).parent / "slack_payloads"
EVENTS = [json.loads(p.read_text()) for p in sorted(CORPUS.glob("events/*.json"))]
INTERACTIONS = [json.loads(p.read_text()) for p in sorted(CORPUS.glob("interactions/*.json"))]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


def bolt_reads(body: dict[str, Any]) -> None:
    """Every reader bolt runs on a request before (and to choose) a listener."""
    for read in (
        payload_utils.to_event,
        payload_utils.to_message,
        payload_utils.to_command,
        payload_utils.to_action,
        payload_utils.to_options,
        payload_utils.to_shortcut,
        payload_utils.to_view,
        payload_utils.to_step,
        internals.extract_enterprise_id,
        internals.extract_team_id,
        internals.extract_user_id,
        internals.extract_channel_id,
        internals.extract_is_enterprise_install,
        internals.extract_thread_ts,
    ):
        read(body)


@st.composite
def altered(draw: st.DrawFn, corpus: list[dict[str, Any]]) -> dict[str, Any]:
    """A corpus payload with one top-level field (or one of its object's fields) removed
    or replaced by any JSON value."""
    body = copy.deepcopy(draw(st.sampled_from(corpus)))
    target = body
    key = draw(st.sampled_from(sorted(body)))
    if isinstance(body[key], dict) and body[key] and draw(st.booleans()):
        target, key = body[key], draw(st.sampled_from(sorted(body[key])))
    if draw(st.booleans()):
        del target[key]
    else:
        target[key] = draw(json_values)
    return body


@given(altered(INTERACTIONS))
def test_an_interaction_we_pass_is_one_bolt_can_read(body: dict[str, Any]) -> None:
    """An interaction payload either is refused as malformed or bolt reads it without
    raising."""
    try:
        check_interaction(body)
    except MalformedEvent:
        return
    bolt_reads(body)


@given(altered(EVENTS))
def test_an_event_we_pass_is_one_bolt_can_read(body: dict[str, Any]) -> None:
    """An event payload either is refused as malformed or bolt reads it without raising."""
    try:
        check_shape(body)
    except MalformedEvent:
        return
    bolt_reads(body)


def test_the_corpus_passes_the_checks() -> None:
    """The corpus's payloads, unaltered, are not refused."""
    for body in EVENTS:
        check_shape(body)
    for body in INTERACTIONS:
        check_interaction(body)


def test_a_view_that_is_null_is_refused_as_malformed() -> None:
    """A view submission whose `view` is there but null is refused (bolt looked inside it:
    a TypeError, a 500); the property above found it."""
    body = copy.deepcopy(next(b for b in INTERACTIONS if b.get("type") == "view_submission")) | {
        "view": None
    }
    with pytest.raises(MalformedEvent, match="view must be an object"):
        check_interaction(body)
