"""Pasted credentials: taken out of people's text before it is stored or shown to a model.

People paste tokens into Slack every day — a bot token in a "why does this fail?", a
private key in a config snippet, a database URL with its password. What a person wrote is
stored (Postgres) and sent to a model provider, so a credential that reached us verbatim
would be in two more places than the person meant. Every text that came from people passes
`redact_secrets` on its way in (`gateway.slack.threads.render_message`: typed turns, edits,
back-filled messages, `read_thread`, pinned messages and the text read from files), and
each credential is replaced by a label that says what was there (`LABELS`).

Where the shapes come from. The rules are detect-secrets' (Yelp's secret scanner, the one
the pre-commit hooks of many organizations run): its regex-based plugins are a rule set
kept up by people who track the vendors' formats — JWTs, Slack tokens and webhook URLs,
Stripe live keys, GitLab, npm, SendGrid, PyPI, Discord, Telegram, Twilio, Mailchimp,
Square and Azure keys, private-key armor, passwords in URLs, AWS key ids and quoted
secret keys. We use its rules, not its scanner: the scanner reads files line by line,
scores entropy and verifies keys against their vendors over the network, and here only the
shapes people paste matter, on text already in memory. `RULES` names every plugin we take
and `LEFT_OUT` every one we do not, with why (a test keeps the two complete, so an upgrade
that brings a plugin asks for a decision). The library has no rule for a few shapes people
paste to an agent's gateway — Anthropic and current OpenAI keys, Slack app and rotating
tokens, GitHub fine-grained tokens, Google API keys, Hugging Face and bare npm tokens, AWS
secret keys after their variable's name, PEM blocks its list lacks (`ENCRYPTED PRIVATE
KEY`) — so `_OWN` adds those, each from its issuer's documented prefix.

How a rule's match becomes what is removed (`Rule.span`):
    token   the match, carried on over the token's characters: some rules match a fixed
            prefix of a longer key (Stripe's 24 characters of a 99-character key, a JWT
            without its signature), and the rest must go too;
    value   the rule's first group, the secret beside its context (`postgres://app:` stays,
            the password goes; `AWS_SECRET_ACCESS_KEY=` stays, the key goes);
    block   from the armor line to its END line (or, cut off, to the end of the text).
Overlapping matches are one credential, labelled by the rule that starts first.

Ordinary words are left alone: no rule matches a word by its letters alone (the library's
Slack rule wants digits between dashes, so `xoxo-hugs-and-kisses` stays), the rules that
would match ordinary text (entropy, keywords, Artifactory's `AP…` words) are left out, and
armor counts only as armor (`-----BEGIN RSA PRIVATE KEY-----`, not the words in a
sentence). The library's rules run with `re.ASCII`: its `(?!\\w)` ends a GitLab token at
the next ASCII word character, so a token glued to Japanese text is still found.
Redaction is idempotent (a label matches no rule) and leaves other text unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

LABELS = MappingProxyType(
    {
        "private_key": "[redacted private key]",
        "slack_token": "[redacted Slack token]",
        "slack_app_token": "[redacted Slack app token]",
        "slack_webhook": "[redacted Slack webhook URL]",
        "anthropic_key": "[redacted Anthropic key]",
        "openai_key": "[redacted OpenAI key]",
        "github_token": "[redacted GitHub token]",
        "gitlab_token": "[redacted GitLab token]",
        "aws_access_key": "[redacted AWS access key]",
        "aws_secret_key": "[redacted AWS secret key]",
        "google_api_key": "[redacted Google API key]",
        "jwt": "[redacted JSON web token]",
        "stripe_key": "[redacted Stripe key]",
        "npm_token": "[redacted npm token]",
        "huggingface_token": "[redacted Hugging Face token]",
        "sendgrid_key": "[redacted SendGrid key]",
        "url_password": "[redacted password]",
        "pypi_token": "[redacted PyPI token]",
        "discord_token": "[redacted Discord token]",
        "telegram_token": "[redacted Telegram token]",
        "twilio_key": "[redacted Twilio key]",
        "mailchimp_key": "[redacted Mailchimp key]",
        "square_secret": "[redacted Square secret]",
        "azure_storage_key": "[redacted Azure storage key]",
    }
)
KINDS = tuple(LABELS)

Span = Literal["token", "value", "block"]
# What a token goes on with, past a rule's match: the characters of keys and of JWTs.
_TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9_\-]*")
# Armor around a key: PEM and PGP's five dashes, SSH2's four and a space.
_ARMOR_START = re.compile(r"-{4,5} ?\Z")
_ARMOR_END = re.compile(r"-{4,5} ?END [A-Z0-9 ]*?-{4,5}|Private-MAC: *[0-9a-fA-F]*")


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern and what its match means: the kind, the part to remove, an optional
    check the match must pass (the library's JWT check: header and payload are JSON), and
    an optional `needle`, a literal of the pattern without which it cannot match."""

    kind: str
    pattern: re.Pattern[str]
    span: Span = "token"
    check: Callable[[str, re.Match[str]], bool] | None = None
    needle: str = ""

    def spans(self, text: str) -> list[tuple[int, int]]:
        if self.needle not in text:
            return []
        found = []
        for match in self.pattern.finditer(text):
            if self.check is None or self.check(text, match):
                found.append(_extent(self.span, text, match))
        return found


