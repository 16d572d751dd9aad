"""The fake's views.publish and slash commands' response URLs, driven by real clients
(slack-sdk's, aiohttp), answering as Slack's reference says: a home view published for a
known user with a fresh hash; `not_enabled`, `hash_conflict`, `view_too_large`,
`user_not_found` and `invalid_arguments` (with Slack's json-pointer message); a response
URL taking five answers within thirty minutes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .slack_api import FakeSlack
from .slack_commands import LIFETIME_SECONDS

TOKEN = "xoxb-test"
USER = "U0HOME0001"
HOME = {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN) as fake:
        fake.add_user(USER, name="ada")
        yield fake


async def refused(client: AsyncWebClient, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as caught:
        await client.views_publish(**kwargs)
    return dict(caught.value.response.data)  # type: ignore[arg-type]


async def test_a_home_view_is_published_with_a_fresh_hash(slack: FakeSlack) -> None:
    """The answer carries the stored view and its hash; the person's Home shows it."""
    client = AsyncWebClient(token=TOKEN, base_url=slack.url)
    first = await client.views_publish(user_id=USER, view=HOME)
    assert first["view"]["type"] == "home" and first["view"]["blocks"] == HOME["blocks"]
    second = await client.views_publish(user_id=USER, view=HOME, hash=first["view"]["hash"])
    assert second["view"]["hash"] != first["view"]["hash"]
    assert slack.home.shown(USER) == "hi" and len(slack.home.publishes) == 2


async def test_views_publish_refuses_as_slack_does(slack: FakeSlack) -> None:
    """A stale hash, an unknown user, a view that is not a home view, too many blocks, too
    large a view, and a Home tab switched off are each refused with Slack's error."""
    client = AsyncWebClient(token=TOKEN, base_url=slack.url)
    await client.views_publish(user_id=USER, view=HOME)
    assert (await refused(client, user_id=USER, view=HOME, hash="1.stale"))[
        "error"
    ] == "hash_conflict"
    assert (await refused(client, user_id="U0NOBODY01", view=HOME))["error"] == "user_not_found"
    modal = await refused(client, user_id=USER, view={**HOME, "type": "modal"})
    assert modal["error"] == "invalid_arguments"
    assert "json-pointer:/view" in modal["response_metadata"]["messages"][0]
    many = {"type": "home", "blocks": [{"type": "divider"}] * 101}
    assert (await refused(client, user_id=USER, view=many))["error"] == "invalid_arguments"
    text = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 2900}}
    large = {"type": "home", "blocks": [text] * 90}
    assert (await refused(client, user_id=USER, view=large))["error"] == "view_too_large"
    slack.home.home_enabled = False
    assert (await refused(client, user_id=USER, view=HOME))["error"] == "not_enabled"
    assert len(slack.home.publishes) == 1


async def test_a_response_url_takes_five_answers_within_thirty_minutes(slack: FakeSlack) -> None:
    """Five answers are taken; the sixth is `used_url`; an empty one `no_text`; a body
    that is not a JSON object `invalid_payload`; after thirty minutes `expired_url`."""
    now = [0.0]
    slack.responses.clock = lambda: now[0]
    url = slack.responses.issue("T1")
    async with aiohttp.ClientSession() as http:

        async def post(body: Any) -> tuple[int, str]:
            async with http.post(url, json=body) as response:
                return response.status, await response.text()

        assert await post({"text": "", "response_type": "ephemeral"}) == (400, "no_text")
        assert await post(["not", "an", "object"]) == (400, "invalid_payload")
        for n in range(5):
            assert await post({"text": f"answer {n}"}) == (200, "ok")
        assert await post({"text": "one too many"}) == (404, "used_url")
        later = slack.responses.issue("T1")
        now[0] += LIFETIME_SECONDS + 1
        async with http.post(later, json={"text": "late"}) as response:
            assert (response.status, await response.text()) == (404, "expired_url")
    assert [a.text for a in slack.responses.answers] == [f"answer {n}" for n in range(5)]
    assert all(a.ephemeral for a in slack.responses.answers)
