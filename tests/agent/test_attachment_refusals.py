"""A 400 about a picture or a document is recognisable (issue 35, item 2): from the vendors'
own bodies, which attachment, whether the model takes none of that kind, and a reason in
our words — never the vendor's text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.errors import AttachmentRefused, NonTransientModelError, Route
from agent.models.providers.classify import classify_status

ROUTE = Route("anthropic", "claude-sonnet-4-5")


def anthropic(message: str) -> bytes:
    return json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    ).encode()


def openai(message: str, param: str | None = None, code: str | None = None) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize(
    ("body", "kind", "scope", "path", "reason"),
    [
        (
            anthropic("messages.2.content.1.image.source.base64: image exceeds 5 MB maximum"),
            "picture",
            "attachment",
            (2, 1),
            "it is too large",
        ),
        (
            anthropic(
                "messages.0.content.3.image.source.base64.data: The image was specified using "
                "the image/png media type, but does not appear to be a valid png image"
            ),
            "picture",
            "attachment",
            (0, 3),
            "it could not be read",
        ),
        (
            anthropic(
                "messages.1.content.2.document.source.base64.data: The PDF specified was not valid."
            ),
            "document",
            "attachment",
            (1, 2),
            "it could not be read",
        ),
        (
            openai(
                "Invalid content type. image_url is only supported by certain models.",
                "messages.[0].content.[1].type",
            ),
            "picture",
            "model",
            None,
            "",
        ),
        (
            openai(
                "You uploaded an unsupported image. Please make sure your image is below 20 MB "
                "in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
                code="invalid_image_format",
            ),
            "picture",
            "attachment",
            None,
            "it could not be read",
        ),
    ],
)
def test_the_vendors_bodies_say_which_attachment_and_why(
    body: bytes, kind: str, scope: str, path: tuple[int, int] | None, reason: str
) -> None:
    """Anthropic's message and OpenAI's `param` place it; a model that takes no pictures at
    all is told apart from one picture refused."""
    error = classify_status(400, {}, body, route=ROUTE)
    assert isinstance(error, AttachmentRefused)
    assert (error.kind, error.scope, error.reason) == (kind, scope, reason)
    if scope == "attachment":
        assert error.path == path


def test_a_400_about_something_else_stays_a_plain_rejection() -> None:
    """`max_tokens` too large is not about an attachment."""
    error = classify_status(400, {}, anthropic("max_tokens: 99999 > 64000"), route=ROUTE)
    assert type(error) is NonTransientModelError


@given(st.text(min_size=1, max_size=80))
def test_the_vendors_words_never_reach_the_message(secret: str) -> None:
    """Whatever else the vendor writes beside the word "image", our message is ours."""
    error = classify_status(400, {}, anthropic(f"image {secret}"), route=ROUTE)
    assert isinstance(error, AttachmentRefused)
    assert str(error) in {
        f"{ROUTE} refused a picture of the request: it could not be read (HTTP 400)",
        f"{ROUTE} refused a picture of the request: it is too large (HTTP 400)",
        f"{ROUTE} takes no pictures (HTTP 400)",
    }
