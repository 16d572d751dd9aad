"""Pasted credentials never survive redaction, wherever they sit, and nothing else changes."""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent import INVISIBLE_CHARACTERS
from gateway.slack.threads import ThreadMessage, render_message
from gateway.text.provenance import parse_turn
from gateway.text.secrets import KINDS, LABELS, Redacted, Redactions, redact_secrets

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"


def chars(alphabet: str, size: int, most: int | None = None) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=size, max_size=most or size)


def joined(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


# One strategy per shape, generating credentials the way their issuers write them.
SHAPES: dict[str, st.SearchStrategy[str]] = {
    "slack_token": joined(
        st.sampled_from(["xoxb", "xoxp", "xoxa", "xoxr", "xoxs", "xoxe.xoxp"]),
        "-",
        chars(string.digits, 10, 13),
        "-",
        chars(string.digits, 10, 13),
        "-",
        chars(ALNUM, 24, 32),
    ),
    "slack_app_token": joined(
        "xapp-1-A", chars(UPPER, 10), "-", chars(string.digits, 13), "-", chars(ALNUM, 64)
    ),
    "anthropic_key": joined("sk-ant-api03-", chars(ALNUM + "_-", 93), "AA"),
    "openai_key": st.one_of(
        joined("sk-", chars(ALNUM, 20, 47), chars(string.digits, 1)),
        joined(st.sampled_from(["sk-proj-", "sk-svcacct-"]), chars(ALNUM + "_-", 40, 160)),
    ),
    "github_token": st.one_of(
        joined(st.sampled_from(["ghp_", "gho_", "ghs_"]), chars(ALNUM, 36)),
        joined("github_pat_", chars(ALNUM, 22), "_", chars(ALNUM, 59)),
    ),
    "aws_access_key": joined(st.sampled_from(["AKIA", "ASIA"]), chars(UPPER, 16)),
    "private_key": joined(
        "-----BEGIN ",
        st.sampled_from(["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED "]),
        "PRIVATE KEY-----\n",
        st.lists(chars(B64, 64), min_size=1, max_size=4).map("\n".join),
        "\n-----END PRIVATE KEY-----",
    ),
}
# Arbitrary text around the credential, including what sanitizing removes or folds.
around = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(sorted(INVISIBLE_CHARACTERS)[:20] + list("-_.:=\n ")),
    max_size=40,
)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_credential_of_each_shape_embedded_anywhere_never_survives(
    kind: str, data: st.DataObject
) -> None:
    """Whatever text comes before and after it, the credential is gone and its kind's label
    is there."""
    secret = data.draw(SHAPES[kind], label="secret")
    text = data.draw(around, label="before") + secret + data.draw(around, label="after")
    redacted = redact_secrets(text)
    assert secret not in redacted.text
    assert redacted.kinds  # counted, as some kind (a neighbour may extend an earlier shape)
    assert LABELS[kind] in redacted.text or set(redacted.kinds) - {kind}


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_credential_alone_is_replaced_by_its_own_label(kind: str, data: st.DataObject) -> None:
    """A credential by itself becomes exactly its kind's label, counted once."""
    redacted = redact_secrets(data.draw(SHAPES[kind]))
    assert (redacted.text, redacted.kinds) == (LABELS[kind], (kind,))


# Every shape starts with one of these; text without them has nothing to redact.
_STARTS = ("xox", "xapp-", "sk-", "gh", "github_pat_", "AKIA", "ASIA", "-----BEGIN")


@given(st.text().filter(lambda t: not any(start in t for start in _STARTS)))
@example("the task-runner-2024-production cluster, desk-sk-a, sk-learn-compatible")
@example("set SLACK_BOT_TOKEN=xoxb-… and OPENAI_API_KEY=sk-… (see AKIA docs)")
def test_text_without_a_credential_is_unchanged(text: str) -> None:
    """Kebab-case words, elided tokens and plain prose come out as they went in."""
    assert redact_secrets(text) == Redacted(text)


@given(st.text() | SHAPES["slack_token"] | SHAPES["private_key"], st.text())
def test_redaction_is_idempotent(first: str, second: str) -> None:
    """Redacting redacted text changes nothing more: a label matches no shape."""
    once = redact_secrets(first + second).text
    assert redact_secrets(once).text == once
    assert redact_secrets(once).kinds == ()


def test_a_private_key_cut_off_is_redacted_to_the_end() -> None:
    """A PEM block pasted without its END line takes the rest of the text with it."""
    text = "here:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nmore"
    assert redact_secrets(text).text == "here:\n[redacted private key]"


def test_a_token_split_by_an_invisible_character_is_redacted_in_a_turn() -> None:
    """The turn sanitizes before redacting: a zero-width space inside a token does not
    hide it, and the tally counts it."""
    token = "xoxb-1234567890-1234567890-abcdefghijABCDEFGHIJ0123"
    hidden = token[:12] + "\u200b" + token[12:]
    tally = Redactions()
    rendered = render_message(
        ThreadMessage("U1", f"why does {hidden} fail?", "1700000000.000100"),
        "C1",
        {},
        note=f"[file notes.txt]\nkey: {SHAPES_EXAMPLE}",
        redactions=tally,
    )
    body = parse_turn(rendered).body
    assert token not in body and SHAPES_EXAMPLE not in body
    assert body.startswith("why does [redacted Slack token] fail?")
    assert dict(tally.kinds) == {"slack_token": 1, "openai_key": 1}


SHAPES_EXAMPLE = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdef"
