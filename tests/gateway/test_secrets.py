"""Pasted credentials never survive redaction, wherever they sit, and nothing else changes."""

from __future__ import annotations

import base64
import json
import re
import string

import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector
from hypothesis import example, given
from hypothesis import strategies as st

from agent import INVISIBLE_CHARACTERS
from gateway.slack.threads import ThreadMessage, render_message
from gateway.text.provenance import parse_turn
from gateway.text.secrets import (
    KINDS,
    LABELS,
    LEFT_OUT,
    LIBRARY,
    RULES,
    Redacted,
    Redactions,
    redact_secrets,
)

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
LOWER = string.ascii_lowercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"


def chars(alphabet: str, size: int, most: int | None = None) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=size, max_size=most or size)


def joined(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


def b64url(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


json_values = st.dictionaries(
    st.text(max_size=8), st.integers() | st.text(max_size=12) | st.booleans(), max_size=4
)
jwts = st.builds(
    lambda header, claims, signature: f"{b64url(header)}.{b64url(claims)}.{signature}",
    json_values.map(lambda extra: {"alg": "HS256", "typ": "JWT", **extra}),
    json_values.map(lambda extra: {"sub": "U1", **extra}),
    chars(URLSAFE, 43, 342),
)

# One strategy per kind, generating credentials the way their issuers write them.
SHAPES: dict[str, st.SearchStrategy[str]] = {
    "slack_token": st.one_of(
        joined(
            st.sampled_from(["xoxb", "xoxp", "xoxa", "xoxr", "xoxs"]),
            "-",
            chars(string.digits, 10, 13),
            "-",
            chars(string.digits, 10, 13),
            "-",
            chars(ALNUM, 24, 32),
        ),
        joined(st.sampled_from(["xoxe.xoxp-1-", "xoxe.xoxb-1-", "xoxe-1-"]), chars(ALNUM, 40, 140)),
    ),
    "slack_app_token": joined(
        "xapp-1-A", chars(UPPER, 10), "-", chars(string.digits, 13), "-", chars(ALNUM, 64)
    ),
    "slack_webhook": joined(
        "https://hooks.slack.com/services/T",
        chars(UPPER, 8, 10),
        "/B",
        chars(UPPER, 8, 11),
        "/",
        chars(ALNUM, 24),
    ),
    "anthropic_key": joined("sk-ant-api03-", chars(URLSAFE, 93), "AA"),
    "openai_key": st.one_of(
        joined("sk-", chars(ALNUM, 20, 47), chars(string.digits, 1)),
        joined(st.sampled_from(["sk-proj-", "sk-svcacct-"]), chars(URLSAFE, 40, 160)),
        joined("sk-", chars(ALNUM, 20), "T3BlbkFJ", chars(ALNUM, 20)),
    ),
    "github_token": st.one_of(
        joined(st.sampled_from(["ghp_", "gho_", "ghs_", "ghu_", "ghr_"]), chars(ALNUM, 36)),
        joined("github_pat_", chars(ALNUM, 22), "_", chars(ALNUM, 59)),
    ),
    "gitlab_token": joined(
        st.sampled_from(["glpat-", "gldt-", "glrt-", "glft-"]), chars(URLSAFE, 20, 50)
    ),
    "aws_access_key": joined(st.sampled_from(["AKIA", "ASIA"]), chars(UPPER, 16)),
    "google_api_key": joined("AIza", chars(URLSAFE, 35)),
    "jwt": jwts,
    "stripe_key": joined(st.sampled_from(["sk_live_", "rk_live_"]), chars(ALNUM, 24, 99)),
    "npm_token": joined("npm_", chars(ALNUM, 36)),
    "huggingface_token": joined("hf_", chars(string.ascii_letters, 34)),
    "sendgrid_key": joined("SG.", chars(URLSAFE, 22), ".", chars(URLSAFE, 43)),
    "pypi_token": joined("pypi-AgEIcHlwaS5vcmc", chars(URLSAFE, 70, 160)),
    "discord_token": joined(
        st.sampled_from("MNO"),
        chars(URLSAFE, 23, 25),
        ".",
        chars(URLSAFE, 6),
        ".",
        chars(URLSAFE, 27),
    ),
    "telegram_token": joined(chars(string.digits, 8, 10), ":", chars(URLSAFE, 35)),
    "twilio_key": joined(st.sampled_from(["AC", "SK"]), chars(LOWER, 32)),
    "mailchimp_key": joined(chars(LOWER, 32), "-us", chars(string.digits, 1, 2)),
    "square_secret": joined("sq0csp-", chars(URLSAFE, 43)),
    "azure_storage_key": joined("AccountKey=", chars(B64, 86), "=="),
    "private_key": st.one_of(
        joined(
            "-----BEGIN ",
            st.sampled_from(["", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED "]),
            "PRIVATE KEY-----\n",
            st.lists(chars(B64, 64), min_size=1, max_size=4).map("\n".join),
            "\n-----END PRIVATE KEY-----",
        ),
        joined(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n",
            st.lists(chars(B64, 64), min_size=1, max_size=4).map("\n".join),
            "\n-----END PGP PRIVATE KEY BLOCK-----",
        ),
        joined(
            "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\n",
            chars(B64, 64),
            "\n---- END SSH2 ENCRYPTED PRIVATE KEY ----",
        ),
    ),
}
# Kinds whose secret sits beside its context: (text as pasted, the secret in it).
IN_CONTEXT: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "url_password": st.builds(
        lambda scheme, user, password, host: (f"{scheme}://{user}:{password}@{host}", password),
        st.sampled_from(["postgresql", "postgres", "mysql", "mongodb+srv", "redis", "https"]),
        chars(ALNUM, 1, 12),
        chars(ALNUM + "-._~%", 8, 40),
        st.sampled_from(["db.internal:5432/prod", "localhost", "cache.example.com:6379/0"]),
    ).filter(lambda pasted: pasted[0].count(pasted[1]) == 1),  # the password only once
    "aws_secret_key": st.builds(
        lambda frame, key: (frame[0] + key + frame[1], key),
        st.sampled_from(
            [
                ("AWS_SECRET_ACCESS_KEY=", ""),
                ("aws_secret_access_key = ", ""),
                ('"SecretAccessKey": "', '"'),
                ("aws_key='", "'"),
            ]
        ),
        chars(B64, 40),
    ),
    "npm_token": st.builds(
        lambda token: (f"//registry.npmjs.org/:_authToken={token}", token),
        joined("npm_", chars(ALNUM, 36)),
    ),
}
PASTED: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    kind: st.one_of(shape.map(lambda s: (s, s)), IN_CONTEXT.get(kind, st.nothing()))
    for kind, shape in SHAPES.items()
} | {"url_password": IN_CONTEXT["url_password"], "aws_secret_key": IN_CONTEXT["aws_secret_key"]}

# Arbitrary text around the credential, including what sanitizing removes or folds. What
# follows a token starts with no ASCII token character: a token glued to more of them is a
# longer word, which some issuers' shapes (GitLab's, of bounded length) do not describe.
around = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(sorted(INVISIBLE_CHARACTERS)[:20] + list("-_.:=\n ")),
    max_size=40,
)
after = around.filter(lambda t: not re.match(r"[A-Za-z0-9_-]", t))


def test_every_kind_has_a_shape_and_every_rule_a_kind() -> None:
    """The strategies cover every kind, and every rule's kind has a label."""
    assert set(PASTED) == set(KINDS) == set(LABELS)
    assert {rule.kind for rule in RULES} == set(KINDS)


def test_every_regex_plugin_of_the_library_is_taken_or_left_out_with_a_reason() -> None:
    """An upgrade of detect-secrets that brings a plugin fails here until it is decided;
    every pattern of a plugin taken is a rule, once."""
    plugins = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
    taken = {cls.__name__ for cls in LIBRARY}
    assert taken | set(LEFT_OUT) == set(plugins) and not taken & set(LEFT_OUT)
    for cls, rules in LIBRARY.items():
        assert issubclass(cls, RegexBasedDetector)
        denylist = [p.pattern for p in getattr(cls, "denylist")]  # noqa: B009
        assert [rule.pattern.pattern for rule in rules] == denylist


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_credential_of_each_shape_embedded_anywhere_never_survives(
    kind: str, data: st.DataObject
) -> None:
    """Whatever text comes before and after it, the credential is gone and its kind's label
    is there."""
    text, secret = data.draw(PASTED[kind], label="pasted")
    before, behind = data.draw(around, label="before"), data.draw(after, label="after")
    redacted = redact_secrets(before + text + behind)
    # Gone: no more copies than the surrounding text brought (hypothesis finds that too).
    assert redacted.text.count(secret) <= (before + behind).count(secret)
    assert redacted.kinds  # counted, as some kind (a neighbour may extend an earlier shape)
    assert LABELS[kind] in redacted.text or set(redacted.kinds) - {kind}


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_credential_alone_is_replaced_by_its_own_label(kind: str, data: st.DataObject) -> None:
    """A credential as pasted becomes its kind's label, counted once; around a password or
    a key named by its variable, the context stays."""
    text, secret = data.draw(PASTED[kind])
    redacted = redact_secrets(text)
    assert redacted.kinds == (kind,)
    assert redacted.text == text.replace(secret, LABELS[kind], 1)


# Ordinary prose: kebab-case words, numbers, capitals, plain links, punctuation.
words = st.one_of(
    st.from_regex(r"[A-Za-z][a-z]{0,11}(-[a-z]{1,12}){0,4}", fullmatch=True),
    st.from_regex(r"[0-9]{1,12}", fullmatch=True),
    st.from_regex(r"[A-Z]{2,12}", fullmatch=True),
    st.from_regex(r"https://[a-z]{1,10}\.com(/[a-z]{1,8}){0,3}", fullmatch=True),
)
separators = st.sampled_from([" ", ", ", ". ", ": ", "; ", "\n", " (", ") ", " — ", "! "])
prose = st.lists(st.tuples(words, separators).map("".join), max_size=30).map("".join)
ORDINARY = (
    "xoxo-hugs-and-kisses, xoxo-forever-and-always",
    "the task-runner-2024-production cluster, desk-sk-a, sk-learn-compatible",
    "set SLACK_BOT_TOKEN=xoxb-… and OPENAI_API_KEY=sk-… (see AKIA docs)",
    "the first line says BEGIN RSA PRIVATE KEY; a PuTTY-User-Key-File-2 is different",
    "eyJ is how a JWT starts; hf_hub_download and npm_config_cache are settings",
    "postgres://localhost:5432/app, https://example.com/a?b=1, ada@example.com",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8, id 123e4567-e89b-12d3-a456-426614174000",
    "glpat- is GitLab's prefix, AIza Google's, sk_live_ Stripe's and SG. SendGrid's",
)


@given(prose)
@example(ORDINARY[0])
@example(ORDINARY[1])
@example(ORDINARY[2])
@example(ORDINARY[3])
@example(ORDINARY[4])
@example(ORDINARY[5])
@example(ORDINARY[6])
@example(ORDINARY[7])
def test_ordinary_words_are_untouched(text: str) -> None:
    """Prose, kebab-case words, links without a password, hashes and the prefixes named in
    a sentence come out as they went in."""
    assert redact_secrets(text) == Redacted(text)


# Every rule needs a run of eight token characters, or a URL's `://`.
@given(st.text().filter(lambda t: not re.search(r"[A-Za-z0-9_\-+/=]{8}|://", t)))
def test_text_without_a_credential_is_unchanged(text: str) -> None:
    """Any text without a run a credential could be comes out as it went in."""
    assert redact_secrets(text) == Redacted(text)


@given(st.text() | SHAPES["slack_token"] | SHAPES["private_key"] | SHAPES["jwt"], st.text())
def test_redaction_is_idempotent(first: str, second: str) -> None:
    """Redacting redacted text changes nothing more: a label matches no shape."""
    once = redact_secrets(first + second).text
    assert redact_secrets(once).text == once
    assert redact_secrets(once).kinds == ()


def test_a_private_key_cut_off_is_redacted_to_the_end() -> None:
    """A PEM block pasted without its END line takes the rest of the text with it."""
    text = "here:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nmore"
    assert redact_secrets(text).text == "here:\n[redacted private key]"


def test_a_long_key_matched_by_its_prefix_goes_whole() -> None:
    """A Stripe key longer than the library's pattern and a JWT whose signature the pattern
    leaves out are removed to their last character."""
    stripe = "sk_live_51HqLyjWDarjtT1zdp7dcXWkHqLyjWDarjtT1zdp7dcXWkHqLyjWDarjtT1zdp7dc"
    token = f"{b64url({'alg': 'HS256'})}.{b64url({'sub': 'U1'})}.SflKxwRJSMeKKF2QT4fwpMeJ"
    redacted = redact_secrets(f"{stripe} then {token}.")
    assert redacted.text == "[redacted Stripe key] then [redacted JSON web token]."


def test_a_token_glued_to_japanese_text_is_found() -> None:
    """The library's `(?!\\w)` ends a GitLab token at ASCII word characters only."""
    text = "トークンはglpat-AbCdEfGhIjKlMnOpQrSt12です"
    assert redact_secrets(text).text == "トークンは[redacted GitLab token]です"


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
