"""Links the model writes in the forms a renderer may still open — the URL on the next
line, by reference, an image, a look-alike bare URL — reach Slack showing the host they
open, posted or streamed (issue 37, item 8)."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.openai_api import Gated, reply_with_tool
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import STREAMING, Rig
from tests.pg import wait_for_task

REPLY = (
    "Sign in [here]\n(https://evil.example/login), read [the guide][g], look at "
    "![https://good.example](https://evil.example/i.png) or https://gооgle.com/x now.\n\n"
    "[g]: https://evil.example/guide\n\nThat is all for today."
)
# The reply as every reader must see it in the end.
SHOWN = [
    "[here]\n(https://evil.example/login) (evil.example)",
    "[the guide](<https://evil.example/guide>) (evil.example)",
    "<https://evil.example/i.png> or",
    "https://gооgle.com/x (xn--ggle-55da.com) now",
]


async def test_a_posted_reply_shows_the_host_of_every_link_form(rig: Rig) -> None:
    """chat.postMessage's markdown block carries each link with the host it opens."""
    rig.model.script(reply_with_tool("final_reply", {"text": REPLY}))
    await rig.send(event_callback(app_mention_event(text="<@UBOT> where?")))
    [post] = await rig.slack.wait_for_posts(1)
    assert post.blocks is not None
    text = post.blocks[0]["text"]
    assert all(part in text for part in SHOWN), text
    assert "![https://good.example]" not in text and "good.example" not in post.text


@pytest.mark.rig(overrides={**STREAMING, "THREADGATE_SLACK_SETTLE_SECONDS": "0.2"})
async def test_a_streamed_reply_shows_no_link_without_its_host(rig: Rig) -> None:
    """While the reply streams no form hides its host (the definition is shown escaped,
    so `[the guide][g]` is no link yet); the finished message is the full rendering."""
    release = asyncio.Event()
    answer = reply_with_tool("final_reply", {"text": REPLY})
    rig.model.script(Gated(answer, release, before=len(answer.chunks()) - 4))
    event = app_mention_event(text="<@UBOT> where?")
    await rig.send(event_callback(event))
    [live] = await rig.slack.wait_for_streams(1)

    def streamed() -> str:
        return rig.slack.stream(live.channel, live.ts).text.replace("\u200d", "")

    await rig.slack.wait_until(lambda: "That is" in streamed(), 10, what="the last paragraph")
    text = streamed()
    assert "[here]\n(https://evil.example/login) (evil.example)" in text, text
    assert "[the guide][g]" in text and "\\[g]: https://evil.example/guide" in text
    assert "https://gооgle.com/x (xn--ggle-55da.com)" in text
    assert "![https://good.example]" not in text and "<https://evil.example/i.png>" in text
    release.set()
    await wait_for_task(rig.db, f"T1:{event['channel']}:{event['ts']}", "done")
    [final] = [m for m in rig.slack.messages[live.channel] if m["ts"] == live.ts]
    text = final["blocks"][0]["text"].replace("\u200d", "")
    assert all(part in text for part in SHOWN), text
