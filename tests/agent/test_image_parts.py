"""Pictures in a user message: each wire format's image parts, and the cap per request."""

from __future__ import annotations

import base64

from agent import MAX_IMAGES_PER_REQUEST, Image, RoundInput, StoredMessage, Task
from agent.models.contract import ModelRequest, SystemMessage, UserMessage
from agent.models.providers import anthropic_wire, openai_wire
from agent.rounds.prompt import newest_images, transcript
from agent.rounds.references import ReferenceCatalog
from agent.rounds.subtask_types import SubtaskRegistry

PNG = Image("image/png", b"\x89PNG\r\n\x1a\nabc", "a.png")
JPEG = Image("image/jpeg", b"\xff\xd8\xffxyz", "b.jpg")
REQUEST = ModelRequest((SystemMessage("sys"), UserMessage("<turn>look</turn>", (PNG, JPEG))))


def data_of(image: Image) -> str:
    return base64.b64encode(image.data).decode()


def test_openai_sends_text_then_image_url_parts() -> None:
    """Chat Completions: a content list, the text first, then data-URL image parts."""
    body = openai_wire.build_body(REQUEST, "gpt-test", stream=False)
    assert body["messages"][1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "<turn>look</turn>"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data_of(PNG)}"}},
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data_of(JPEG)}"}},
        ],
    }


def test_anthropic_sends_text_then_base64_image_blocks() -> None:
    """Messages API: a text block, then one `image` block per picture."""
    body = anthropic_wire.build_body(REQUEST, "claude-test", stream=False)
    source = {"type": "base64", "media_type": "image/png", "data": data_of(PNG)}
    assert body["messages"][0]["content"][:2] == [
        {"type": "text", "text": "<turn>look</turn>"},
        {"type": "image", "source": source},
    ]
    assert body["messages"][0]["content"][2]["source"]["media_type"] == "image/jpeg"


def test_a_message_without_pictures_is_plain_text_on_both_wires() -> None:
    """No images: the content stays a string, as before."""
    request = ModelRequest((UserMessage("hi"),))
    assert openai_wire.build_body(request, "m", stream=False)["messages"][0]["content"] == "hi"
    assert anthropic_wire.build_body(request, "m", stream=False)["messages"][0]["content"] == "hi"


def turn(n: int, images: int) -> StoredMessage:
    pictures = tuple(Image("image/png", bytes([n, k]), f"{n}-{k}") for k in range(images))
    return StoredMessage(f"m{n}", "s", "user", "turn", f"turn {n}", pictures)


def test_a_request_carries_only_the_newest_pictures() -> None:
    """Three turns of five pictures: the newest turn's five and three of the one before."""
    window = [turn(1, 5), turn(2, 5), turn(3, 5)]
    chosen = newest_images(window)
    assert {k: len(v) for k, v in chosen.items()} == {"m3": 5, "m2": 3}
    assert sum(map(len, chosen.values())) == MAX_IMAGES_PER_REQUEST


def test_the_transcript_puts_pictures_beside_their_turn() -> None:
    """The prompt builder hands a stored turn's pictures to its UserMessage."""
    task = Task("t", "s", {})
    round_input = RoundInput(task, (turn(1, 0), turn(2, 1)))
    catalog = ReferenceCatalog.from_window(round_input.window)
    messages = transcript(round_input, catalog, SubtaskRegistry())
    users = [m for m in messages if isinstance(m, UserMessage)]
    assert [len(m.images) for m in users] == [0, 1]
