"""Picture budgets end to end: a picture past a budget is not stored, and the model is
told which and why (issue 37, item 6)."""

from __future__ import annotations

from tests.fakes.slack_events import event_callback, file_share_event
from tests.gateway.rig import Rig
from tests.gateway.test_files_end_to_end import png, user_texts


async def test_a_picture_past_the_thread_budget_reaches_the_model_as_a_note(
    fresh_dsn: str,
) -> None:
    """With a thread budget smaller than the picture: no image in the request, none
    stored, and the turn names the picture, not kept, with the reason."""
    async with Rig(fresh_dsn, overrides={"THREADGATE_THREAD_PICTURE_BYTES": "10"}) as rig:
        file = rig.slack.files.add_file("big.png", png(), mimetype="image/png")
        status, _ = await rig.send(event_callback(file_share_event(files=[file])))
        assert status == 200
        await rig.slack.wait_for_posts(1)
        seen = rig.model.requests[-1]
        assert seen.images() == []
        note = user_texts(seen)[-1].split("</turn>", 1)[1]
        assert note.startswith('\n<runtime source="attachment_not_kept">Not kept, so you cannot')
        assert '"big.png"' in note
        assert "this thread has stored its limit of 10 bytes of pictures" in note
        assert await rig.count("message_attachments") == 0
