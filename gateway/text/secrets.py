"""Pasted credentials: taken out of people's text before it is stored or shown to a model.

People paste tokens into Slack every day — a bot token in a "why does this fail?", a
private key in a config snippet. What a person wrote is stored (Postgres) and sent to a
model provider, so a credential that reached us verbatim would be in two more places than
the person meant. Every text that came from people passes `redact_secrets` on its way in
(`gateway.slack.threads.render_message`: typed turns, edits, back-filled messages,
`read_thread`, pinned messages and the text read from files), and each credential shape is
replaced by a label that says what was there:

    Slack tokens       xoxb-…, xoxp-…, xoxa-…, xoxe.xoxp-… and the other `xox?-` kinds
    Slack app tokens   xapp-1-…
    Anthropic keys     sk-ant-…
    OpenAI keys        sk-…, sk-proj-…, sk-svcacct-…, sk-admin-…
    GitHub tokens      ghp_…, gho_…, ghu_…, ghs_…, ghr_…, github_pat_…
    AWS access keys    AKIA… and ASIA… (the key id; the secret key has no shape of its own)
    private keys       a PEM block from -----BEGIN … PRIVATE KEY----- to its END line (or,
                       cut off, to the end of the text)

The shapes are matched wherever they are, glued to other text or not: a credential must not
survive because a word came before it. What keeps kebab-case words (`task-runner-prod`)
from passing for an OpenAI key is the key's own shape — twenty letters and digits in a row,
a digit among them, or one of the documented prefixes — not its neighbours. Redaction is
idempotent (a label matches no shape) and leaves text without a credential unchanged.

A regular expression per shape, not a secret-scanning library: the scanners worth having
(detect-secrets, trufflehog) score entropy, verify keys against their vendors over the
network and read files; here only the shapes people paste matter, on text already in memory,
and a false positive costs a label in one message.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType

# Each kind's pattern, in the order they are tried at one position: the Anthropic prefix
# before the OpenAI one it starts like.
_SHAPES = MappingProxyType(
    {
        "private_key": (
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*\Z)"
        ),
        "slack_token": r"xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{8,}",
        "slack_app_token": r"xapp-[0-9]+-[A-Za-z0-9-]{8,}",
        "anthropic_key": r"sk-ant-[A-Za-z0-9_-]{20,}",
        "openai_key": (
            r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"
            r"|(?=[A-Za-z]*[0-9])[A-Za-z0-9]{20,}[A-Za-z0-9_-]*)"
        ),
        "github_token": r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        "aws_access_key": r"(?:AKIA|ASIA)[A-Z0-9]{16}",
    }
)
LABELS = MappingProxyType(
    {
        "private_key": "[redacted private key]",
        "slack_token": "[redacted Slack token]",
        "slack_app_token": "[redacted Slack app token]",
        "anthropic_key": "[redacted Anthropic key]",
        "openai_key": "[redacted OpenAI key]",
        "github_token": "[redacted GitHub token]",
        "aws_access_key": "[redacted AWS access key]",
    }
)
KINDS = tuple(_SHAPES)
# One scan for all the shapes. Without named groups: they keep `re` from skipping ahead to
# the characters a shape can start with, and the scan took many times as long. The kind of
# a match is the first shape that matches it whole (the one the alternation chose).
_PATTERN = re.compile("|".join(f"(?:{shape})" for shape in _SHAPES.values()), re.S)
_EACH = {kind: re.compile(shape, re.S) for kind, shape in _SHAPES.items()}

# Told once, in the reply to a message that had one (gateway/delivery/publisher.py).
ROTATE_NOTE = (
    "_I removed a credential (a token or key) from a message here before reading or "
    "storing it. It was posted in Slack, so whoever it belongs to should rotate it._"
)


@dataclass(frozen=True, slots=True)
class Redacted:
    """A text with its credentials replaced, and the kind of each one replaced, in order."""

    text: str
    kinds: tuple[str, ...] = ()


def redact_secrets(text: str) -> Redacted:
    """`text` with every credential shape replaced by its label (`LABELS`)."""
    kinds: list[str] = []

    def label(match: re.Match[str]) -> str:
        kind = next(kind for kind, shape in _EACH.items() if shape.fullmatch(match.group()))
        kinds.append(kind)
        return LABELS[kind]

    return Redacted(_PATTERN.sub(label, text), tuple(kinds))


@dataclass
class Redactions:
    """A tally of what was redacted, for the texts of one piece of work (one admission):
    whoever renders them passes it along, and reads afterwards what was taken out."""

    kinds: Counter[str] = field(default_factory=Counter)

    def redact(self, text: str) -> str:
        redacted = redact_secrets(text)
        self.kinds.update(redacted.kinds)
        return redacted.text

    def __bool__(self) -> bool:
        return bool(self.kinds)