def _extent(span: Span, text: str, match: re.Match[str]) -> tuple[int, int]:
    if span == "value":
        return match.span(1)
    if span == "block":
        dashes = _ARMOR_START.search(text, max(0, match.start() - 6), match.start())
        start = dashes.start() if dashes else match.start()
        end = _ARMOR_END.search(text, match.end())
        return start, end.end() if end else len(text)
    token_end = _TOKEN_CHARACTERS.match(text, match.end())
    return match.start(), token_end.end() if token_end else match.end()


def _ascii(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The library's pattern with ASCII classes (see the module docstring)."""
    return re.compile(pattern.pattern, (pattern.flags & ~re.UNICODE) | re.ASCII)


def _armor(text: str, match: re.Match[str]) -> bool:
    """The library's markers name a key only as armor: after `-----` (PEM, PGP) or as the
    first line of a PuTTY key file, not inside a sentence about one."""
    if match.group().startswith("PuTTY"):
        return text.startswith(":", match.end())
    return _ARMOR_START.search(text, max(0, match.start() - 6), match.start()) is not None


def _jwt(text: str, match: re.Match[str]) -> bool:
    return JwtTokenDetector.is_formally_valid(match.group())


def _library(
    detector: type[object],
    kind: str,
    span: Span = "token",
    check: Callable[[str, re.Match[str]], bool] | None = None,
    *,
    patterns: slice = slice(None),
    needle: str = "",
) -> tuple[Rule, ...]:
    """Some of a detect-secrets plugin's patterns (all, unless `patterns` says which) as
    rules of one kind."""
    denylist: tuple[re.Pattern[str], ...] = tuple(getattr(detector, "denylist"))  # noqa: B009
    return tuple(Rule(kind, _ascii(pattern), span, check, needle) for pattern in denylist[patterns])


# The plugins we take: every pattern of each, as rules of our kinds (a test checks that
# each plugin's patterns are all here, once).
LIBRARY: MappingProxyType[type[object], tuple[Rule, ...]] = MappingProxyType(
    {
        PrivateKeyDetector: _library(PrivateKeyDetector, "private_key", "block", _armor),
        SlackDetector: _library(SlackDetector, "slack_token", patterns=slice(0, 1))
        + _library(SlackDetector, "slack_webhook", patterns=slice(1, 2)),
        AWSKeyDetector: _library(AWSKeyDetector, "aws_access_key", patterns=slice(0, 1))
        + _library(AWSKeyDetector, "aws_secret_key", "value", patterns=slice(1, 2)),
        GitHubTokenDetector: _library(GitHubTokenDetector, "github_token"),
        GitLabTokenDetector: _library(GitLabTokenDetector, "gitlab_token"),
        JwtTokenDetector: _library(JwtTokenDetector, "jwt", check=_jwt),
        StripeDetector: _library(StripeDetector, "stripe_key"),
        NpmDetector: _library(NpmDetector, "npm_token", "value"),
        SendGridDetector: _library(SendGridDetector, "sendgrid_key"),
        BasicAuthDetector: _library(BasicAuthDetector, "url_password", "value"),
        OpenAIDetector: _library(OpenAIDetector, "openai_key"),
        PypiTokenDetector: _library(PypiTokenDetector, "pypi_token"),
        # These three start with no literal, so `re` tries them at every character: a
        # literal they need lets most texts skip them (BENCHMARKS.md, pasted credentials).
        DiscordBotTokenDetector: _library(DiscordBotTokenDetector, "discord_token", needle="."),
        TelegramBotTokenDetector: _library(TelegramBotTokenDetector, "telegram_token", needle=":"),
        TwilioKeyDetector: _library(TwilioKeyDetector, "twilio_key"),
        MailchimpDetector: _library(MailchimpDetector, "mailchimp_key", needle="-us"),
        SquareOAuthDetector: _library(SquareOAuthDetector, "square_secret"),
        AzureStorageKeyDetector: _library(AzureStorageKeyDetector, "azure_storage_key"),
    }
)
# The library's plugins we do not take, and why (their class names: a test compares this
# with the library's list of plugins).
LEFT_OUT = MappingProxyType(
    {
        "ArtifactoryDetector": "its `AP…` rule matches ordinary capitalised words",
        "Base64HighEntropyString": "entropy redacts hashes, ids and encoded data people paste",
        "HexHighEntropyString": "entropy redacts commit hashes and checksums",
        "KeywordDetector": "`password = …` in prose and code is mostly not a secret",
        "IPPublicDetector": "an address is not a credential",
        "CloudantDetector": "a vendor keyword rule; its `cl_key: …` matches ordinary notes",
        "IbmCloudIamDetector": "a keyword rule whose vendor prefix is optional: any `key: …`",
        "IbmCosHmacDetector": "a vendor keyword rule for a store we do not expect pasted",
        "SoftlayerDetector": "a vendor keyword rule whose `sl_` prefix matches ordinary notes",
    }
)


def _own(kind: str, pattern: str, span: Span = "token") -> Rule:
    return Rule(kind, re.compile(pattern, re.ASCII), span)


# Shapes the library has no rule for (see the module docstring), from the issuers' prefixes.
_OWN = (
    _own("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", "block"),
    _own("slack_token", r"xoxe(?:\.xox[a-z])?-[0-9]+-[A-Za-z0-9]{8,}"),
    _own("slack_app_token", r"xapp-[0-9]+-[A-Za-z0-9-]{8,}"),
    _own("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    _own(
        "openai_key",
        r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"
        r"|(?=[A-Za-z]*[0-9])[A-Za-z0-9]{20,})",
    ),
    _own("github_token", r"github_pat_[A-Za-z0-9_]{22,}"),
    _own("google_api_key", r"AIza[0-9A-Za-z_-]{35}"),
    _own("huggingface_token", r"hf_[A-Za-z]{34}"),
    _own("npm_token", r"npm_[A-Za-z0-9]{36}"),
    _own(
        "aws_secret_key",
        r"(?i:secret_?access_?key)[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40,})",
        "value",
    ),
)
RULES: tuple[Rule, ...] = (*(rule for rules in LIBRARY.values() for rule in rules), *_OWN)

# Told once, in the reply to a message that had one (gateway/delivery/publisher.py).
ROTATE_NOTE = (
    "_I removed a credential (a token, key or password) from a message here before reading "
    "or storing it. It was posted in Slack, so whoever it belongs to should rotate it._"
)


@dataclass(frozen=True, slots=True)
class Redacted:
    """A text with its credentials replaced, and the kind of each one replaced, in order."""

    text: str
    kinds: tuple[str, ...] = ()


def redact_secrets(text: str) -> Redacted:
    """`text` with every credential replaced by its label (`LABELS`)."""
    found = sorted(
        (start, -end, order, rule.kind)
        for order, rule in enumerate(RULES)
        for start, end in rule.spans(text)
        if end > start
    )
    if not found:
        return Redacted(text)
    parts: list[str] = []
    kinds: list[str] = []
    done = 0
    for start, negative_end, _, kind in found:
        if start < done:  # inside (or overlapping) the credential just replaced
            done = max(done, -negative_end)
            continue
        parts += [text[done:start], LABELS[kind]]
        kinds.append(kind)
        done = -negative_end
    parts.append(text[done:])
    return Redacted("".join(parts), tuple(kinds))


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
