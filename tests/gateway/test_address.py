"""A task's address is read once into a typed Slack address."""

from __future__ import annotations

import pytest

from gateway.slack.address import SlackAddress


def test_an_address_keeps_what_the_gatekeeper_stored() -> None:
    """Every key the gatekeeper writes becomes its field; a DM is told by its channel."""
    stored = {"team": "T1", "channel": "D1", "thread_ts": "1.0", "user": "U1", "enterprise": "E1"}
    address = SlackAddress.parse(stored)
    assert address == SlackAddress("D1", "1.0", team="T1", user="U1", enterprise="E1")
    assert address.is_dm and not SlackAddress("C1", "1.0").is_dm


def test_an_older_address_lacks_team_and_user_but_not_its_thread() -> None:
    """Tasks from before teams and recipients were recorded parse; one without a thread
    does not."""
    assert SlackAddress.parse({"channel": "C1", "thread_ts": "1.0"}) == SlackAddress("C1", "1.0")
    with pytest.raises(KeyError):
        SlackAddress.parse({"channel": "C1"})
